// The operator API's listings and who-am-I, over a real store, through the
// router: the tier filter, oldest first with a cursor, the approvals each
// pending operation needs and the server's time, and /v1/me.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <boost/json.hpp>

#include "api_stage.h"
#include "fault_fs.h"

using namespace opgate;
namespace json = boost::json;
using testing::kLarge;
using testing::kRefund;
using testing::request;

TEST_CASE("listing: tier filter, oldest first with a cursor, approvals needed, /v1/me") {
  testing::ApiStage s;
  s.open_api();
  auto send = [&](http::Request r) { return s.router.dispatch(r); };
  const http::Headers alice{{"Authorization", "Bearer tok-alice-only-for-tests"}};
  auto list = [&](const std::string& query) {
    auto r = send(request("GET", "/v1/operations?" + query, alice));
    REQUIRE_MESSAGE(r.status == 200, r.body);
    return s.body_of(r).as_object();
  };
  auto keys = [](const json::object& page) {
    std::vector<std::string> out;
    for (const auto& op : page.at("operations").as_array())
      out.emplace_back(op.at("key").as_string());
    return out;
  };
  // By key, ORDER-100 comes first; by creation, ORDER-300 does.
  CHECK(keys(list("state=pending")) == std::vector<std::string>{kRefund, kLarge});
  auto sorted = list("state=pending&sort=created_at");
  CHECK(keys(sorted) == std::vector<std::string>{kLarge, kRefund});
  CHECK(sorted.at("now_ms").as_int64() == s.clock.now_ms());
  const auto& ops = sorted.at("operations").as_array();
  CHECK(ops.at(0).at("approvals_needed").as_int64() == 2);
  CHECK(ops.at(1).at("approvals_needed").as_int64() == 1);
  // Paged: one at a time, oldest first.
  auto page1 = list("state=pending&sort=created_at&limit=1");
  CHECK(keys(page1) == std::vector<std::string>{kLarge});
  REQUIRE(page1.at("next_cursor").is_string());
  auto page2 = list("state=pending&sort=created_at&limit=1&cursor=" +
                    std::string(page1.at("next_cursor").as_string()));
  CHECK(keys(page2) == std::vector<std::string>{kRefund});
  CHECK(page2.at("next_cursor").is_null());
  // Settled operations carry no approvals_needed.
  auto deny = send(request("POST", "/v1/operations/" + std::string(kRefund) + "/deny", alice,
                           R"({"reason":"no"})"));
  REQUIRE(deny.status == 200);
  CHECK(s.body_of(deny).as_object().count("approvals_needed") == 0);
  CHECK(keys(list("state=pending&sort=created_at")) == std::vector<std::string>{kLarge});
  // Tiers: a small credit is "support", a refund "refund".
  REQUIRE(s.sync->bind("sess_3", "demo-user", "admin").ok());
  operations::SessionView credit;
  credit.required_actions = {
      {"call_3", "turn_1", "issue_account_credit",
       R"({"order_id":"ORDER-300","amount_minor":500,"currency":"USD","reason_code":"GOODWILL"})"}};
  s.agents.views["sess_3"] = credit;
  s.webhook("msg_sess_3", "sess_3");
  s.pump();
  const std::string credit_key = "demo-user:ORDER-300:account-credit:v1";
  REQUIRE(s.state(credit_key) == "pending");
  CHECK(keys(list("state=pending&tier=support")) == std::vector<std::string>{credit_key});
  CHECK(keys(list("state=pending&tier=refund")) == std::vector<std::string>{kLarge});
  CHECK(keys(list("state=pending&tier=refund&owner=someone-else")).empty());
  CHECK(keys(list("state=pending&tier=supervisor")).empty());
  for (const char* bad :
       {"tier=gold", "sort=amount", "sort=created_at", "state=settled&sort=created_at",
        "state=pending&sort=created_at&cursor=x", "state=pending&sort=created_at&cursor=12"}) {
    CAPTURE(bad);
    CHECK(send(request("GET", std::string("/v1/operations?") + bad, alice)).status == 400);
  }
  // Outside its owner patterns a principal's queue is empty.
  auto outsider = send(request("GET", "/v1/operations?state=pending&sort=created_at",
                               {{"Authorization", "Bearer tok-outsider-only-for-tests"}}));
  CHECK(s.body_of(outsider).at("operations").as_array().empty());

  auto me = s.body_of(send(request("GET", "/v1/me", alice))).as_object();
  CHECK(me.at("principal").as_string() == "alice");
  CHECK(json::serialize(me.at("scopes")) == R"(["operations:read","operations:approve"])");
  CHECK(json::serialize(me.at("owners")) == R"(["*"])");
  CHECK(me.at("max_amount_minor").at("USD").as_int64() == 100000);
  CHECK(me.count("token_sha256") == 0);
  CHECK(send(request("GET", "/v1/me")).status == 401);
}

