// The payment outbox under every provider fault: the final state is right,
// the provider holds at most one object per operation key, and opgate's
// ledger equals the provider's.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>

#include "cluster.h"

using namespace opgate::testing;

namespace {

std::vector<std::string> fault_orders(int n) {
  const int64_t placed = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count() -
                         3600;
  std::vector<std::string> out;
  for (int i = 1; i <= n; ++i)
    out.push_back(fmt::format(
        R"({{"order_id":"F{}","owner":"demo-user","amount_minor":{},"currency":"USD","payment_intent":"pi_F{}","customer":"cus_demo","payment_method":"visa ending 4242","status":"paid","placed_at":{}}})",
        i, 1000 + i, i, placed));
  out.push_back(fmt::format(
      R"({{"order_id":"C1","owner":"demo-user","amount_minor":20000,"currency":"GBP","payment_intent":"pi_C1","customer":"cus_gbp","payment_method":"visa ending 1881","status":"paid","placed_at":{}}})",
      placed));
  return out;
}

std::string key_for(int i) { return fmt::format("demo-user:F{}:full-refund:v1", i); }

json::array provider_objects(Cluster& c) {
  auto ledger = c.payments_admin("GET", "/_sim/ledger").body;
  json::array all = ledger.at("refunds").as_array();
  for (const auto& b : ledger.at("balance_transactions").as_array()) all.push_back(b);
  return all;
}

// opgate's ledger and the provider's record agree operation by operation,
// counting only provider objects that succeeded.
void check_ledgers_agree(Cluster& c) {
  std::map<std::string, std::string> provider;  // operation key -> object id
  std::map<std::string, int> count;
  for (const auto& o : provider_objects(c)) {
    auto key = str(o.at("metadata"), "operation_key");
    count[key]++;
    const std::string status = str(o, "status");
    if (status.empty() || status == "succeeded") provider[key] = str(o, "id");
  }
  for (const auto& entry : count)
    CHECK_MESSAGE(entry.second == 1, "provider holds " << entry.second << " for " << entry.first);
  std::map<std::string, std::string> ours;
  auto ledger = c.op("GET", "/v1/ledger");
  for (const auto& row : ledger.body.at("ledger").as_array())
    ours[str(row, "operation_key")] = str(row, "provider_object_id");
  CHECK(ours == provider);
}

std::string refund_fault(const std::string& key, const std::string& action, int times,
                         int delay_ms = 0) {
  return fmt::format(
      R"({{"rules":[{{"method":"POST","path_prefix":"/v1/refunds","operation_key":"{}","action":"{}","times":{},"delay_ms":{}}}]}})",
      key, action, times, delay_ms);
}

}  // namespace

TEST_CASE("every provider fault ends in the right state with one object per key") {
  ClusterOptions o;
  o.orders = fault_orders(8);
  o.payments_timeout_ms = 1000;
  Cluster c(o);
  struct Case {
    std::string action;
    int times;
    int delay_ms;
    std::string outcome;
  };
  const std::vector<Case> cases = {
      {"delay", 1, 2000, "succeeded"},                 // timeout; reconciler finds it
      {"drop_before_commit", 1, 0, "succeeded"},       // absent; executed again, same key
      {"drop_after_commit", 1, 0, "succeeded"},        // found by reconciliation
      {"error_500_before_commit", 1, 0, "succeeded"},  // absent; executed again
      {"error_500_after_commit", 1, 0, "succeeded"},   // found by reconciliation
      {"rate_limit", 1, 0, "succeeded"},               // 429 is indeterminate, then retried
      {"decline", 1, 0, "failed"},                     // a definite refusal
      {"pending", 1, 0, "succeeded"},                  // pending refund, settled later
  };
  std::vector<std::string> sessions;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto key = key_for(static_cast<int>(i) + 1);
    auto r =
        c.payments_admin("POST", "/_sim/faults",
                         refund_fault(key, cases[i].action, cases[i].times, cases[i].delay_ms));
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    sessions.push_back(c.create_session(
        fmt::format(R"([{{"name":"request_refund","arguments":{{"order_id":"F{}"}}}}])", i + 1)));
    c.wait_operation(key, [](auto& op) { return str(op, "state") == "pending"; });
    c.approve(key);
  }
  // The pending refund is not settled by opgate until the provider settles it.
  const auto pending_key = key_for(8);
  auto held = c.wait_operation(pending_key, [](auto& op) {
    return str(op, "state") == "outcome_unknown" && !str(op, "provider_object_id").empty();
  });
  CHECK(held.at("outcome").is_null());
  auto settle =
      c.payments_admin("POST", "/_sim/refunds/" + str(held, "provider_object_id") + "/settle",
                       R"({"status":"succeeded"})");
  REQUIRE_MESSAGE(settle.status == 200, settle.raw);

  for (size_t i = 0; i < cases.size(); ++i) {
    const auto key = key_for(static_cast<int>(i) + 1);
    CAPTURE(cases[i].action);
    auto op = c.wait_operation(key, [](auto& x) { return str(x, "state") == "settled"; });
    CHECK(str(op, "outcome") == cases[i].outcome);
    auto sim = c.wait_session_sim(sessions[i], [](auto& s) {
      return str(s.at("turns").as_array().at(0), "status") == "completed";
    });
    CHECK(sim.at("items").as_array().size() == 4);  // user, call, output, answer
  }
  check_ledgers_agree(c);
  auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find("opgate_provider_attempts_total") != std::string::npos);
  CHECK(metrics.find(R"(opgate_operations{state="settled"} 8)") != std::string::npos);
}

