#include "outbox/drainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <future>

#include "common/crypto.h"
#include "operations/decisions.h"
#include "operations/execution.h"
#include "operations/keys.h"
#include "operations/state_machine.h"
#include "outbox/claim.h"

namespace opgate::outbox {

namespace {

std::string call_text(const pb::CallRef& c) {
  return c.session_id() + "/" + c.turn_id() + "/" + c.call_id();
}

// Whether the item is still exactly as this process dispatched (or leased)
// it (outbox/claim.h).
Result<bool> still_ours(store::Transaction& txn, const store::OutboxEntry& entry) {
  return unchanged(txn, entry);
}

Error reconciliation_busy() {
  Error e = make_error(errc::overloaded,
                       "The operation's provider call or reconciliation is still running; ask "
                       "again in a moment.");
  e.retry_after_ms = 5'000;
  return e;
}

}  // namespace

std::string result_idempotency_key(const pb::CallRef& call) {
  return "opgate-result-" + crypto::sha256_hex(call_text(call)).substr(0, 40);
}

Drainer::Drainer(store::Storage& storage, Lanes& lanes, operations::PaymentProvider& provider,
                 operations::AgentPlatform& agents, const Live<operations::PolicyConfig>& policy,
                 Metrics& metrics, const Clock& clock, Random random, DrainerOptions options,
                 operations::OrderService* orders)
    : storage_(storage),
      lanes_(lanes),
      provider_(provider),
      agents_(agents),
      policy_(policy),
      metrics_(metrics),
      clock_(clock),
      random_(std::move(random)),
      options_(options),
      orders_(orders),
      deliveries_(storage) {}

std::string Drainer::lane_of(const pb::OutboxItem& item) {
  if (item.kind() == pb::OUTBOX_DELIVER_RESULT) return "call:" + call_text(item.call());
  return operation_lane(item.operation_key());
}

std::string Drainer::operation_lane(const std::string& key) { return "operation:" + key; }

Status Drainer::recover_after_restart() {
  OPGATE_ASSIGN_OR_RETURN(
      auto n,
      recover_executing_older_than(options_.shared_store ? options_.claim_lease_ms : -1,
                                   "the daemon restarted while the provider call was in flight"));
  (void)n;
  return Status::Ok();
}

Result<size_t> Drainer::recover_executing_older_than(int64_t age_ms, const std::string& reason) {
  store::OperationQuery q;
  q.state = pb::STATE_EXECUTING;
  q.limit = 1000;
  size_t recovered = 0;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, storage_.reader().operations(q));
    for (const auto& found : page.operations) {
      bool done = false;
      OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
        done = false;
        OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(found.key()));
        if (!op || !operations::is(*op, operations::State::executing)) return Status::Ok();
        // Another process's call in flight is younger than its lease.
        if (age_ms >= 0 && txn.now_ms() - op->updated_at_ms() <= age_ms) return Status::Ok();
        done = true;
        // The execute item its claim leased goes with it: its holder, if it
        // answers yet, finds the item gone and records a late answer, and no
        // process takes the item up while a re-execution is in flight.
        OPGATE_ASSIGN_OR_RETURN(auto items, txn.outbox_of(op->key()));
        for (const auto& item : items)
          if (item.item.kind() == pb::OUTBOX_EXECUTE) txn.remove_outbox(item.id);
        return operations::recover_executing(txn, *op, reason);
      }));
      if (done) {
        ++recovered;
        spdlog::warn("operation {} was executing with no live claim; now outcome_unknown",
                     found.key());
      }
    }
    if (page.next_after.empty()) return recovered;
    q.after = page.next_after;
  }
}

