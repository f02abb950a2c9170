// Tool results reach the session exactly once in effect, whatever fails on
// the way: each failure mode against the agent platform simulator.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <csignal>

#include "cluster.h"

using namespace opgate::testing;

namespace {

const std::string kLookup = R"([{"name":"lookup_order","arguments":{"order_id":"ORDER-100"}}])";

std::string events_fault(const std::string& action, int times, int delay_ms = 0) {
  return fmt::format(
      R"({{"rules":[{{"method":"POST","path_prefix":"/v1/agents/sessions","action":"{}","times":{},"delay_ms":{}}}]}})",
      action, times, delay_ms);
}

json::object completed(Cluster& c, const std::string& session) {
  return c.wait_session_sim(session, [](auto& s) {
    return str(s.at("turns").as_array().at(0), "status") == "completed";
  });
}

json::object call_state(Cluster& c, const std::string& session) {
  auto r = c.op("GET", "/v1/sessions/" + session);
  REQUIRE(r.status == 200);
  return r.body.at("calls").as_array().at(0).as_object();
}

}  // namespace

TEST_CASE("a 5xx, a dropped answer and a timeout are retried with the same result") {
  ClusterOptions o;
  o.agent_timeout_ms = 500;
  Cluster c(o);
  for (const auto& fault : std::vector<std::pair<std::string, int>>{{"error_500_before_commit", 0},
                                                                    {"error_500_after_commit", 0},
                                                                    {"drop_after_commit", 0},
                                                                    {"delay", 1200}}) {
    const std::string& action = fault.first;
    const int delay = fault.second;
    CAPTURE(action);
    REQUIRE(c.agent_admin("POST", "/_sim/faults", events_fault(action, 1, delay)).status == 200);
    auto session = c.create_session(kLookup);
    auto sim = completed(c, session);
    CHECK(sim.at("results").as_object().size() == 1);
    // After a commit the session may finish before opgate hears back; the
    // retry with the same key is then answered as a safe resend.
    CHECK(eventually([&] { return str(call_state(c, session), "delivery") == "delivered"; }));
    c.agent_admin("DELETE", "/_sim/faults");
  }
  auto stats = c.agent_admin("GET", "/_sim/stats").body;
  CHECK(stats.at("conflicts").as_int64() == 0);
  CHECK(stats.at("results_received").as_int64() == 4);
}

TEST_CASE("a different result already held by the session is flagged, never overwritten") {
  Cluster c;
  // Every post fails until opgate has tried once and is stopped: its retry
  // cannot win the race with the other answer.
  REQUIRE(
      c.agent_admin("POST", "/_sim/faults", events_fault("error_500_before_commit", -1)).status ==
      200);
  auto session = c.create_session(kLookup);
  REQUIRE(eventually(
      [&] { return c.agent_admin("GET", "/_sim/stats").body.at("event_posts").as_int64() >= 1; }));
  c.signal_daemon(SIGSTOP);
  REQUIRE(c.agent_admin("DELETE", "/_sim/faults").status == 200);
  auto sim = c.agent_admin("GET", "/_sim/sessions/" + session).body.as_object();
  const auto& action = sim.at("required_actions").as_array().at(0);
  // Someone else answers the call through the public API.
  auto other = c.agent_api(
      "POST", "/v1/agents/sessions/" + session + "/events",
      json::serialize(json::object{
          {"events", json::array{json::object{{"type", "agent.session.input.tool_result"},
                                              {"turn_id", str(action, "turn_id")},
                                              {"call_id", str(action, "call_id")},
                                              {"success", false},
                                              {"error", "answered by someone else"}}}}}),
      "someone-else");
  c.signal_daemon(SIGCONT);
  REQUIRE_MESSAGE(other.status == 202, other.raw);
  REQUIRE(eventually([&] { return str(call_state(c, session), "delivery") == "conflict"; }));
  auto held = c.agent_admin("GET", "/_sim/sessions/" + session).body.as_object();
  for (const auto& [call, result] : held.at("results").as_object())
    CHECK(str(result, "error") == "answered by someone else");
}

TEST_CASE("a result saved before a kill -9 is delivered after the restart") {
  Cluster c;
  REQUIRE(
      c.agent_admin("POST", "/_sim/faults", events_fault("error_500_before_commit", -1)).status ==
      200);
  auto session = c.create_session(kLookup);
  REQUIRE(eventually([&] {
    auto r = c.op("GET", "/v1/sessions/" + session);
    return r.status == 200 && !r.body.at("calls").as_array().empty() &&
           !r.body.at("calls").as_array().at(0).at("result").is_null();
  }));
  c.restart_daemon(/*kill9=*/true);
  c.agent_admin("DELETE", "/_sim/faults");
  auto sim = completed(c, session);
  CHECK(sim.at("results").as_object().size() == 1);
  // The platform has the result before opgate records its answer.
  CHECK(eventually([&] { return str(call_state(c, session), "delivery") == "delivered"; }));
}

TEST_CASE("an operation whose outcome is unknown produces no result for the session") {
  Cluster c;
  c.payments_admin(
      "POST", "/_sim/faults",
      R"({"rules":[{"method":"POST","path_prefix":"/v1/refunds","action":"drop_after_commit","times":-1},)"
      R"({"method":"GET","path_prefix":"/v1/refunds","action":"error_500_before_commit","times":-1}]})");
  auto session =
      c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])");
  const std::string key = "demo-user:ORDER-100:full-refund:v1";
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "pending"; });
  c.approve(key);
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "outcome_unknown"; });
  auto calls = c.op("GET", "/v1/sessions/" + session).body.at("calls").as_array();
  CHECK(calls.at(0).at("result").is_null());
  auto sim = c.agent_admin("GET", "/_sim/sessions/" + session).body.as_object();
  CHECK(sim.at("results").as_object().empty());
  CHECK(str(sim.at("turns").as_array().at(0), "status") == "waiting");
}
