// The drainer and the reconciler against a scripted payment provider: every
// branch of recording an answer and of reconciling, the lease that recovers
// an answer that was never recorded, the re-check before execution, and
// tool-result delivery verdicts. Real store, injected clock.
#include "outbox/drainer.h"

#include <doctest/doctest.h>

#include <atomic>
#include <boost/json.hpp>
#include <future>
#include <thread>
#include <utility>

#include "becomes_true.h"
#include "fault_fs.h"
#include "operations/attention.h"
#include "operations/decisions.h"
#include "operations/declared.h"
#include "operations/execution.h"
#include "operations/settlement.h"
#include "world.h"

using namespace opgate;
namespace json = boost::json;

namespace {

constexpr const char* kRefund = "demo-user:ORDER-100:full-refund:v1";
constexpr const char* kCredit = "demo-user:ORDER-100:account-credit:v1";

operations::Principal alice() {
  operations::Principal p;
  p.name = "alice";
  p.scopes = {"operations:read", "operations:approve", "operations:resolve"};
  p.owners = {"*"};
  p.max_amount_minor = {{"USD", 100000}};
  return p;
}

operations::PaymentResult answer(operations::Verdict v, std::string error = "") {
  return {v, v == operations::Verdict::refused ? "" : "re_1", "", std::move(error), ""};
}

struct World : testing::World {
  explicit World(store::rocks::OpenOptions options = {}) : testing::World(options) {
    seed_order("ORDER-100");
    REQUIRE(sync->bind("sess_1", "demo-user", "admin").ok());
  }

  // The model asks; the proposal is stored pending.
  void propose(const std::string& call_id, const std::string& tool, const std::string& args) {
    operations::SessionView v;
    v.required_actions = {{call_id, "turn_1", tool, args}};
    {
      std::lock_guard lock(agents.mu);
      agents.views["sess_1"] = v;
    }
    webhook("msg_" + call_id, "sess_1");
    pump();
  }
  void propose_refund() { propose("call_refund", "request_refund", R"({"order_id":"ORDER-100"})"); }
  void propose_credit(int64_t amount) {
    propose("call_credit", "issue_account_credit",
            json::serialize(json::object{{"order_id", "ORDER-100"},
                                         {"amount_minor", amount},
                                         {"currency", "USD"},
                                         {"reason_code", "GOODWILL"}}));
  }

  Result<operations::Approved> approve(
      const std::string& key,
      const std::optional<operations::ClaimAtOnce>& claim_at_once = std::nullopt) {
    auto op = operation(key);
    std::optional<operations::Approved> out;
    Status s = storage->transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(
          auto a,
          operations::approve(
              txn, key, alice(),
              {op.proposal().amount_minor(), op.proposal().currency(), op.fingerprint(), {}, {}},
              *policy.get(), std::nullopt, claim_at_once));
      out = a;
      return Status::Ok();
    });
    if (!s) return s.error();
    return *out;
  }

  // The refund proposed and approved, and the provider's answer a timeout:
  // outcome_unknown, with `later` the provider's next answers.
  void refund_timed_out(std::deque<operations::PaymentResult> later = {}) {
    propose_refund();
    REQUIRE(approve(kRefund).ok());
    later.push_front(answer(operations::Verdict::indeterminate, "timeout"));
    provider.answers = std::move(later);
    pump();
    REQUIRE(state(kRefund) == "outcome_unknown");
  }

  // A drainer of another node on the same store, with lanes of its own.
  std::unique_ptr<outbox::Drainer> other_node(Lanes& lanes) {
    return std::make_unique<outbox::Drainer>(*storage, lanes, provider, agents, policy, metrics,
                                             clock, [] { return 0.0; });
  }

  // An approval that claims at once: its lease and the operation claimed.
  std::pair<operations::ClaimAtOnce, pb::Operation> approve_claiming(const std::string& key) {
    const auto at_once = drainer->claim_at_once();
    auto approved = approve(key, at_once);
    REQUIRE(approved.ok());
    REQUIRE(approved->claimed);
    return {at_once, *approved->claimed};
  }

  std::string state(const std::string& key) {
    auto op = operation(key);
    std::string s(operations::state_text(op));
    if (op.outcome() != pb::OUTCOME_NONE) s += "/" + std::string(operations::outcome_text(op));
    return s;
  }
  pb::OrderFunds funds() { return *storage->reader().funds("ORDER-100"); }
  std::optional<pb::LedgerEntry> ledger(const std::string& key) {
    return *storage->reader().ledger_entry(key);
  }
  // Stores the item as given, as an earlier version could have made it.
  void rewrite(const store::OutboxEntry& entry) {
    Status s = storage->transact([&](store::Transaction& txn) {
      txn.update_outbox(entry);
      return Status::Ok();
    });
    REQUIRE(s.ok());
  }
  size_t items_of(pb::OutboxKind kind, int64_t at_ms) {
    size_t n = 0;
    for (const auto& e : due(at_ms))
      if (e.item.kind() == kind) ++n;
    return n;
  }
};

operations::LookupResult lookup(operations::Lookup l,
                                operations::Verdict v = operations::Verdict::succeeded) {
  operations::LookupResult r;
  r.lookup = l;
  r.object = {v, "re_found", v == operations::Verdict::succeeded ? "succeeded" : "failed", "", ""};
  r.error = l == operations::Lookup::unreachable ? "connection refused" : "";
  return r;
}

}  // namespace

