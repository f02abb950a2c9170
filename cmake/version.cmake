# Generates common/version.h from common/version.h.in: PROJECT_VERSION and
# OPGATE_REVISION, the output of `git describe --always --dirty` ("unknown"
# outside a git checkout). The revision is read at configure time; CMake
# configures again when HEAD moves (a commit, a checkout), so a build dir that
# is reused names the commit it was built from.
set(OPGATE_REVISION unknown)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
    RESULT_VARIABLE _opgate_git_rc OUTPUT_VARIABLE _opgate_git_out
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_opgate_git_rc EQUAL 0 AND NOT _opgate_git_out STREQUAL "")
    set(OPGATE_REVISION ${_opgate_git_out})
    # HEAD, and the branch it points to (loose or packed).
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --path-format=absolute
        --git-path HEAD --git-path packed-refs --symbolic-full-name HEAD
      WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
      OUTPUT_VARIABLE _opgate_git_paths OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    string(REPLACE "\n" ";" _opgate_git_paths "${_opgate_git_paths}")
    list(LENGTH _opgate_git_paths _opgate_n)
    if(_opgate_n EQUAL 3)
      list(GET _opgate_git_paths 2 _opgate_ref)
      list(REMOVE_AT _opgate_git_paths 2)
      if(_opgate_ref MATCHES "^refs/")
        execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --path-format=absolute
            --git-path ${_opgate_ref}
          WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
          OUTPUT_VARIABLE _opgate_ref_path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        list(APPEND _opgate_git_paths ${_opgate_ref_path})
      endif()
    endif()
    foreach(_opgate_path IN LISTS _opgate_git_paths)
      if(EXISTS ${_opgate_path})
        set_property(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} APPEND PROPERTY
          CMAKE_CONFIGURE_DEPENDS ${_opgate_path})
      endif()
    endforeach()
  endif()
endif()
set(OPGATE_GENERATED_DIR ${CMAKE_CURRENT_BINARY_DIR}/generated)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/common/version.h.in
  ${OPGATE_GENERATED_DIR}/common/version.h @ONLY)
message(STATUS "opgate ${PROJECT_VERSION} (${OPGATE_REVISION})")
