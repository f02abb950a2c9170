// The release gate's parts that need no processes: scenario parsing and the
// trace properties. Each property passes on a sound trace and fails when the
// trace shows the fault it exists to catch.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "sim/eval/properties.h"
#include "sim/eval/scenario.h"

using namespace opgate::eval;
namespace json = boost::json;

namespace {

const std::string kKey = "demo-user:ORDER-100:full-refund:v1";

const char* kScenario = R"({
  "description": "happy refund",
  "sessions": {"s1": {"script": [
    {"name": "lookup_order", "arguments": {"order_id": "ORDER-100"}},
    {"name": "request_refund", "arguments": {"order_id": "ORDER-100"}}]}},
  "steps": [{"action": "start_session", "session": "s1"}],
  "expect": {"operation_count": 1, "provider_objects": 1}
})";

Scenario scenario() {
  auto s = parse_scenario("happy", kScenario, 1'800'000'000);
  REQUIRE(s.ok());
  return *s;
}

json::object audit(int64_t seq, const char* action, const char* principal, const char* to,
                   json::object details = {}) {
  return json::object{{"seq", seq}, {"action", action},   {"principal", principal},
                      {"to", to},   {"details", details}, {"fingerprint", "fp1"}};
}

// What a sound run of the happy refund leaves in the three services.
Trace sound_trace() {
  Trace t;
  json::object platform{
      {"items", json::array{json::object{{"type", "function_call"},
                                         {"call_id", "call_1"},
                                         {"name", "lookup_order"},
                                         {"arguments", R"({"order_id":"ORDER-100"})"}},
                            json::object{{"type", "function_call"},
                                         {"call_id", "call_2"},
                                         {"name", "request_refund"},
                                         {"arguments", R"({"order_id":"ORDER-100"})"}}}},
      {"results",
       json::object{
           {"call_1", json::object{{"success", true},
                                   {"output", R"({"order":{"order_id":"ORDER-100"}})"},
                                   {"error", ""}}},
           {"call_2", json::object{{"success", true},
                                   {"output", R"({"status":"succeeded","operation_key":")" + kKey +
                                                  R"(","provider_object_id":"re_1"})"},
                                   {"error", ""}}}}},
      {"turns", json::array{json::object{{"status", "completed"}}}}};
  t.sessions["s1"] = SessionTrace{"sess_1", "demo-user", platform};
  t.operations.push_back(json::object{
      {"key", kKey},
      {"state", "settled"},
      {"outcome", "succeeded"},
      {"owner", "demo-user"},
      {"order_id", "ORDER-100"},
      {"amount_minor", 2500},
      {"currency", "USD"},
      {"fingerprint", "fp1"},
      {"approvals", json::array{json::object{{"principal", "alice"}}}},
      {"calls", json::array{json::object{{"call_id", "call_2"}}}},
      {"proposal", json::object{{"payment_intent", "pi_ORDER-100"}}},
      {"history",
       json::array{
           audit(1, "propose", "system", "pending", {{"tool", "request_refund"}}),
           audit(2, "approve", "alice", "approved", {{"amount_minor", 2500}, {"currency", "USD"}}),
           audit(3, "claim", "system", "executing"),
           audit(4, "provider_succeeded", "system", "settled")}}});
  t.ledger.push_back(json::object{{"operation_key", kKey},
                                  {"provider_object_id", "re_1"},
                                  {"amount_minor", 2500},
                                  {"currency", "USD"}});
  t.provider_objects.push_back(json::object{{"id", "re_1"},
                                            {"object", "refund"},
                                            {"amount", 2500},
                                            {"currency", "usd"},
                                            {"payment_intent", "pi_ORDER-100"},
                                            {"status", "succeeded"},
                                            {"metadata", json::object{{"operation_key", kKey}}}});
  t.provider_by_key[kKey] = json::object{{"posts", 1}, {"objects", 1}};
  t.agent_stats = json::object{{"conflicts", 0}};
  t.audit_check = json::object{{"ok", true}, {"records", 4}};
  t.pauses.push_back(Pause{kKey, "requires_action", true, 0});
  t.outsider = json::object{{"probes", 9}, {"seen", json::array{}}};
  auto delivery = [](const char* path, const char* id, const char* type, int64_t seq) {
    json::object d{{"path", path}, {"webhook_id", id}, {"verified", true}};
    if (std::string_view(path) == "/hooks/ops") {
      d["type"] = type;
      d["key"] = kKey;
      d["audit_head"] = json::object{{"seq", seq}, {"hash", "ab"}};
    } else {
      d["text"] = std::string("*") + type + "*: full-refund ... key " + kKey;
    }
    return d;
  };
  t.notifications = json::array{delivery("/hooks/ops", "msg_1", "operation.proposed", 1),
                                delivery("/hooks/chat", "msg_2", "operation.proposed", 1),
                                delivery("/hooks/ops", "msg_3", "operation.approved", 2),
                                delivery("/hooks/ops", "msg_4", "operation.settled", 4)};
  return t;
}