TEST_CASE("a transcript stops paging when the platform's cursor does not move") {
  testing::ApiStage s;
  s.open_api();
  const http::Headers alice{{"Authorization", "Bearer tok-alice-only-for-tests"}};
  // Every page says there is more, after the same item.
  s.agents.items_page = {R"({"data":[],"has_more":true,"last_id":"item_7"})", true, "item_7"};
  auto r = s.router.dispatch(request("GET", "/v1/sessions/sess_1/transcript", alice));
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(s.body_of(r).at("item_pages").as_array().size() == 2);
  CHECK(s.agents.item_fetches == 2);  // the first page, and the one that did not move on
  CHECK(s.body_of(r).at("truncated").as_bool());
}

TEST_CASE("a transcript is read within bounds: a cursor seen before, or too many bytes, ends it") {
  testing::ApiStage s;
  s.open_api();
  const http::Headers alice{{"Authorization", "Bearer tok-alice-only-for-tests"}};
  // Paging that alternates between two cursors, more each time.
  s.agents.items_after = [](const std::string& after) -> operations::Page {
    const std::string next = after == "item_a" ? "item_b" : "item_a";
    return {R"({"data":[],"has_more":true,"last_id":")" + next + "\"}", true, next};
  };
  auto r = s.router.dispatch(request("GET", "/v1/sessions/sess_1/transcript", alice));
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(s.agents.item_fetches == 3);  // "", item_a, item_b: then item_a again
  CHECK(s.body_of(r).at("truncated").as_bool());
  // A cursor always new, a page of 1 MiB each: cut at 8 MiB.
  s.agents.item_fetches = 0;
  s.agents.items_after = [](const std::string& after) -> operations::Page {
    const std::string next = after + "x";
    return {R"({"data":[],"pad":")" + std::string(1 << 20, 'p') + R"(","has_more":true})", true,
            next};
  };
  r = s.router.dispatch(request("GET", "/v1/sessions/sess_1/transcript", alice));
  REQUIRE(r.status == 200);
  CHECK(s.agents.item_fetches == 8);
  CHECK(s.body_of(r).at("truncated").as_bool());
  // A transcript that ends is whole.
  s.agents.items_after = {};
  s.agents.items_page = {R"({"data":[],"has_more":false})", false, ""};
  r = s.router.dispatch(request("GET", "/v1/sessions/sess_1/transcript", alice));
  CHECK_FALSE(s.body_of(r).at("truncated").as_bool());
}

