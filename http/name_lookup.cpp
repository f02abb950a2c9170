#include "http/name_lookup.h"

#include <atomic>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "common/mutex.h"

namespace opgate::http {

namespace {

namespace net = boost::asio;

std::atomic<int> lookups_running{0};

// A lookup's answer, shared by the thread that makes it and the caller
// that may have stopped waiting.
struct Pending {
  Mutex mu;
  CondVar cv;
  std::optional<Result<Addresses>> answer GUARDED_BY(mu);
};

Error cannot_connect(const std::string& host, const std::string& port, const std::string& why) {
  return make_error(errc::connect_failed, "cannot connect to " + host + ":" + port + ": " + why);
}

}  // namespace

Result<Addresses> system_look_up(const std::string& host, const std::string& port) {
  net::io_context ioc;
  net::ip::tcp::resolver resolver(ioc);
  boost::system::error_code ec;
  auto found = resolver.resolve(host, port, ec);
  if (ec) return cannot_connect(host, port, ec.message());
  return found;
}

Result<Addresses> look_up_within(const std::string& host, const std::string& port,
                                 std::chrono::milliseconds within, const LookUp& look_up) {
  if (lookups_running.fetch_add(1) >= kLookupsAtOnce) {
    lookups_running.fetch_sub(1);
    return cannot_connect(host, port, "too many name lookups are waiting for an answer");
  }
  auto pending = std::make_shared<Pending>();
  try {
    std::thread([pending, host, port, look_up] {
      auto found = look_up(host, port);
      {
        MutexLock lock(pending->mu);
        pending->answer = std::move(found);
      }
      pending->cv.notify_all();
      lookups_running.fetch_sub(1);
    }).detach();
  } catch (const std::system_error& e) {
    lookups_running.fetch_sub(1);
    return cannot_connect(host, port, std::string("cannot look the name up: ") + e.what());
  }
  const auto deadline = std::chrono::steady_clock::now() + within;
  MutexLock lock(pending->mu);
  while (!pending->answer)
    if (pending->cv.wait_until(pending->mu, deadline) == std::cv_status::timeout &&
        !pending->answer)
      return cannot_connect(host, port, "no address for the name in time");
  return std::move(*pending->answer);
}

}  // namespace opgate::http
