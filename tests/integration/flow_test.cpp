// The whole refund flow against real processes: webhook → lookup → pending
// proposal → operator decision → provider → ledger → tool result → turn.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "cluster.h"
#include "http/server.h"

using namespace opgate::testing;

namespace {

const std::string kKey = "demo-user:ORDER-100:full-refund:v1";
const std::string kLookupThenRefund =
    R"([{"name":"lookup_order","arguments":{"order_id":"ORDER-100"}},)"
    R"({"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])";

std::string last_message(const json::object& sim) {
  std::string text;
  for (const auto& item : sim.at("items").as_array())
    if (str(item, "type") == "message" && str(item, "role") == "assistant")
      text = str(item, "content");
  return text;
}

int provider_posts_for(Cluster& c, const std::string& key) {
  auto stats = c.payments_admin("GET", "/_sim/stats");
  auto* k = stats.body.at("by_operation_key").as_object().if_contains(key);
  return k ? static_cast<int>(k->at("posts").as_int64()) : 0;
}

json::array ledger_rows(Cluster& c, const std::string& query) {
  auto r = c.op("GET", "/v1/ledger?" + query);
  REQUIRE(r.status == 200);
  return r.body.at("ledger").as_array();
}

bool is_settled(const json::object& op) { return str(op, "state") == "settled"; }

}  // namespace

TEST_CASE("approving the exact proposal refunds once, records the ledger and completes the turn") {
  Cluster c;
  auto session = c.create_session(kLookupThenRefund);
  auto op = c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  CHECK(str(op, "owner") == "demo-user");
  CHECK(op.at("amount_minor").as_int64() == 2500);
  CHECK(str(op, "currency") == "USD");
  CHECK(str(op, "kind") == "full-refund");
  CHECK(str(op, "session_id") == session);
  CHECK(op.at("outcome").is_null());

  // The lookup was answered from server-owned data with the policy.
  auto sim = c.wait_session_sim(session, [](auto& s) { return results(s).size() == 1; });
  auto lookup = json::parse(str(results(sim)[0], "output"));
  CHECK(lookup.at("refund_policy").at("refundable_minor").as_int64() == 2500);
  CHECK(root_status(sim) == "waiting");
  CHECK(provider_posts_for(c, kKey) == 0);

  c.approve(kKey);
  op = c.wait_operation(kKey, is_settled);
  CHECK(str(op, "outcome") == "succeeded");
  auto refunds = provider_refunds_for(c, kKey);
  REQUIRE(refunds.size() == 1);
  CHECK(refunds[0].at("amount").as_int64() == 2500);
  CHECK(str(op, "provider_object_id") == str(refunds[0], "id"));
  auto rows = ledger_rows(c, "session=" + session);
  REQUIRE(rows.size() == 1);
  CHECK(str(rows[0], "operation_key") == kKey);
  CHECK(str(rows[0], "provider_object_id") == str(refunds[0], "id"));

  sim = c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
  auto refund_result = json::parse(str(results(sim)[1], "output"));
  CHECK(str(refund_result, "status") == "succeeded");
  CHECK(str(refund_result, "operation_key") == kKey);
  CHECK(last_message(sim).find("succeeded") != std::string::npos);
}

TEST_CASE("a denial makes no provider call and the session is told") {
  Cluster c;
  auto session = c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  // The CLI refuses to deny on behalf of a session the operation is not linked to.
  auto [wrong_rc, wrong_out] =
      c.cli({"deny", "--operation", kKey, "--session", "sess_other", "--reason", "x"}, kAliceToken);
  CHECK(wrong_rc == 1);
  CHECK(str(c.operation(kKey), "state") == "pending");
  const auto denied = c.cli({"deny", "--operation", kKey, "--reason", "not eligible"}, kAliceToken);
  REQUIRE_MESSAGE(denied.first == 0, denied.second);
  CHECK(denied.second.find("denied: " + kKey + " is settled/denied") != std::string::npos);
  auto sim = c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
  CHECK(str(json::parse(str(results(sim)[1], "output")), "status") == "denied");
  CHECK(last_message(sim).find("denied") != std::string::npos);
  CHECK(provider_posts_for(c, kKey) == 0);
  CHECK(ledger_rows(c, "session=" + session).empty());
  // Deciding again: the same principal's repeat is the same answer; approval is refused.
  CHECK(
      c.op("POST", "/v1/operations/" + kKey + "/deny", R"({"reason":"not eligible"})", kAliceToken)
          .status == 200);
  c.approve(kKey, kAliceToken, 409);
}

