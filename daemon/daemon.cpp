#include "daemon/daemon.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include "common/signals.h"
#include "daemon/node.h"

namespace opgate::daemon {

int serve(const Config& config, const ServeOptions& options) {
  // Taken by wait_for_signal below; blocked before any thread starts.
  const sigset_t signals = block_daemon_signals();
  auto node = Node::start(config, options);
  if (!node) {
    spdlog::critical("cannot start: {}", node.error().message);
    return 2;
  }
  int sig = 0;
  while ((sig = wait_for_signal(signals)) == SIGHUP) (*node)->reload(options.config_path);
  const bool store_failed = sig == SIGUSR1;
  spdlog::info("{}; draining", store_failed ? std::string("the store failed")
                                            : fmt::format("signal {} received", sig));
  return (*node)->drain(store_failed);
}

}  // namespace opgate::daemon
