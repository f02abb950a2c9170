// Session sync over a real store, with a scripted stand-in for the Agents
// API and an injected clock: coalescing, backoff, Retry-After, the sweep,
// sessions the platform does not know, calls of one step that ask for the
// same thing, and one slow session beside the others.
#include "agent_sessions/session_sync.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <boost/json.hpp>
#include <chrono>

#include "operations/decisions.h"
#include "operations/notes.h"
#include "world.h"

using namespace opgate;
namespace json = boost::json;

namespace {

struct World : testing::World {
  World() { seed_order("ORDER-100"); }

  void require(const std::string& session,
               std::vector<std::pair<std::string, std::string>> calls) {  // call id, tool+args
    operations::SessionView v;
    v.status = "requires_action";
    for (auto& [id, spec] : calls) {
      auto paren = spec.find('(');
      v.required_actions.push_back(
          {id, "turn_1", spec.substr(0, paren), spec.substr(paren + 1, spec.size() - paren - 2)});
    }
    std::lock_guard lock(agents.mu);
    agents.views[session] = v;
  }
  void require_lookup(const std::string& call_id, const std::string& session = "sess_1") {
    require(session, {{call_id, R"(lookup_order({"order_id":"ORDER-100"}))"}});
  }
  bool answered(const std::string& call_id, const std::string& session = "sess_1") {
    auto c = call(session, "turn_1", call_id);
    return c && c->result_saved();
  }
  size_t deliveries_due() {
    size_t n = 0;
    for (const auto& e : due(clock.now_ms()))
      if (e.item.kind() == pb::OUTBOX_DELIVER_RESULT) ++n;
    return n;
  }
  void bind(const std::string& session) { REQUIRE(sync->bind(session, "demo-user", "admin").ok()); }
};

operations::Principal admin() {
  operations::Principal p;
  p.name = "alice";
  p.scopes = {"admin"};
  p.owners = {"*"};
  p.max_amount_minor = {{"USD", 100000}};
  return p;
}

}  // namespace

TEST_CASE("a burst of webhooks for one session is one fetch, answered once") {
  World w;
  w.bind("sess_1");
  w.require_lookup("call_1");
  for (int i = 0; i < 5; ++i) w.webhook(fmt::format("msg_{}", i), "sess_1");
  CHECK(w.sync->dispatch(*w.lanes) == 1);
  w.lanes->wait_idle();
  CHECK(w.agents.fetches == 1);
  CHECK(w.answered("call_1"));
  CHECK(w.deliveries_due() == 1);
  CHECK(w.inbox->backlog() == 0);
  // A later webhook for the same, still undelivered call answers nothing twice.
  w.webhook("msg_again", "sess_1");
  CHECK(w.sync->dispatch(*w.lanes) == 1);
  w.lanes->wait_idle();
  CHECK(w.agents.fetches == 2);
  CHECK(w.deliveries_due() == 1);
}

TEST_CASE("two request_refund calls for one order in one step: one operation, both answered") {
  World w;
  w.bind("sess_1");
  w.require("sess_1", {{"call_a", R"(request_refund({"order_id":"ORDER-100"}))"},
                       {"call_b", R"(request_refund({"order_id":"ORDER-100","reason":"late"}))"}});
  w.webhook("msg_1", "sess_1");
  w.pump();
  auto op = w.operation("demo-user:ORDER-100:full-refund:v1");
  REQUIRE(op.calls_size() == 2);
  CHECK(w.call("sess_1", "turn_1", "call_a")->operation_key() == op.key());
  CHECK(w.call("sess_1", "turn_1", "call_b")->operation_key() == op.key());
  CHECK_FALSE(w.answered("call_a"));
  // Denied: each linked call receives exactly one result.
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::deny(txn, op.key(), admin(), "not eligible");
              })
              .ok());
  w.pump();
  CHECK(w.answered("call_a"));
  CHECK(w.answered("call_b"));
  int results = 0;
  for (const auto& [ref, result] : w.agents.submitted) {
    ++results;
    CHECK(result.output().find("\"status\":\"denied\"") != std::string::npos);
  }
  CHECK(results == 2);
}