size_t Drainer::dispatch() {
  if (options_.shared_store &&
      clock_.now_ms() - last_stale_check_ms_ >= options_.claim_lease_ms / 2) {
    // Executing with no live claim (its process died where no item leads
    // back to it): found here by any process once the lease has passed.
    last_stale_check_ms_ = clock_.now_ms();
    auto n = recover_executing_older_than(
        options_.claim_lease_ms,
        "the process calling the provider stopped before recording its answer");
    if (!n) spdlog::error("cannot look for stale executing operations: {}", n.error().message);
  }
  const size_t batch = lanes_.batch_for(options_.batch);
  if (batch == 0) return 0;  // the lanes have enough to do; a finished task wakes the next pass
  auto items = storage_.reader().due(store::Queue::work, clock_.now_ms(), batch,
                                     held_.current(clock_.now_ms()));
  if (!items) {
    spdlog::error("outbox scan failed: {}", items.error().message);
    return 0;
  }
  size_t handed = 0;
  for (auto& entry : *items) {
    const std::string id = entry.id;
    const std::string lane = lane_of(entry.item);
    if (!lanes_.try_post(lane, [this, entry = std::move(entry)] {
          const HeldItems::Release release(held_, entry.id);
          run(entry);
        }))
      continue;
    held_.hold(id);
    ++handed;
  }
  return handed;
}

void Drainer::run(const store::OutboxEntry& entry) {
  switch (entry.item.kind()) {
    case pb::OUTBOX_EXECUTE:
      return execute(entry);
    case pb::OUTBOX_RECONCILE:
      return reconcile(entry);
    case pb::OUTBOX_DELIVER_RESULT:
      return deliver(entry);
    default:
      spdlog::error("outbox item {} has an unknown kind; removed", entry.id);
      return remove(entry);
  }
}

store::OutboxEntry Drainer::lease(const store::OutboxEntry& entry, int64_t now_ms,
                                  const std::string& token) const {
  return leased(entry, now_ms + options_.claim_lease_ms, token);
}

int64_t Drainer::backoff(int attempt) {
  MutexLock lock(random_mu_);
  return backoff_ms(attempt, options_.retry_base_ms, options_.retry_cap_ms, random_);
}

void Drainer::remove(const store::OutboxEntry& entry) {
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
    if (ours) txn.remove_outbox(entry.id);
    return Status::Ok();
  });
  if (!s) {
    spdlog::error("cannot remove outbox item {}: {}", entry.id, s.error().message);
    rest(entry);
  }
}

void Drainer::retry_later(const store::OutboxEntry& entry, const std::string& error,
                          int64_t at_least_ms) {
  const int64_t wait = std::max(backoff(entry.item.attempts() + 1), at_least_ms);
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
    if (!ours) return Status::Ok();
    store::OutboxEntry next = entry;
    next.item.set_attempts(entry.item.attempts() + 1);
    next.item.set_last_error(error);
    next.item.set_not_before_ms(txn.now_ms() + wait);
    txn.update_outbox(next);
    return Status::Ok();
  });
  if (!s) {
    spdlog::error("cannot reschedule outbox item {}: {}", entry.id, s.error().message);
    rest(entry);
  }
}

void Drainer::rest(const store::OutboxEntry& entry) {
  held_.rest(entry.id, clock_.now_ms() + backoff(entry.item.attempts() + 1));
}

Result<std::optional<operations::SourcedOrder>> Drainer::source_order(
    const std::optional<pb::Operation>& op) {
  if (!orders_ || !op || !operations::is(*op, operations::State::approved))
    return std::optional<operations::SourcedOrder>();
  return operations::source_order(orders_, op->proposal().order_id(), metrics_);
}

namespace {
// What a transaction of an operation's item reads first: the item, the
// operation, and its order's records (if the order is known).
store::ReadAhead item_and_operation(const store::OutboxEntry& entry, const std::string& order_id) {
  store::ReadAhead ahead;
  ahead.outbox_items = {entry.id};
  ahead.operations = {entry.item.operation_key()};
  if (!order_id.empty()) ahead.orders = ahead.funds = {order_id};
  return ahead;
}
}  // namespace