TEST_CASE("an approved refund is claimed, executed once, settled with its ledger row and funds") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  REQUIRE(w.provider.executed.size() == 1);
  CHECK(w.provider.executed[0].idempotency_key == w.operation(kRefund).idempotency_key());
  CHECK(w.provider.executed[0].amount_minor == 2500);
  REQUIRE(w.ledger(kRefund));
  CHECK(w.ledger(kRefund)->recorded_by() == "provider");
  CHECK(w.funds().refunded_minor() == 2500);
  CHECK(w.funds().reserved_minor() == 0);
  CHECK_FALSE(w.operation(kRefund).reserved_funds());
  auto call = w.call("sess_1", "turn_1", "call_refund");
  CHECK(call->delivery() == pb::DELIVERY_DELIVERED);
  CHECK(w.due(w.clock.now_ms() + 86'400'000).empty());
}

TEST_CASE("a refusal's long text in any script is stored cut between characters, and reads back") {
  World w;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "\xe6\x97\xa5";  // 日: 600 bytes
  w.provider.answers = {{operations::Verdict::refused, "re_" + text, text, text, ""}};
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.pump();
  // Whole characters only: 166 of them (498 bytes) fit in 500.
  const auto op = w.storage->reader().operation(kRefund);
  REQUIRE(op.ok());
  REQUIRE(op->has_value());
  CHECK(operations::state_text(**op) == "settled");
  CHECK((*op)->last_error() == text.substr(0, 498));
  CHECK((*op)->provider_status() == text.substr(0, 63));
  CHECK((*op)->provider_object_id() == ("re_" + text).substr(0, 255));
  CHECK(w.storage->reader().audit_of(kRefund).ok());
  auto call = w.call("sess_1", "turn_1", "call_refund");
  REQUIRE(call);
  // The agent is told the outcome with the same text.
  CHECK(boost::json::parse(call->result().output()).at("reason").as_string() ==
        text.substr(0, 498));
}

