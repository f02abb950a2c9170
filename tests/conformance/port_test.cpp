// The contracts of store/port.h, one test case per promise. Written against
// the port only: what passes here against RocksDB must pass against every
// other backend.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "backend.h"
#include "common/crypto.h"

using namespace opgate;
using store::Storage;
using store::Transaction;

namespace {

struct Fixture {
  ManualClock clock{1'800'000'000'000};
  std::unique_ptr<Storage> s = conformance::backend().open_empty(clock);

  void write(const std::function<void(Transaction&)>& fn) {
    Status st = s->transact([&](Transaction& t) {
      fn(t);
      return Status::Ok();
    });
    REQUIRE_MESSAGE(st.ok(), st.error().message);
  }
  void restart() {
    s.reset();
    s = conformance::backend().reopen(clock);
  }
};

pb::Operation op(const std::string& key, pb::OperationState state, const std::string& order = "O1",
                 int64_t expires_at_ms = 0) {
  pb::Operation o;
  o.set_key(key);
  o.set_state(state);
  o.mutable_proposal()->set_order_id(order);
  o.mutable_proposal()->set_owner("u");
  o.set_expires_at_ms(expires_at_ms);
  return o;
}

store::NewEvent event(const std::string& id, const std::string& body, bool queue,
                      const std::string& session = "sess_1") {
  store::NewEvent e;
  e.event.set_source("agents");
  e.event.set_webhook_id(id);
  e.event.set_body(body);
  e.event.set_body_sha256(crypto::sha256(body));
  e.event.set_type("agent.session.action_required");
  e.event.set_session_id(session);
  e.queue = queue;
  return e;
}

pb::ToolCall call(const std::string& session, const std::string& turn, const std::string& id) {
  pb::ToolCall c;
  c.set_session_id(session);
  c.set_turn_id(turn);
  c.set_call_id(id);
  return c;
}

pb::CallRef ref(const std::string& session, const std::string& turn, const std::string& id) {
  pb::CallRef r;
  r.set_session_id(session);
  r.set_turn_id(turn);
  r.set_call_id(id);
  return r;
}

pb::AuditRecord record(const std::string& key, const std::string& action) {
  pb::AuditRecord a;
  a.set_operation_key(key);
  a.set_action(action);
  a.set_principal("system");
  return a;
}

}  // namespace

TEST_CASE("a transaction commits all of its writes or, when it fails, none") {
  Fixture f;
  Status failed = f.s->transact([&](Transaction& t) -> Status {
    pb::Session s;
    s.set_session_id("sess_1");
    t.put_session(s);
    OPGATE_TRY(t.put_operation(op("k1", pb::STATE_PENDING)));
    return make_error(errc::conflict, "changed my mind");
  });
  CHECK(failed.error().is(errc::conflict));
  CHECK_FALSE(f.s->reader().session("sess_1")->has_value());
  CHECK_FALSE(f.s->reader().operation("k1")->has_value());
  f.write([](Transaction& t) {
    pb::Session s;
    s.set_session_id("sess_1");
    t.put_session(s);
    REQUIRE(t.put_operation(op("k1", pb::STATE_PENDING)).ok());
  });
  CHECK(f.s->reader().session("sess_1")->has_value());
  CHECK(f.s->reader().operation("k1")->has_value());
}

TEST_CASE("a transaction reads its own writes") {
  Fixture f;
  f.write([](Transaction& t) {
    REQUIRE(t.put_operation(op("k1", pb::STATE_PENDING)).ok());
    CHECK(t.operation("k1")->has_value());
    CHECK(t.operations_of_order("O1")->size() == 1);
    CHECK(t.operations({pb::STATE_PENDING, "", 10, {}})->operations.size() == 1);
    t.put_call(call("sess_1", "t1", "c1"));
    CHECK(t.call(ref("sess_1", "t1", "c1"))->has_value());
    CHECK(t.calls_of("sess_1")->size() == 1);
    pb::OrderFunds funds;
    funds.set_order_id("O1");
    funds.set_reserved_minor(5);
    t.put_funds(funds);
    CHECK(t.funds("O1")->reserved_minor() == 5);
  });
}

TEST_CASE("the calls of one turn are read in call id order, a page after another") {
  Fixture f;
  f.write([](Transaction& t) {
    for (const char* id : {"c3", "c1", "c5", "c2", "c4"}) t.put_call(call("sess_1", "task", id));
    t.put_call(call("sess_1", "call", "c0"));
    t.put_call(call("sess_1", "tasks", "c9"));
    t.put_call(call("sess_10", "task", "c6"));
  });
  auto& r = f.s->reader();
  auto ids = [](const Result<std::vector<pb::ToolCall>>& calls) {
    REQUIRE(calls.ok());
    std::string out;
    for (const auto& c : *calls) out += c.call_id() + " ";
    return out;
  };
  CHECK(ids(r.calls_of_turn("sess_1", "task", "", 2)) == "c1 c2 ");
  CHECK(ids(r.calls_of_turn("sess_1", "task", "c2", 2)) == "c3 c4 ");
  CHECK(ids(r.calls_of_turn("sess_1", "task", "c4", 10)) == "c5 ");
  CHECK(ids(r.calls_of_turn("sess_1", "task", "c5", 10)).empty());
  CHECK(ids(r.calls_of_turn("sess_1", "task", "c25", 1)) == "c3 ");  // not a call: after it
  CHECK(ids(r.calls_of_turn("sess_1", "task", "", 0)).empty());
  CHECK(ids(r.calls_of_turn("sess_1", "call", "", 10)) == "c0 ");
  CHECK(ids(r.calls_of_turn("sess_2", "task", "", 10)).empty());
}

