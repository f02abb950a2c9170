// Approval rules that need the whole daemon: the order read again at
// approval time, idempotent decisions, and a settled operation's 409.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cluster.h"

using namespace opgate::testing;

namespace {
const std::string kKey = "demo-user:ORDER-100:full-refund:v1";
const std::string kRefund = R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])";
}  // namespace

TEST_CASE("an order changed while awaiting approval rejects the operation and tells the session") {
  Cluster c;
  auto session = c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  auto order = c.op("GET", "/v1/orders/ORDER-100").body.as_object();
  order["amount_minor"] = 3000;  // the price changed
  REQUIRE(c.op("PUT", "/v1/orders/ORDER-100", json::serialize(order)).status == 200);
  auto r =
      c.op("POST", "/v1/operations/" + kKey + "/approve",
           json::serialize(json::object{{"amount_minor", 2500},
                                        {"currency", "USD"},
                                        {"fingerprint", str(c.operation(kKey), "fingerprint")}}),
           kAliceToken);
  CHECK(r.status == 409);
  CHECK(str(r.body.at("error"), "code") == "order_changed");
  auto op = c.operation(kKey);
  CHECK(str(op, "state") == "settled");
  CHECK(str(op, "outcome") == "rejected");
  auto sim =
      c.wait_session_sim(session, [](auto& s) { return !s.at("results").as_object().empty(); });
  for (const auto& [call, result] : sim.at("results").as_object())
    CHECK(str(json::parse(str(result, "output")), "status") == "rejected");
  CHECK(c.payments_admin("GET", "/_sim/stats").body.at("post_requests").as_int64() == 0);
}

TEST_CASE(
    "decisions are idempotent per principal; a settled operation answers 409 with its state") {
  ClusterOptions o;
  Cluster c(o);
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-300"}}])");
  const std::string key = "demo-user:ORDER-300:full-refund:v1";
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "pending"; });
  const auto audit_count = [&] {
    return c.op("GET", "/v1/audit?operation=" + key).body.at("audit").as_array().size();
  };
  auto first = c.approve(key, kAliceToken);
  const auto after_first = audit_count();
  auto repeat = c.approve(key, kAliceToken);
  CHECK(repeat.at("approvals").as_array().size() == 1);
  CHECK(str(repeat, "state") == "pending");
  CHECK(audit_count() == after_first);
  c.approve(key, kBobToken);
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "settled"; });
  auto late =
      c.op("POST", "/v1/operations/" + key + "/deny", R"({"reason":"too late"})", kBobToken);
  CHECK(late.status == 409);
  CHECK(str(late.body.at("operation"), "state") == "settled");
  (void)first;
}