TEST_CASE("an approval that claims at once: executing as it commits, paid once by its process") {
  // The execute item is found by reading the operation's items, or among
  // those the approval read after its commit.
  for (const bool items_read_at_commit : {false, true}) {
    CAPTURE(items_read_at_commit);
    World w;
    w.propose_refund();
    const operations::ClaimAtOnce at_once = w.drainer->claim_at_once();
    CHECK(at_once.lease_ms == 30'000);
    auto approved = w.approve(kRefund, at_once);
    REQUIRE(approved.ok());
    REQUIRE(approved->claimed);
    CHECK(approved->claimed->key() == kRefund);
    // Durably executing, the amount held, before any provider call.
    CHECK(w.state(kRefund) == "executing");
    CHECK(w.funds().reserved_minor() == 2500);
    CHECK(w.provider.calls() == 0);
    std::vector<std::string> actions;
    auto records = w.storage->reader().audit_of(kRefund);
    REQUIRE(records.ok());
    for (const auto& r : *records) actions.push_back(r.action());
    CHECK(actions == std::vector<std::string>{"propose", "approve", "claim"});
    // Its execute item is leased to the approval: no pass takes it meanwhile.
    CHECK(w.due(w.clock.now_ms() + 29'999).empty());
    auto items = w.due(w.clock.now_ms() + 30'000);
    REQUIRE(items.size() == 1);
    CHECK(items[0].item.kind() == pb::OUTBOX_EXECUTE);
    CHECK(items[0].item.lease_token() == at_once.lease_token);
    w.pump();
    CHECK(w.provider.calls() == 0);
    std::optional<std::vector<store::OutboxEntry>> read;
    if (items_read_at_commit) read = *w.storage->reader().outbox_of(kRefund);
    w.drainer->execute_claimed(*approved->claimed, at_once.lease_token, read);
    w.lanes->wait_idle();
    w.pump();
    CHECK(w.state(kRefund) == "settled/succeeded");
    REQUIRE(w.provider.executed.size() == 1);
    CHECK(w.provider.executed[0].idempotency_key == w.operation(kRefund).idempotency_key());
    CHECK(w.funds().refunded_minor() == 2500);
    CHECK(w.funds().reserved_minor() == 0);
    CHECK(w.call("sess_1", "turn_1", "call_refund")->delivery() == pb::DELIVERY_DELIVERED);
    CHECK(w.due(w.clock.now_ms() + 86'400'000).empty());
  }
}

TEST_CASE("an approval's claim never called is recovered when its lease ends, then reconciled") {
  World w;
  w.propose_refund();
  const auto at_once = w.drainer->claim_at_once();
  REQUIRE(w.approve(kRefund, at_once).ok());
  // Its process stopped before the call (or no lane could take it).
  w.clock.advance_ms(29'999);
  w.pump();
  CHECK(w.state(kRefund) == "executing");
  w.clock.advance_ms(1);
  w.pump();
  CHECK(w.state(kRefund) == "outcome_unknown");
  CHECK(w.provider.calls() == 0);
  // Proven absent, it executes under the same key: once.
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.executed.size() == 1);
}

TEST_CASE("an approval's claim calls nothing once its item was taken over or its lease ran out") {
  for (const bool taken_over : {true, false}) {
    CAPTURE(taken_over);
    World w;
    w.propose_refund();
    const auto [at_once, claimed] = w.approve_claiming(kRefund);
    // The items as the approval read them after its commit: a lease that
    // ran out since is seen by the clock alone.
    auto read = w.storage->reader().outbox_of(kRefund);
    REQUIRE(read.ok());
    if (taken_over) {
      auto items = w.due(w.clock.now_ms() + 30'000);
      REQUIRE(items.size() == 1);
      store::OutboxEntry taken = items[0];
      taken.item.set_lease_token("the-other-process");
      w.rewrite(taken);
    } else {
      w.clock.advance_ms(30'000);  // its lane took it only after the lease
    }
    w.drainer->execute_claimed(claimed, at_once.lease_token,
                               taken_over ? std::nullopt : std::optional(*read));
    w.lanes->wait_idle();
    CHECK(w.provider.calls() == 0);
    if (taken_over) {
      CHECK(w.state(kRefund) == "executing");
      CHECK(w.due(w.clock.now_ms() + 30'000).at(0).item.lease_token() == "the-other-process");
    } else {
      // The item is a pass's to recover.
      w.pump();
      CHECK(w.state(kRefund) == "outcome_unknown");
      CHECK(w.provider.calls() == 0);
    }
  }
}

TEST_CASE("a claim whose commit came back late calls nothing: the call could outlive its lease") {
  World w;
  w.propose_refund();
  const auto [at_once, claimed] = w.approve_claiming(kRefund);
  // 10 s and 1 ms later: 19,999 ms of the 30 s lease left, under the 20 s
  // a provider call may take.
  w.clock.advance_ms(10'001);
  w.drainer->execute_claimed(claimed, at_once.lease_token);
  w.lanes->wait_idle();
  CHECK(w.provider.calls() == 0);
  CHECK(w.state(kRefund) == "executing");
  // Its lease ends: recovered, proven absent, executed once.
  w.clock.advance_ms(20'000);
  w.pump();
  CHECK(w.state(kRefund) == "outcome_unknown");
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.calls() == 1);
}

TEST_CASE("an execute item names its order; one made before items did is executed the same") {
  for (const bool named : {true, false}) {
    CAPTURE(named);
    World w;
    w.propose_refund();
    REQUIRE(w.approve(kRefund).ok());
    auto items = w.due(w.clock.now_ms());
    REQUIRE(items.size() == 1);
    CHECK(items[0].item.kind() == pb::OUTBOX_EXECUTE);
    CHECK(items[0].item.order_id() == "ORDER-100");
    if (!named) {
      auto old = items[0];
      old.item.clear_order_id();
      w.rewrite(old);
    }
    w.pump();
    CHECK(w.state(kRefund) == "settled/succeeded");
    CHECK(w.provider.executed.size() == 1);
    CHECK(w.funds().refunded_minor() == 2500);
    CHECK(w.funds().reserved_minor() == 0);
  }
}

TEST_CASE("a definite refusal settles failed: no ledger row, the held amount released") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.answers = {answer(operations::Verdict::refused, "card declined")};
  w.pump();
  CHECK(w.state(kRefund) == "settled/failed");
  CHECK_FALSE(w.ledger(kRefund));
  CHECK(w.funds().reserved_minor() == 0);
  CHECK(w.funds().refunded_minor() == 0);
  CHECK(w.operation(kRefund).decision_reason() == "card declined");
}

TEST_CASE("an indeterminate answer is outcome_unknown; the reconciler finds the object") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.answers = {answer(operations::Verdict::indeterminate, "timeout")};
  w.pump();
  CHECK(w.state(kRefund) == "outcome_unknown");
  CHECK(w.funds().reserved_minor() == 2500);  // it may have been paid: still held
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms() + 60'000) == 1);
  w.provider.lookups = {lookup(operations::Lookup::found)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.ledger(kRefund)->provider_object_id() == "re_found");
  CHECK(w.funds().refunded_minor() == 2500);
  CHECK(w.funds().reserved_minor() == 0);
  CHECK(w.provider.executed.size() == 1);
}

namespace {
// Whether operation.needs_attention was audited and raised for the refund.
bool attention_raised(World& w) {
  auto audit = w.storage->reader().audit_of(kRefund);
  REQUIRE(audit.ok());
  bool audited = false;
  for (const auto& r : *audit) audited = audited || r.action() == "needs_attention";
  auto events = w.storage->reader().notifications_since(0, 100);
  REQUIRE(events.ok());
  bool notified = false;
  for (const auto& e : *events)
    notified = notified || (e.type() == "operation.needs_attention" &&
                            e.operation_json().find(kRefund) != std::string::npos);
  return audited && notified;
}
}  // namespace

TEST_CASE("the reconciler finds a failed object: settled failed, the held amount released") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.answers = {answer(operations::Verdict::indeterminate, "timeout")};
  w.pump();
  w.provider.lookups = {lookup(operations::Lookup::found, operations::Verdict::refused)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/failed");
  CHECK(w.funds().reserved_minor() == 0);
  CHECK_FALSE(attention_raised(w));  // nothing was done besides (no order cancelled)
}

TEST_CASE("a proven absence executes again under the same idempotency key") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.answers = {answer(operations::Verdict::indeterminate, "reset"),
                        answer(operations::Verdict::succeeded)};
  w.pump();
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  REQUIRE(w.provider.executed.size() == 2);
  CHECK(w.provider.executed[0].idempotency_key == w.provider.executed[1].idempotency_key);
}

TEST_CASE("a re-execution that is indeterminate again backs off further each time") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  // The provider saved a 500 under the key and answers it to every retry,
  // while its listing proves the refund absent every time.
  w.provider.answers = {answer(operations::Verdict::indeterminate, "HTTP 500")};
  w.pump();
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  for (int second = 0; second < 120; ++second) {
    w.clock.advance_ms(1'000);
    w.pump();
  }
  CHECK(w.state(kRefund) == "outcome_unknown");
  // Backing off 0.5 s, 1 s, 2 s, 4 s ... (with jitter): a handful of calls
  // in two minutes, where each absence had started again from 0.5 s.
  CHECK(w.provider.executed.size() <= 10);
  CHECK(w.provider.executed.size() >= 4);
  for (const auto& sent : w.provider.executed)
    CHECK(sent.idempotency_key == w.provider.executed[0].idempotency_key);
}

TEST_CASE("an unreachable provider leaves it outcome_unknown and tries again later") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.answers = {answer(operations::Verdict::indeterminate, "timeout")};
  w.pump();
  w.provider.lookups = {lookup(operations::Lookup::unreachable)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "outcome_unknown");
  auto op = w.operation(kRefund);
  CHECK(op.last_error().find("connection refused") != std::string::npos);
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms()) == 0);  // backing off
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms() + 3'600'000) == 1);
}

TEST_CASE(
    "reconcile now while a scheduled pass reads the provider: it waits its turn, then reads") {
  World w;
  w.refund_timed_out();
  // The scheduled pass finds the provider unreachable, but only once the
  // operator has asked; the operator's pass then finds the refund.
  std::promise<void> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  bool first = true;
  w.provider.during_find = [&] {
    if (!std::exchange(first, false)) return;
    entered.set_value();
    released.wait();
  };
  w.provider.lookups = {lookup(operations::Lookup::unreachable), lookup(operations::Lookup::found)};
  w.clock.advance_ms(60'000);
  REQUIRE(w.drainer->dispatch() == 1);
  entered.get_future().wait();
  auto manual =
      std::async(std::launch::async, [&] { return w.drainer->reconcile_now(kRefund, alice()); });
  const std::string lane = "operation:" + std::string(kRefund);
  while (!w.lanes->awaited(lane) &&
         manual.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
  }
  release.set_value();
  Status s = manual.get();
  CHECK_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  w.lanes->wait_idle();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.looked_up.size() == 2);
  CHECK(w.provider.executed.size() == 1);
}

TEST_CASE(
    "a manual reconcile on another node never crosses a re-execution in flight: the answer "
    "settles it") {
  World w;
  w.refund_timed_out({answer(operations::Verdict::succeeded)});
  // Node B shares the store. Its lane for the operation is busy, so the
  // operator's "reconcile now", accepted while the operation is unknown,
  // waits there.
  Lanes b_lanes("node-b", 2, 16);
  auto node_b = w.other_node(b_lanes);
  outbox::Drainer& b = *node_b;
  std::promise<void> unblock;
  auto unblocked = unblock.get_future().share();
  const std::string lane = "operation:" + std::string(kRefund);
  REQUIRE(b_lanes.try_post(lane, [unblocked] { unblocked.wait(); }));
  auto manual = std::async(std::launch::async, [&] { return b.reconcile_now(kRefund, alice()); });
  const bool awaited =
      testing::becomes_true([&] { return b_lanes.awaited(lane); }, std::chrono::seconds(10));
  if (!awaited) unblock.set_value();  // so that the failure below ends the test, not hangs it
  REQUIRE(awaited);
  // Node A's scheduled pass proves the refund absent and executes it
  // again; while that call is in flight, node B's pass runs.
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  std::optional<Status> manual_status;
  w.provider.during_execute = [&] {
    if (manual_status) return;
    unblock.set_value();
    manual_status = manual.get();
  };
  w.clock.advance_ms(60'000);
  w.pump();
  w.provider.during_execute = nullptr;
  b_lanes.wait_idle();
  REQUIRE(manual_status);
  // Node B's pass found it executing again and left it to that call.
  CHECK(manual_status->ok());
  auto audit = w.storage->reader().audit_of(kRefund);
  REQUIRE(audit.ok());
  for (const auto& record : *audit) CHECK(record.action() != "restart");
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.calls() == 2);  // the timed-out call and the re-execution, same key
  CHECK(w.ledger(kRefund).has_value());
}

TEST_CASE(
    "a re-execution that outlives its lease is fenced by the node that recovers it: its late "
    "answer leaves the reconcile item in place") {
  World w;
  w.refund_timed_out({answer(operations::Verdict::indeterminate, "timeout again")});
  // Proven absent, node A executes it again on the reconcile item it
  // leases; the call stalls past the lease, and node B, finding the item
  // due and the operation executing, recovers it to outcome_unknown.
  Lanes b_lanes("node-b", 2, 16);
  auto node_b = w.other_node(b_lanes);
  outbox::Drainer& b = *node_b;
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  bool recovered = false;
  w.provider.during_execute = [&] {
    if (recovered) return;
    recovered = true;
    w.clock.advance_ms(31'000);
    CHECK(b.dispatch() == 1);
    b_lanes.wait_idle();
    CHECK(w.state(kRefund) == "outcome_unknown");
    w.provider.lookups = {lookup(operations::Lookup::unreachable)};  // from now on
  };
  w.clock.advance_ms(60'000);
  w.pump();
  w.provider.during_execute = nullptr;
  REQUIRE(recovered);
  // Node A's answer (a timeout again) came after: recorded as a late one,
  // and the operation still has the item that reconciles it.
  CHECK(w.state(kRefund) == "outcome_unknown");
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms() + 3'600'000) == 1);
  w.provider.lookups = {lookup(operations::Lookup::found)};
  w.clock.advance_ms(3'600'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.calls() == 2);  // the first call and the re-execution, same key
}

TEST_CASE(
    "a declared operation is reconciled and executed again at the executor its claim sent it to") {
  auto reship = [](const std::string& url) {
    auto declared = operations::parse_declared_operation(json::parse(R"({
      "name": "reship_order", "description": "Ship an order again.", "tier": "support",
      "effect": "Order {order_id} is shipped again.",
      "parameters": {"required": [], "properties": {}},
      "executor": {"url": ")" + url + R"(", "token_env": "SHIP_TOKEN"}})"),
                                                         "operations[0]");
    REQUIRE_MESSAGE(declared.ok(), declared.error().message);
    operations::PolicyConfig policy;
    policy.declared.push_back(*declared);
    return policy;
  };
  World w;
  w.policy.set(reship("https://ship-a.example/reship"));
  w.propose("call_reship", "reship_order", R"({"order_id":"ORDER-100"})");
  const std::string key = "demo-user:ORDER-100:reship_order:v1";
  REQUIRE(w.state(key) == "pending");
  REQUIRE(w.approve(key).ok());
  w.provider.answers = {answer(operations::Verdict::indeterminate, "timeout")};
  w.pump();
  REQUIRE(w.state(key) == "outcome_unknown");
  CHECK(w.operation(key).executor_url() == "https://ship-a.example/reship");
  // A reload points the declaration at another executor: the operation
  // sent to the first is proven absent there and sent there again.
  w.policy.set(reship("https://ship-b.example/reship"));
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  w.provider.answers = {answer(operations::Verdict::succeeded)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(key) == "settled/succeeded");
  REQUIRE(w.provider.looked_up.size() == 1);
  CHECK(w.provider.looked_up[0].executor_url == "https://ship-a.example/reship");
  REQUIRE(w.provider.executed.size() == 2);
  for (const auto& sent : w.provider.executed)
    CHECK(sent.executor_url == "https://ship-a.example/reship");
}

