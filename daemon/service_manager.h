// The service manager's side of `opgate serve` (systemd's sd_notify, unit
// Type=notify): READY=1 once both listeners are up and the store is open,
// STOPPING=1 when the drain starts, WATCHDOG=1 while the daemon is healthy.
// Every call is a no-op when NOTIFY_SOCKET is unset, i.e. when systemd did
// not start the process (a shell, a container, the tests' clusters).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "common/mutex.h"

namespace opgate::daemon {

// READY=1 with STATUS=`status` (shown by `systemctl status`).
void notify_ready(const std::string& status);
// STOPPING=1 with STATUS=`status`: systemd waits for the exit (TimeoutStopSec).
void notify_stopping(const std::string& status);

// Still starting, with progress: the service manager's start timeout is
// extended by `more` from now.
void notify_extend_start(std::chrono::seconds more, const std::string& status);

// Pings the watchdog (WATCHDOG=1) at half the interval the unit asks for
// (WatchdogSec=, passed as WATCHDOG_USEC), each time only if `healthy()`
// returns true. A daemon whose check fails or hangs stops pinging and systemd
// restarts it. Without a watchdog for this process it starts no thread.
class Watchdog {
 public:
  explicit Watchdog(std::function<bool()> healthy);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Time between pings; zero when the watchdog is not enabled.
  std::chrono::microseconds period() const { return period_; }
  // Stops pinging and joins the thread (at the drain). Safe to call twice.
  void stop();

 private:
  void run();

  std::function<bool()> healthy_;
  std::chrono::microseconds period_{0};
  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool stopping() EXCLUDES(mu_);
  std::thread thread_;
};

// The daemon's health check for the watchdog: GET /healthz on the operator
// listener `listen` (its configured "host:port"; the bound `port` replaces
// the port) answers 200 within `timeout`. A listener on every address
// (0.0.0.0, [::]) is asked on loopback.
std::function<bool()> operator_health_check(const std::string& listen, uint16_t port,
                                            std::chrono::milliseconds timeout);

}  // namespace opgate::daemon