TEST_CASE(
    "the ledger is listed in pages, or by its operation; rows of others' owners are left out") {
  testing::ApiStage s;
  s.open_api();
  const http::Headers alice{{"Authorization", "Bearer tok-alice-only-for-tests"}};
  const http::Headers outsider{{"Authorization", "Bearer tok-outsider-only-for-tests"}};
  REQUIRE(s.storage
              ->transact([&](store::Transaction& txn) {
                for (const char* key :
                     {"demo-user:O1:full-refund:v1", "demo-user:O2:full-refund:v1",
                      "demo-user:O3:full-refund:v1"}) {
                  pb::LedgerEntry l;
                  l.set_operation_key(key);
                  l.set_owner("demo-user");
                  l.set_session_id("sess_1");
                  txn.put_ledger(l);
                }
                return Status::Ok();
              })
              .ok());
  auto keys_of = [&](const http::Response& r) {
    std::vector<std::string> out;
    const auto body = s.body_of(r);
    for (const auto& row : body.at("ledger").as_array())
      out.push_back(std::string(row.at("operation_key").as_string()));
    return out;
  };
  auto first = s.router.dispatch(request("GET", "/v1/ledger?limit=2", alice));
  REQUIRE(first.status == 200);
  CHECK(keys_of(first) ==
        std::vector<std::string>{"demo-user:O1:full-refund:v1", "demo-user:O2:full-refund:v1"});
  CHECK(s.body_of(first).at("next_cursor").as_string() == "demo-user:O2:full-refund:v1");
  auto rest = s.router.dispatch(request(
      "GET", "/v1/ledger?limit=2&cursor=demo-user%3AO2%3Afull-refund%3Av1&session=sess_1", alice));
  CHECK(keys_of(rest) == std::vector<std::string>{"demo-user:O3:full-refund:v1"});
  CHECK(s.body_of(rest).at("next_cursor").is_null());
  auto one = s.router.dispatch(
      request("GET", "/v1/ledger?operation=demo-user%3AO3%3Afull-refund%3Av1", alice));
  CHECK(keys_of(one) == std::vector<std::string>{"demo-user:O3:full-refund:v1"});
  CHECK(keys_of(s.router.dispatch(request(
                    "GET", "/v1/ledger?operation=demo-user%3AO3%3Afull-refund%3Av1", outsider)))
            .empty());
  for (const char* bad : {"limit=0", "limit=1001", "limit=2x", "limit=-1", "limit="}) {
    CAPTURE(bad);
    CHECK(s.router.dispatch(request("GET", std::string("/v1/ledger?") + bad, alice)).status == 400);
  }
  // Rows of owners a principal may not see neither fill its page nor become
  // its cursor, which would name them.
  REQUIRE(s.storage
              ->transact([&](store::Transaction& txn) {
                for (const char* key :
                     {"outsider-a:O4:full-refund:v1", "outsider-a:O5:full-refund:v1"}) {
                  pb::LedgerEntry l;
                  l.set_operation_key(key);
                  l.set_owner("outsider-a");
                  txn.put_ledger(l);
                }
                return Status::Ok();
              })
              .ok());
  auto mine = s.router.dispatch(request("GET", "/v1/ledger?limit=1", outsider));
  CHECK(keys_of(mine) == std::vector<std::string>{"outsider-a:O4:full-refund:v1"});
  CHECK(s.body_of(mine).at("next_cursor").as_string() == "outsider-a:O4:full-refund:v1");
  auto next = s.router.dispatch(
      request("GET", "/v1/ledger?limit=1&cursor=outsider-a%3AO4%3Afull-refund%3Av1", outsider));
  CHECK(keys_of(next) == std::vector<std::string>{"outsider-a:O5:full-refund:v1"});
  auto aimed = s.router.dispatch(request("GET", "/v1/ledger?limit=1&owner=demo-user", outsider));
  CHECK(keys_of(aimed).empty());
  CHECK(s.body_of(aimed).at("next_cursor").is_null());
}

TEST_CASE("without a console the routes are not served under /console/api") {
  testing::ApiStage s;
  s.open_api();
  const http::Headers alice{{"Authorization", "Bearer tok-alice-only-for-tests"}};
  CHECK(s.router.dispatch(request("GET", "/v1/me", alice)).status == 200);
  CHECK(s.router.dispatch(request("GET", "/console/api/v1/me", alice)).status == 404);
}