void Drainer::execute(const store::OutboxEntry& entry) {
  const std::string& key = entry.item.operation_key();
  // The item names its order (one made before items did is read for it).
  // With an order service, the operation is read first, and its order
  // re-read before the claim: nothing is executed on an order the service
  // could not confirm just now.
  std::optional<pb::Operation> seen;
  std::string order_id = entry.item.order_id();
  if (order_id.empty() || orders_) {
    auto read = storage_.reader().operation(key);
    if (!read) {
      spdlog::warn("operation {} waits: {}", key, read.error().message);
      return retry_later(entry, read.error().message);
    }
    seen = std::move(*read);
    if (seen) order_id = seen->proposal().order_id();
  }
  auto sourced = source_order(seen);
  if (!sourced) {
    spdlog::warn("operation {} waits: {}", key, sourced.error().message);
    return retry_later(entry, sourced.error().message);
  }
  std::optional<pb::Operation> claimed;
  store::OutboxEntry leased;
  auto policy = policy_.get();
  const std::string token = crypto::random_hex(8);
  const auto ahead = item_and_operation(entry, order_id);
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    claimed.reset();
    OPGATE_TRY(txn.read_ahead(ahead));
    // Taken by another process since this one read it: its work now.
    OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
    if (!ours) return Status::Ok();
    OPGATE_ASSIGN_OR_RETURN(auto claim, operations::claim(txn, key, *policy, *sourced));
    claimed = std::move(claim.claimed);
    if (claimed) {
      // Kept, out of the way, until the answer is recorded; the token
      // fences that record.
      leased = lease(entry, txn.now_ms(), token);
      txn.update_outbox(leased);
    } else if (claim.item_done) {
      txn.remove_outbox(entry.id);
    }
    return Status::Ok();
  });
  if (!s) {
    spdlog::error("cannot claim operation {}: {}", key, s.error().message);
    return retry_later(entry, s.error().message);
  }
  if (claimed) call_provider(*claimed, leased, "system");
}

operations::ClaimAtOnce Drainer::claim_at_once() const {
  return {crypto::random_hex(8), options_.claim_lease_ms};
}

void Drainer::execute_claimed(pb::Operation claimed, const std::string& lease_token,
                              std::optional<std::vector<store::OutboxEntry>> read) {
  const std::string key = claimed.key();
  std::function<void()> task = [this, claimed = std::move(claimed), lease_token,
                                read = std::move(read)] {
    auto items = read ? Result<std::vector<store::OutboxEntry>>(*read)
                      : storage_.reader().outbox_of(claimed.key());
    if (!items) {
      spdlog::error("cannot read the execute item of {} (it is recovered when its lease ends): {}",
                    claimed.key(), items.error().message);
      return;
    }
    for (const auto& entry : *items) {
      if (entry.item.kind() != pb::OUTBOX_EXECUTE || entry.item.lease_token() != lease_token)
        continue;
      // Past its lease the item is another pass's to recover: no call.
      if (clock_.now_ms() >= entry.item.not_before_ms()) break;
      return call_provider(claimed, entry, "system");
    }
    spdlog::warn(
        "the execute item of {} was taken over, or its lease ran out, before its "
        "provider call; it is recovered instead",
        claimed.key());
  };
  const std::string lane = operation_lane(key);
  // The lane is this operation's, new with its approval: only a full pool
  // turns the call away, for as long as a few of its tasks take.
  if (lanes_.try_post(lane, task) ||
      lanes_.post_when_free(lane, task, std::chrono::milliseconds(options_.claim_lease_ms / 10)))
    return;
  spdlog::warn(
      "no lane could take the provider call of {}: it is recovered when its lease ends, and "
      "reconciled",
      key);
}