TEST_CASE("a second credit proposal for the same order while one is pending is refused, not kept") {
  World w;
  w.bind("sess_1");
  w.require(
      "sess_1",
      {{"call_a",
        R"(issue_account_credit({"order_id":"ORDER-100","amount_minor":500,"currency":"USD","reason_code":"GOODWILL"}))"},
       {"call_b",
        R"(issue_account_credit({"order_id":"ORDER-100","amount_minor":900,"currency":"USD","reason_code":"GOODWILL"}))"}});
  w.webhook("msg_1", "sess_1");
  w.pump();
  auto op = w.operation("demo-user:ORDER-100:account-credit:v1");
  CHECK(op.proposal().amount_minor() == 500);
  CHECK(op.calls_size() == 1);
  auto b = w.call("sess_1", "turn_1", "call_b");
  REQUIRE(b);
  REQUIRE(b->result_saved());
  CHECK_FALSE(b->result().success());
  CHECK(b->result().error().find("already awaiting a decision") != std::string::npos);
  CHECK_FALSE(w.answered("call_a"));
}

TEST_CASE("a new credit for another amount after the first settled is a new version") {
  World w;
  w.bind("sess_1");
  w.require(
      "sess_1",
      {{"call_a",
        R"(issue_account_credit({"order_id":"ORDER-100","amount_minor":500,"currency":"USD","reason_code":"GOODWILL"}))"}});
  w.webhook("msg_1", "sess_1");
  w.pump();
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::deny(txn, "demo-user:ORDER-100:account-credit:v1", admin(),
                                        "too much");
              })
              .ok());
  w.require(
      "sess_1",
      {{"call_b",
        R"(issue_account_credit({"order_id":"ORDER-100","amount_minor":200,"currency":"USD","reason_code":"GOODWILL"}))"}});
  w.webhook("msg_2", "sess_1");
  w.pump();
  auto v2 = w.operation("demo-user:ORDER-100:account-credit:v2");
  CHECK(v2.proposal().amount_minor() == 200);
  CHECK(v2.state() == pb::STATE_PENDING);
}

TEST_CASE("one slow session fetch does not hold up another session") {
  World w;
  w.bind("sess_slow");
  w.bind("sess_1");
  w.require_lookup("call_slow", "sess_slow");
  w.require_lookup("call_1", "sess_1");
  {
    std::lock_guard lock(w.agents.mu);
    w.agents.held_session = "sess_slow";
  }
  w.webhook("msg_slow", "sess_slow");
  w.webhook("msg_1", "sess_1");
  std::mutex mu;
  std::condition_variable done;
  w.lanes->on_done([&] { done.notify_all(); });
  w.engine->pass();
  w.agents.wait_until_holding();
  {
    std::unique_lock lock(mu);
    // Bounded only as a guard against a hang; the answer does not wait on time.
    CHECK(done.wait_for(lock, std::chrono::seconds(20), [&] { return w.answered("call_1"); }));
  }
  CHECK_FALSE(w.answered("call_slow", "sess_slow"));
  w.agents.release();
  w.lanes->wait_idle();
  CHECK(w.answered("call_slow", "sess_slow"));
}

TEST_CASE("events queued behind many events of a session in backoff still run") {
  World w;
  w.bind("sess_bad");
  w.bind("sess_1");
  auto unavailable = make_error(errc::agents_unavailable, "agents API answered 503");
  unavailable.retry_after_ms = 60'000;  // long, past every full scan below
  w.agents.session_errors["sess_bad"] = unavailable;
  const size_t many = agent_sessions::SessionSync::kPassEntries + 100;
  for (size_t i = 0; i < many; ++i) w.webhook(fmt::format("msg_bad_{}", i), "sess_bad");
  w.pump();  // sess_bad's fetch fails: it backs off
  w.require_lookup("call_1");
  w.webhook("msg_good", "sess_1");
  w.pump();
  CHECK(w.answered("call_1"));
  // After a full scan from the top too: a page of the backing-off session's
  // events does not hold the next session's.
  w.clock.advance_ms(1'500);
  w.require_lookup("call_2", "sess_1");
  w.webhook("msg_good_2", "sess_1");
  w.pump();
  CHECK(w.answered("call_2"));
  CHECK(w.inbox->backlog() == many);  // sess_bad's events wait, none lost
}

TEST_CASE("a read of the whole queue sets the backlog to what it holds") {
  World w;
  w.bind("sess_1");
  w.agents.fetch_error = make_error(errc::agents_unavailable, "agents API answered 503");
  for (int i = 0; i < 3; ++i) w.webhook(fmt::format("msg_{}", i), "sess_1");
  w.pump();
  REQUIRE(w.inbox->backlog() == 3);
  // Drifted: events counted processed twice (a stale pass handed them out
  // again after their lane had finished them).
  w.inbox->processed(2);
  REQUIRE(w.inbox->backlog() == 1);
  w.clock.advance_ms(1'500);  // the next pass reads the queue from its start
  w.pump();
  CHECK(w.inbox->backlog() == 3);
}

TEST_CASE("a failed fetch backs off with jitter and no sooner than Retry-After") {
  World w;
  w.bind("sess_1");
  w.agents.fetch_error = make_error(errc::agents_unavailable, "agents API answered 429");
  w.agents.fetch_error->retry_after_ms = 5000;
  w.webhook("msg_1", "sess_1");
  w.pump();
  CHECK(w.agents.fetches == 1);
  w.pump();
  CHECK(w.agents.fetches == 1);  // not before the wait
  w.clock.advance_ms(4999);
  w.pump();
  CHECK(w.agents.fetches == 1);
  w.agents.fetch_error.reset();
  w.require_lookup("call_1");
  w.clock.advance_ms(1001);  // past the wait and the next full scan
  w.pump();
  CHECK(w.agents.fetches == 2);
  CHECK(w.answered("call_1"));
}

TEST_CASE("the sweep recovers a session whose webhook was lost, and leaves quiet ones alone") {
  World w;
  w.bind("sess_1");
  w.require_lookup("call_1");
  // No webhook ever arrives; the sweep finds the recently bound session.
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000) == 1);
  w.lanes->wait_idle();
  CHECK(w.answered("call_1"));
  // The model moves on to a new call; its webhook is lost too.
  w.clock.advance_ms(60 * 1000);
  w.require_lookup("call_2");
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000) == 1);
  w.lanes->wait_idle();
  CHECK(w.answered("call_2"));
  // Hours later, with nothing outstanding, the session is left alone.
  w.pump();  // delivers both results
  w.clock.advance_ms(2 * 3600 * 1000);
  const int before = w.agents.fetches;
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000) == 0);
  w.lanes->wait_idle();
  CHECK(w.agents.fetches == before);
}