TEST_CASE("a record read again in a transaction is as the transaction last wrote it") {
  Fixture f;
  f.write([](Transaction& t) {
    REQUIRE(t.put_operation(op("k1", pb::STATE_PENDING)).ok());
    pb::OrderFunds funds;
    funds.set_order_id("O1");
    funds.set_reserved_minor(5);
    t.put_funds(funds);
    pb::OutboxItem item;
    item.set_kind(pb::OUTBOX_EXECUTE);
    item.set_operation_key("k1");
    t.enqueue(item);
  });
  auto queued = f.s->reader().outbox_of("k1");
  REQUIRE(queued->size() == 1);
  const std::string id = queued->at(0).id;
  f.write([&](Transaction& t) {
    // Each read twice, then written, then read again.
    for (int i = 0; i < 2; ++i) {
      CHECK(t.funds("O1")->reserved_minor() == 5);
      CHECK((*t.operation("k1"))->state() == pb::STATE_PENDING);
      CHECK((*t.outbox_item(id))->attempts() == 0);
      CHECK_FALSE(t.order("O1")->has_value());
      CHECK_FALSE(t.call(ref("sess_1", "t1", "c1"))->has_value());
    }
    pb::OrderFunds funds = *t.funds("O1");
    funds.set_reserved_minor(7);
    t.put_funds(funds);
    REQUIRE(t.put_operation(op("k1", pb::STATE_APPROVED)).ok());
    store::OutboxEntry again = queued->at(0);
    again.item.set_attempts(1);
    t.update_outbox(again);
    pb::Order order;
    order.set_order_id("O1");
    t.put_order(order);
    t.put_call(call("sess_1", "t1", "c1"));
    CHECK(t.funds("O1")->reserved_minor() == 7);
    CHECK((*t.operation("k1"))->state() == pb::STATE_APPROVED);
    CHECK((*t.outbox_item(id))->attempts() == 1);
    CHECK(t.order("O1")->has_value());
    CHECK(t.call(ref("sess_1", "t1", "c1"))->has_value());
    t.remove_outbox(id);
    CHECK_FALSE(t.outbox_item(id)->has_value());
  });
  CHECK(f.s->reader().funds("O1")->reserved_minor() == 7);
  CHECK_FALSE(f.s->reader().outbox_item(id)->has_value());
}

TEST_CASE("records read ahead read as they would without it, and as written after") {
  Fixture f;
  f.write([](Transaction& t) {
    REQUIRE(t.put_operation(op("k1", pb::STATE_APPROVED)).ok());
    pb::Order order;
    order.set_order_id("O1");
    order.set_currency("EUR");
    t.put_order(order);
    pb::OrderFunds funds;
    funds.set_order_id("O1");
    funds.set_refunded_minor(3);
    t.put_funds(funds);
    t.put_call(call("sess_1", "t1", "c1"));
    pb::LedgerEntry entry;
    entry.set_operation_key("k1");
    entry.set_amount_minor(3);
    t.put_ledger(entry);
    pb::OutboxItem item;
    item.set_kind(pb::OUTBOX_EXECUTE);
    item.set_operation_key("k1");
    t.enqueue(item);
  });
  const std::string id = f.s->reader().outbox_of("k1")->at(0).id;
  f.write([&](Transaction& t) {
    store::ReadAhead ahead;
    ahead.outbox_items = {id, "no-such-item", id};
    ahead.operations = {"k1", "k2"};
    ahead.orders = {"O1", "O2"};
    ahead.funds = {"O1", "O2"};
    ahead.calls = {ref("sess_1", "t1", "c1"), ref("sess_1", "t1", "c2")};
    ahead.ledger = {"k1", "k2"};
    REQUIRE(t.read_ahead(ahead).ok());
    CHECK((*t.outbox_item(id))->operation_key() == "k1");
    CHECK_FALSE(t.outbox_item("no-such-item")->has_value());
    CHECK((*t.operation("k1"))->state() == pb::STATE_APPROVED);
    CHECK_FALSE(t.operation("k2")->has_value());
    CHECK((*t.order("O1"))->currency() == "EUR");
    CHECK_FALSE(t.order("O2")->has_value());
    CHECK(t.funds("O1")->refunded_minor() == 3);
    CHECK(t.funds("O2")->refunded_minor() == 0);
    CHECK(t.funds("O2")->order_id() == "O2");
    CHECK(t.call(ref("sess_1", "t1", "c1"))->has_value());
    CHECK_FALSE(t.call(ref("sess_1", "t1", "c2"))->has_value());
    CHECK((*t.ledger_entry("k1"))->amount_minor() == 3);
    CHECK_FALSE(t.ledger_entry("k2")->has_value());
    REQUIRE(t.put_operation(op("k1", pb::STATE_EXECUTING)).ok());
    pb::LedgerEntry entry;
    entry.set_operation_key("k2");
    entry.set_amount_minor(5);
    t.put_ledger(entry);
    pb::OrderFunds funds = *t.funds("O1");
    funds.set_reserved_minor(4);
    t.put_funds(funds);
    t.remove_outbox(id);
    REQUIRE(t.read_ahead(ahead).ok());  // again, after the writes
    CHECK((*t.operation("k1"))->state() == pb::STATE_EXECUTING);
    CHECK(t.funds("O1")->reserved_minor() == 4);
    CHECK_FALSE(t.outbox_item(id)->has_value());
    CHECK((*t.ledger_entry("k2"))->amount_minor() == 5);
    CHECK(t.read_ahead({}).ok());
  });
  CHECK((*f.s->reader().operation("k1"))->state() == pb::STATE_EXECUTING);
  f.write([&](Transaction& t) {  // the record missing first, the one there after it
    store::ReadAhead ahead;
    ahead.operations = {"k3", "k1"};
    ahead.orders = {"O2", "O1"};
    ahead.funds = {"O2", "O1"};
    ahead.calls = {ref("sess_1", "t1", "c2"), ref("sess_1", "t1", "c1")};
    ahead.ledger = {"k3", "k2"};
    REQUIRE(t.read_ahead(ahead).ok());
    CHECK_FALSE(t.operation("k3")->has_value());
    CHECK((*t.operation("k1"))->state() == pb::STATE_EXECUTING);
    CHECK_FALSE(t.order("O2")->has_value());
    CHECK((*t.order("O1"))->currency() == "EUR");
    CHECK(t.funds("O1")->reserved_minor() == 4);
    CHECK_FALSE(t.call(ref("sess_1", "t1", "c2"))->has_value());
    CHECK(t.call(ref("sess_1", "t1", "c1"))->has_value());
    CHECK_FALSE(t.ledger_entry("k3")->has_value());
    CHECK((*t.ledger_entry("k2"))->amount_minor() == 5);
  });
}

TEST_CASE("what was committed survives a restart") {
  Fixture f;
  f.write([](Transaction& t) { REQUIRE(t.put_operation(op("k1", pb::STATE_APPROVED)).ok()); });
  f.restart();
  auto o = f.s->reader().operation("k1");
  REQUIRE(o->has_value());
  CHECK((*o)->state() == pb::STATE_APPROVED);
}