TEST_CASE("lookup answers only for the bound owner; another owner's order is not found") {
  Cluster c;
  auto session =
      c.create_session(R"([{"name":"lookup_order","arguments":{"order_id":"ORDER-200"}},)"
                       R"({"name":"lookup_order","arguments":{"order_id":"ORDER-NOPE"}},)"
                       R"({"name":"request_refund","arguments":{"order_id":"ORDER-200"}}])");
  auto sim = c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
  auto r = results(sim);
  REQUIRE(r.size() == 3);
  for (const auto& x : r) CHECK_FALSE(x.at("success").as_bool());
  CHECK(str(r[0], "error") == str(r[1], "error"));
  CHECK(str(r[0], "error") == str(r[2], "error"));
  CHECK(c.op("GET", "/v1/operations?owner=demo-user").body.at("operations").as_array().empty());
}

TEST_CASE("a model-supplied owner, amount or key is rejected and creates nothing") {
  Cluster c;
  auto session = c.create_session(
      R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100","amount_minor":1}},)"
      R"({"name":"request_refund","arguments":{"order_id":"ORDER-100","owner":"other-user"}},)"
      R"({"name":"request_refund","arguments":{"order_id":"ORDER-100","operation_key":"x"}}])");
  auto sim = c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
  auto r = results(sim);
  REQUIRE(r.size() == 3);
  for (const auto& x : r) {
    CHECK_FALSE(x.at("success").as_bool());
    CHECK(str(x, "error").find("Unknown argument") != std::string::npos);
  }
  CHECK(c.op("GET", "/v1/operations/" + kKey).status == 404);
}

TEST_CASE("an instruction hidden in order notes leaves only server-computed fields") {
  Cluster c;
  c.create_session(R"([{"name":"lookup_order","arguments":{"order_id":"ORDER-500"}},)"
                   R"({"name":"request_refund","arguments":{"order_id":"ORDER-500"}}])");
  auto op = c.wait_operation("demo-user:ORDER-500:full-refund:v1",
                             [](auto& o) { return str(o, "state") == "pending"; });
  CHECK(str(op, "owner") == "demo-user");
  CHECK(op.at("amount_minor").as_int64() == 3000);
  CHECK(str(op, "currency") == "USD");
  CHECK(op.at("approvals").as_array().empty());
}

TEST_CASE("the same request twice, from the same session or another, is one operation") {
  Cluster c;
  auto first =
      c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}},)"
                       R"({"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])");
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  auto second =
      c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])");
  auto op = c.wait_operation(kKey, [](auto& o) { return o.at("calls").as_array().size() == 2; });
  CHECK(c.op("GET", "/v1/operations?owner=demo-user").body.at("operations").as_array().size() == 1);
  c.approve(kKey);
  c.wait_operation(kKey, is_settled);
  for (const auto& s : {first, second}) {
    auto sim = c.wait_session_sim(s, [](auto& x) { return root_status(x) == "completed"; });
    for (const auto& r : results(sim))
      CHECK(str(json::parse(str(r, "output")), "status") == "succeeded");
  }
  // The first session asked twice: the second ask was answered with the outcome.
  auto sim = c.wait_session_sim(first, [](auto& x) { return results(x).size() == 2; });
  CHECK(results(sim).size() == 2);
  CHECK(provider_refunds_for(c, kKey).size() == 1);
  CHECK(provider_posts_for(c, kKey) == 1);
  CHECK(ledger_rows(c, "owner=demo-user").size() == 1);
}