TEST_CASE(
    "a call listed only after its webhook's fetch is answered by the sweep, however idle "
    "the session was") {
  World w;
  w.bind("sess_1");
  w.clock.advance_ms(2 * 3600 * 1000);  // long idle: no call, bound hours ago
  // The platform's read lags its webhook: the fetch lists nothing yet.
  w.require("sess_1", {});
  w.webhook("msg_1", "sess_1");
  w.pump();
  CHECK(w.inbox->backlog() == 0);  // the event is used up
  w.require_lookup("call_1");
  w.clock.advance_ms(30'000);
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000) == 1);
  w.lanes->wait_idle();
  CHECK(w.answered("call_1"));
  // An hour after the webhook, with nothing outstanding, it is left alone.
  w.pump();
  w.clock.advance_ms(3600 * 1000);
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000) == 0);
}

TEST_CASE("a 404 that says the session does not exist sets its events aside until recover") {
  World w;
  w.bind("sess_1");
  w.agents.fetch_error = make_error(errc::session_not_found, "the agent platform has no session");
  w.webhook("msg_1", "sess_1");
  w.pump();
  CHECK(w.agents.fetches == 1);
  CHECK(w.inbox->backlog() == 0);
  auto session = w.storage->reader().session("sess_1");
  CHECK((*session)->closed());
  // Further events wait too; nothing is fetched for a closed session.
  w.webhook("msg_2", "sess_1");
  w.pump();
  CHECK(w.agents.fetches == 1);
  // The platform was only misconfigured: recover reopens the session and
  // its waiting events are processed.
  w.agents.fetch_error.reset();
  w.require_lookup("call_1");
  auto recovered = w.sync->recover("sess_1");
  REQUIRE(recovered.ok());
  CHECK(recovered->ok());
  CHECK_FALSE((*w.storage->reader().session("sess_1"))->closed());
  CHECK(w.inbox->backlog() == 2);
  w.pump();
  CHECK(w.inbox->backlog() == 0);
  CHECK(w.answered("call_1"));
}

TEST_CASE("a session recovered while the platform is down stays reopened, its events queued") {
  World w;
  w.bind("sess_1");
  w.agents.fetch_error = make_error(errc::session_not_found, "the agent platform has no session");
  w.webhook("msg_1", "sess_1");
  w.pump();
  REQUIRE((*w.storage->reader().session("sess_1"))->closed());
  w.agents.fetch_error = make_error(errc::agents_unavailable, "agents API answered 503");
  auto recovered = w.sync->recover("sess_1");
  REQUIRE(recovered.ok());  // reopened
  REQUIRE_FALSE(recovered->ok());
  CHECK(recovered->error().is(errc::agents_unavailable));
  CHECK_FALSE((*w.storage->reader().session("sess_1"))->closed());
  CHECK(w.inbox->backlog() == 1);
  // The platform answers again: the worker processes what waited.
  w.agents.fetch_error.reset();
  w.require_lookup("call_1");
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.answered("call_1"));
  CHECK(w.inbox->backlog() == 0);
}

