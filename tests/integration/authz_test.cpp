// What a principal may read or act on is limited to the owners its patterns
// match, on every route; order updates keep what opgate executed and are
// audited with their principal.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cluster.h"

using namespace opgate::testing;

namespace {
const std::string kKey = "demo-user:ORDER-100:full-refund:v1";
const std::string kRefund = R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])";
}  // namespace

TEST_CASE("outside its owner patterns a principal finds nothing, on every route") {
  Cluster c;
  auto session = c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  const auto t = kOutsiderToken;
  CHECK(c.op("GET", "/v1/operations/" + kKey, "", t).status == 404);
  CHECK(c.op("GET", "/v1/operations/" + kKey + "/context", "", t).status == 404);
  CHECK(
      c.op("GET", "/v1/operations?state=pending", "", t).body.at("operations").as_array().empty());
  CHECK(c.op("GET", "/v1/audit?operation=" + kKey, "", t).status == 404);
  CHECK(c.op("GET", "/v1/audit", "", t).body.at("audit").as_array().empty());
  CHECK(c.op("GET", "/v1/sessions/" + session, "", t).status == 404);
  CHECK(c.op("GET", "/v1/sessions/" + session + "/transcript", "", t).status == 404);
  CHECK(c.op("POST", "/v1/sessions/" + session + "/recover", "", t).status == 404);
  CHECK(c.op("POST", "/v1/operations/" + kKey + "/deny", R"({"reason":"x"})", t).status == 404);
  CHECK(c.op("POST", "/v1/operations/" + kKey + "/approve",
             json::serialize(json::object{{"amount_minor", 2500},
                                          {"currency", "USD"},
                                          {"fingerprint", str(c.operation(kKey), "fingerprint")}}),
             t)
            .status == 404);
  CHECK(str(c.operation(kKey), "state") == "pending");
  // The audit chain spans every owner: an outsider hears whether it
  // verifies, never its length, head or a problem naming another's record.
  auto verify = c.op("GET", "/v1/audit/verify", "", t);
  CHECK(verify.status == 200);
  CHECK(verify.body.at("ok").as_bool());
  CHECK_FALSE(verify.body.as_object().contains("records"));
  CHECK_FALSE(verify.body.as_object().contains("head"));
  CHECK(c.op("GET", "/v1/audit/verify", "", kAdminToken).body.as_object().contains("records"));
  // An unknown id and an id of the wrong shape are answered like any other.
  CHECK(c.op("GET", "/v1/sessions/sess_unknown/transcript", "", kAdminToken).status == 404);
  CHECK(c.op("GET", "/v1/sessions/..%2Fetc/transcript", "", kAdminToken).status == 400);
  // The same requests with a token for the owner see it.
  CHECK(c.op("GET", "/v1/operations/" + kKey, "", kReaderToken).status == 200);
  CHECK(c.op("GET", "/v1/sessions/" + session + "/transcript", "", kReaderToken).status == 200);
  // Settled: the ledger row is visible to the owner's principals only.
  c.approve(kKey, kAliceToken);
  c.wait_operation(kKey, [](auto& x) { return str(x, "outcome") == "succeeded"; });
  CHECK(c.op("GET", "/v1/ledger", "", t).body.at("ledger").as_array().empty());
  CHECK(c.op("GET", "/v1/ledger", "", kReaderToken).body.at("ledger").as_array().size() == 1);
  CHECK(c.op("POST", "/v1/operations/" + kKey + "/reconcile", "", t).status == 404);
}

TEST_CASE("an order update keeps what opgate refunded and is audited with its principal") {
  Cluster c;
  c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  c.approve(kKey, kAliceToken);
  c.wait_operation(kKey, [](auto& x) { return str(x, "outcome") == "succeeded"; });
  // An admin "resets" the order as the business system still sees it.
  auto order = c.op("GET", "/v1/orders/ORDER-100").body.as_object();
  order["status"] = "paid";
  order["refunded_minor"] = 0;
  order["note"] = "re-imported";
  REQUIRE(c.op("PUT", "/v1/orders/ORDER-100", json::serialize(order)).status == 200);
  auto audit = c.op("GET", "/v1/audit").body.at("audit").as_array();
  bool audited = false;
  for (const auto& r : audit)
    if (str(r, "action") == "order_update" && str(r, "principal") == "admin" &&
        str(r.at("details"), "order_id") == "ORDER-100")
      audited = true;
  CHECK(audited);
  // Asked again, the model gets the recorded outcome; a second session's
  // request is refused: nothing remains to refund.
  auto again = c.create_session(kRefund);
  auto sim =
      c.wait_session_sim(again, [](auto& s) { return !s.at("results").as_object().empty(); });
  for (const auto& [call, result] : sim.at("results").as_object())
    CHECK(str(json::parse(str(result, "output")), "status") == "succeeded");
  CHECK(c.payments_admin("GET", "/_sim/stats").body.at("post_requests").as_int64() == 1);
  auto credit = c.create_session(
      R"([{"name":"issue_account_credit","arguments":{"order_id":"ORDER-100","amount_minor":100,"currency":"USD","reason_code":"GOODWILL"}}])");
  auto refused =
      c.wait_session_sim(credit, [](auto& s) { return !s.at("results").as_object().empty(); });
  for (const auto& [call, result] : refused.at("results").as_object())
    CHECK(str(result, "error").find("remains") != std::string::npos);
}

TEST_CASE("the CLI follows every page of a listing") {
  Cluster c;
  for (const char* order : {"ORDER-100", "ORDER-300", "ORDER-400"})
    c.create_session(
        fmt::format(R"([{{"name":"request_refund","arguments":{{"order_id":"{}"}}}}])", order));
  CHECK(eventually([&] {
    return c.op("GET", "/v1/operations?state=pending").body.at("operations").as_array().size() == 3;
  }));
  auto [rc, out] = c.cli({"--page-size", "1", "ops", "list", "--state", "pending"});
  CHECK(rc == 0);
  for (const char* order : {"ORDER-100", "ORDER-300", "ORDER-400"})
    CHECK(out.find(order) != std::string::npos);
}
