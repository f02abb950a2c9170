// Orders from the business's order service (orders.source = "http", served by
// opgate-sim orders with faults): a service that is down, slow or answers
// nonsense gets a temporary refusal and never a guess; every proposal,
// approval and execution reads the order afresh; a cancel_order whose calls
// time out at the order service and at the provider settles with at most
// one cancellation and one refund.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cluster.h"

using namespace opgate::testing;

namespace {

const std::string kRefund = "demo-user:ORDER-100:full-refund:v1";
const std::string kCancel = "demo-user:ORDER-100:cancel-order:v1";

ClusterOptions with_order_service() {
  ClusterOptions o;
  o.order_service = true;
  o.orders_timeout_ms = 500;
  return o;
}

std::string fault(const std::string& method, const std::string& path, const std::string& action,
                  int times = -1, int delay_ms = 0) {
  return fmt::format(
      R"({{"rules":[{{"method":"{}","path_prefix":"{}","action":"{}","times":{},"delay_ms":{}}}]}})",
      method, path, action, times, delay_ms);
}

// The one result of a session whose script is a single call.
json::object only_result(Cluster& c, const std::string& session) {
  auto sim = c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
  auto r = results(sim);
  REQUIRE(r.size() == 1);
  return r[0];
}

std::string lookup(const std::string& order) {
  return R"([{"name":"lookup_order","arguments":{"order_id":")" + order + R"("}}])";
}

}  // namespace

TEST_CASE("an order service that is down, slow or malformed gets a temporary refusal, no guess") {
  Cluster c(with_order_service());
  // Down: every read answers 500.
  c.orders_admin("POST", "/_sim/faults",
                 fault("GET", "/orders/ORDER-100", "error_500_before_commit"));
  auto down = only_result(c, c.create_session(lookup("ORDER-100")));
  CHECK_FALSE(down.at("success").as_bool());
  CHECK(str(down, "error").find("order service is unavailable") != std::string::npos);
  // Slow: the answer comes after the timeout.
  c.orders_admin("POST", "/_sim/faults", fault("GET", "/orders/ORDER-300", "delay", -1, 1500));
  auto slow = only_result(c, c.create_session(lookup("ORDER-300")));
  CHECK_FALSE(slow.at("success").as_bool());
  CHECK(str(slow, "error").find("order service is unavailable") != std::string::npos);
  // Malformed: a 200 whose body is not an order.
  c.orders_admin("POST", "/_sim/faults", fault("GET", "/orders/ORDER-500", "malformed"));
  auto malformed = only_result(c, c.create_session(lookup("ORDER-500")));
  CHECK_FALSE(malformed.at("success").as_bool());
  CHECK(str(malformed, "error").find("order service is unavailable") != std::string::npos);
  // A refund asked for while the service is down proposes nothing.
  auto refused = only_result(
      c, c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])"));
  CHECK_FALSE(refused.at("success").as_bool());
  CHECK(c.op("GET", "/v1/operations").body.at("operations").as_array().empty());
  // Back: the order as the service has it now, read afresh.
  c.orders_admin("DELETE", "/_sim/faults");
  auto order = c.orders_admin("GET", "/_sim/orders/ORDER-100").body.as_object();
  order["note"] = "changed at the order service";
  REQUIRE(c.orders_admin("PUT", "/_sim/orders/ORDER-100", json::serialize(order)).status == 200);
  auto found = only_result(c, c.create_session(lookup("ORDER-100")));
  REQUIRE(found.at("success").as_bool());
  CHECK(str(found, "output").find("changed at the order service") != std::string::npos);
  auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find(R"(opgate_order_service_reads_total{result="unavailable"})") !=
        std::string::npos);
}

TEST_CASE(
    "an approval reads the order afresh: down is a 503 that approves nothing, changed rejects") {
  Cluster c(with_order_service());
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])");
  auto op = c.wait_operation(kRefund, [](auto& o) { return str(o, "state") == "pending"; });
  c.orders_admin("POST", "/_sim/faults",
                 fault("GET", "/orders/ORDER-100", "error_500_before_commit"));
  auto approval = json::serialize(json::object{{"amount_minor", op.at("amount_minor")},
                                               {"currency", op.at("currency")},
                                               {"fingerprint", op.at("fingerprint")}});
  auto down = c.op("POST", "/v1/operations/" + kRefund + "/approve", approval, kAliceToken);
  CHECK(down.status == 503);
  CHECK(str(down.body.at("error"), "code") == "orders_unavailable");
  // One that names another order is refused as that, before the service.
  auto other = json::parse(approval).as_object();
  other["order_id"] = "ORDER-300";
  auto widened =
      c.op("POST", "/v1/operations/" + kRefund + "/approve", json::serialize(other), kAliceToken);
  CHECK(widened.status == 422);
  CHECK(str(widened.body.at("error"), "code") == "widening_refused");
  CHECK(str(c.operation(kRefund), "state") == "pending");
  c.orders_admin("DELETE", "/_sim/faults");
  auto order = c.orders_admin("GET", "/_sim/orders/ORDER-100").body.as_object();
  order["amount_minor"] = 3000;
  REQUIRE(c.orders_admin("PUT", "/_sim/orders/ORDER-100", json::serialize(order)).status == 200);
  auto changed = c.op("POST", "/v1/operations/" + kRefund + "/approve", approval, kAliceToken);
  CHECK(changed.status == 409);
  auto settled = c.wait_operation(kRefund, [](auto& o) { return str(o, "state") == "settled"; });
  CHECK(str(settled, "outcome") == "rejected");
  CHECK(provider_refunds_for(c, kRefund).empty());
}