TEST_CASE("append_events stores new ids once, and tells duplicates from conflicts") {
  Fixture f;
  std::vector<store::NewEvent> first = {event("a", "{1}", true), event("b", "{2}", false),
                                        event("a", "{1}", true), event("c", "{3}", true)};
  auto r = f.s->append_events(first);
  REQUIRE(r.ok());
  CHECK((*r)[0] == store::Appended::stored);
  CHECK((*r)[1] == store::Appended::stored);
  CHECK((*r)[2] == store::Appended::duplicate);  // a copy within one call
  CHECK((*r)[3] == store::Appended::stored);
  std::vector<store::NewEvent> later = {event("a", "{1}", true), event("b", "{other}", true)};
  auto again = f.s->append_events(later);
  CHECK((*again)[0] == store::Appended::duplicate);
  CHECK((*again)[1] == store::Appended::conflict);
  CHECK(*f.s->reader().queued_count() == 2);  // a and c; b was not queued
  auto stored = f.s->reader().event("agents", "b");
  REQUIRE(stored->has_value());
  CHECK((*stored)->body() == "{2}");
}

TEST_CASE("append_events answers a repeat within one call against what is stored, if anything") {
  Fixture f;
  std::vector<store::NewEvent> before = {event("a", "{1}", true)};
  REQUIRE(f.s->append_events(before).ok());
  std::vector<store::NewEvent> events = {event("a", "{other}", true), event("a", "{1}", true),
                                         event("d", "{4}", true), event("d", "{not 4}", true),
                                         event("d", "{4}", true)};
  auto r = f.s->append_events(events);
  REQUIRE(r.ok());
  CHECK((*r)[0] == store::Appended::conflict);   // against the stored a
  CHECK((*r)[1] == store::Appended::duplicate);  // the stored a, not the refused copy
  CHECK((*r)[2] == store::Appended::stored);
  CHECK((*r)[3] == store::Appended::conflict);  // against d stored by this call
  CHECK((*r)[4] == store::Appended::duplicate);
  CHECK(*f.s->reader().queued_count() == 2);  // a once, d once
  auto d = f.s->reader().event("agents", "d");
  REQUIRE(d->has_value());
  CHECK((*d)->body() == "{4}");
}

TEST_CASE("append_events stores the record the caller serialized, as the event reads back") {
  Fixture f;
  auto made = event("pre", "{\"made\":\"ahead\"}", true);
  made.event.set_received_at_ms(1234);
  made.record = made.event.SerializeAsString();
  std::vector<store::NewEvent> events = {std::move(made)};
  auto r = f.s->append_events(events);
  REQUIRE(r.ok());
  CHECK((*r)[0] == store::Appended::stored);
  auto stored = f.s->reader().event("agents", "pre");
  REQUIRE(stored->has_value());
  CHECK((*stored)->body() == "{\"made\":\"ahead\"}");
  CHECK((*stored)->received_at_ms() == 1234);
  CHECK(*f.s->reader().queued_count() == 1);
}

TEST_CASE(
    "queued events come in order, page by page; finishing and parking take them out, parking "
    "once") {
  Fixture f;
  std::vector<store::NewEvent> events;
  for (int i = 0; i < 5; ++i) events.push_back(event("e" + std::to_string(i), "{}", true));
  REQUIRE(f.s->append_events(events).ok());
  auto page = f.s->reader().queued("", 3);
  REQUIRE(page->size() == 3);
  CHECK(page->at(0).event.webhook_id() == "e0");
  auto rest = f.s->reader().queued(page->back().queue_id, 10);
  REQUIRE(rest->size() == 2);
  CHECK(rest->at(0).event.webhook_id() == "e3");
  f.write([&](Transaction& t) {
    t.finish_event(page->at(0));
    t.park_event(page->at(1));
  });
  CHECK(*f.s->reader().queued_count() == 3);
  CHECK((*f.s->reader().event("agents", "e0"))->processed());
  CHECK_FALSE((*f.s->reader().event("agents", "e1"))->processed());
  // An entry handed over twice (a pass that read it before it was parked)
  // is parked once.
  f.write([&](Transaction& t) { t.park_event(page->at(1)); });
  size_t released = 0;
  REQUIRE(f.s->transact([&](Transaction& t) -> Status {
               OPGATE_ASSIGN_OR_RETURN(released, t.release_parked("sess_1"));
               return Status::Ok();
             })
              .ok());
  CHECK(released == 1);
  CHECK(*f.s->reader().queued_count() == 4);
  // Released events queue behind everything queued before.
  CHECK(f.s->reader().queued("", 10)->back().event.webhook_id() == "e1");
}

TEST_CASE("sessions and tool calls are found by id and listed in order") {
  Fixture f;
  f.write([](Transaction& t) {
    for (auto id : {"sess_b", "sess_a", "sess_c"}) {
      pb::Session s;
      s.set_session_id(id);
      s.set_owner("u");
      t.put_session(s);
    }
    t.put_call(call("sess_a", "t2", "c1"));
    t.put_call(call("sess_a", "t1", "c2"));
    t.put_call(call("sess_b", "t1", "c1"));
  });
  auto& r = f.s->reader();
  CHECK(*r.session_ids("", 2) == std::vector<std::string>{"sess_a", "sess_b"});
  CHECK(*r.session_ids("sess_b", 10) == std::vector<std::string>{"sess_c"});
  auto calls = r.calls_of("sess_a");
  REQUIRE(calls->size() == 2);
  CHECK(calls->at(0).turn_id() == "t1");
  CHECK_FALSE(r.call(ref("sess_a", "t9", "c1"))->has_value());
}

TEST_CASE("operations are listed by state, paged, filtered, and counted in step") {
  Fixture f;
  f.write([](Transaction& t) {
    for (int i = 0; i < 5; ++i)
      REQUIRE(t.put_operation(op("k" + std::to_string(i), pb::STATE_PENDING)).ok());
    REQUIRE(t.put_operation(op("k9", pb::STATE_SETTLED)).ok());
  });
  auto& r = f.s->reader();
  auto page = r.operations({pb::STATE_PENDING, "", 2, {}});
  REQUIRE(page->operations.size() == 2);
  CHECK(page->operations[0].key() == "k0");
  CHECK(page->next_after == "k1");
  auto next = r.operations({pb::STATE_PENDING, page->next_after, 10, {}});
  CHECK(next->operations.size() == 3);
  CHECK(next->next_after.empty());
  auto filtered =
      r.operations({std::nullopt, "", 10, [](const pb::Operation& o) { return o.key() != "k2"; }});
  CHECK(filtered->operations.size() == 5);
  auto counts = r.counts();
  CHECK(counts->operations.at(pb::STATE_PENDING) == 5);
  CHECK(counts->operations.at(pb::STATE_SETTLED) == 1);
  CHECK(counts->settled.at(pb::OUTCOME_SUCCEEDED) == 0);
  f.write([](Transaction& t) {
    auto settled = op("k1", pb::STATE_SETTLED);
    settled.set_outcome(pb::OUTCOME_DENIED);
    REQUIRE(t.put_operation(settled).ok());
  });
  CHECK(r.counts()->settled.at(pb::OUTCOME_DENIED) == 1);
  f.write([](Transaction& t) { REQUIRE(t.put_operation(op("k0", pb::STATE_APPROVED)).ok()); });
  CHECK(r.counts()->operations.at(pb::STATE_PENDING) == 3);
  CHECK(r.counts()->operations.at(pb::STATE_APPROVED) == 1);
  CHECK(r.operations({pb::STATE_PENDING, "", 10, {}})->operations.size() == 3);
}

