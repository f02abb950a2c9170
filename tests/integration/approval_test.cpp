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

TEST_CASE("an approver lowers the amount through the API: never raised, paid and told as lowered") {
  Cluster c;
  auto session = c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  const std::string fp = str(c.operation(kKey), "fingerprint");
  auto approve_with = [&](json::object body) {
    body.emplace("fingerprint", fp);
    body.emplace("currency", "USD");
    return c.op("POST", "/v1/operations/" + kKey + "/approve", json::serialize(body), kAliceToken);
  };
  // Widening in any form is 422 and changes nothing.
  CHECK(approve_with({{"amount_minor", 2600}, {"edit_reason", "more"}}).status == 422);
  CHECK(approve_with({{"amount_minor", 1500}, {"edit_reason", "x"}, {"order_id", "ORDER-300"}})
            .status == 422);
  CHECK(approve_with({{"amount_minor", 1500}, {"edit_reason", "x"}, {"owner", "someone-else"}})
            .status == 422);
  auto no_reason = approve_with({{"amount_minor", 1500}});
  CHECK(no_reason.status == 400);
  CHECK(str(c.operation(kKey), "fingerprint") == fp);
  CHECK(str(c.operation(kKey), "state") == "pending");

  auto lowered =
      approve_with({{"amount_minor", 1500}, {"edit_reason", "Only one item arrived damaged."}});
  REQUIRE(lowered.status == 200);
  CHECK(lowered.body.at("amount_minor").as_int64() == 1500);
  CHECK(lowered.body.at("original_amount_minor").as_int64() == 2500);
  CHECK(str(lowered.body, "edited_by") == "alice");
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "settled"; });
  auto refunds = provider_refunds_for(c, kKey);
  REQUIRE(refunds.size() == 1);
  CHECK(refunds[0].at("amount").as_int64() == 1500);
  auto sim =
      c.wait_session_sim(session, [](auto& s) { return !s.at("results").as_object().empty(); });
  for (const auto& [call, result] : sim.at("results").as_object()) {
    auto output = json::parse(str(result, "output")).as_object();
    CHECK(str(output, "status") == "succeeded");
    CHECK(output.at("amount_minor").as_int64() == 1500);
    CHECK(output.at("original_amount_minor").as_int64() == 2500);
  }
  auto ledger = c.op("GET", "/v1/ledger").body.at("ledger").as_array();
  REQUIRE(ledger.size() == 1);
  CHECK(ledger[0].at("amount_minor").as_int64() == 1500);
  CHECK(ledger[0].at("original_amount_minor").as_int64() == 2500);
}

TEST_CASE("opgate approve --amount lowers the amount; a higher one is refused before any request") {
  Cluster c;
  c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  auto [hrc, higher] =
      c.cli({"approve", "--yes", "--operation", kKey, "--amount", "30.00", "--reason", "more"},
            kAliceToken);
  CHECK(hrc == 2);
  auto [nrc, no_reason] =
      c.cli({"approve", "--yes", "--operation", kKey, "--amount", "15.00"}, kAliceToken);
  CHECK(nrc == 2);
  auto [brc, bad] =
      c.cli({"approve", "--yes", "--operation", kKey, "--amount", "15.001", "--reason", "x"},
            kAliceToken);
  CHECK(brc == 2);
  CHECK(str(c.operation(kKey), "state") == "pending");
  auto [rc, out] = c.cli({"approve", "--yes", "--operation", kKey, "--amount", "15.00", "--reason",
                          "Only one item arrived damaged."},
                         kAliceToken);
  CHECK(rc == 0);
  CHECK(out.find("lowered to:  15.00 USD") != std::string::npos);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "settled"; });
  auto op = c.operation(kKey);
  CHECK(op.at("amount_minor").as_int64() == 1500);
  CHECK(op.at("original_amount_minor").as_int64() == 2500);
  CHECK(str(op, "edit_reason") == "Only one item arrived damaged.");
}