void Drainer::call_provider(const pb::Operation& claimed, const store::OutboxEntry& entry,
                            const std::string& principal) {
  if (const int64_t left = entry.item.not_before_ms() - clock_.now_ms();
      left < options_.call_budget_ms) {
    spdlog::warn(
        "the claim on {} has {} ms of its lease left, too little for a provider call; it is "
        "recovered when the lease ends, and reconciled",
        claimed.key(), left);
    return;
  }
  // Durably executing: now, and only now, the provider is called.
  const int64_t started_ns = clock_.monotonic_ns();
  auto result =
      operations::fit_for_records(provider_.execute(operations::payment_request(claimed)));
  metrics_
      .histogram("opgate_provider_call_seconds", {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5})
      .observe(static_cast<double>(clock_.monotonic_ns() - started_ns) / 1e9);
  metrics_.inc("opgate_provider_attempts_total",
               {{"result", std::string(operations::to_string(result.verdict))}});
  // A re-execution after a proven absence (its item a reconcile item) that
  // is again indeterminate keeps counting: a provider that keeps failing the
  // call (a 500 it saved under the key, a 409) while its listing proves the
  // object absent is asked ever less often, not twice a second.
  const int attempts = entry.item.kind() == pb::OUTBOX_RECONCILE ? entry.item.attempts() + 1 : 0;
  const int64_t reconcile_in = backoff(attempts);
  bool fenced = false;
  // Its settlement reads the calls that asked for it too, the ledger entry
  // a success writes, and the order's own record only to cancel the order.
  store::ReadAhead ahead = item_and_operation(entry, claimed.proposal().order_id());
  if (claimed.proposal().kind() != operations::kCancelOrder) ahead.orders.clear();
  ahead.calls.assign(claimed.calls().begin(), claimed.calls().end());
  if (result.verdict == operations::Verdict::succeeded) ahead.ledger = {claimed.key()};
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    OPGATE_TRY(txn.read_ahead(ahead));
    // The lease ran out and another process took the work over: the answer
    // is recorded as a late one (a success settles an operation that is
    // outcome_unknown by now); the item and its holder's work are left as
    // they are, and its reconciliation proves the rest.
    OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
    fenced = !ours;
    if (fenced) return operations::record_late_answer(txn, claimed.key(), result, principal);
    OPGATE_TRY(
        operations::record_answer(txn, claimed.key(), result, principal, reconcile_in, attempts));
    txn.remove_outbox(entry.id);
    return Status::Ok();
  });
  if (s && fenced)
    spdlog::warn(
        "the claim on {} was lost before its answer was recorded; the answer is recorded as a "
        "late one and the new holder reconciles the rest",
        claimed.key());
  if (!s)
    spdlog::error(
        "cannot record the provider's answer for {} (it stays executing until "
        "reconciled): {}",
        claimed.key(), s.error().message);
}