TEST_CASE("every operation is visited once, in key order, until the visitor stops") {
  Fixture f;
  f.write([](Transaction& t) {
    for (int i = 0; i < 1205; ++i) {  // more than a page of the default visit
      auto o = op(fmt::format("k{:04}", i), i % 2 ? pb::STATE_PENDING : pb::STATE_SETTLED);
      if (i % 2 == 0) o.mutable_proposal()->set_amount_minor(i);
      REQUIRE(t.put_operation(o).ok());
    }
  });
  auto& r = f.s->reader();
  std::vector<std::string> keys;
  int64_t amounts = 0;
  REQUIRE(r.visit_operations([&](const pb::Operation& o) {
             keys.push_back(o.key());
             amounts += o.proposal().amount_minor();
             return true;
           }).ok());
  REQUIRE(keys.size() == 1205);
  CHECK(std::is_sorted(keys.begin(), keys.end()));
  CHECK(keys.front() == "k0000");
  CHECK(amounts == 602 * 603);  // the even ones: none left over from the message before
  size_t seen = 0;
  REQUIRE(r.visit_operations([&](const pb::Operation&) { return ++seen < 3; }).ok());
  CHECK(seen == 3);
}

TEST_CASE("pending operations are found by expiry, earliest first, and only while pending") {
  Fixture f;
  f.write([](Transaction& t) {
    REQUIRE(t.put_operation(op("late", pb::STATE_PENDING, "O1", 3000)).ok());
    REQUIRE(t.put_operation(op("early", pb::STATE_PENDING, "O1", 1000)).ok());
    REQUIRE(t.put_operation(op("done", pb::STATE_SETTLED, "O1", 500)).ok());
  });
  auto& r = f.s->reader();
  CHECK(*r.expired_by(999, 10) == std::vector<std::string>{});
  CHECK(*r.expired_by(3000, 10) == std::vector<std::string>{"early", "late"});
  CHECK(*r.expired_by(3000, 1) == std::vector<std::string>{"early"});
  f.write([](Transaction& t) { REQUIRE(t.put_operation(op("early", pb::STATE_SETTLED)).ok()); });
  CHECK(*r.expired_by(3000, 10) == std::vector<std::string>{"late"});
}

TEST_CASE("operations of an order, orders, and funds that start at zero") {
  Fixture f;
  f.write([](Transaction& t) {
    REQUIRE(t.put_operation(op("a", pb::STATE_PENDING, "O1")).ok());
    REQUIRE(t.put_operation(op("b", pb::STATE_SETTLED, "O1")).ok());
    REQUIRE(t.put_operation(op("c", pb::STATE_PENDING, "O2")).ok());
    pb::Order o;
    o.set_order_id("O1");
    o.set_amount_minor(2500);
    t.put_order(o);
  });
  auto& r = f.s->reader();
  CHECK(r.operations_of_order("O1")->size() == 2);
  CHECK((*r.order("O1"))->amount_minor() == 2500);
  CHECK_FALSE(r.order("O9")->has_value());
  auto funds = r.funds("O9");
  REQUIRE(funds.ok());
  CHECK(funds->refunded_minor() == 0);
  CHECK(funds->order_id() == "O9");
}

TEST_CASE("ledger rows are found by key and filtered by session, owner and order") {
  Fixture f;
  f.write([](Transaction& t) {
    for (auto [key, session, owner, order] :
         {std::tuple{"k1", "s1", "u1", "O1"}, {"k2", "s2", "u1", "O2"}, {"k3", "s2", "u2", "O3"}}) {
      pb::LedgerEntry l;
      l.set_operation_key(key);
      l.set_session_id(session);
      l.set_owner(owner);
      l.set_order_id(order);
      t.put_ledger(l);
    }
  });
  auto& r = f.s->reader();
  CHECK(r.ledger({})->size() == 3);
  CHECK(r.ledger({"s2", "", "", "", 0})->size() == 2);
  CHECK(r.ledger({"s2", "u1", "", "", 0})->size() == 1);
  CHECK(r.ledger({"", "", "O3", "", 0})->size() == 1);
  CHECK((*r.ledger_entry("k2"))->owner() == "u1");
  // In pages, in key order, each after the last one's cursor.
  auto first = r.ledger({"", "", "", "", 2});
  REQUIRE(first->size() == 2);
  CHECK(first->at(0).operation_key() == "k1");
  CHECK(first->at(1).operation_key() == "k2");
  auto rest = r.ledger({"", "", "", "k2", 2});
  REQUIRE(rest->size() == 1);
  CHECK(rest->at(0).operation_key() == "k3");
  CHECK(r.ledger({"s2", "", "", "k1", 1})->at(0).operation_key() == "k2");
  CHECK(r.ledger({"", "", "", "k3", 0})->empty());
}