TEST_CASE(
    "an approval that widens the proposal is a 422, a stale one a 409; neither changes anything") {
  Cluster c;
  c.create_session(kLookupThenRefund);
  auto op = c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  const auto audit_before =
      c.op("GET", "/v1/audit?operation=" + kKey).body.at("audit").as_array().size();
  const std::string fp = str(op, "fingerprint");
  // With the fingerprint shown: a higher amount or another currency widens it.
  for (const auto& body :
       {fmt::format(R"({{"amount_minor":2600,"currency":"USD","fingerprint":"{}"}})", fp),
        fmt::format(R"({{"amount_minor":2500,"currency":"GBP","fingerprint":"{}"}})", fp)}) {
    auto r = c.op("POST", "/v1/operations/" + kKey + "/approve", body, kAliceToken);
    CHECK(r.status == 422);
    CHECK(str(r.body.at("error"), "code") == "widening_refused");
  }
  // Another order, owner or kind named: the key names them.
  for (const char* field : {"order_id", "owner", "kind"}) {
    auto r = c.op(
        "POST", "/v1/operations/" + kKey + "/approve",
        fmt::format(R"({{"amount_minor":2500,"currency":"USD","fingerprint":"{}","{}":"other"}})",
                    fp, field),
        kAliceToken);
    CHECK(r.status == 422);
    CHECK(str(r.body.at("error"), "code") == "widening_refused");
    CHECK(str(r.body.at("error"), "message") ==
          fmt::format("An approval cannot change the {}.", field));
  }
  // Another fingerprint: what was shown is not what is stored.
  for (const auto& body :
       {std::string(R"({"amount_minor":2500,"currency":"USD","fingerprint":"00"})"),
        std::string(R"({"amount_minor":1500,"currency":"USD","fingerprint":"00",)"
                    R"("edit_reason":"less"})")}) {
    auto r = c.op("POST", "/v1/operations/" + kKey + "/approve", body, kAliceToken);
    CHECK(r.status == 409);
    CHECK(str(r.body.at("error"), "code") == "proposal_mismatch");
  }
  auto bad = c.op("POST", "/v1/operations/" + kKey + "/approve", R"({"amount_minor":"2500"})",
                  kAliceToken);
  CHECK(bad.status == 400);
  op = c.operation(kKey);
  CHECK(str(op, "state") == "pending");
  CHECK(op.at("approvals").as_array().empty());
  CHECK(c.op("GET", "/v1/audit?operation=" + kKey).body.at("audit").as_array().size() ==
        audit_before);
  CHECK(provider_posts_for(c, kKey) == 0);
}

TEST_CASE("operator authentication and authority are enforced") {
  Cluster c;
  c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  CHECK(c.op("GET", "/v1/operations", "", "").status == 401);
  CHECK(c.op("GET", "/v1/operations", "", "not-a-token").status == 401);
  CHECK(c.op("GET", "/v1/operations", "", kReaderToken).status == 200);
  c.approve(kKey, kReaderToken, 403);
  c.approve(kKey, kSupportToken, 403);  // 2500 is over its 2000 limit
  CHECK(str(c.operation(kKey), "state") == "pending");
}

TEST_CASE("recovering any number of times never approves, executes or duplicates") {
  Cluster c;
  auto session = c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  c.wait_session_sim(session, [](auto& s) { return results(s).size() == 1; });
  for (int i = 0; i < 5; ++i) {
    auto r = c.op("POST", "/v1/sessions/" + session + "/recover");
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    CHECK(r.body.at("calls").as_array().size() == 2);
    c.agent_admin("POST", "/_sim/sessions/" + session + "/notify");
  }
  auto [rc, out] = c.cli({"recover", "--session", session});
  CHECK(rc == 0);
  auto op = c.operation(kKey);
  CHECK(str(op, "state") == "pending");
  CHECK(op.at("approvals").as_array().empty());
  CHECK(op.at("calls").as_array().size() == 1);
  CHECK(provider_posts_for(c, kKey) == 0);
  CHECK(c.op("GET", "/v1/operations").body.at("operations").as_array().size() == 1);
}