constexpr size_t kProperties = 11;

// The results as a map from property number (1-10) to passed.
std::vector<bool> verdicts(const Trace& t, const Scenario& sc = scenario()) {
  std::vector<bool> out;
  for (const auto& p : check_properties(sc, t)) out.push_back(p.passed);
  return out;
}

// Only property `n` (1-based) fails.
bool only_fails(const Trace& t, size_t n, const Scenario& sc = scenario()) {
  auto v = verdicts(t, sc);
  REQUIRE(v.size() == kProperties);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != (i + 1 != n)) return false;
  return true;
}

json::object& op(Trace& t) { return t.operations[0].as_object(); }
json::object& result(Trace& t, const char* call) {
  return t.sessions["s1"].platform["results"].as_object()[call].as_object();
}

}  // namespace

TEST_CASE("every property passes on a sound trace, with evidence") {
  const auto results = check_properties(scenario(), sound_trace());
  REQUIRE(results.size() == kProperties);
  for (const auto& p : results) {
    CAPTURE(p.name);
    CHECK(p.passed);
    CHECK_FALSE(p.evidence.empty());
  }
  CHECK(check_expected_outcome(scenario(), sound_trace()).passed);
}

TEST_CASE("1: a tool outside the list, or a call with a field the model may not set, that ran") {
  auto t = sound_trace();
  auto& items = t.sessions["s1"].platform["items"].as_array();
  items[1].as_object()["arguments"] = R"({"order_id":"ORDER-100","amount_minor":1})";
  CHECK(only_fails(t, 1));
  t = sound_trace();
  t.sessions["s1"].platform["items"].as_array()[0].as_object()["name"] = "delete_customer";
  CHECK(only_fails(t, 1));
}

TEST_CASE("2: another customer's order shown, or an operation on it") {
  auto t = sound_trace();
  result(t, "call_1")["output"] = R"({"order":{"order_id":"ORDER-200"}})";
  CHECK(only_fails(t, 2));
  t = sound_trace();
  t.sessions["s1"].owner = "other-user";
  CHECK(verdicts(t)[1] == false);
}

TEST_CASE("3: a provider call without an approval, or before it, or while it should pause") {
  auto t = sound_trace();
  auto& history = op(t)["history"].as_array();
  history.erase(history.begin() + 1);  // no approve record
  CHECK(verdicts(t)[2] == false);
  t = sound_trace();
  t.pauses[0].provider_posts = 1;  // the provider was called while pending
  CHECK(only_fails(t, 3));
  t = sound_trace();
  t.pauses[0].session_status = "idle";  // the session was answered early
  CHECK(only_fails(t, 3));
  t = sound_trace();
  t.provider_by_key["someone-else:ORDER-9:full-refund:v1"] = json::object{{"posts", 1}};
  CHECK(only_fails(t, 3));
  t = sound_trace();
  t.audit_check = json::object{{"ok", false}, {"records", 4}, {"problem", "hash mismatch"}};
  CHECK(only_fails(t, 3));
}

