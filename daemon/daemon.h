// `opgate serve`: starts a node (daemon/node.h), reloads it on SIGHUP and
// runs until SIGTERM or SIGINT, then drains it: stop accepting, answer or
// refuse what is in flight, let the lanes finish, flush, exit 0.
#pragma once

#include <string>

#include "daemon/config.h"

namespace opgate::daemon {

struct ServeOptions {
  // The file the configuration came from: SIGHUP reads it again.
  std::string config_path;
  // If set, {"ingress":port,"operator":port} is written here once listening
  // (tests and scripts use port 0 and read the real ports back).
  std::string ports_file;
};

// The exit status after the store stopped accepting writes (EX_TEMPFAIL):
// the unit's Restart=on-failure starts the daemon again.
inline constexpr int kExitStoreFailed = 75;

// Returns the process exit code: 0 after a drain on SIGTERM, 2 when it
// cannot start, kExitStoreFailed when the store failed while serving.
int serve(const Config& config, const ServeOptions& options);

}  // namespace opgate::daemon