TEST_CASE("what records the head (an operation, its notification) holds the real one") {
  Fixture f;
  f.write([&](Transaction& t) {
    pb::AuditRecord first;
    first.set_operation_key("k0");
    first.set_action("propose");
    t.append_audit(first);
  });
  f.write([&](Transaction& t) {
    for (const std::string key : {"k1", "k2"}) {
      pb::AuditRecord a;
      a.set_operation_key(key);
      a.set_action("propose");
      t.append_audit(a);
      auto head = t.head_to_record();
      REQUIRE(head.ok());
      auto o = op(key, pb::STATE_PENDING);
      o.set_audit_seq(head->seq);
      o.set_audit_hash(head->hash);
      REQUIRE(t.put_operation(o).ok());
      pb::OutboxItem item;
      item.set_kind(pb::OUTBOX_NOTIFY_EVENT);
      item.set_operation_key(key);
      auto& n = *item.mutable_notification();
      n = opgate::conformance::notification_on(*head, "operation.proposed", t.now_ms());
      t.keep_notification(n);
      t.enqueue(item);
    }
  });
  auto& r = f.s->reader();
  for (const auto& [key, seq] : {std::pair{"k1", 2}, {"k2", 3}}) {
    auto o = r.operation(key);
    REQUIRE(o->has_value());
    auto records = r.audit_of(key);
    REQUIRE(records->size() == 1);
    CHECK((*o)->audit_seq() == static_cast<uint64_t>(seq));
    CHECK((*o)->audit_hash() == records->at(0).hash());
  }
  auto kept = r.notifications_since(0, 10);
  REQUIRE(kept->size() == 2);
  std::set<std::string> ids;
  for (const auto& n : *kept) {
    ids.insert(n.event_id());
    auto records = r.audit(n.audit_seq() - 1, 1);
    REQUIRE(records->size() == 1);
    CHECK(records->at(0).hash() == n.audit_hash());
  }
  CHECK(ids == std::set<std::string>{"evt_2_proposed", "evt_3_proposed"});
  auto queued = r.due(store::Queue::notifications, INT64_MAX, 10, {});
  REQUIRE(queued->size() == 2);
  for (const auto& e : *queued) {
    const auto& n = e.item.notification();
    CHECK(n.event_id() == "evt_" + std::to_string(n.audit_seq()) + "_proposed");
    CHECK(n.audit_seq() <= 3);
  }
  CHECK(f.s->verify_audit()->ok);
}

TEST_CASE("an operation that records a head not chained yet reads back in its transaction") {
  Fixture f;
  f.write([&](Transaction& t) { REQUIRE(t.put_operation(op("k1", pb::STATE_PENDING)).ok()); });
  f.write([&](Transaction& t) {
    for (auto state : {pb::STATE_APPROVED, pb::STATE_EXECUTING}) {
      pb::AuditRecord a;
      a.set_operation_key("k1");
      a.set_action("step");
      t.append_audit(a);
      auto head = t.head_to_record();
      REQUIRE(head.ok());
      auto o = op("k1", state);
      o.set_audit_seq(head->seq);
      o.set_audit_hash(head->hash);
      REQUIRE(t.put_operation(o).ok());
      auto read = t.operation("k1");
      REQUIRE(read.ok());
      REQUIRE(read->has_value());
      CHECK((*read)->state() == state);
      auto of_order = t.operations_of_order("O1");
      REQUIRE(of_order.ok());
      REQUIRE(of_order->size() == 1);
      CHECK(of_order->at(0).state() == state);
    }
  });
  auto& r = f.s->reader();
  auto o = r.operation("k1");
  REQUIRE(o->has_value());
  CHECK((*o)->state() == pb::STATE_EXECUTING);
  auto records = r.audit_of("k1");
  REQUIRE(records->size() == 2);
  CHECK((*o)->audit_seq() == 2);
  CHECK((*o)->audit_hash() == records->at(1).hash());
  auto counts = r.counts();
  REQUIRE(counts.ok());
  CHECK(counts->operations[pb::STATE_EXECUTING] == 1);
  CHECK(counts->operations[pb::STATE_APPROVED] == 0);
  CHECK(counts->operations[pb::STATE_PENDING] == 0);
  CHECK(f.s->verify_audit()->ok);
}

TEST_CASE("the audit chain links every record, across transactions and restarts") {
  Fixture f;
  f.write([&](Transaction& t) {
    t.append_audit(record("k1", "propose"));
    t.append_audit(record("k2", "propose"));
    CHECK(t.audit_head()->seq == 2);
  });
  f.restart();
  f.write([&](Transaction& t) { t.append_audit(record("k1", "approve")); });
  auto& r = f.s->reader();
  auto of_k1 = r.audit_of("k1");
  REQUIRE(of_k1->size() == 2);
  CHECK(of_k1->at(1).action() == "approve");
  CHECK(of_k1->at(1).seq() == 3);
  CHECK(r.audit(1, 10)->size() == 2);
  CHECK(r.audit(0, 1)->at(0).seq() == 1);
  auto head = r.audit_head();
  CHECK(head->seq == 3);
  auto v = f.s->verify_audit();
  REQUIRE(v.ok());
  CHECK(v->ok);
  CHECK(v->records == 3);
  CHECK(v->head.hash == head->hash);
}

TEST_CASE("an operation is read with its records, in a transaction as it would be outside") {
  Fixture f;
  f.write([&](Transaction& t) {
    REQUIRE(t.put_operation(op("k1", pb::STATE_PENDING)).ok());
    t.append_audit(record("k1", "propose"));
    t.append_audit(record("k2", "propose"));
    t.append_audit(record("k1", "approve"));
  });
  f.write([&](Transaction& t) { t.append_audit(record("k1", "claim")); });
  auto& r = f.s->reader();
  auto found = r.operation_history("k1");
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->operation.key() == "k1");
  CHECK((*found)->operation.state() == pb::STATE_PENDING);
  REQUIRE((*found)->records.size() == 3);
  CHECK((*found)->records[0].action() == "propose");
  CHECK((*found)->records[1].action() == "approve");
  CHECK((*found)->records[2].action() == "claim");
  CHECK((*found)->records[2].seq() == 4);
  // Records alone are not an operation; neither is a key never used.
  CHECK_FALSE(r.operation_history("k2")->has_value());
  CHECK_FALSE(r.operation_history("nope")->has_value());
  // A transaction reads its own writes, the new record chained.
  f.write([&](Transaction& t) {
    REQUIRE(t.put_operation(op("k1", pb::STATE_APPROVED)).ok());
    t.append_audit(record("k1", "settle"));
    auto mine = t.operation_history("k1");
    REQUIRE(mine.ok());
    REQUIRE(mine->has_value());
    CHECK((*mine)->operation.state() == pb::STATE_APPROVED);
    REQUIRE((*mine)->records.size() == 4);
    CHECK((*mine)->records[3].action() == "settle");
  });
  CHECK(r.operation_history("k1")->value().records.size() == 4);
}