TEST_CASE("events parked until binding count in the backlog again once released") {
  World w;
  w.webhook("msg_1", "sess_1");
  w.webhook("msg_2", "sess_1");
  CHECK(w.inbox->backlog() == 2);
  w.pump();  // unbound: parked
  CHECK(w.inbox->backlog() == 0);
  w.bind("sess_1");
  CHECK(w.inbox->backlog() == 2);
  w.require_lookup("call_1");
  w.pump();
  CHECK(w.inbox->backlog() == 0);
  CHECK(w.answered("call_1"));
}

TEST_CASE("compaction removes processed inbox events past retention, and nothing else") {
  store::rocks::OpenOptions options;
  options.inbox_retention_ms = 3600 * 1000;
  World w;
  w.restart(options);
  // An event of another type is processed by being stored; one for an
  // unbound session waits, unprocessed.
  REQUIRE(w.inbox->accept("agents", "msg_done", "{}", {"evt_1", "response.completed", ""}).ok());
  REQUIRE(w.inbox
              ->accept("agents", "msg_waiting", "{}",
                       {"evt_2", std::string(ingress::kActionRequired), "sess_unbound"})
              .ok());
  w.pump();
  w.clock.advance_ms(2 * 3600 * 1000);
  REQUIRE(w.inbox->accept("agents", "msg_recent", "{}", {"evt_3", "response.completed", ""}).ok());
  w.pump();
  // The index entry and the event itself each go by their own compaction.
  REQUIRE(w.storage->db().compact(store::rocks::Cf::inbox).ok());
  REQUIRE(w.storage->db().compact(store::rocks::Cf::events).ok());
  auto has = [&](const char* id) {
    auto v = w.storage->reader().event("agents", id);
    return v.ok() && v->has_value();
  };
  CHECK_FALSE(has("msg_done"));
  CHECK(has("msg_waiting"));
  CHECK(has("msg_recent"));
  std::vector<std::string> kept;
  REQUIRE(w.storage->db()
              .scan(store::rocks::Cf::events, "",
                    [&](std::string_view, std::string_view v) {
                      pb::InboxEvent e;
                      REQUIRE(e.ParseFromArray(v.data(), static_cast<int>(v.size())));
                      kept.push_back(e.webhook_id());
                      return true;
                    })
              .ok());
  CHECK(kept == std::vector<std::string>{"msg_waiting", "msg_recent"});
}

TEST_CASE("a sweep looks at a bounded slice of sessions per call and resumes where it stopped") {
  World w;
  for (int i = 1; i <= 5; ++i) {
    w.bind(fmt::format("sess_{}", i));
    w.require_lookup(fmt::format("call_{}", i), fmt::format("sess_{}", i));
  }
  // Two sessions per call: three calls make a cycle over the five.
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000, 1000, 2) == 2);
  CHECK(w.sync->sweeping());
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000, 1000, 2) == 2);
  CHECK(w.sync->sweeping());
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000, 1000, 2) == 1);
  CHECK_FALSE(w.sync->sweeping());
  w.lanes->wait_idle();
  for (int i = 1; i <= 5; ++i)
    CHECK(w.answered(fmt::format("call_{}", i), fmt::format("sess_{}", i)));
  // The next cycle starts from the first session again; hours later, with
  // nothing outstanding, it hands out none.
  w.pump();
  w.clock.advance_ms(2 * 3600 * 1000);
  CHECK(w.sync->sweep(*w.lanes, 3600 * 1000, 1000, 2) == 0);
  CHECK(w.sync->sweeping());
}

