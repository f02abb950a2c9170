// The benchmark's load generator against a receiver on loopback that checks
// what a real ingress checks: every request is signed when it is sent, no
// webhook-id repeats (so a 2xx counts as a new event), and an answer that
// says duplicate is counted apart, never as accepted.
#include "sim/load_generator.h"

#include <doctest/doctest.h>

#include <ctime>
#include <mutex>
#include <set>

#include "common/webhook_signature.h"
#include "http/server.h"

using namespace opgate;

namespace {
constexpr const char* kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

struct Receiver {
  std::mutex mu;
  std::set<std::string> ids;
  uint64_t repeats = 0;
  uint64_t bad = 0;
  bool call_everything_a_duplicate = false;
  std::string key = *webhooks::decode_secret(kSecret);
  http::Server server{
      {}, [this](http::Request&& r) {
        std::lock_guard lock(mu);
        const auto id = r.header("webhook-id").value_or("");
        const auto ts = r.header("webhook-timestamp").value_or("");
        const auto sig = r.header("webhook-signature").value_or("");
        if (!webhooks::verify({id, ts, sig, r.body}, {key}, std::time(nullptr), 300)) ++bad;
        if (!ids.insert(std::string(id)).second) ++repeats;
        return http::json_response(200, call_everything_a_duplicate
                                            ? R"({"accepted":true,"duplicate":true})"
                                            : R"({"accepted":true,"duplicate":false})");
      }};
  uint16_t port = *server.start();
};

sim::LoadOptions options(uint16_t port) {
  sim::LoadOptions o;
  o.port = port;
  o.secret = kSecret;
  o.connections = 4;
  o.threads = 1;
  o.seconds = 0.3;
  o.body_bytes = 256;
  return o;
}
}  // namespace

TEST_CASE("load generator: every request signed afresh, no id twice, every 2xx counted once") {
  Receiver r;
  auto report = sim::run_load(options(r.port));
  REQUIRE(report.ok());
  std::lock_guard lock(r.mu);
  CHECK(report->requests > 0);
  CHECK(r.bad == 0);
  CHECK(r.repeats == 0);
  CHECK(report->accepted == r.ids.size());
  CHECK(report->duplicates == 0);
  CHECK(report->errors == 0);
}

TEST_CASE("load generator: answers that say duplicate are counted apart") {
  Receiver r;
  r.call_everything_a_duplicate = true;
  auto report = sim::run_load(options(r.port));
  REQUIRE(report.ok());
  CHECK(report->requests > 0);
  CHECK(report->accepted == 0);
  CHECK(report->duplicates == report->requests);
}

TEST_CASE("load generator: a flood of forgeries is signed with another key") {
  Receiver r;
  auto o = options(r.port);
  o.bad_signatures = true;
  auto report = sim::run_load(o);
  REQUIRE(report.ok());
  std::lock_guard lock(r.mu);
  CHECK(report->requests > 0);
  CHECK(r.bad == report->requests);
}