TEST_CASE("an operator's reconcile of an operation that lost its reconcile item makes one") {
  World w;
  w.refund_timed_out();
  // As an older version could leave it: unknown, with no reconcile item.
  for (const auto& e : w.due(w.clock.now_ms() + 3'600'000))
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  txn.remove_outbox(e.id);
                  return Status::Ok();
                })
                .ok());
  w.provider.lookups = {lookup(operations::Lookup::unreachable)};
  Status s = w.drainer->reconcile_now(kRefund, alice());
  CHECK(s.ok());
  CHECK(w.state(kRefund) == "outcome_unknown");
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms() + 3'600'000) == 1);  // kept, backing off
  w.provider.lookups = {lookup(operations::Lookup::found)};
  w.clock.advance_ms(3'600'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
}

TEST_CASE("a success answered after the operation was recovered to outcome_unknown settles it") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  // While the provider call is in flight, another process finds the claim
  // stale and recovers the operation (with a reconcile item of its own).
  w.provider.during_execute = [&] {
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) -> Status {
                  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(kRefund));
                  return operations::recover_executing(txn, *op, "stale claim");
                })
                .ok());
  };
  w.pump();
  w.provider.during_execute = nullptr;
  CHECK(w.state(kRefund) == "settled/succeeded");  // the late answer proves it
  CHECK(w.provider.looked_up.empty());
  REQUIRE(w.ledger(kRefund));
  CHECK(w.ledger(kRefund)->provider_object_id() == "re_" + std::string(kRefund));
  w.clock.advance_ms(3'600'000);
  w.pump();  // the reconcile item finds it settled and goes
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms() + 3'600'000) == 0);
  CHECK(w.provider.calls() == 1);
}

