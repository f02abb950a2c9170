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
  // The answer is the operation as its approval committed it: its history
  // ends with the approval and the claim that came with it, each record as
  // the chain keeps it.
  const auto& answered = lowered.body.at("history").as_array();
  REQUIRE(answered.size() >= 3);
  CHECK(str(answered[answered.size() - 2].as_object(), "action") == "approve");
  CHECK(str(answered.back().as_object(), "action") == "claim");
  auto settled = c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "settled"; });
  const auto& kept = settled.at("history").as_array();
  REQUIRE(kept.size() > answered.size());
  for (size_t i = 0; i < answered.size(); ++i) CHECK(answered[i] == kept[i]);
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
  // An amount given empty (an unset variable in a script) is refused: read
  // as no amount it would approve the whole proposal; and a reason alone
  // (its amount forgotten) too.
  CHECK(
      c.cli({"approve", "--yes", "--operation", kKey, "--amount", "", "--reason", "x"}, kAliceToken)
          .first == 2);
  CHECK(c.cli({"approve", "--yes", "--operation", kKey, "--reason", "Only one item."}, kAliceToken)
            .first == 2);
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
  // The report counts it: one approved, lowered by 10.00, alice its approver.
  auto [jrc, json_report] = c.cli({"--json", "report", "--since", "1h"}, kAliceToken);
  REQUIRE(jrc == 0);
  auto report = json::parse(json_report).as_object();
  CHECK(report.at("proposals").as_int64() == 1);
  CHECK(report.at("outcomes").at("approved").as_int64() == 1);
  CHECK(report.at("narrowed").at("amount_removed_minor").at("USD").as_int64() == 1000);
  CHECK(report.at("approvers").at("alice").at("approved").as_int64() == 1);
  auto [trc, text] = c.cli({"report"}, kAliceToken);
  CHECK(trc == 0);
  CHECK(text.find("1 proposals in the last 7d") != std::string::npos);
  CHECK(text.find("lowered by the approver 1") != std::string::npos);
  // An outsider's report sees none of it.
  auto outsider = c.op("GET", "/v1/report", "", kOutsiderToken);
  CHECK(outsider.body.at("proposals").as_int64() == 0);
  // A page's charts are drawn from the report it showed (same principal and
  // window): a proposal made in between is in the next report, not in them.
  auto page = c.op("GET", "/v1/report?from_ms=1", "", kAliceToken);
  REQUIRE(page.status == 200);
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-300"}}])");
  c.wait_operation("demo-user:ORDER-300:full-refund:v1",
                   [](auto& x) { return str(x, "state") == "pending"; });
  const auto chart = c.op("GET", "/v1/report/charts/outcomes.svg?from_ms=1", "", kAliceToken).raw;
  CHECK(chart.find("approved") != std::string::npos);
  CHECK(chart.find("pending") == std::string::npos);
  const auto fresh = c.op("GET", "/v1/report/charts/outcomes.svg?from_ms=2", "", kAliceToken).raw;
  CHECK(fresh.find("pending") != std::string::npos);
  CHECK(c.op("GET", "/v1/report?from_ms=1", "", kAliceToken).body.at("proposals").as_int64() == 2);
  // Another principal's charts are its own.
  const auto theirs =
      c.op("GET", "/v1/report/charts/outcomes.svg?from_ms=1", "", kOutsiderToken).raw;
  CHECK(theirs.find("approved") == std::string::npos);
  // A window or a cursor is digits alone: anything else is refused, not
  // read in part ("1.7e12" as 1, "-1" wrapped round).
  for (const char* bad : {"1.7e12", "12abc", "-1", "+5", "%205", ""})
    CHECK_MESSAGE(
        c.op("GET", std::string("/v1/report?from_ms=") + bad, "", kAliceToken).status == 400, bad);
  for (const char* bad : {"-1", "-2", "1e3", "99999999999999999999"})
    CHECK_MESSAGE(c.op("GET", std::string("/v1/audit?after=") + bad).status == 400, bad);
  CHECK(c.op("GET", "/v1/audit?after=0").status == 200);
}