TEST_CASE("events for an unbound session wait and are processed when it is bound") {
  Cluster c;
  auto session = c.create_session(kLookupThenRefund, "");
  CHECK(eventually([&] {
    return c.agent_admin("GET", "/_sim/stats").body.at("webhooks_acked").as_int64() >= 1;
  }));
  CHECK(c.op("GET", "/v1/sessions/" + session).status == 404);
  auto bound = c.op("POST", "/v1/sessions/" + session + "/bind", R"({"owner":"demo-user"})");
  REQUIRE(bound.status == 200);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  // Binding again to another owner is refused.
  CHECK(c.op("POST", "/v1/sessions/" + session + "/bind", R"({"owner":"other-user"})").status ==
        409);
}

TEST_CASE("a restart at any point keeps pending operations, the ledger and the audit chain") {
  Cluster c;
  auto done = c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  c.approve(kKey);
  c.wait_operation(kKey, is_settled);
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-300"}}])");
  const std::string pending_key = "demo-user:ORDER-300:full-refund:v1";
  c.wait_operation(pending_key, [](auto& o) { return str(o, "state") == "pending"; });
  auto audit_before = c.op("GET", "/v1/audit/verify").body;
  CHECK(audit_before.at("ok").as_bool());

  c.restart_daemon(/*kill9=*/true);
  CHECK(str(c.operation(pending_key), "state") == "pending");
  CHECK(str(c.operation(kKey), "outcome") == "succeeded");
  CHECK(ledger_rows(c, "owner=demo-user").size() == 1);
  auto audit_after = c.op("GET", "/v1/audit/verify").body;
  CHECK(audit_after.at("ok").as_bool());
  CHECK(audit_after.at("records").as_int64() >= audit_before.at("records").as_int64());

  int exit_code = -1;
  c.stop_daemon_gracefully(&exit_code);
  CHECK(exit_code == 0);
  if (c.store() == "rocksdb") {  // offline verification reads a data directory
    auto [rc, out] = c.cli({"audit", "verify", "--data-dir", (c.dir() / "data").string()});
    CHECK(rc == 0);
    CHECK(out.find("verifies") != std::string::npos);
  }
  c.start_daemon();
  CHECK(str(c.operation(pending_key), "state") == "pending");
  // Above the two-person threshold: one approval leaves it pending.
  c.approve(pending_key, kAliceToken);
  CHECK(str(c.operation(pending_key), "state") == "pending");
  c.approve(pending_key, kBobToken);
  CHECK(str(c.wait_operation(pending_key, is_settled), "outcome") == "succeeded");
  CHECK(ledger_rows(c, "owner=demo-user").size() == 2);
  (void)done;
}

TEST_CASE("a payment timeout leaves the operation outcome_unknown until the provider proves it") {
  Cluster c;
  auto session = c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  // The provider never answers, and its listing is down: nothing proves anything.
  c.payments_admin(
      "POST", "/_sim/faults",
      R"({"rules":[{"method":"POST","path_prefix":"/v1/refunds","action":"drop_before_commit","times":-1},)"
      R"({"method":"GET","path_prefix":"/v1/refunds","action":"error_500_before_commit","times":-1}]})");
  c.approve(kKey);
  auto op = c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "outcome_unknown"; });
  CHECK(op.at("outcome").is_null());
  CHECK_FALSE(str(op, "last_error").empty());
  // The session hears nothing invented while the outcome is unknown.
  auto sim = c.agent_admin("GET", "/_sim/sessions/" + session).body.as_object();
  CHECK(results(sim).size() == 1);
  CHECK(ledger_rows(c, "session=" + session).empty());

  // The provider comes back: the listing proves absence, the same key runs again.
  c.payments_admin("DELETE", "/_sim/faults");
  // 200 once its own pass has read the provider (after any scheduled pass
  // in flight); 409 only if the scheduled reconciliation settled it first.
  auto rec = c.op("POST", "/v1/operations/" + kKey + "/reconcile", "", kOncallToken);
  CHECK((rec.status == 200 || rec.status == 409));
  if (rec.status == 409)
    CHECK(boost::json::serialize(rec.body).find("settled") != std::string::npos);
  op = c.wait_operation(kKey, is_settled);
  CHECK(str(op, "outcome") == "succeeded");
  CHECK(provider_refunds_for(c, kKey).size() == 1);
  CHECK(ledger_rows(c, "session=" + session).size() == 1);
  c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
}

