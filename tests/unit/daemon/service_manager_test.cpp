// The daemon's side of systemd's notify protocol, against a datagram socket
// the test announces in NOTIFY_SOCKET, and the watchdog's health check
// against a real HTTP server.
#include "daemon/service_manager.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "http/client.h"
#include "http/router.h"
#include "http/server.h"
#include "tests/unit/notify_socket.h"

using namespace opgate;
using opgate::testing::NotifySocket;

namespace {

// Counts calls to a health check and lets the test wait for the n-th.
struct CountingCheck {
  explicit CountingCheck(bool answer) : answer(answer) {}
  std::function<bool()> fn() {
    return [this] {
      std::lock_guard lock(mu);
      ++calls;
      cv.notify_all();
      return answer;
    };
  }
  bool wait_for_calls(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return calls >= n; });
  }
  int count() {
    std::lock_guard lock(mu);
    return calls;
  }
  const bool answer;
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
};

}  // namespace

TEST_CASE("service manager: READY=1 and STOPPING=1 reach NOTIFY_SOCKET with their status") {
  NotifySocket socket;
  daemon::notify_ready("webhooks on port 1, operator API on port 2");
  CHECK(socket.receive() == "READY=1\nSTATUS=webhooks on port 1, operator API on port 2");
  daemon::notify_stopping("draining");
  CHECK(socket.receive() == "STOPPING=1\nSTATUS=draining");
}

TEST_CASE("service manager: without WATCHDOG_USEC the watchdog starts nothing") {
  NotifySocket socket;
  CountingCheck check(true);
  daemon::Watchdog watchdog(check.fn());
  CHECK(watchdog.period().count() == 0);
  watchdog.stop();
  CHECK(check.count() == 0);
  CHECK_FALSE(socket.read_now());
}

TEST_CASE("service manager: the watchdog pings at half the interval while healthy") {
  NotifySocket socket;
  socket.enable_watchdog(20'000);
  CountingCheck check(true);
  daemon::Watchdog watchdog(check.fn());
  CHECK(watchdog.period() == std::chrono::microseconds(10'000));
  CHECK(socket.receive() == "WATCHDOG=1");
  CHECK(socket.receive() == "WATCHDOG=1");
  watchdog.stop();
  CHECK(check.count() >= 2);
}

TEST_CASE("service manager: an unhealthy daemon does not ping the watchdog") {
  NotifySocket socket;
  socket.enable_watchdog(20'000);
  CountingCheck check(false);
  daemon::Watchdog watchdog(check.fn());
  // The second check starts after the first one's ping would have been sent.
  REQUIRE(check.wait_for_calls(2));
  CHECK_FALSE(socket.read_now());
}

TEST_CASE("service manager: stopping the watchdog does not wait out its period") {
  NotifySocket socket;
  socket.enable_watchdog(600'000'000);  // a ping every 5 minutes
  CountingCheck check(true);
  daemon::Watchdog watchdog(check.fn());
  REQUIRE(check.wait_for_calls(1));
  const auto start = std::chrono::steady_clock::now();
  watchdog.stop();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(socket.receive() == "WATCHDOG=1");
}

TEST_CASE("service manager: the health check asks the operator listener's /healthz") {
  std::atomic<int> status{200};
  http::Router router;
  router.add("GET", "/healthz", [&](const http::Request&, const http::PathParams&) {
    http::Response r;
    r.status = status;
    return r;
  });
  http::Server server({}, [&](http::Request&& r) { return router.dispatch(r); });
  auto port = server.start();
  REQUIRE(port.ok());
  const auto timeout = std::chrono::seconds(5);

  CHECK(daemon::operator_health_check("127.0.0.1:0", *port, timeout)());
  // A listener on every address is asked on loopback.
  CHECK(daemon::operator_health_check("0.0.0.0:8081", *port, timeout)());
  status = 503;
  CHECK_FALSE(daemon::operator_health_check("127.0.0.1:0", *port, timeout)());
  server.stop();
  CHECK_FALSE(daemon::operator_health_check("127.0.0.1:0", *port, timeout)());
  // A stopped listener refuses at once rather than holding the connection
  // unanswered until the check's timeout.
  http::ClientRequest request;
  request.url = fmt::format("http://127.0.0.1:{}/healthz", *port);
  request.timeout = timeout;
  auto refused = http::send(request);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == "connect_failed");
}