TEST_CASE(
    "a failure that left something done, or a success after the record said otherwise, "
    "raises needs_attention") {
  SUBCASE("refused, with something done (an order cancelled)") {
    World w;
    w.propose_refund();
    REQUIRE(w.approve(kRefund).ok());
    w.provider.answers = {{operations::Verdict::refused, "", "", "refused",
                           "the order is cancelled at the order service, but the provider "
                           "refused its refund"}};
    w.pump();
    CHECK(w.state(kRefund) == "settled/failed");
    CHECK(attention_raised(w));
    CHECK(w.operation(kRefund).last_error().find("the order is cancelled") != std::string::npos);
  }
  SUBCASE("refused plainly: nothing to look at") {
    World w;
    w.propose_refund();
    REQUIRE(w.approve(kRefund).ok());
    w.provider.answers = {answer(operations::Verdict::refused, "card_declined")};
    w.pump();
    CHECK(w.state(kRefund) == "settled/failed");
    CHECK_FALSE(attention_raised(w));
  }
  SUBCASE("a late success for an operation settled failed") {
    World w;
    w.propose_refund();
    REQUIRE(w.approve(kRefund).ok());
    w.provider.answers = {answer(operations::Verdict::refused, "card_declined")};
    w.pump();
    REQUIRE(w.state(kRefund) == "settled/failed");
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  return operations::record_late_answer(
                      txn, kRefund,
                      {operations::Verdict::succeeded, "re_late", "succeeded", "", ""}, "system");
                })
                .ok());
    CHECK(w.state(kRefund) == "settled/failed");  // the record stands; a person looks
    CHECK(attention_raised(w));
    CHECK(w.operation(kRefund).last_error().find("re_late succeeded") != std::string::npos);
  }
  SUBCASE("a late success for an operation resolved succeeded without an object id") {
    World w;
    w.refund_timed_out();
    operations::Resolution r;
    r.outcome = operations::Outcome::succeeded;
    r.evidence = "seen in the dashboard";
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  return operations::resolve(txn, kRefund, alice(), r);
                })
                .ok());
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  return operations::record_late_answer(
                      txn, kRefund, {operations::Verdict::succeeded, "re_1", "succeeded", "", ""},
                      "system");
                })
                .ok());
    CHECK_FALSE(attention_raised(w));
  }
}

TEST_CASE("a refusal answered late is audited and left for the reconciler to prove") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.answers = {answer(operations::Verdict::refused, "card_declined")};
  w.provider.during_execute = [&] {
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) -> Status {
                  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(kRefund));
                  return operations::recover_executing(txn, *op, "stale claim");
                })
                .ok());
  };
  w.pump();
  w.provider.during_execute = nullptr;
  CHECK(w.state(kRefund) == "outcome_unknown");
  auto audit = w.storage->reader().audit_of(kRefund);
  REQUIRE(audit.ok());
  CHECK(audit->back().action() == "late_answer");
  CHECK(audit->back().details_json().find("card_declined") != std::string::npos);
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms() + 3'600'000) == 1);
}

