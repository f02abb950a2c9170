// Session sync over a real store, with a scripted stand-in for the Agents
// API and an injected clock: coalescing, backoff, Retry-After and the sweep.
#include "worker/session_sync.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/metrics.h"
#include "ingress/inbox.h"
#include "outbox/outbox.h"
#include "store_world.h"

using namespace opgate;

namespace {

struct World : testing::StoreWorld {
  std::unique_ptr<worker::SessionSync> sync;

  explicit World(store::OpenOptions options = {}) : StoreWorld(options) {
    sync = std::make_unique<worker::SessionSync>(
        *journal, *inbox, *outbox, agents, worker::PolicyConfig{}, metrics, [] { return 0.0; });
    pb::Order order;
    order.set_order_id("ORDER-100");
    order.set_owner("demo-user");
    order.set_amount_minor(2500);
    order.set_currency("USD");
    order.set_payment_intent("pi_1");
    order.set_customer("cus_1");
    order.set_payment_method("visa");
    order.set_status("paid");
    order.set_placed_at(clock.now_s() - 60);
    store::Batch b;
    b.put(store::Cf::orders, "ORDER-100", order);
    REQUIRE(store->commit(b).ok());
  }

  void webhook(const std::string& id, const std::string& session) {
    ingress::Envelope e{"evt_" + id, std::string(ingress::kActionRequired), session};
    REQUIRE(inbox->accept("agents", id, "{}" + id, e).ok());
  }
  void require_lookup(const std::string& call_id) {
    agents.view.status = "requires_action";
    agents.view.required_actions = {
        {call_id, "turn_1", "lookup_order", R"({"order_id":"ORDER-100"})"}};
  }
  bool answered(const std::string& call_id) {
    auto call = store->get_message<pb::ToolCall>(store::Cf::calls,
                                                 outbox::call_key("sess_1", "turn_1", call_id));
    return call.ok() && call->has_value() && (*call)->result_saved();
  }
};

}  // namespace

TEST_CASE("a burst of webhooks for one session is one fetch, answered once") {
  World w;
  REQUIRE(w.sync->bind("sess_1", "demo-user", "admin").ok());
  w.require_lookup("call_1");
  for (int i = 0; i < 5; ++i) w.webhook(fmt::format("msg_{}", i), "sess_1");
  CHECK(w.sync->process_inbox() == 5);
  CHECK(w.agents.fetches == 1);
  CHECK(w.answered("call_1"));
  CHECK(w.outbox->due(w.clock.now_ms(), 10)->size() == 1);
  // Later webhooks for the same pending call answer nothing twice.
  w.webhook("msg_again", "sess_1");
  CHECK(w.sync->process_inbox() == 1);
  CHECK(w.outbox->due(w.clock.now_ms(), 10)->size() == 1);
}

TEST_CASE("events queued behind a pass's worth of events for a session in backoff still run") {
  World w;
  REQUIRE(w.sync->bind("sess_bad", "demo-user", "admin").ok());
  REQUIRE(w.sync->bind("sess_1", "demo-user", "admin").ok());
  w.agents.session_errors["sess_bad"] = make_error("agents_unavailable", "agents API answered 503");
  const size_t many = worker::SessionSync::kPassEvents + 100;
  for (size_t i = 0; i < many; ++i) w.webhook(fmt::format("msg_bad_{}", i), "sess_bad");
  CHECK(w.sync->process_inbox() == 0);  // sess_bad's fetch fails: it backs off
  w.require_lookup("call_1");
  w.webhook("msg_good", "sess_1");
  CHECK(w.sync->process_inbox() == 1);
  CHECK(w.answered("call_1"));
  CHECK(w.inbox->backlog() == many);  // sess_bad's events wait, none lost
}