TEST_CASE("POST /v1/approvals answers per item: a stale or unknown item fails alone and says why") {
  Cluster c;
  c.create_session(kRefund);
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-500"}}])");
  const std::string other = "demo-user:ORDER-500:full-refund:v1";
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  c.wait_operation(other, [](auto& x) { return str(x, "state") == "pending"; });
  auto item = [&](const std::string& key) {
    auto op = c.operation(key);
    return json::object{{"key", key},
                        {"amount_minor", op.at("amount_minor")},
                        {"currency", op.at("currency")},
                        {"fingerprint", op.at("fingerprint")}};
  };
  auto stale = item(other);
  stale["fingerprint"] = std::string(64, '0');
  // Malformed batches change nothing.
  CHECK(c.op("POST", "/v1/approvals", R"({"items":[]})", kAliceToken).status == 400);
  CHECK(c.op("POST", "/v1/approvals",
             json::serialize(json::object{{"items", json::array{item(kKey), item(kKey)}}}),
             kAliceToken)
            .status == 400);
  // An item whose fields are malformed refuses the batch before an item
  // ahead of it is approved.
  auto malformed = item(other);
  malformed["amount_minor"] = "2500";
  auto refused = c.op("POST", "/v1/approvals",
                      json::serialize(json::object{{"items", json::array{item(kKey), malformed}}}),
                      kAliceToken);
  CHECK(refused.status == 400);
  CHECK(str(refused.body.at("error"), "message").find(other) != std::string::npos);
  CHECK(str(c.operation(kKey), "state") == "pending");
  CHECK(c.operation(kKey).at("approvals").as_array().empty());

  auto r =
      c.op("POST", "/v1/approvals",
           json::serialize(json::object{
               {"items", json::array{item(kKey), stale,
                                     json::object{{"key", "demo-user:ORDER-999:full-refund:v1"},
                                                  {"amount_minor", 100},
                                                  {"currency", "USD"},
                                                  {"fingerprint", "x"}}}}}),
           kAliceToken);
  REQUIRE(r.status == 200);
  CHECK(r.body.at("approved").as_int64() == 1);
  CHECK(r.body.at("refused").as_int64() == 2);
  const auto& results = r.body.at("results").as_array();
  REQUIRE(results.size() == 3);
  CHECK(results[0].at("status").as_int64() == 200);
  CHECK(str(results[0].at("operation"), "key") == kKey);
  CHECK(results[1].at("status").as_int64() == 409);
  CHECK(str(results[1].at("error"), "code") == "proposal_mismatch");
  CHECK(str(results[1].at("operation"), "state") == "pending");
  CHECK(results[2].at("status").as_int64() == 404);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "settled"; });
  CHECK(str(c.operation(other), "state") == "pending");
  // A token that may not approve is refused the whole request.
  CHECK(c.op("POST", "/v1/approvals",
             json::serialize(json::object{{"items", json::array{item(other)}}}), kReaderToken)
            .status == 403);
}

TEST_CASE("above the step-up line the API and the CLI are refused with step_up_required") {
  ClusterOptions o;
  o.extra_config = "[console.step_up]\nabove_minor = { USD = 2000 }\n";
  Cluster c(o);
  c.create_session(kRefund);  // 25.00 USD: above the line
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  auto op = c.operation(kKey);
  CHECK(op.at("step_up_required").as_bool());
  auto r = c.op(
      "POST", "/v1/operations/" + kKey + "/approve",
      json::serialize(json::object{
          {"amount_minor", 2500}, {"currency", "USD"}, {"fingerprint", str(op, "fingerprint")}}),
      kAliceToken);
  CHECK(r.status == 403);
  CHECK(str(r.body.at("error"), "code") == "step_up_required");
  auto [rc, out] = c.cli({"approve", "--yes", "--operation", kKey}, kAliceToken);
  CHECK(rc != 0);
  CHECK(out.find("approved by you") == std::string::npos);
  // A made-up assertion through the API: refused, nothing approved.
  auto forged =
      c.op("POST", "/v1/operations/" + kKey + "/approve",
           json::serialize(json::object{{"amount_minor", 2500},
                                        {"currency", "USD"},
                                        {"fingerprint", str(op, "fingerprint")},
                                        {"step_up", json::object{{"challenge", "AAAA"},
                                                                 {"credential_id", "AAAA"},
                                                                 {"client_data_json", "AAAA"},
                                                                 {"authenticator_data", "AAAA"},
                                                                 {"signature", "AAAA"}}}}),
           kAliceToken);
  CHECK(forged.status == 403);
  CHECK(str(forged.body.at("error"), "code") == "step_up_failed");
  CHECK(str(c.operation(kKey), "state") == "pending");
  // Only an administrator allows a principal to enrol a passkey.
  auto [arc, allowed] = c.cli({"passkeys", "allow", "--principal", "alice"}, kAdminToken);
  CHECK(arc == 0);
  CHECK(allowed.find("alice may register one passkey") != std::string::npos);
  auto [src, self] = c.cli({"passkeys", "allow", "--principal", "alice"}, kAliceToken);
  CHECK(src != 0);
  CHECK(c.op("POST", "/v1/passkeys/enrolments", R"({"principal":"nobody"})", kAdminToken).status ==
        404);
  // A principal's passkey records are its own (and an all-owners token's).
  CHECK(c.op("GET", "/v1/audit?operation=passkey:alice", "", kOutsiderToken).status == 404);
  CHECK(c.op("GET", "/v1/audit?operation=passkey:alice", "", kAliceToken).status == 200);
}