void Drainer::reconcile(const store::OutboxEntry& entry) {
  const std::string& key = entry.item.operation_key();
  auto op = storage_.reader().operation(key);
  if (!op) {
    spdlog::error("cannot read operation {}: {}", key, op.error().message);
    return retry_later(entry, op.error().message);
  }
  if (*op && operations::is(**op, operations::State::executing)) {
    // Executed again after a proven absence, and its answer never recorded.
    // The item is written too, so that the call's holder, if its answer
    // still comes, finds the item no longer its own: it records the answer
    // as a late one and leaves the item here, for the next pass.
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
      if (!ours) return Status::Ok();
      OPGATE_ASSIGN_OR_RETURN(auto cur, txn.operation(key));
      if (!cur || !operations::is(*cur, operations::State::executing)) return Status::Ok();
      const std::string why =
          "the provider call's answer was never recorded; its outcome is unknown";
      OPGATE_TRY(operations::recover_executing(txn, *cur, why, false));
      store::OutboxEntry fenced = entry;
      fenced.item.clear_lease_token();
      fenced.item.set_attempts(entry.item.attempts() + 1);
      fenced.item.set_last_error(why);
      fenced.item.set_not_before_ms(txn.now_ms());
      txn.update_outbox(fenced);
      return Status::Ok();
    });
    if (!s) {
      spdlog::error("cannot recover operation {}: {}", key, s.error().message);
      rest(entry);
    }
    return;  // the item stays due: the next pass reconciles
  }
  if (!*op || !operations::is(**op, operations::State::outcome_unknown)) return remove(entry);
  const pb::Operation operation = **op;
  auto found = provider_.find(operations::payment_request(operation));
  found.object = operations::fit_for_records(std::move(found.object));
  metrics_.inc("opgate_reconciliations_total",
               {{"result", found.lookup == operations::Lookup::found    ? "found"
                           : found.lookup == operations::Lookup::absent ? "absent"
                                                                        : "unreachable"}});
  if (found.lookup == operations::Lookup::found &&
      found.object.verdict != operations::Verdict::pending) {
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
      if (!ours) return Status::Ok();
      OPGATE_TRY(operations::settle_found(txn, key, found.object));
      txn.remove_outbox(entry.id);
      return Status::Ok();
    });
    if (!s) {
      spdlog::error("cannot settle reconciled {}: {}", key, s.error().message);
      rest(entry);
    }
    return;
  }
  if (found.lookup == operations::Lookup::absent) {
    // Proven absent: execute again, under the same idempotency key.
    std::optional<pb::Operation> claimed;
    store::OutboxEntry leased;
    const std::string token = crypto::random_hex(8);
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      claimed.reset();
      OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
      if (!ours) return Status::Ok();
      OPGATE_ASSIGN_OR_RETURN(claimed, operations::execute_again(txn, key));
      if (!claimed) {
        txn.remove_outbox(entry.id);
        return Status::Ok();
      }
      leased = lease(entry, txn.now_ms(), token);
      txn.update_outbox(leased);
      return Status::Ok();
    });
    if (!s) {
      spdlog::error("cannot execute {} again: {}", key, s.error().message);
      return rest(entry);
    }
    if (claimed) call_provider(*claimed, leased, "reconciler");
    return;
  }
  // Unreachable, or found but still pending: stay outcome_unknown, try later.
  const std::string error = found.lookup == operations::Lookup::found
                                ? "the provider's object is still pending"
                                : "reconciliation: " + found.error;
  const int64_t wait = backoff(entry.item.attempts() + 1);
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(bool ours, still_ours(txn, entry));
    if (!ours) return Status::Ok();
    OPGATE_TRY(operations::note_unresolved(
        txn, key, error, found.lookup == operations::Lookup::found ? &found.object : nullptr));
    store::OutboxEntry next = entry;
    next.item.set_attempts(entry.item.attempts() + 1);
    next.item.set_last_error(error);
    next.item.set_not_before_ms(txn.now_ms() + wait);
    txn.update_outbox(next);
    return Status::Ok();
  });
  if (!s) {
    spdlog::error("cannot reschedule reconciliation of {}: {}", key, s.error().message);
    rest(entry);
  }
}

Status Drainer::reconcile_now(const std::string& key, const operations::Principal& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto op,
                          operations::visible_operation(storage_.reader(), key, principal));
  if (!operations::is(op, operations::State::outcome_unknown))
    return make_error(errc::invalid_state,
                      fmt::format("Only operations in outcome_unknown are reconciled; this one is "
                                  "{}.",
                                  operations::state_text(op)));
  // A pass of its own in the operation's lane, so it never runs beside the
  // scheduled one. When a scheduled pass (or a re-execution) holds the lane,
  // this one waits for it and goes next, so the provider is read after the
  // operator asked; it finds the operation settled if that pass settled it.
  auto done = std::make_shared<std::promise<Status>>();
  auto finished = done->get_future();
  if (!lanes_.post_when_free(
          operation_lane(key), [this, key, done] { done->set_value(reconcile_due_now(key)); },
          std::chrono::milliseconds(options_.claim_lease_ms)))
    return reconciliation_busy();
  return finished.get();
}

