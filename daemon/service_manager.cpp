#include "daemon/service_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cstring>

#include "common/thread_name.h"
#include "http/client.h"

namespace opgate::daemon {

namespace {

void notify(const std::string& message) {
  // 0: NOTIFY_SOCKET is unset; < 0: it is set but the message did not go out.
  if (int rc = sd_notify(0, message.c_str()); rc < 0)
    spdlog::warn("cannot notify the service manager: {}", std::strerror(-rc));
}

}  // namespace

void notify_ready(const std::string& status) { notify("READY=1\nSTATUS=" + status); }

void notify_stopping(const std::string& status) { notify("STOPPING=1\nSTATUS=" + status); }

void notify_extend_start(std::chrono::seconds more, const std::string& status) {
  notify(fmt::format("EXTEND_TIMEOUT_USEC={}\nSTATUS={}", std::chrono::microseconds(more).count(),
                     status));
}

Watchdog::Watchdog(std::function<bool()> healthy) : healthy_(std::move(healthy)) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  period_ = std::chrono::microseconds(usec / 2);
  spdlog::info("watchdog: pinging the service manager every {} ms while healthy",
               period_.count() / 1000);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Watchdog::stopping() {
  MutexLock lock(mu_);
  return stopping_;
}

void Watchdog::run() {
  name_this_thread("watchdog");
  while (!stopping()) {
    // The health check is a network call: made without the lock.
    if (healthy_())
      notify("WATCHDOG=1");
    else
      spdlog::warn("watchdog: health check failed; not pinging the service manager");
    MutexLock lock(mu_);
    if (!stopping_) cv_.wait_for(mu_, period_);
  }
}

std::function<bool()> operator_health_check(const std::string& listen, uint16_t port,
                                            std::chrono::milliseconds timeout) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "[::]" || host == "::") host = "[::1]";
  const std::string url = fmt::format("http://{}:{}/healthz", host, port);
  return [url, timeout] {
    http::ClientRequest request;
    request.url = url;
    request.timeout = timeout;
    auto response = http::send(request);
    return response && response->status == 200;
  };
}

}  // namespace opgate::daemon