TEST_CASE("a failed fetch backs off with jitter and no sooner than Retry-After") {
  World w;
  REQUIRE(w.sync->bind("sess_1", "demo-user", "admin").ok());
  w.agents.fetch_error = make_error("agents_unavailable", "agents API answered 429");
  w.agents.fetch_error->retry_after_ms = 5000;
  w.webhook("msg_1", "sess_1");
  CHECK(w.sync->process_inbox() == 0);
  CHECK(w.agents.fetches == 1);
  CHECK(w.sync->process_inbox() == 0);
  CHECK(w.agents.fetches == 1);  // not before the wait
  w.clock.advance_ms(4999);
  w.sync->process_inbox();
  CHECK(w.agents.fetches == 1);
  w.agents.fetch_error.reset();
  w.require_lookup("call_1");
  w.clock.advance_ms(1);
  CHECK(w.sync->process_inbox() == 1);
  CHECK(w.agents.fetches == 2);
  CHECK(w.answered("call_1"));
}

TEST_CASE("the sweep recovers a session whose webhook was lost, and leaves quiet ones alone") {
  World w;
  REQUIRE(w.sync->bind("sess_1", "demo-user", "admin").ok());
  w.require_lookup("call_1");
  // No webhook ever arrives; the sweep finds the recently bound session.
  CHECK(w.sync->sweep(3600 * 1000) == 1);
  CHECK(w.answered("call_1"));
  // The model moves on to a new call; its webhook is lost too.
  w.clock.advance_ms(60 * 1000);
  w.require_lookup("call_2");
  CHECK(w.sync->sweep(3600 * 1000) == 1);
  CHECK(w.answered("call_2"));
  // Hours later, with nothing outstanding, the session is left alone.
  auto call_delivered = [&](const std::string& id) {
    REQUIRE(w.journal
                ->run([&](store::Txn& txn) {
                  auto key = outbox::call_key("sess_1", "turn_1", id);
                  auto c = txn.store().get_message<pb::ToolCall>(store::Cf::calls, key);
                  auto call = **c;
                  call.set_delivery("delivered");
                  call.set_delivered_at_ms(txn.now_ms());
                  txn.batch().put(store::Cf::calls, key, call);
                  return Status::Ok();
                })
                .ok());
  };
  call_delivered("call_1");
  call_delivered("call_2");
  w.clock.advance_ms(2 * 3600 * 1000);
  const int before = w.agents.fetches;
  CHECK(w.sync->sweep(3600 * 1000) == 0);
  CHECK(w.agents.fetches == before);
}

TEST_CASE("compaction removes processed inbox events past retention, and nothing else") {
  store::OpenOptions options;
  options.inbox_retention_ms = 3600 * 1000;
  World w(options);
  // An event of another type is processed by being stored; one for an
  // unbound session waits, unprocessed.
  REQUIRE(w.inbox->accept("agents", "msg_done", "{}", {"evt_1", "response.completed", ""}).ok());
  REQUIRE(w.inbox
              ->accept("agents", "msg_waiting", "{}",
                       {"evt_2", std::string(ingress::kActionRequired), "sess_unbound"})
              .ok());
  w.sync->process_inbox();
  w.clock.advance_ms(2 * 3600 * 1000);
  REQUIRE(w.inbox->accept("agents", "msg_recent", "{}", {"evt_3", "response.completed", ""}).ok());
  w.sync->process_inbox();
  REQUIRE(w.store->compact(store::Cf::inbox).ok());
  auto has = [&](const char* id) {
    auto v = w.store->get(store::Cf::inbox, ingress::Inbox::event_key("agents", id));
    return v.ok() && v->has_value();
  };
  CHECK_FALSE(has("msg_done"));
  CHECK(has("msg_waiting"));
  CHECK(has("msg_recent"));
}

TEST_CASE("events for a session the platform does not know are closed, not retried forever") {
  World w;
  REQUIRE(w.sync->bind("sess_1", "demo-user", "admin").ok());
  w.agents.fetch_error = make_error("session_not_found", "agents API answered 404");
  w.webhook("msg_1", "sess_1");
  CHECK(w.sync->process_inbox() == 1);
  CHECK(w.sync->process_inbox() == 0);
  CHECK(w.agents.fetches == 1);
  auto session = w.store->get_message<pb::Session>(store::Cf::sessions, "sess_1");
  CHECK((*session)->last_sync_error() == "the agent platform has no such session");
}