TEST_CASE("a provider that commits but answers too late is found by reconciliation, once") {
  Cluster c;
  c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  c.payments_admin(
      "POST", "/_sim/faults",
      R"({"rules":[{"method":"POST","path_prefix":"/v1/refunds","action":"delay","delay_ms":2500,"times":1}]})");
  c.approve(kKey);
  auto op = c.wait_operation(kKey, is_settled);
  CHECK(str(op, "outcome") == "succeeded");
  CHECK(provider_refunds_for(c, kKey).size() == 1);
  CHECK(ledger_rows(c, "owner=demo-user").size() == 1);
  // The history shows it passed through outcome_unknown, not failed.
  bool was_unknown = false;
  for (const auto& h : op.at("history").as_array())
    if (str(h, "to") == "outcome_unknown") was_unknown = true;
  CHECK(was_unknown);
}

TEST_CASE("inspect shows root turn status, every page of items and the ledger rows") {
  Cluster c;
  std::string script = "[";
  for (int i = 0; i < 12; ++i)
    script += R"({"name":"lookup_order","arguments":{"order_id":"ORDER-100"}},)";
  script += R"({"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])";
  auto session = c.create_session(script);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  auto [prc, pending] = c.cli({"pending", "--session", session});
  CHECK(prc == 0);
  CHECK(pending.find(kKey) != std::string::npos);
  // Nobody can confirm on a pipe: without --yes the CLI refuses and approves nothing.
  auto [nrc, refused] = c.cli({"approve", "--session", session, "--operation", kKey}, kAliceToken);
  CHECK(nrc != 0);
  CHECK(str(c.operation(kKey), "state") == "pending");
  auto [arc, approved] =
      c.cli({"approve", "--yes", "--session", session, "--operation", kKey}, kAliceToken);
  CHECK(arc == 0);
  CHECK(approved.find("25.00 USD") != std::string::npos);
  CHECK(approved.find("visa ending 4242") != std::string::npos);
  c.wait_operation(kKey, is_settled);
  c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
  auto [rc, out] = c.cli({"inspect", "--session", session});
  CHECK(rc == 0);
  CHECK(out.find("completed") != std::string::npos);
  CHECK(out.find("page 2") != std::string::npos);  // 29 items in pages of 20
  CHECK(out.find("ledger:") != std::string::npos);
  CHECK(out.find(kKey) != std::string::npos);
  CHECK(out.find("re_") != std::string::npos);
}

TEST_CASE("inspect shows a transcript of an unexpected shape as far as it goes, and exits 0") {
  Cluster c;
  // An operator API whose transcript (the platform's JSON, passed through)
  // has a turn without subagent_id and pages that are not what they were.
  opgate::http::Server odd({}, [](opgate::http::Request&& r) {
    opgate::http::Response res;
    res.status = 200;
    res.headers["Content-Type"] = "application/json";
    res.body = r.target.ends_with("/transcript")
                   ? R"({"turns":{"data":[{"id":"turn_1","status":"completed"},7]},)"
                     R"("item_pages":[7,{"data":"x"},{"data":[{"type":"message","role":"user",)"
                     R"("content":"hello"}]}]})"
                   : R"({"session_id":"sess_odd","owner":"demo-user","calls":[],"ledger":[]})";
    return res;
  });
  auto port = odd.start();
  REQUIRE(port.ok());
  auto [rc, out] = c.cli({"inspect", "--session", "sess_odd"}, kAdminToken,
                         "http://127.0.0.1:" + std::to_string(*port));
  CHECK(rc == 0);
  CHECK(out.find("turn_1 completed") != std::string::npos);
  CHECK(out.find("user: hello") != std::string::npos);
  odd.stop();
}