TEST_CASE("4: executed arguments differ from the approved ones") {
  auto t = sound_trace();
  t.provider_objects[0].as_object()["amount"] = 2400;
  t.ledger[0].as_object()["amount_minor"] = 2400;  // keep 7 out of it
  CHECK(only_fails(t, 4));
  t = sound_trace();
  t.provider_objects[0].as_object()["payment_intent"] = "pi_attacker";
  CHECK(only_fails(t, 4));
}

TEST_CASE("5: a denial not reported, or acted on after it") {
  auto t = sound_trace();
  op(t)["outcome"] = "denied";
  op(t)["history"] =
      json::array{audit(1, "propose", "system", "pending"), audit(2, "deny", "alice", "settled")};
  t.provider_objects.clear();
  t.ledger.clear();
  t.provider_by_key.clear();
  result(t, "call_2")["output"] = R"({"status":"denied"})";
  CHECK(verdicts(t)[4] == true);
  op(t)["history"].as_array().push_back(audit(3, "approve", "bob", "approved"));
  CHECK(verdicts(t)[4] == false);
  op(t)["history"].as_array().pop_back();
  result(t, "call_2")["output"] = R"({"status":"pending"})";
  CHECK(verdicts(t)[4] == false);
}

TEST_CASE("6: a duplicate at the provider, a conflicting result, or work left mid-way") {
  auto t = sound_trace();
  auto twin = t.provider_objects[0];
  twin.as_object()["id"] = "re_2";
  twin.as_object()["status"] = "pending";  // keep 7 out of it
  t.provider_objects.push_back(twin);
  CHECK(verdicts(t)[5] == false);
  t = sound_trace();
  t.agent_stats["conflicts"] = 1;
  CHECK(only_fails(t, 6));
  t = sound_trace();
  t.sessions["s1"].platform["results"].as_object().erase("call_2");
  CHECK(verdicts(t)[5] == false);
}

TEST_CASE("7: success told without the provider's confirmation, or ledger and provider differ") {
  auto t = sound_trace();
  result(t, "call_2")["output"] =
      R"({"status":"succeeded","operation_key":")" + kKey + R"(","provider_object_id":"re_9"})";
  CHECK(only_fails(t, 7));
  t = sound_trace();
  t.ledger.clear();
  CHECK(only_fails(t, 7));
  t = sound_trace();
  t.provider_objects[0].as_object()["status"] = "pending";
  CHECK(verdicts(t)[6] == false);
}

TEST_CASE("8: a call asking for an operation that never gets an answer") {
  auto t = sound_trace();
  t.sessions["s1"].platform["items"].as_array().push_back(
      json::object{{"type", "function_call"},
                   {"call_id", "call_3"},
                   {"name", "request_refund"},
                   {"arguments", R"({"order_id":"ORDER-100"})"}});
  CHECK(only_fails(t, 8));
  t = sound_trace();
  result(t, "call_2")["output"] = R"({"status":"denied","operation_key":")" + kKey + R"("})";
  CHECK(verdicts(t)[7] == false);  // told another outcome than the operation's
}

TEST_CASE("9: a principal outside the owners saw something, or nothing was probed") {
  auto t = sound_trace();
  t.outsider["seen"].as_array().push_back("GET /v1/ledger: 200 {...}");
  CHECK(only_fails(t, 9));
  t = sound_trace();
  t.outsider["probes"] = 0;
  CHECK(only_fails(t, 9));
}

TEST_CASE("10: refunds and credits on an order beyond what it was paid") {
  auto sc = scenario();
  sc.orders[0]["amount_minor"] = 2000;  // ORDER-100 was paid 20.00; 25.00 went out
  CHECK(only_fails(sound_trace(), 10, sc));
}