TEST_CASE("account credits: support approves small ones, large ones need a larger limit") {
  ClusterOptions o;
  o.orders = fault_orders(0);
  Cluster c(o);
  c.payments_admin("POST", "/_sim/customers", R"({"id":"cus_gbp"})");
  c.create_session(
      R"([{"name":"issue_account_credit","arguments":{"order_id":"C1","amount_minor":1500,"currency":"GBP","reason_code":"DELIVERY_DELAY"}}])");
  const std::string key = "demo-user:C1:account-credit:v1";
  auto op = c.wait_operation(key, [](auto& x) { return str(x, "state") == "pending"; });
  CHECK(str(op.at("proposal"), "tier") == "support");
  c.approve(key, kSupportToken);
  op = c.wait_operation(key, [](auto& x) { return str(x, "state") == "settled"; });
  CHECK(str(op, "outcome") == "succeeded");
  auto objects = provider_objects(c);
  REQUIRE(objects.size() == 1);
  CHECK(objects[0].at("amount").as_int64() == -1500);
  CHECK(str(objects[0], "customer") == "cus_gbp");
  check_ledgers_agree(c);

  // A second, larger credit on another session links to the settled key's
  // recorded outcome rather than paying again.
  auto again = c.create_session(
      R"([{"name":"issue_account_credit","arguments":{"order_id":"C1","amount_minor":1500,"currency":"GBP","reason_code":"DELIVERY_DELAY"}}])");
  c.wait_session_sim(again, [](auto& s) { return !s.at("results").as_object().empty(); });
  CHECK(provider_objects(c).size() == 1);
}

TEST_CASE("on-call resolves an outcome_unknown operation by hand, audited, with the ledger") {
  ClusterOptions o;
  o.orders = fault_orders(1);
  o.payments_timeout_ms = 1000;
  Cluster c(o);
  const auto key = key_for(1);
  // Posts and listings both fail: reconciliation can prove nothing.
  c.payments_admin(
      "POST", "/_sim/faults",
      R"({"rules":[{"method":"POST","path_prefix":"/v1/refunds","action":"drop_after_commit","times":-1},)"
      R"({"method":"GET","path_prefix":"/v1/refunds","action":"error_500_before_commit","times":-1}]})");
  auto session = c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"F1"}}])");
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "pending"; });
  // Resolve is refused before the outcome is unknown, and without the scope.
  CHECK(c.op("POST", "/v1/operations/" + key + "/resolve",
             R"({"outcome":"succeeded","evidence":"x"})", kOncallToken)
            .status == 409);
  c.approve(key);
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "outcome_unknown"; });
  auto [lrc, listing] = c.cli({"ops", "list", "--state", "outcome_unknown"}, kOncallToken);
  CHECK(lrc == 0);
  CHECK(listing.find(key) != std::string::npos);
  CHECK(c.op("POST", "/v1/operations/" + key + "/resolve",
             R"({"outcome":"succeeded","evidence":"x"})", kAliceToken)
            .status == 403);
  CHECK(c.op("POST", "/v1/operations/" + key + "/resolve", R"({"outcome":"maybe","evidence":"x"})",
             kOncallToken)
            .status == 400);
  auto [rc, out] = c.cli({"ops", "resolve", key, "--outcome", "succeeded", "--evidence",
                          "provider dashboard shows the refund"},
                         kOncallToken);
  CHECK(rc == 0);
  auto op = c.operation(key);
  CHECK(str(op, "outcome") == "succeeded");
  bool audited = false;
  for (const auto& h : op.at("history").as_array())
    if (str(h, "action") == "resolve_succeeded" && str(h, "principal") == "oncall") audited = true;
  CHECK(audited);
  CHECK(c.op("GET", "/v1/ledger").body.at("ledger").as_array().size() == 1);
  c.wait_session_sim(session, [](auto& s) {
    return str(s.at("turns").as_array().at(0), "status") == "completed";
  });
}

TEST_CASE("a daemon killed while executing restarts into outcome_unknown and reconciles once") {
  ClusterOptions o;
  o.orders = fault_orders(1);
  o.payments_timeout_ms = 5000;
  Cluster c(o);
  const auto key = key_for(1);
  // The provider holds the call long enough to kill the daemon mid-flight.
  c.payments_admin("POST", "/_sim/faults", refund_fault(key, "delay", 1, 3000));
  auto session = c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"F1"}}])");
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "pending"; });
  c.approve(key);
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "executing"; });
  c.restart_daemon(/*kill9=*/true);
  // The restart marks it unknown (the history shows it), then it is proven;
  // meanwhile the same idempotency key keeps a re-execution from paying twice.
  auto op = c.wait_operation(key, [](auto& x) { return str(x, "state") == "settled"; });
  CHECK(str(op, "outcome") == "succeeded");
  bool restarted = false;
  for (const auto& h : op.at("history").as_array())
    if (str(h, "action") == "restart" && str(h, "to") == "outcome_unknown") restarted = true;
  CHECK(restarted);
  check_ledgers_agree(c);
  CHECK(provider_objects(c).size() == 1);
  c.wait_session_sim(session, [](auto& s) {
    return str(s.at("turns").as_array().at(0), "status") == "completed";
  });
}