TEST_CASE("what a transaction asks to read after its commit is read as committed") {
  Fixture f;
  f.write([&](Transaction& t) {
    REQUIRE(t.put_operation(op("k1", pb::STATE_PENDING)).ok());
    t.append_audit(record("k1", "propose"));
  });
  store::CommittedRead read;
  read.operation_key = "k1";
  f.write([&](Transaction& t) {
    t.read_after_commit(&read);
    REQUIRE(t.put_operation(op("k1", pb::STATE_APPROVED)).ok());
    t.append_audit(record("k1", "approve"));
    pb::OutboxItem item;
    item.set_kind(pb::OUTBOX_EXECUTE);
    item.set_operation_key("k1");
    t.enqueue(item);
    CHECK_FALSE(read.read);  // not before the commit
  });
  REQUIRE(read.read);
  REQUIRE(read.history);
  CHECK(read.history->operation.state() == pb::STATE_APPROVED);
  // The records as the chain holds them, this transaction's chained.
  auto stored = f.s->reader().audit_of("k1");
  REQUIRE(stored.ok());
  REQUIRE(read.history->records.size() == 2);
  CHECK(read.history->records[1].action() == "approve");
  CHECK(read.history->records[1].seq() == 2);
  CHECK(read.history->records[1].hash() == stored->at(1).hash());
  // The item as stored, with the id the store gave it.
  auto items = f.s->reader().outbox_of("k1");
  REQUIRE(items.ok());
  REQUIRE(read.items.size() == 1);
  CHECK(read.items[0].id == items->at(0).id);
  CHECK(read.items[0].item.kind() == pb::OUTBOX_EXECUTE);

  // A commit with no record in the chain reads alike.
  store::CommittedRead plain;
  plain.operation_key = "k1";
  f.write([&](Transaction& t) {
    t.read_after_commit(&plain);
    REQUIRE(t.put_operation(op("k1", pb::STATE_EXECUTING)).ok());
  });
  REQUIRE(plain.read);
  CHECK(plain.history->operation.state() == pb::STATE_EXECUTING);
  CHECK(plain.history->records.size() == 2);

  // A key with no operation reads as none; a transaction that fails
  // leaves it unread.
  store::CommittedRead none, failed;
  none.operation_key = "nope";
  f.write([&](Transaction& t) {
    t.read_after_commit(&none);
    t.append_audit(record("nope", "note"));
  });
  CHECK(none.read);
  CHECK_FALSE(none.history);
  CHECK(none.items.empty());
  failed.operation_key = "k1";
  Status refused = f.s->transact([&](Transaction& t) -> Status {
    t.read_after_commit(&failed);
    t.append_audit(record("k1", "settle"));
    return make_error(errc::bad_request, "no");
  });
  CHECK_FALSE(refused.ok());
  CHECK_FALSE(failed.read);
}

namespace {

// Queues a reconcile item due at each time, keyed "k" and the time.
void queue_reconciles(Fixture& f, std::initializer_list<int64_t> due_at) {
  f.write([&](Transaction& t) {
    for (int64_t at : due_at) {
      pb::OutboxItem i;
      i.set_kind(pb::OUTBOX_RECONCILE);
      i.set_operation_key("k" + std::to_string(at));
      i.set_not_before_ms(at);
      t.enqueue(i);
    }
  });
}

}  // namespace

TEST_CASE("outbox items are due by time, rescheduled and removed") {
  Fixture f;
  queue_reconciles(f, {300, 100, 200});
  auto& r = f.s->reader();
  CHECK(r.due(store::Queue::work, 99, 10, {})->empty());
  auto due = r.due(store::Queue::work, 250, 10, {});
  REQUIRE(due->size() == 2);
  CHECK(due->at(0).item.operation_key() == "k100");
  CHECK(*r.next_due_ms(store::Queue::work) == 100);
  auto later = due->at(0);
  later.item.set_not_before_ms(1000);
  later.item.set_attempts(1);
  f.write([&](Transaction& t) {
    t.update_outbox(later);
    t.remove_outbox(due->at(1).id);
    t.remove_outbox("no-such-item");  // not an error
  });
  auto now_due = r.due(store::Queue::work, 999, 10, {});
  REQUIRE(now_due->size() == 1);
  CHECK(now_due->at(0).item.operation_key() == "k300");
  CHECK(r.due(store::Queue::work, 1000, 10, {})->size() == 2);
  f.write([&](Transaction& t) {
    store::OutboxEntry gone{"no-such-item", later.item};
    t.update_outbox(gone);  // an item that is gone is not brought back
  });
  CHECK(r.due(store::Queue::work, 1000, 10, {})->size() == 2);
  // Work the caller holds already is left out, and does not count.
  auto held = r.due(store::Queue::work, 1000, 1, {now_due->at(0).id});
  REQUIRE(held->size() == 1);
  CHECK(held->at(0).item.operation_key() == "k100");
  CHECK(r.due(store::Queue::work, 1000, 10, {now_due->at(0).id, held->at(0).id})->empty());
  CHECK(r.due(store::Queue::work, 1000, 0, {})->empty());  // a dispatcher with no room
}

TEST_CASE("a queue is read a page at a time, each page after the last item of the one before") {
  Fixture f;
  // Five due at 100 and one at 50, 150 and 5000.
  queue_reconciles(f, {100, 150, 100, 50, 100, 100, 5000, 100});
  auto& r = f.s->reader();
  std::vector<store::OutboxEntry> walked;
  store::DuePosition after;
  for (;;) {
    auto page = r.due_after(store::Queue::work, 1000, after, 2);
    REQUIRE(page.ok());
    if (!page->end) break;
    CHECK(page->entries.size() <= 2);
    walked.insert(walked.end(), page->entries.begin(), page->entries.end());
    CHECK(page->end->id == page->entries.back().id);
    after = *page->end;
  }
  // Every item due by 1000 once, in the order due() reads them.
  auto all = r.due(store::Queue::work, 1000, 100, {});
  REQUIRE(all->size() == 7);
  REQUIRE(walked.size() == 7);
  for (size_t i = 0; i < walked.size(); ++i) CHECK(walked[i].id == all->at(i).id);
  CHECK(walked.front().item.operation_key() == "k50");
  CHECK(walked.back().item.operation_key() == "k150");
  // From the middle of those due at 100: the rest of them, then the next.
  auto rest = r.due_after(store::Queue::work, 1000, store::DuePosition::of(all->at(2)), 100);
  REQUIRE(rest->entries.size() == 4);
  CHECK(rest->entries[0].id == all->at(3).id);
  // Other queues and no room read nothing.
  CHECK_FALSE(r.due_after(store::Queue::notifications, 1000, {}, 10)->end);
  CHECK_FALSE(r.due_after(store::Queue::work, 1000, {}, 0)->end);
  CHECK_FALSE(r.due_after(store::Queue::work, 1000, store::DuePosition::of(all->back()), 10)->end);
}