TEST_CASE("a cancel whose calls time out at the order service and the provider settles once") {
  Cluster c(with_order_service());
  auto session = c.create_session(
      R"([{"name":"cancel_order","arguments":{"order_id":"ORDER-100","reason":"not needed"}}])");
  c.wait_operation(kCancel, [](auto& o) { return str(o, "state") == "pending"; });
  // The order service cancels, then the answer is lost; the provider refunds,
  // then the answer is lost.
  c.orders_admin("POST", "/_sim/faults",
                 fault("POST", "/orders/ORDER-100/cancel", "drop_after_commit", 1));
  c.payments_admin("POST", "/_sim/faults", fault("POST", "/v1/refunds", "drop_after_commit", 1));
  c.approve(kCancel, kAliceToken);
  auto op = c.wait_operation(kCancel, [](auto& o) { return str(o, "state") == "settled"; });
  CHECK(str(op, "outcome") == "succeeded");
  auto stats = c.orders_admin("GET", "/_sim/stats").body;
  CHECK(stats.at("by_order").at("ORDER-100").at("cancellations").as_int64() == 1);
  CHECK(stats.at("by_order").at("ORDER-100").at("cancel_requests").as_int64() >= 2);
  CHECK(str(c.orders_admin("GET", "/_sim/orders/ORDER-100").body, "status") == "cancelled");
  auto refunds = provider_refunds_for(c, kCancel);
  REQUIRE(refunds.size() == 1);
  CHECK(refunds[0].at("amount").as_int64() == 2500);
  auto result = only_result(c, session);
  CHECK(str(json::parse(str(result, "output")), "status") == "succeeded");
}

TEST_CASE(
    "a cancellation whose refund went out is proven at the provider, even when the order service "
    "no longer shows it cancelled") {
  Cluster c(with_order_service());
  auto session = c.create_session(
      R"([{"name":"cancel_order","arguments":{"order_id":"ORDER-100","reason":"not needed"}}])");
  c.wait_operation(kCancel, [](auto& o) { return str(o, "state") == "pending"; });
  // The refund goes out and its answer is lost; the provider's records
  // cannot be read until the order service has changed its mind.
  c.payments_admin("POST", "/_sim/faults",
                   R"({"rules":[{"method":"POST","path_prefix":"/v1/refunds",)"
                   R"("action":"drop_after_commit","times":1},)"
                   R"({"method":"GET","path_prefix":"/v1/refunds",)"
                   R"("action":"error_500_before_commit","times":-1}]})");
  c.approve(kCancel, kAliceToken);
  c.wait_operation(kCancel, [](auto& o) { return str(o, "state") == "outcome_unknown"; });
  // The order service now reports the order delivered and not cancelled,
  // and has forgotten its idempotency keys.
  auto order = c.orders_admin("GET", "/_sim/orders/ORDER-100").body.as_object();
  order["status"] = "paid";
  order["delivery"] = json::array{json::object{{"at", 1}, {"status", "delivered"}, {"detail", ""}}};
  REQUIRE(c.orders_admin("PUT", "/_sim/orders/ORDER-100", json::serialize(order)).status == 200);
  REQUIRE(c.orders_admin("POST", "/_sim/reset").status == 200);
  c.payments_admin("DELETE", "/_sim/faults");
  auto reconciled = c.op("POST", "/v1/operations/" + kCancel + "/reconcile", "", kOncallToken);
  CHECK(reconciled.status == 200);
  auto op = c.wait_operation(kCancel, [](auto& o) { return str(o, "state") == "settled"; });
  CHECK(str(op, "outcome") == "succeeded");
  auto refunds = provider_refunds_for(c, kCancel);
  REQUIRE(refunds.size() == 1);
  auto ledger = c.op("GET", "/v1/ledger").body.at("ledger").as_array();
  REQUIRE(ledger.size() == 1);
  CHECK(str(ledger[0], "provider_object_id") == str(refunds[0], "id"));
  // Nothing remains of the order's value: a credit against it is refused.
  auto credit = only_result(
      c, c.create_session(R"([{"name":"issue_account_credit","arguments":{"order_id":"ORDER-100",)"
                          R"("amount_minor":2000,"currency":"USD","reason_code":"GOODWILL"}}])"));
  CHECK_FALSE(credit.at("success").as_bool());
  CHECK(provider_refunds_for(c, kCancel).size() == 1);
  CHECK(c.payments_admin("GET", "/_sim/ledger").body.at("balance_transactions").as_array().empty());
  auto result = only_result(c, session);
  CHECK(str(json::parse(str(result, "output")), "status") == "succeeded");
}