TEST_CASE("the CLI shows what customers and models wrote with control characters escaped") {
  Cluster c;
  // An order whose payment method, and a note whose text, carry terminal
  // escape sequences (clear the screen, retitle the window).
  const std::string order =
      R"({"order_id":"ORDER-900","owner":"demo-user","amount_minor":1200,"currency":"USD",)"
      R"("payment_intent":"pi_900","customer":"cus_900","payment_method":"visa\u001b[2J",)"
      R"("status":"paid","placed_at":1800000000,"note":""})";
  REQUIRE(c.op("PUT", "/v1/orders/ORDER-900", order).status == 200);
  const std::string key = "demo-user:ORDER-900:full-refund:v1";
  auto session =
      c.create_session(R"([{"name":"lookup_order","arguments":{"order_id":"ORDER-900"}},)"
                       R"({"name":"add_internal_note","arguments":{"order_id":"ORDER-900",)"
                       R"("text":"boxed\u001b]0;pwned\u0007","evidence":["$call:0"]}},)"
                       R"({"name":"request_refund","arguments":{"order_id":"ORDER-900"}}])");
  c.wait_operation(key, [](auto& o) { return str(o, "state") == "pending"; });
  auto [prc, pending] = c.cli({"pending", "--session", session});
  CHECK(prc == 0);
  CHECK(pending.find("visa\\x1b[2J") != std::string::npos);
  CHECK(pending.find('\x1b') == std::string::npos);
  auto [irc, inspected] = c.cli({"inspect", "--session", session});
  CHECK(irc == 0);
  CHECK(inspected.find("boxed\\x1b]0;pwned\\x07") != std::string::npos);
  CHECK(inspected.find('\x1b') == std::string::npos);
  CHECK(inspected.find('\x07') == std::string::npos);
}

TEST_CASE("orders import checks the whole file first, then upserts every order") {
  Cluster c;
  const std::string order =
      R"({"order_id":"ORDER-900","owner":"demo-user","amount_minor":1200,"currency":"USD",)"
      R"("payment_intent":"pi_900","customer":"cus_900","payment_method":"visa","status":"paid",)"
      R"("placed_at":1800000000,"note":""})";
  const auto bad = c.dir() / "bad.ndjson";
  std::ofstream(bad) << order << "\n\nnot json\n";
  auto [bad_rc, bad_out] = c.cli({"orders", "import", bad.string()});
  CHECK(bad_rc == 1);
  CHECK(c.op("GET", "/v1/orders/ORDER-900").status == 404);  // nothing imported
  const auto good = c.dir() / "good.ndjson";
  std::ofstream(good) << order << "\n";
  auto [rc, out] = c.cli({"orders", "import", good.string()});
  CHECK(rc == 0);
  CHECK(out.find("imported 1 order(s)") != std::string::npos);
  auto stored = c.op("GET", "/v1/orders/ORDER-900");
  REQUIRE(stored.status == 200);
  CHECK(stored.body.at("amount_minor").as_int64() == 1200);
}