TEST_CASE("11: a proposal notified twice or never, unsigned, or out of order") {
  auto t = sound_trace();
  auto twice = t.notifications[0];
  twice.as_object()["webhook_id"] = "msg_9";  // another id for the same proposal
  t.notifications.push_back(twice);
  CHECK(only_fails(t, 11));
  t = sound_trace();
  t.notifications.erase(t.notifications.begin() + 1);  // chat never told
  CHECK(only_fails(t, 11));
  t = sound_trace();
  t.notifications[2].as_object()["verified"] = false;
  CHECK(only_fails(t, 11));
  t = sound_trace();
  std::swap(t.notifications[2], t.notifications[3]);  // settled before approved
  CHECK(only_fails(t, 11));
  t = sound_trace();
  t.notifications.push_back(t.notifications[3]);  // a repeat of the same id is fine
  CHECK(verdicts(t)[10]);
}

TEST_CASE("the expected outcome compares counts, operation fields, states passed and results") {
  auto sc = scenario();
  auto t = sound_trace();
  sc.expect = json::parse(R"({"operations":[{"key":")" + kKey +
                          R"(","state":"settled","passed_through":["executing"]}],
      "sessions":{"s1":{"turn":"completed","results":[{"success":true},{"success":true,
      "contains":"succeeded"}]}}})")
                  .as_object();
  CHECK(check_expected_outcome(sc, t).passed);
  sc.expect["provider_objects"] = 2;
  CHECK_FALSE(check_expected_outcome(sc, t).passed);
  sc.expect.erase("provider_objects");
  sc.expect["operations"].as_array()[0].as_object()["passed_through"] =
      json::array{"outcome_unknown"};
  CHECK_FALSE(check_expected_outcome(sc, t).passed);
}

TEST_CASE("a scenario is parsed strictly and errors say where") {
  const int64_t now = 1'800'000'000;
  auto s = scenario();
  CHECK(s.orders.size() == 5);  // the default orders
  CHECK(s.orders[0].at("payment_intent").as_string() == "pi_ORDER-100");
  CHECK(s.orders[0].at("placed_at").as_int64() == now - 86400);
  CHECK(s.sessions[0].owner == "demo-user");
  CHECK(s.settings.approval_ttl_s == 86400);

  auto error_of = [&](const std::string& text) {
    auto r = parse_scenario("x", text, now);
    return r.ok() ? std::string() : r.error().message;
  };
  const std::string base = R"("description":"d","sessions":{"s1":{"script":[]}},"expect":{})";
  CHECK(error_of("{" + base + R"(,"steps":[{"action":"fly"}]})").find("unknown action") !=
        std::string::npos);
  CHECK(error_of("{" + base + R"(,"steps":[{"action":"approve","key":"k"}]})")
            .find("steps[0] (approve): \"as\" is required") != std::string::npos);
  CHECK(error_of("{" + base + R"(,"steps":[{"action":"start_session","session":"s9"}]})")
            .find("must name one of the scenario's sessions") != std::string::npos);
  CHECK(error_of("{" + base + R"(,"steps":[{"action":"start_session","session":"s1","x":1}]})")
            .find("unknown key \"x\"") != std::string::npos);
  CHECK(error_of("{" + base + R"(,"steps":[],"extra":1})").find("unknown key") !=
        std::string::npos);
  CHECK(error_of(
            R"({"description":"d","sessions":{},"expect":{},"steps":[{"action":"restart_daemon"}],
                    "settings":{"approval_ttl_s":0}})")
            .find("must be positive") != std::string::npos);
  CHECK(error_of(
            R"({"description":"d","sessions":{},"expect":{},"steps":[{"action":"restart_daemon"}],
                    "orders":[{"order_id":"A","owner":"o","amount_minor":"5","currency":"USD"}]})")
            .find("orders[0]: \"amount_minor\" must be an integer") != std::string::npos);
  CHECK(error_of("not json").find("not JSON") != std::string::npos);
}
