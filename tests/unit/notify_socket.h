// The service manager's end of sd_notify for tests: a unix datagram socket in
// a temporary directory, announced through NOTIFY_SOCKET (and, optionally, a
// watchdog through WATCHDOG_USEC) for as long as the object lives.
#pragma once

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/crypto.h"

namespace opgate::testing {

class NotifySocket {
 public:
  NotifySocket() {
    path_ = std::filesystem::temp_directory_path() / ("opgate-notify-" + crypto::random_hex(6));
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      throw std::runtime_error("cannot bind " + path_.string());
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }
  ~NotifySocket() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::close(fd_);
    std::filesystem::remove(path_);
  }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  // Asks for a watchdog ping every usec / 2 microseconds.
  void enable_watchdog(uint64_t usec) {
    ::setenv("WATCHDOG_USEC", std::to_string(usec).c_str(), 1);
    ::unsetenv("WATCHDOG_PID");
  }

  // The next datagram, waiting at most `deadline` for it.
  std::optional<std::string> receive(
      std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(deadline.count())) != 1) return std::nullopt;
    return read_now();
  }
  // The first datagram starting with `prefix`, skipping others.
  std::optional<std::string> receive_starting_with(const std::string& prefix) {
    while (auto m = receive())
      if (m->starts_with(prefix)) return m;
    return std::nullopt;
  }
  // A datagram already queued, if any (never waits).
  std::optional<std::string> read_now() {
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace opgate::testing