TEST_CASE("a provider call that throws leaves no operation stuck: after the lease, reconciled") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.throw_on_execute = true;
  w.pump();
  CHECK(w.state(kRefund) == "executing");  // the answer was never recorded
  w.provider.throw_on_execute = false;
  w.clock.advance_ms(30'000);  // the claim's lease
  w.pump();
  CHECK(w.state(kRefund) != "executing");
  w.provider.lookups = {lookup(operations::Lookup::found)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.executed.size() == 1);  // never executed blindly again
}

TEST_CASE(
    "an item the store fails, and will not take back either, rests before it is tried again") {
  auto control = std::make_shared<testing::SyncControl>();
  World w(testing::with_faults(control));
  w.storage->fan_out_notifications(false);
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  // Read-only from the first failed sync: the claim fails, and so does
  // writing the item back for later.
  control->set_fail(true);
  CHECK(w.drainer->dispatch() == 1);
  w.lanes->wait_idle();
  CHECK(w.provider.calls() == 0);
  // Still due, it is not handed out again at once, pass after pass.
  CHECK(w.drainer->dispatch() == 0);
  CHECK(w.drainer->dispatch() == 0);
  // After its rest it is.
  w.clock.advance_ms(60'000);
  CHECK(w.drainer->dispatch() == 1);
  w.lanes->wait_idle();
  CHECK(w.provider.calls() == 0);
}

TEST_CASE("a failed sync recording the provider's answer: read-only, restarted, paid once") {
  auto control = std::make_shared<testing::SyncControl>();
  std::atomic<int> told{0};
  auto o = testing::with_faults(control);
  o.on_read_only = [&](const std::string&) { ++told; };
  World w(o);
  // No notification events: their fan-out, on lanes of its own, could be
  // the write that meets the failed sync first, and the answer's write
  // would then be refused rather than left unsynced.
  w.storage->fan_out_notifications(false);
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  bool lost = false;
  SUBCASE("the answer never reached the disk") { lost = true; }
  SUBCASE("the answer reached the disk after all") { lost = false; }
  {
    std::lock_guard lock(control->mu);
    control->lose_unsynced = lost;
  }
  // The provider refunds; the synced write of its answer then fails, and
  // RocksDB accepts no write until it is opened again.
  w.provider.during_execute = [&] { control->set_fail(true); };
  w.engine->pass();  // the execute item goes to its lane
  w.lanes->wait_idle();
  w.notify_lanes->wait_idle();
  REQUIRE(w.provider.executed.size() == 1);
  CHECK(told == 1);  // the daemon stops on this and its service manager restarts it
  w.provider.during_execute = nullptr;
  control->set_fail(false);
  CHECK_FALSE(w.storage->check_writable().ok());
  // The restart, on what the disk holds: the refund recorded, or an
  // operation executing, which becomes outcome_unknown and is reconciled.
  w.close();
  w.open(o);
  REQUIRE(w.drainer->recover_after_restart().ok());
  CHECK(w.state(kRefund) == (lost ? "outcome_unknown" : "settled/succeeded"));
  w.provider.lookups = {lookup(operations::Lookup::found)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.executed.size() == 1);  // never executed again
  CHECK(w.ledger(kRefund)->provider_object_id() ==
        (lost ? "re_found" : "re_" + std::string(kRefund)));
}

TEST_CASE(
    "a claim whose holder went silent is recovered with its execute item, which no node "
    "takes up afterwards") {
  World w;
  w.propose_refund();
  // Node A approves and claims at once, then goes silent before its call.
  auto [at_once, claimed] = w.approve_claiming(kRefund);
  REQUIRE(w.state(kRefund) == "executing");
  REQUIRE(w.items_of(pb::OUTBOX_EXECUTE, w.clock.now_ms() + 3'600'000) == 1);
  // Node B shares the store; its lane for the operation is busy, so its
  // pass only looks for stale claims.
  Lanes b_lanes("node-b", 2, 16);
  outbox::DrainerOptions shared;
  shared.shared_store = true;
  outbox::Drainer b(
      *w.storage, b_lanes, w.provider, w.agents, w.policy, w.metrics, w.clock, [] { return 0.0; },
      shared);
  std::promise<void> unblock;
  auto unblocked = unblock.get_future().share();
  REQUIRE(b_lanes.try_post("operation:" + std::string(kRefund), [unblocked] { unblocked.wait(); }));
  w.clock.advance_ms(shared.claim_lease_ms + 1'000);
  b.dispatch();
  unblock.set_value();
  b_lanes.wait_idle();
  CHECK(w.state(kRefund) == "outcome_unknown");
  // The execute item went with the recovery: nothing for another node to
  // claim (and recover again) while the reconciliation's re-execution runs.
  CHECK(w.items_of(pb::OUTBOX_EXECUTE, w.clock.now_ms() + 3'600'000) == 0);
  CHECK(w.items_of(pb::OUTBOX_RECONCILE, w.clock.now_ms() + 3'600'000) == 1);
  // Node A wakes: its item is gone, so it calls nothing.
  w.drainer->execute_claimed(claimed, at_once.lease_token);
  w.lanes->wait_idle();
  CHECK(w.provider.calls() == 0);
}

TEST_CASE("a slow provider call holds only its own lane: another session is answered meanwhile") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  std::promise<void> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  w.provider.during_execute = [&] {
    entered.set_value();
    released.wait();
  };
  w.engine->pass();  // hands the execute item to its lane, where it waits on the provider
  entered.get_future().wait();
  // Meanwhile another session asks for a lookup: answered and delivered.
  REQUIRE(w.sync->bind("sess_2", "demo-user", "admin").ok());
  operations::SessionView v;
  v.required_actions = {{"call_lookup", "turn_1", "lookup_order", R"({"order_id":"ORDER-100"})"}};
  {
    std::lock_guard lock(w.agents.mu);
    w.agents.views["sess_2"] = v;
  }
  w.webhook("msg_lookup", "sess_2");
  auto answered = [&] {
    auto c = w.call("sess_2", "turn_1", "call_lookup");
    return c && c->delivery() == pb::DELIVERY_DELIVERED;
  };
  for (int i = 0; i < 100 && !answered(); ++i) {
    w.engine->pass();
    testing::becomes_true([&] { return w.lanes->in_flight() <= 1; }, std::chrono::seconds(10));
  }
  CHECK(answered());
  CHECK(w.state(kRefund) == "executing");  // the provider has not answered yet
  release.set_value();
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
}

TEST_CASE("a claim taken over while its provider call ran records nothing over the new holder") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  // While the provider is called, the lease passes and another process
  // takes the item over: its own lease token, its own due time.
  w.provider.during_execute = [&] {
    auto items = w.due(w.clock.now_ms() + 3'600'000);
    REQUIRE(items.size() == 1);
    CHECK_FALSE(items[0].item.lease_token().empty());  // the claim fenced it
    store::OutboxEntry taken = items[0];
    taken.item.set_lease_token("the-other-process");
    taken.item.set_not_before_ms(w.clock.now_ms() + 60'000);
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  txn.update_outbox(taken);
                  return Status::Ok();
                })
                .ok());
  };
  w.pump();
  w.provider.during_execute = nullptr;
  CHECK(w.provider.calls() == 1);
  // The answer was not recorded by the process that lost its claim, and
  // the new holder's item is still there, as it left it.
  CHECK(w.state(kRefund) == "executing");
  auto items = w.due(w.clock.now_ms() + 3'600'000);
  REQUIRE(items.size() == 1);
  CHECK(items[0].item.lease_token() == "the-other-process");
  // The new holder, when its lease passes, reconciles: never a second call.
  w.provider.lookups = {lookup(operations::Lookup::found)};
  w.clock.advance_ms(60'000);
  w.pump();
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kRefund) == "settled/succeeded");
  CHECK(w.provider.calls() == 1);
}