TEST_CASE("operations list in pages, with or without a state, filtered by owner") {
  Cluster c;
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}},)"
                   R"({"name":"request_refund","arguments":{"order_id":"ORDER-300"}}])");
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-500"}}])");
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  c.wait_operation("demo-user:ORDER-500:full-refund:v1",
                   [](auto& o) { return str(o, "state") == "pending"; });
  // ORDER-300 is asked for once ORDER-100's call is answered; deny ORDER-100.
  REQUIRE(
      c.op("POST", "/v1/operations/" + kKey + "/deny", R"({"reason":"no"})", kAliceToken).status ==
      200);
  c.wait_operation("demo-user:ORDER-300:full-refund:v1",
                   [](auto& o) { return str(o, "state") == "pending"; });
  for (const std::string filter : {"", "&state=pending"}) {
    CAPTURE(filter);
    std::vector<std::string> keys;
    std::string cursor;
    int pages = 0;
    do {
      auto r = c.op(
          "GET", "/v1/operations?limit=1" + filter + (cursor.empty() ? "" : "&cursor=" + cursor));
      REQUIRE(r.status == 200);
      for (const auto& op : r.body.at("operations").as_array()) keys.push_back(str(op, "key"));
      cursor = str(r.body, "next_cursor");
      ++pages;
    } while (!cursor.empty() && pages < 10);
    CHECK(keys.size() == (filter.empty() ? 3u : 2u));
    CHECK(std::is_sorted(keys.begin(), keys.end()));
  }
  CHECK(c.op("GET", "/v1/operations?owner=other-user").body.at("operations").as_array().empty());
  CHECK(c.op("GET", "/v1/operations?owner=demo-user&limit=1000")
            .body.at("operations")
            .as_array()
            .size() == 3);
}

TEST_CASE("draft_customer_reply keeps the reply for a person, sends nothing, shows it to owners") {
  Cluster c;
  const std::string text = "Dear customer,\x1b[2J your refund is on its way.";
  auto session = c.create_session(json::serialize(json::array{
      json::object{{"name", "draft_customer_reply"},
                   {"arguments", json::object{{"order_id", "ORDER-100"}, {"text", text}}}},
      json::object{
          {"name", "draft_customer_reply"},
          {"arguments", json::object{{"order_id", "ORDER-200"}, {"text", "not yours"}}}}}));
  auto sim = c.wait_session_sim(session, [](auto& s) { return root_status(s) == "completed"; });
  auto answers = results(sim);
  REQUIRE(answers.size() == 2);
  CHECK(str(json::parse(str(answers[0], "output")), "status") == "drafted");
  CHECK(str(json::parse(str(answers[0], "output")), "sent") == "false");
  CHECK(str(answers[1], "error").find("No order") != std::string::npos);  // another owner's
  auto listing = c.op("GET", "/v1/drafts?order_id=ORDER-100").body.at("drafts").as_array();
  REQUIRE(listing.size() == 1);
  CHECK(str(listing[0], "text") == text);
  CHECK(str(listing[0], "owner") == "demo-user");
  CHECK(c.op("GET", "/v1/drafts?order_id=ORDER-200").body.at("drafts").as_array().empty());
  // Owner patterns: a token for other owners sees none of them.
  CHECK(c.op("GET", "/v1/drafts", "", kOutsiderToken).body.at("drafts").as_array().empty());
  CHECK(c.op("GET", "/v1/drafts?order_id=../x").status == 400);
  auto [rc, out] = c.cli({"drafts", "list", "--order", "ORDER-100"});
  CHECK(rc == 0);
  CHECK(out.find("your refund is on its way") != std::string::npos);
  CHECK(out.find('\x1b') == std::string::npos);  // the terminal escape is escaped
  CHECK(provider_posts_for(c, "demo-user:ORDER-100:full-refund:v1") == 0);
  auto audit = c.op("GET", "/v1/audit").body.at("audit").as_array();
  CHECK(std::any_of(audit.begin(), audit.end(), [](const json::value& r) {
    return str(r, "action") == "customer_reply_drafted";
  }));
}

TEST_CASE("opgate policy show: every tool, enabled or not, its tier and limits; the thresholds") {
  ClusterOptions o;
  o.extra_config =
      "[policy.tools.cancel_order]\nenabled = false\n[console.step_up]\ntiers = [\"supervisor\"]\n";
  Cluster c(o);
  auto policy = c.op("GET", "/v1/policy", "", kReaderToken);
  REQUIRE(policy.status == 200);
  const auto& tools = policy.body.at("tools").as_array();
  REQUIRE(tools.size() == 6);
  auto tool = [&](std::string_view name) -> const json::object& {
    for (const auto& t : tools)
      if (str(t, "name") == name) return t.as_object();
    FAIL("no tool " << name);
    return tools.front().as_object();
  };
  CHECK_FALSE(tool("cancel_order").at("enabled").as_bool());
  CHECK(tool("request_refund").at("enabled").as_bool());
  CHECK(str(tool("request_refund"), "tier") == "refund");
  CHECK(str(tool("draft_customer_reply"), "tier") == "auto");
  CHECK(policy.body.at("step_up").at("tiers").as_array().size() == 1);
  auto [rc, out] = c.cli({"policy", "show"}, kReaderToken);
  CHECK(rc == 0);
  CHECK(out.find("cancel_order           no") != std::string::npos);
  CHECK(out.find("request_refund         yes      refund") != std::string::npos);
  CHECK(out.find("step-up (passkey) for tiers: supervisor") != std::string::npos);
}

