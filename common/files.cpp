#include "common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace opgate {

namespace {

Error failed(const std::string& what, const std::string& path) {
  return make_error(errc::file_write, "cannot " + what + " " + path + ": " + std::strerror(errno));
}

// Opens `path` read-only and syncs it.
Status sync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0) return failed("open", path);
  if (::fsync(fd) != 0) {
    Error e = failed("sync", path);
    ::close(fd);
    return e;
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace

Status sync_directory(const std::string& dir, bool files) {
  std::error_code ec;
  if (files) {
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (entry.is_regular_file()) OPGATE_TRY(sync_path(entry.path().string(), 0));
    if (ec) return make_error(errc::file_write, "cannot list " + dir + ": " + ec.message());
  }
  return sync_path(dir, O_DIRECTORY);
}

Status write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return failed("write", tmp);
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Error e = failed("write", tmp);
      ::close(fd);
      return e;
    }
    written += static_cast<size_t>(n);
  }
  // On disk before it takes the name, and the name on disk before success
  // is reported: a power loss leaves the old file or the new, never an
  // empty one.
  if (::fsync(fd) != 0) {
    Error e = failed("sync", tmp);
    ::close(fd);
    return e;
  }
  if (::close(fd) != 0) return failed("write", tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(errc::file_write, "cannot rename " + tmp + ": " + ec.message());
  auto parent = std::filesystem::path(path).parent_path();
  return sync_directory(parent.empty() ? "." : parent.string());
}

}  // namespace opgate