TEST_CASE("an operation executing at restart becomes outcome_unknown, then reconciled") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  w.provider.throw_on_execute = true;
  w.pump();
  REQUIRE(w.state(kRefund) == "executing");
  w.restart();
  REQUIRE(w.drainer->recover_after_restart().ok());
  CHECK(w.state(kRefund) == "outcome_unknown");
}

TEST_CASE("an order that changed after approval is rejected before any provider call") {
  World w;
  w.propose_refund();
  REQUIRE(w.approve(kRefund).ok());
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                OPGATE_ASSIGN_OR_RETURN(auto order, txn.order("ORDER-100"));
                order->set_amount_minor(3000);
                txn.put_order(*order);
                return Status::Ok();
              })
              .ok());
  w.pump();
  CHECK(w.state(kRefund) == "settled/rejected");
  CHECK(w.provider.executed.empty());
}

TEST_CASE("a credit and a full refund approved together: the order pays out at most once") {
  World w;
  w.propose_credit(1000);
  w.propose_refund();
  REQUIRE(w.approve(kCredit).ok());
  REQUIRE(w.approve(kRefund).ok());
  w.pump();
  // Whichever is claimed first runs; the other no longer fits what remains.
  const bool credit_first = w.state(kCredit) == "settled/succeeded";
  CHECK(w.provider.executed.size() == 1);
  if (credit_first) {
    CHECK(w.state(kRefund) == "settled/rejected");
    CHECK(w.funds().credited_minor() == 1000);
    CHECK(w.funds().refunded_minor() == 0);
  } else {
    CHECK(w.state(kRefund) == "settled/succeeded");
    CHECK(w.state(kCredit) == "settled/rejected");
    CHECK(w.funds().refunded_minor() == 2500);
  }
  CHECK(w.funds().refunded_minor() + w.funds().credited_minor() <= 2500);
}

TEST_CASE("a call the session no longer waits for is recorded as stale, not retried") {
  for (auto verdict :
       {operations::SubmitVerdict::unknown_call, operations::SubmitVerdict::session_gone}) {
    World w;
    w.agents.verdict = verdict;
    w.propose("call_1", "lookup_order", R"({"order_id":"ORDER-100"})");
    CHECK(w.call("sess_1", "turn_1", "call_1")->delivery() == pb::DELIVERY_STALE);
    CHECK(w.due(w.clock.now_ms() + 3'600'000).empty());
  }
}

TEST_CASE("a call recorded stale that the session lists again is answered again, same key") {
  World w;
  w.agents.verdict = operations::SubmitVerdict::session_gone;
  w.propose("call_1", "lookup_order", R"({"order_id":"ORDER-100"})");
  REQUIRE(w.call("sess_1", "turn_1", "call_1")->delivery() == pb::DELIVERY_STALE);
  // The platform (its moment of doubt over) lists the call as waiting.
  w.agents.verdict = operations::SubmitVerdict::accepted;
  w.webhook("msg_again", "sess_1");
  w.pump();
  CHECK(w.call("sess_1", "turn_1", "call_1")->delivery() == pb::DELIVERY_DELIVERED);
  REQUIRE(w.agents.idempotency_keys.size() == 2);
  CHECK(w.agents.idempotency_keys[0] == w.agents.idempotency_keys[1]);
}

TEST_CASE("a conflicting result is flagged, never overwritten or retried") {
  World w;
  w.agents.verdict = operations::SubmitVerdict::conflict;
  w.propose("call_1", "lookup_order", R"({"order_id":"ORDER-100"})");
  CHECK(w.call("sess_1", "turn_1", "call_1")->delivery() == pb::DELIVERY_CONFLICT);
  CHECK(w.due(w.clock.now_ms() + 3'600'000).empty());
  CHECK(w.agents.idempotency_keys.size() == 1);
}