TEST_CASE("an internal note is stored only with evidence from its own session about its order") {
  World w;
  w.seed_order("ORDER-101");
  w.bind("sess_1");
  w.bind("sess_2");
  // sess_2 looks ORDER-100 up; sess_1 looks ORDER-101 up.
  w.require("sess_2", {{"call_other", R"(lookup_order({"order_id":"ORDER-100"}))"}});
  w.webhook("msg_1", "sess_2");
  w.pump();
  w.require("sess_1", {{"call_101", R"(lookup_order({"order_id":"ORDER-101"}))"}});
  w.webhook("msg_2", "sess_1");
  w.pump();
  CHECK(w.call("sess_1", "turn_1", "call_101")->order_id() == "ORDER-101");
  auto note = [&](const std::string& call_id, const std::string& evidence) {
    w.require("sess_1", {{call_id, R"(add_internal_note({"order_id":"ORDER-100","text":"late",)"
                                   R"("evidence":[")" +
                                       evidence + R"("]}))"}});
    w.webhook("msg_" + call_id, "sess_1");
    w.pump();
    auto c = w.call("sess_1", "turn_1", call_id);
    REQUIRE(c);
    REQUIRE(c->result_saved());
    return c->result();
  };
  // Another session's lookup of the same order, and this session's lookup of
  // another order: both refused, nothing audited.
  auto other_session = note("note_1", "call_other");
  CHECK_FALSE(other_session.success());
  CHECK(other_session.error().find("not a call of this session") != std::string::npos);
  auto other_order = note("note_2", "call_101");
  CHECK_FALSE(other_order.success());
  CHECK(other_order.error().find("not about order ORDER-100") != std::string::npos);
  auto audited = [&](const std::string& call_id) {
    pb::ToolCall c;
    c.set_session_id("sess_1");
    c.set_call_id(call_id);
    return w.storage->reader().audit_of(operations::note_key(c)).value();
  };
  CHECK(audited("note_1").empty());
  CHECK(audited("note_2").empty());
  // This session's own lookup of the order: stored, with its evidence.
  w.require("sess_1", {{"call_100", R"(lookup_order({"order_id":"ORDER-100"}))"}});
  w.webhook("msg_3", "sess_1");
  w.pump();
  auto good = note("note_3", "call_100");
  CHECK(good.success());
  auto records = audited("note_3");
  REQUIRE(records.size() == 1);
  CHECK(records[0].action() == "internal_note");
  auto details = json::parse(records[0].details_json()).as_object();
  CHECK(details.at("order_id").as_string() == "ORDER-100");
  CHECK(details.at("owner").as_string() == "demo-user");
  CHECK(details.at("evidence").as_array().size() == 1);
  CHECK(details.at("evidence").as_array()[0].as_string() == "call_100");
  auto calls = w.storage->reader().calls_of("sess_1").value();
  auto shown = operations::notes_json(w.storage->reader(), calls).value();
  REQUIRE(shown.size() == 1);
  CHECK(shown[0].at("text").as_string() == "late");
  CHECK(w.storage->verify_audit().value().ok);
}

TEST_CASE("events handed over again after their lane finished them are not fetched for again") {
  World w;
  w.bind("sess_1");
  w.require_lookup("call_1");
  w.webhook("msg_1", "sess_1");
  w.webhook("msg_2", "sess_1");
  // What a dispatch pass read just before a lane finished these events.
  auto stale = w.storage->reader().queued("", 10);
  REQUIRE(stale->size() == 2);
  w.sync->process("sess_1", *stale);
  CHECK(w.answered("call_1"));
  CHECK(w.agents.fetches == 1);
  CHECK(w.inbox->backlog() == 0);
  w.sync->process("sess_1", *stale);
  CHECK(w.agents.fetches == 1);
  // Counted processed once: a webhook after them is the backlog's one event.
  w.webhook("msg_3", "sess_1");
  CHECK(w.inbox->backlog() == 1);
}

TEST_CASE("events of an unbound session handed over twice wait once for its binding") {
  World w;
  w.webhook("msg_1", "sess_1");
  auto stale = w.storage->reader().queued("", 10);
  REQUIRE(stale->size() == 1);
  w.sync->process("sess_1", *stale);
  w.sync->process("sess_1", *stale);
  CHECK(w.inbox->backlog() == 0);
  w.bind("sess_1");
  CHECK(*w.storage->reader().queued_count() == 1);
}

TEST_CASE("an event finished through its old queue entry after a release leaves no entry behind") {
  World w;
  w.require_lookup("call_1");
  w.webhook("msg_1", "sess_1");
  auto stale = w.storage->reader().queued("", 10);  // its first entry
  REQUIRE(stale->size() == 1);
  w.sync->process("sess_1", *stale);  // unbound: parked
  w.bind("sess_1");                   // released under a new entry
  REQUIRE(*w.storage->reader().queued_count() == 1);
  // A lane that held the first entry answers, and finishes the event.
  w.sync->process("sess_1", *stale);
  CHECK(w.answered("call_1"));
  CHECK(w.agents.fetches == 1);
  // The new entry names a processed event: removed when next handed over,
  // with no second fetch.
  w.pump();
  CHECK(*w.storage->reader().queued_count() == 0);
  CHECK(w.agents.fetches == 1);
}