TEST_CASE("/readyz is 503 once the store cannot be written; /healthz still answers") {
  auto control = std::make_shared<testing::SyncControl>();
  auto o = testing::with_faults(control);
  testing::ApiStage s(o);
  s.open_api();
  CHECK(s.router.dispatch(request("GET", "/readyz")).status == 200);
  control->set_fail(true);  // every WAL sync from now on fails
  auto r = s.router.dispatch(request("GET", "/readyz"));
  CHECK(r.status == 503);
  CHECK(r.body.find("storage_unavailable") != std::string::npos);
  CHECK(s.router.dispatch(request("GET", "/healthz")).status == 200);
  control->set_fail(false);
  // RocksDB stays read-only after a failed sync: still not ready (the daemon
  // exits on it and is started again).
  CHECK(s.router.dispatch(request("GET", "/readyz")).status == 503);
}

TEST_CASE(
    "a session's view carries its first 1,000 ledger rows, and a cursor when there are more") {
  testing::ApiStage s;
  s.open_api();
  const http::Headers alice{{"Authorization", "Bearer tok-alice-only-for-tests"}};
  auto key = [](int i) { return fmt::format("demo-user:O{:04}:full-refund:v1", i); };
  auto put_rows = [&](int from, int to) {
    REQUIRE(s.storage
                ->transact([&](store::Transaction& txn) {
                  for (int i = from; i < to; ++i) {
                    pb::LedgerEntry l;
                    l.set_operation_key(key(i));
                    l.set_owner("demo-user");
                    l.set_session_id("sess_1");
                    txn.put_ledger(l);
                    pb::ToolCall c;  // the session's call that proposed it
                    c.set_session_id("sess_1");
                    c.set_turn_id("turn_9");
                    c.set_call_id(fmt::format("call_{:04}", i));
                    c.set_operation_key(key(i));
                    txn.put_call(c);
                  }
                  return Status::Ok();
                })
                .ok());
  };
  auto view = [&] {
    auto r = s.router.dispatch(request("GET", "/v1/sessions/sess_1", alice));
    REQUIRE_MESSAGE(r.status == 200, r.body);
    return s.body_of(r).as_object();
  };
  put_rows(0, 1000);
  auto whole = view();
  CHECK(whole.at("ledger").as_array().size() == 1000);
  CHECK(whole.at("ledger_next_cursor").is_null());
  put_rows(1000, 1002);
  auto cut = view();
  CHECK(cut.at("ledger").as_array().size() == 1000);
  REQUIRE(cut.at("ledger_next_cursor").is_string());
  auto rest = s.body_of(s.router.dispatch(
      request("GET",
              "/v1/ledger?session=sess_1&cursor=" +
                  http::url_component(std::string(cut.at("ledger_next_cursor").as_string())),
              alice)));
  REQUIRE(rest.at("ledger").as_array().size() == 2);
  CHECK(rest.at("ledger").as_array().at(1).at("operation_key").as_string() == key(1001));
}

TEST_CASE("recover answers 200 with the sync's error when the platform is down: it did reopen") {
  testing::ApiStage s;
  s.open_api();
  auto people = testing::ApiStage::principals();
  people.front().scopes.push_back("sessions:bind");  // alice
  s.people.set(people);
  const http::Headers alice{{"Authorization", "Bearer tok-alice-only-for-tests"}};
  s.agents.fetch_error = make_error(errc::agents_unavailable, "agents API answered 503");
  auto r = s.router.dispatch(request("POST", "/v1/sessions/sess_1/recover", alice));
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(s.body_of(r).at("sync_error").as_string() ==
        "Cannot fetch the session: agents API answered 503");
  s.agents.fetch_error.reset();
  r = s.router.dispatch(request("POST", "/v1/sessions/sess_1/recover", alice));
  REQUIRE(r.status == 200);
  CHECK_FALSE(s.body_of(r).as_object().contains("sync_error"));
}