TEST_CASE("outbox items read together come in the order asked, none for one that is gone") {
  Fixture f;
  f.write([](Transaction& t) {
    for (const char* key : {"k1", "k2", "k3"}) {
      pb::OutboxItem i;
      i.set_kind(pb::OUTBOX_NOTIFY_EVENT);
      i.set_operation_key(key);
      t.enqueue(i);
    }
  });
  auto& r = f.s->reader();
  std::vector<std::string> ids;
  for (const char* key : {"k1", "k2", "k3"}) ids.push_back(r.outbox_of(key)->at(0).id);
  f.write([&](Transaction& t) { t.remove_outbox(ids[1]); });
  auto read = r.outbox_items({ids[2], ids[1], "no-such-item", ids[0], ids[2]});
  REQUIRE(read.ok());
  REQUIRE(read->size() == 5);
  CHECK((*read)[0]->operation_key() == "k3");
  CHECK_FALSE((*read)[1].has_value());
  CHECK_FALSE((*read)[2].has_value());
  CHECK((*read)[3]->operation_key() == "k1");
  CHECK((*read)[4]->operation_key() == "k3");
  CHECK(r.outbox_items({})->empty());
}

// The claim of several items at once (a node fanning out notification
// events): read together in a transaction, each is taken by one
// transaction only, however many processes and threads try at once.
TEST_CASE("items read together in a transaction are each taken by one transaction") {
  Fixture f;
  constexpr int kItems = 40, kThreads = 4;
  f.write([](Transaction& t) {
    for (int i = 0; i < kItems; ++i) {
      pb::OutboxItem item;
      item.set_kind(pb::OUTBOX_NOTIFY_EVENT);
      item.set_operation_key(fmt::format("k{}", i));
      t.enqueue(item);
    }
  });
  auto queued = f.s->reader().due(store::Queue::notifications, INT64_MAX, 100, {});
  REQUIRE(queued.ok());
  std::vector<std::string> ids;
  for (const auto& e : *queued) ids.push_back(e.id);
  REQUIRE(ids.size() == kItems);
  std::unique_ptr<Storage> other;
  if (conformance::backend().shared()) other = conformance::backend().reopen(f.clock);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int n = 0; n < kThreads; ++n)
    threads.emplace_back([&, n] {
      Storage& s = (other && n % 2 == 1) ? *other : *f.s;
      // Each thread asks for the items in its own order, a few at a time.
      std::vector<std::string> mine = ids;
      std::rotate(mine.begin(), mine.begin() + n * 7, mine.end());
      for (size_t at = 0; at < mine.size(); at += 5) {
        std::vector<std::string> some(
            mine.begin() + static_cast<long>(at),
            mine.begin() + static_cast<long>(std::min(at + 5, mine.size())));
        Status st = s.transact([&](Transaction& t) -> Status {
          OPGATE_ASSIGN_OR_RETURN(auto items, t.outbox_items(some));
          OPGATE_ASSIGN_OR_RETURN(auto taken, t.funds("taken"));
          for (size_t i = 0; i < some.size(); ++i) {
            if (!items[i]) continue;
            taken.set_reserved_minor(taken.reserved_minor() + 1);
            t.remove_outbox(some[i]);
          }
          t.put_funds(taken);
          return Status::Ok();
        });
        if (!st) failures++;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(f.s->reader().funds("taken")->reserved_minor() == kItems);
  CHECK(f.s->reader().due(store::Queue::notifications, INT64_MAX, 100, {})->empty());
}

// Also when the record is read ahead, which reads it under its lock too.
TEST_CASE("concurrent transactions that read and write the same record lose no update") {
  for (bool read_ahead : {false, true}) {
    CAPTURE(read_ahead);
    Fixture f;
    std::unique_ptr<Storage> other;
    if (read_ahead && conformance::backend().shared())
      other = conformance::backend().reopen(f.clock);
    constexpr int kThreads = 4, kEach = 50;
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, i] {
        Storage& s = (other && i % 2 == 1) ? *other : *f.s;
        for (int n = 0; n < kEach; ++n) {
          Status st = s.transact([&](Transaction& t) -> Status {
            if (read_ahead) {
              store::ReadAhead ahead;
              ahead.orders = {"O1"};
              ahead.funds = {"O1"};
              OPGATE_TRY(t.read_ahead(ahead));
            }
            OPGATE_ASSIGN_OR_RETURN(auto funds, t.funds("O1"));
            funds.set_reserved_minor(funds.reserved_minor() + 1);
            t.put_funds(funds);
            return Status::Ok();
          });
          if (!st) failures++;
        }
      });
    for (auto& t : threads) t.join();
    CHECK(failures == 0);
    CHECK(f.s->reader().funds("O1")->reserved_minor() == kThreads * kEach);
  }
}

TEST_CASE("processes sharing a store lose no update, store a webhook once, keep one chain") {
  if (!conformance::backend().shared()) return;  // one process per store (RocksDB)
  Fixture f;
  auto other = conformance::backend().reopen(f.clock);
  constexpr int kThreads = 2, kEach = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (Storage* s : {f.s.get(), other.get()})
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, s] {
        for (int n = 0; n < kEach; ++n) {
          Status st = s->transact([&](Transaction& t) -> Status {
            OPGATE_ASSIGN_OR_RETURN(auto funds, t.funds("O1"));
            funds.set_reserved_minor(funds.reserved_minor() + 1);
            t.put_funds(funds);
            pb::AuditRecord a;
            a.set_operation_key("k1");
            a.set_action("step");
            t.append_audit(a);
            return Status::Ok();
          });
          if (!st) failures++;
        }
      });
  // The same webhook at both at once: stored once, the other a duplicate.
  std::vector<store::NewEvent> one = {event("same", "{1}", true)};
  std::vector<store::NewEvent> two = {event("same", "{1}", true)};
  Result<std::vector<store::Appended>> a = std::vector<store::Appended>{};
  Result<std::vector<store::Appended>> b = std::vector<store::Appended>{};
  std::thread ta([&] { a = f.s->append_events(one); });
  std::thread tb([&] { b = other->append_events(two); });
  ta.join();
  tb.join();
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  constexpr int kTotal = 2 * kThreads * kEach;
  CHECK(f.s->reader().funds("O1")->reserved_minor() == kTotal);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(((*a)[0] == store::Appended::stored) != ((*b)[0] == store::Appended::stored));
  CHECK(*f.s->reader().queued_count() == 1);
  auto v = other->verify_audit();
  REQUIRE(v.ok());
  CHECK(v->ok);
  CHECK(v->records == kTotal);
  CHECK(f.s->reader().audit_head()->seq == kTotal);
}