Status Drainer::reconcile_due_now(const std::string& key) {
  // The operation's own reconcile item is made due now (or made, if it has
  // none), durably, and run fenced like any dispatched item: on a shared
  // store a pass of another process never crosses it (whichever changes the
  // item first does the work; the other writes nothing). An item leased to
  // a provider call in flight is left to it.
  std::optional<store::OutboxEntry> entry;
  bool in_flight = false, made = false;
  OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
    entry.reset();
    in_flight = made = false;
    OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
    if (!op || !operations::is(*op, operations::State::outcome_unknown))
      return Status::Ok();  // settled (or executing again) since it was asked for
    OPGATE_ASSIGN_OR_RETURN(auto items, txn.outbox_of(key));
    for (auto& found : items) {
      if (found.item.kind() != pb::OUTBOX_RECONCILE) continue;
      if (!found.item.lease_token().empty() && found.item.not_before_ms() > txn.now_ms()) {
        in_flight = true;
        return Status::Ok();
      }
      if (found.item.not_before_ms() > txn.now_ms()) {
        found.item.set_not_before_ms(txn.now_ms());
        txn.update_outbox(found);
      }
      entry = std::move(found);
      return Status::Ok();
    }
    pb::OutboxItem item;
    item.set_kind(pb::OUTBOX_RECONCILE);
    item.set_operation_key(key);
    item.set_not_before_ms(txn.now_ms());
    txn.enqueue(std::move(item));
    made = true;
    return Status::Ok();
  }));
  if (in_flight) return reconciliation_busy();
  if (made) {
    // The reconcile item just made, as stored.
    OPGATE_ASSIGN_OR_RETURN(auto items, storage_.reader().outbox_of(key));
    for (auto& found : items)
      if (found.item.kind() == pb::OUTBOX_RECONCILE) entry = std::move(found);
  }
  if (!entry) return Status::Ok();  // nothing to reconcile any more, or another process has it
  reconcile(*entry);
  return Status::Ok();
}

void Drainer::deliver(const store::OutboxEntry& entry) {
  const auto& ref = entry.item.call();
  // The item carries the result; one made before items did reads the call.
  std::optional<pb::ToolCall> call;
  if (!entry.item.has_result()) {
    auto read = storage_.reader().call(ref);
    if (!read) {
      spdlog::error("cannot read call {}: {}", call_text(ref), read.error().message);
      return retry_later(entry, read.error().message);
    }
    if (!*read || !(*read)->result_saved()) return remove(entry);
    call = std::move(*read);
  }
  const pb::ToolResult& result = call ? call->result() : entry.item.result();
  auto verdict = agents_.submit_result(ref.session_id(), ref, result, result_idempotency_key(ref));
  if (!verdict) {
    metrics_.inc("opgate_result_deliveries_total", {{"result", "retry"}});
    return retry_later(entry, verdict.error().message, verdict.error().retry_after_ms);
  }
  pb::Delivery delivery = pb::DELIVERY_DELIVERED;
  std::string error;
  if (*verdict == operations::SubmitVerdict::conflict) {
    delivery = pb::DELIVERY_CONFLICT;
    error = "the session holds a different result for this call";
  } else if (*verdict == operations::SubmitVerdict::unknown_call) {
    delivery = pb::DELIVERY_STALE;
    error = "the session no longer waits for this call";
  } else if (*verdict == operations::SubmitVerdict::session_gone) {
    delivery = pb::DELIVERY_STALE;
    error = "the agent platform has no such session any more";
  }
  const char* label = delivery == pb::DELIVERY_DELIVERED  ? "delivered"
                      : delivery == pb::DELIVERY_CONFLICT ? "conflict"
                                                          : "stale";
  metrics_.inc("opgate_result_deliveries_total", {{"result", label}});
  if (delivery != pb::DELIVERY_DELIVERED)
    spdlog::warn("tool result for {} needs attention: {}", call_text(ref), error);
  Status s = deliveries_.record({entry, delivery, error});
  if (!s) {
    // Sent again later, under the same key.
    spdlog::error("cannot record delivery of {}: {}", call_text(ref), s.error().message);
    return retry_later(entry, s.error().message);
  }
}

}  // namespace opgate::outbox