TEST_CASE(
    "opgate policy test replays recorded proposals against a new policy and changes nothing") {
  Cluster c;
  c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  const auto before = c.operation(kKey);
  const auto file = c.dir() / "next-policy.toml";
  std::ofstream(file) << R"([[ingress.sources]]
name = "agents"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[policy]
two_person_threshold_minor = { USD = 1000, GBP = 1000 }
[policy.tools.request_refund]
tier = "supervisor"
)";
  auto [rc, out] = c.cli({"--json", "policy", "test", "--config", file.string()});
  REQUIRE(rc == 0);
  auto report = json::parse(out).as_object();
  CHECK(report.at("replayed").as_int64() == 1);
  CHECK(report.at("differing").as_int64() == 1);
  const auto& diffs = report.at("operations").as_array().at(0).at("differences").as_array();
  REQUIRE(diffs.size() == 2);
  CHECK(str(diffs[0], "what") == "tier");
  CHECK(str(diffs[0], "would_be") == "supervisor");
  CHECK(str(diffs[1], "what") == "approvals_needed");
  CHECK(str(diffs[1], "would_be") == "2");
  auto [trc, text] = c.cli({"policy", "test", "--config", file.string(), "--since", "1h"});
  CHECK(trc == 0);
  CHECK(text.find("1 proposals since 1h replayed; 1 would differ") != std::string::npos);
  CHECK(c.cli({"policy", "test", "--config", file.string(), "--since", "soon"}).first == 2);
  // Nothing changed: the operation is as it was.
  CHECK(json::serialize(c.operation(kKey)) == json::serialize(before));
  // A token minted without a label has none (no other command's default).
  auto [arc, minted] = c.cli({"--json", "agent-tokens", "create", "--owner", "demo-user"});
  REQUIRE(arc == 0);
  CHECK(str(json::parse(minted), "label").empty());
  // A lifetime past what a millisecond count holds is refused, not wrapped
  // around into a short one (106751991167313 days wrap to 1,067,392 s).
  CHECK(c.cli({"agent-tokens", "create", "--owner", "demo-user", "--ttl", "106751991167313d"})
            .first == 2);
  // A lifetime given empty is refused, not read as none (a token for ever).
  CHECK(c.cli({"agent-tokens", "create", "--owner", "demo-user", "--ttl", ""}).first == 2);
  // On a backup, against the configuration in force: the same answer, and
  // the backup is left as it was. (A PostgreSQL store is copied by the
  // database's own tools; policy test reads it live.)
  if (c.store() == "postgres") return;
  const auto backup = c.dir() / "backup";
  REQUIRE(c.cli({"backup", "create", "--to", backup.string()}).first == 0);
  auto [brc, offline] = c.cli({"--json", "policy", "test", "--config", file.string(), "--backup",
                               backup.string(), "--current", c.config_file().string()});
  REQUIRE(brc == 0);
  auto replayed = json::parse(offline).as_object();
  CHECK(replayed.at("replayed").as_int64() == 1);
  CHECK(replayed.at("differing").as_int64() == 1);
  CHECK(json::serialize(replayed.at("totals")) == json::serialize(report.at("totals")));
  CHECK(c.cli({"policy", "test", "--config", file.string(), "--backup", backup.string()}).first ==
        2);  // offline needs the baseline
}