TEST_CASE("notifications wait in their own queue; items are found by operation") {
  Fixture f;
  f.write([](Transaction& t) {
    pb::OutboxItem work;
    work.set_kind(pb::OUTBOX_EXECUTE);
    work.set_operation_key("k1");
    t.enqueue(work);
    pb::OutboxItem note;
    note.set_kind(pb::OUTBOX_NOTIFY_DELIVERY);
    note.set_operation_key("k1");
    note.mutable_notification()->set_endpoint("ops");
    t.enqueue(note);
    pb::OutboxItem other;
    other.set_kind(pb::OUTBOX_NOTIFY_EVENT);
    other.set_operation_key("k2");
    t.enqueue(other);
  });
  auto& r = f.s->reader();
  auto work = r.due(store::Queue::work, 1, 10, {});
  REQUIRE(work->size() == 1);
  CHECK(work->at(0).item.kind() == pb::OUTBOX_EXECUTE);
  CHECK(r.due(store::Queue::notifications, 1, 10, {})->size() == 2);
  auto of_k1 = r.outbox_of("k1");
  REQUIRE(of_k1->size() == 2);
  f.write([&](Transaction& t) { t.remove_outbox(of_k1->at(0).id); });
  CHECK(r.outbox_of("k1")->size() == 1);
  CHECK(r.due(store::Queue::work, 1, 10, {})->empty());
}

TEST_CASE("endpoint states start fresh and are kept; notification events are kept in time order") {
  Fixture f;
  auto fresh = f.s->reader().endpoint_state("ops");
  REQUIRE(fresh.ok());
  CHECK(fresh->name() == "ops");
  CHECK_FALSE(fresh->disabled());
  f.write([](Transaction& t) {
    pb::EndpointState s;
    s.set_name("ops");
    s.set_disabled(true);
    t.put_endpoint_state(s);
    for (int64_t at : {300, 100, 200}) {
      pb::Notification n;
      n.set_event_id("evt_" + std::to_string(at));
      n.set_created_at_ms(at);
      t.keep_notification(n);
    }
  });
  CHECK(f.s->reader().endpoint_state("ops")->disabled());
  f.write([](Transaction& t) {
    pb::EndpointState s;
    s.set_name("chat");
    s.set_backlog(3);
    t.put_endpoint_state(s);
  });
  auto all = f.s->reader().endpoint_states();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK(all->at(0).name() == "chat");
  CHECK(all->at(0).backlog() == 3);
  CHECK(all->at(1).name() == "ops");
  auto since = f.s->reader().notifications_since(150, 10);
  REQUIRE(since->size() == 2);
  CHECK(since->at(0).event_id() == "evt_200");
  CHECK(since->at(1).event_id() == "evt_300");
}

TEST_CASE("kept records are read by kind and key, listed in key order, replaced and forgotten") {
  Fixture f;
  auto& r = f.s->reader();
  CHECK_FALSE(r.kept("agent_token", "aa")->has_value());
  f.write([](Transaction& t) {
    t.keep("agent_token", "bb", std::string("two\0bytes", 9));
    t.keep("agent_token", "aa", "one");
    t.keep("agent_token", "cc", "three");
    t.keep("other_kind", "aa", "elsewhere");
  });
  REQUIRE(r.kept("agent_token", "bb")->has_value());
  CHECK(**r.kept("agent_token", "bb") == std::string("two\0bytes", 9));
  auto all = r.kept_all("agent_token", "", 10);
  REQUIRE(all.ok());
  REQUIRE(all->size() == 3);
  CHECK(all->at(0).first == "aa");
  CHECK(all->at(2).second == "three");
  auto page = r.kept_all("agent_token", "aa", 1);
  REQUIRE(page->size() == 1);
  CHECK(page->at(0).first == "bb");
  CHECK(r.kept_all("agent_token", "cc", 10)->empty());
  f.write([](Transaction& t) {
    t.keep("agent_token", "aa", "one, replaced");
    t.forget("agent_token", "cc");
    t.forget("agent_token", "never-kept");
  });
  CHECK(**r.kept("agent_token", "aa") == "one, replaced");
  CHECK_FALSE(r.kept("agent_token", "cc")->has_value());
  CHECK(r.kept_all("agent_token", "", 10)->size() == 2);
  CHECK(**r.kept("other_kind", "aa") == "elsewhere");
  // A transaction reads its own writes.
  Status s = f.s->transact([](Transaction& t) -> Status {
    t.keep("agent_token", "dd", "four");
    OPGATE_ASSIGN_OR_RETURN(auto seen, t.kept("agent_token", "dd"));
    CHECK(seen == std::optional<std::string>("four"));
    return Status::Ok();
  });
  CHECK(s.ok());
}

TEST_CASE(
    "what a transaction defers to after its commit runs once it is durable, never on failure") {
  Fixture f;
  std::vector<std::string> seen;  // what a fresh reader saw when each ran
  Status ok = f.s->transact([&](Transaction& t) -> Status {
    t.put_funds([] {
      pb::OrderFunds funds;
      funds.set_order_id("O1");
      funds.set_reserved_minor(7);
      return funds;
    }());
    t.after_commit([&] {
      seen.push_back("reserved " + std::to_string(f.s->reader().funds("O1")->reserved_minor()));
    });
    CHECK(seen.empty());  // not yet: the transaction is open
    return Status::Ok();
  });
  REQUIRE(ok.ok());
  CHECK(seen == std::vector<std::string>{"reserved 7"});
  Status failed = f.s->transact([&](Transaction& t) -> Status {
    t.after_commit([&] { seen.push_back("after a failure"); });
    return make_error(errc::conflict, "no");
  });
  CHECK_FALSE(failed.ok());
  CHECK(seen.size() == 1);
}

TEST_CASE("a backup is a copy at the chain's head, or a clear refusal naming the tools to use") {
  Fixture f;
  f.write([](Transaction& t) {
    pb::AuditRecord a;
    a.set_operation_key("k1");
    a.set_action("step");
    t.append_audit(a);
  });
  const auto dir = std::filesystem::temp_directory_path() /
                   ("opgate-conformance-backup-" + crypto::random_hex(6));
  auto info = f.s->backup_to(dir.string());
  if (info.ok()) {
    CHECK(std::filesystem::exists(dir));
    CHECK(info->audit_head.seq == 1);
    CHECK(info->audit_head.hash == f.s->reader().audit_head()->hash);
    std::filesystem::remove_all(dir);
  } else {
    CHECK(info.error().is(errc::bad_request));
    CHECK_FALSE(info.error().message.empty());
    CHECK_FALSE(std::filesystem::exists(dir));  // nothing half-written
  }
  if (conformance::backend().name() == "rocksdb") CHECK(info.ok());
  if (conformance::backend().name() == "postgres") {
    REQUIRE_FALSE(info.ok());
    CHECK(info.error().message.find("pg_basebackup") != std::string::npos);
    CHECK(info.error().message.find("pg_dump") != std::string::npos);
  }
}