TEST_CASE("a deliver item carries its result; one made before items did reads the call") {
  for (const bool carried : {true, false}) {
    CAPTURE(carried);
    World w;
    w.agents.verdict = make_error(errc::agents_unavailable, "agents API answered 503");
    w.propose("call_1", "lookup_order", R"({"order_id":"ORDER-100"})");
    const auto saved = w.call("sess_1", "turn_1", "call_1")->result();
    auto items = w.due(w.clock.now_ms() + 3'600'000);
    REQUIRE(items.size() == 1);
    CHECK(items[0].item.result().SerializeAsString() == saved.SerializeAsString());
    // What is submitted: the item's result if it has one (made different
    // here to tell the two apart), else the call's.
    auto item = items[0];
    pb::ToolResult expected = saved;
    if (carried) {
      expected.set_output(R"({"carried":true})");
      *item.item.mutable_result() = expected;
    } else {
      item.item.clear_result();
    }
    w.rewrite(item);
    w.clock.advance_ms(3'600'000);
    w.agents.verdict = operations::SubmitVerdict::accepted;
    w.pump();
    CHECK(w.call("sess_1", "turn_1", "call_1")->delivery() == pb::DELIVERY_DELIVERED);
    REQUIRE(w.agents.submitted.size() == 2);
    CHECK(w.agents.submitted.back().second.SerializeAsString() == expected.SerializeAsString());
  }
}

TEST_CASE("a retryable failure waits for Retry-After and resends under the same key") {
  World w;
  Error busy = make_error(errc::agents_unavailable, "agents API answered 429");
  busy.retry_after_ms = 7000;
  w.agents.verdict = busy;
  w.propose("call_1", "lookup_order", R"({"order_id":"ORDER-100"})");
  CHECK(w.call("sess_1", "turn_1", "call_1")->delivery() == pb::DELIVERY_PENDING);
  CHECK(w.items_of(pb::OUTBOX_DELIVER_RESULT, w.clock.now_ms() + 6999) == 0);
  CHECK(w.items_of(pb::OUTBOX_DELIVER_RESULT, w.clock.now_ms() + 7000) == 1);
  w.clock.advance_ms(7000);
  w.agents.verdict = operations::SubmitVerdict::accepted;
  w.pump();
  CHECK(w.call("sess_1", "turn_1", "call_1")->delivery() == pb::DELIVERY_DELIVERED);
  REQUIRE(w.agents.idempotency_keys.size() == 2);
  CHECK(w.agents.idempotency_keys[0] == w.agents.idempotency_keys[1]);
}

TEST_CASE("an outcome_unknown operation needs attention after enough attempts or time") {
  operations::AttentionPolicy policy{3, 60'000};
  pb::Operation op;
  op.set_state(pb::STATE_OUTCOME_UNKNOWN);
  op.set_unknown_since_ms(1'000'000);
  op.set_attempts(2);
  CHECK_FALSE(operations::needs_attention(op, 1'000'000 + 59'999, policy));
  CHECK(operations::needs_attention(op, 1'000'000 + 60'000, policy));
  op.set_attempts(3);
  CHECK(operations::needs_attention(op, 1'000'000, policy));
  op.set_state(pb::STATE_SETTLED);
  CHECK_FALSE(operations::needs_attention(op, 1'000'000 + 600'000, policy));
}

TEST_CASE(
    "cancel_order: one refund at the provider; the order is cancelled only when it is proven") {
  World w;
  constexpr const char* kCancel = "demo-user:ORDER-100:cancel-order:v1";
  w.propose("call_cancel", "cancel_order", R"({"order_id":"ORDER-100","reason":"duplicate"})");
  auto op = w.operation(kCancel);
  CHECK(op.proposal().tier() == "supervisor");
  CHECK(op.proposal().amount_minor() == 2500);
  REQUIRE(w.approve(kCancel).ok());
  // The provider times out: outcome_unknown, the order still paid and held.
  w.provider.answers = {answer(operations::Verdict::indeterminate, "timeout"),
                        answer(operations::Verdict::succeeded)};
  w.pump();
  CHECK(w.state(kCancel) == "outcome_unknown");
  CHECK((*w.storage->reader().order("ORDER-100"))->status() == pb::ORDER_PAID);
  CHECK(w.funds().reserved_minor() == 2500);
  // Proven absent: executed again under the same key; then it succeeds.
  w.provider.lookups = {lookup(operations::Lookup::absent)};
  w.clock.advance_ms(60'000);
  w.pump();
  CHECK(w.state(kCancel) == "settled/succeeded");
  REQUIRE(w.provider.executed.size() == 2);
  CHECK(w.provider.executed[0].idempotency_key == w.provider.executed[1].idempotency_key);
  CHECK(w.provider.executed[0].kind == operations::PaymentRequest::Kind::refund);
  CHECK((*w.storage->reader().order("ORDER-100"))->status() == pb::ORDER_CANCELLED);
  CHECK(w.funds().refunded_minor() == 2500);
  CHECK(w.funds().reserved_minor() == 0);
  REQUIRE(w.ledger(kCancel));
  CHECK(w.ledger(kCancel)->kind() == "cancel-order");
  // A refused refund leaves the order as it was.
  World v;
  v.propose("call_cancel", "cancel_order", R"({"order_id":"ORDER-100","reason":"duplicate"})");
  REQUIRE(v.approve(kCancel).ok());
  v.provider.answers = {answer(operations::Verdict::refused, "card declined")};
  v.pump();
  CHECK(v.state(kCancel) == "settled/failed");
  CHECK((*v.storage->reader().order("ORDER-100"))->status() == pb::ORDER_PAID);
  CHECK(v.funds().reserved_minor() == 0);
}
