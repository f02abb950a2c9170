# Install rules (`cmake --install`) and the Debian package built from them
# (`cpack -G DEB`; ./scripts/package runs it). What lands where:
#   /usr/bin/opgate, /usr/bin/opgate-sim
#   /etc/opgate/opgate.toml, /etc/opgate/opgate.env      conffiles, 0640 root:opgate
#   /lib/systemd/system/opgate.service
#   /usr/share/opgate/  alert rules, Grafana dashboard, the annotated example config
#   /usr/share/doc/opgate/README.md                      the runbooks the alerts point at
#   /usr/share/doc/opgate/docs/                          the manuals the README links to
# The maintainer scripts in deploy/debian/ create the opgate user and
# /var/lib/opgate (0700 opgate:opgate).
set(OPGATE_DEPLOY ${CMAKE_CURRENT_LIST_DIR})

install(TARGETS opgate opgate-sim RUNTIME DESTINATION bin)
install(FILES ${OPGATE_DEPLOY}/opgate.toml ${OPGATE_DEPLOY}/opgate.env
  DESTINATION /etc/opgate PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
install(FILES ${OPGATE_DEPLOY}/systemd/opgate.service DESTINATION /lib/systemd/system)
install(FILES ${OPGATE_DEPLOY}/prometheus/opgate-alerts.yml
  ${OPGATE_DEPLOY}/grafana/opgate-dashboard.json ${CMAKE_SOURCE_DIR}/opgate.example.toml
  DESTINATION share/opgate)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION share/doc/opgate)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION share/doc/opgate/docs
  FILES_MATCHING PATTERN "*.md" PATTERN "*.png")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME opgate)
set(CPACK_PACKAGE_VENDOR opgate)
set(CPACK_PACKAGE_CONTACT "opgate maintainers <opgate@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "agents propose refunds and credits; people approve; the ledger proves")
set(CPACK_PACKAGE_DESCRIPTION
  "opgate lets an AI agent propose refunds and account credits that an \
authenticated operator approves exactly, executes them through a durable outbox \
with idempotency keys, and hands the verified result back to the agent session.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# The build dir is the tests' RelWithDebInfo one; the packaged binaries are stripped.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # opgate_0.2.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Libraries from dpkg-shlibdeps; adduser for the postinst; the system CA
# store for the https calls to the agent platform and the payment provider;
# procps for the unit's ExecReload=/bin/kill.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, ca-certificates, procps")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS prometheus)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${OPGATE_DEPLOY}/debian/conffiles ${OPGATE_DEPLOY}/debian/postinst
  ${OPGATE_DEPLOY}/debian/prerm ${OPGATE_DEPLOY}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
