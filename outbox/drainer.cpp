#include "outbox/drainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <chrono>
#include <latch>
#include <map>

#include "operations/proposal.h"
#include "operations/repository.h"
#include "worker/policy.h"

namespace opgate::outbox {

using operations::Event;
using store::Cf;
namespace json = boost::json;

namespace {

constexpr std::string_view kManualPrefix = "manual/";

std::string details(std::initializer_list<std::pair<std::string_view, std::string>> fields) {
  json::object o;
  for (const auto& [k, v] : fields) o[k] = v;
  return json::serialize(o);
}

std::string_view verdict_name(adapters::Verdict v) {
  switch (v) {
    case adapters::Verdict::succeeded:
      return "succeeded";
    case adapters::Verdict::pending:
      return "pending";
    case adapters::Verdict::refused:
      return "refused";
    case adapters::Verdict::indeterminate:
      return "indeterminate";
  }
  return "unknown";
}

}  // namespace

Drainer::Drainer(store::Journal& journal, Outbox& outbox, adapters::PaymentProvider& provider,
                 adapters::AgentsClient& agents, Metrics& metrics, Random random,
                 DrainerOptions options)
    : journal_(journal),
      outbox_(outbox),
      provider_(provider),
      agents_(agents),
      metrics_(metrics),
      random_(std::move(random)),
      options_(options),
      pool_(static_cast<size_t>(std::max(1, options.max_in_flight))) {}

Drainer::~Drainer() { pool_.join(); }

adapters::PaymentRequest Drainer::request_for(const pb::Operation& op) const {
  const auto& p = op.proposal();
  return {p.kind(),     op.key(),         op.idempotency_key(), p.payment_intent(),
          p.customer(), p.amount_minor(), p.currency(),         p.reason()};
}

Status Drainer::recover_after_restart() {
  auto keys = operations::keys_in_state(journal_.store(), operations::State::executing, SIZE_MAX);
  if (!keys) return keys.error();
  for (const auto& key : *keys) {
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      auto op = operations::load(txn.store(), key);
      if (!op) return op.error();
      if (!op->has_value()) return Status::Ok();
      auto& o = **op;
      o.set_last_error("the daemon restarted while the provider call was in flight");
      if (Status s = operations::apply(txn, o, Event::restart, "system",
                                       details({{"reason", "restart while executing"}}));
          !s)
        return s;
      pb::OutboxItem item;
      item.set_kind(std::string(kReconcile));
      item.set_operation_key(key);
      outbox_.enqueue(txn, std::move(item));
      return Status::Ok();
    });
    if (!s) return s;
    spdlog::warn("operation {} was executing at restart; now outcome_unknown", key);
  }
  return Status::Ok();
}

size_t Drainer::run_once() {
  auto items = outbox_.due(journal_.clock().now_ms(), options_.batch);
  if (!items) {
    spdlog::error("outbox scan failed: {}", items.error().message);
    return 0;
  }
  // Items run concurrently, at most max_in_flight at once, but the items of
  // one operation (or one tool call) run in order on one task: one provider
  // call at a time per operation.
  std::map<std::string, std::vector<const Outbox::Entry*>> lanes;
  for (const auto& entry : *items) {
    const auto& kind = entry.item.kind();
    std::string lane = kind == kDeliverResult ? "call:" + call_key(entry.item.call())
                                              : "op:" + entry.item.operation_key();
    lanes[lane].push_back(&entry);
  }
  std::latch done(static_cast<std::ptrdiff_t>(lanes.size()));
  for (auto& [lane, entries] : lanes) {
    boost::asio::post(pool_, [this, &done, list = entries] {
      for (const auto* entry : list) {
        const auto& kind = entry->item.kind();
        try {
          if (kind == kExecute)
            execute(*entry);
          else if (kind == kReconcile)
            reconcile(*entry);
          else if (kind == kDeliverResult)
            deliver(*entry);
        } catch (const std::exception& e) {
          spdlog::error("outbox item {} failed: {}", entry->key, e.what());
        }
      }
      done.count_down();
    });
  }
  done.wait();
  return items->size();
}

int64_t Drainer::backoff(int attempt) {
  std::lock_guard lock(random_mu_);
  return backoff_ms(attempt, options_.retry_base_ms, options_.retry_cap_ms, random_);
}

void Drainer::retry_later(const Outbox::Entry& entry, const std::string& error,
                          int64_t at_least_ms) {
  Status s = journal_.run([&](store::Txn& txn) -> Status {
    pb::OutboxItem item = entry.item;
    item.set_attempts(item.attempts() + 1);
    item.set_last_error(error);
    item.set_not_before_ms(txn.now_ms() + std::max(backoff(item.attempts()), at_least_ms));
    txn.batch().put(Cf::outbox, entry.key, item);
    return Status::Ok();
  });
  if (!s) spdlog::error("cannot reschedule outbox item: {}", s.error().message);
}

void Drainer::execute(const Outbox::Entry& entry) {
  const std::string& key = entry.item.operation_key();
  std::optional<pb::Operation> claimed;
  Status s = journal_.run([&](store::Txn& txn) -> Status {
    auto op = operations::load(txn.store(), key);
    if (!op) return op.error();
    if (!op->has_value() || (*op)->state() != "approved") {
      txn.batch().del(Cf::outbox, entry.key);  // nothing left to execute
      return Status::Ok();
    }
    auto& o = **op;
    auto order = txn.store().get_message<pb::Order>(Cf::orders, o.proposal().order_id());
    if (!order) return order.error();
    if (!order->has_value() || worker::order_changed(o.proposal(), **order)) {
      o.set_decision_reason("The order changed after the proposal was approved.");
      txn.batch().del(Cf::outbox, entry.key);
      return outbox_.settle(txn, o, Event::reject, "system",
                            details({{"reason", "order changed before execution"}}));
    }
    o.set_attempts(o.attempts() + 1);
    if (Status s = operations::apply(txn, o, Event::claim, "system",
                                     details({{"idempotency_key", o.idempotency_key()}}));
        !s)
      return s;
    claimed = o;
    return Status::Ok();
  });
  if (!s) {
    spdlog::error("cannot claim operation {}: {}", key, s.error().message);
    return;
  }
  if (!claimed) return;
  call_provider(*claimed, entry.key, "system");
}

void Drainer::call_provider(const pb::Operation& claimed, const std::string& item_key,
                            const std::string& principal) {
  // Durably executing: now, and only now, the provider is called.
  const auto started = std::chrono::steady_clock::now();
  auto result = provider_.execute(request_for(claimed));
  metrics_
      .histogram("opgate_provider_call_seconds", {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5})
      .observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  metrics_.inc("opgate_provider_attempts_total",
               {{"result", std::string(verdict_name(result.verdict))}});
  if (Status r = record_result(claimed.key(), item_key, result, principal); !r)
    spdlog::error("cannot record provider result for {}: {}", claimed.key(), r.error().message);
}

Status Drainer::record_result(const std::string& key, const std::string& item_key,
                              const adapters::PaymentResult& result, const std::string& principal) {
  return journal_.run([&](store::Txn& txn) -> Status {
    auto op = operations::load(txn.store(), key);
    if (!op) return op.error();
    if (!op->has_value()) return make_error("not_found", "operation vanished");
    auto& o = **op;
    txn.batch().del(Cf::outbox, item_key);
    if (!result.object_id.empty()) o.set_provider_object_id(result.object_id);
    o.set_provider_status(result.provider_status);
    switch (result.verdict) {
      case adapters::Verdict::succeeded: {
        o.set_last_error("");
        return outbox_.settle(txn, o, Event::provider_succeeded, principal,
                              details({{"provider_object_id", o.provider_object_id()}}),
                              "provider");
      }
      case adapters::Verdict::refused: {
        o.set_last_error(result.error);
        o.set_decision_reason(result.error);
        return outbox_.settle(txn, o, Event::provider_refused, principal,
                              details({{"error", result.error}}));
      }
      case adapters::Verdict::pending:
      case adapters::Verdict::indeterminate: {
        o.set_last_error(result.verdict == adapters::Verdict::pending
                             ? "the provider holds the object but its result is pending"
                             : result.error);
        if (Status s = operations::apply(txn, o, Event::provider_indeterminate, principal,
                                         details({{"error", o.last_error()}}));
            !s)
          return s;
        pb::OutboxItem item;
        item.set_kind(std::string(kReconcile));
        item.set_operation_key(key);
        item.set_not_before_ms(txn.now_ms() + backoff(0));
        outbox_.enqueue(txn, std::move(item));
        return Status::Ok();
      }
    }
    return Status::Ok();
  });
}

void Drainer::reconcile(const Outbox::Entry& entry) {
  const std::string& key = entry.item.operation_key();
  auto op = operations::load(journal_.store(), key);
  if (!op || !op->has_value()) return;
  if ((*op)->state() != "outcome_unknown") {
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      txn.batch().del(Cf::outbox, entry.key);
      return Status::Ok();
    });
    (void)s;
    return;
  }
  const pb::Operation operation = **op;
  auto found = provider_.find(request_for(operation));
  metrics_.inc("opgate_reconciliations_total",
               {{"result", found.lookup == adapters::Lookup::found    ? "found"
                           : found.lookup == adapters::Lookup::absent ? "absent"
                                                                      : "unreachable"}});
  if (found.lookup == adapters::Lookup::found &&
      found.object.verdict != adapters::Verdict::pending) {
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      auto cur = operations::load(txn.store(), key);
      if (!cur) return cur.error();
      if (!cur->has_value() || (*cur)->state() != "outcome_unknown") {
        txn.batch().del(Cf::outbox, entry.key);
        return Status::Ok();
      }
      auto& o = **cur;
      txn.batch().del(Cf::outbox, entry.key);
      o.set_provider_object_id(found.object.object_id);
      o.set_provider_status(found.object.provider_status);
      o.set_attempts(o.attempts() + 1);
      const bool ok = found.object.verdict == adapters::Verdict::succeeded;
      if (!ok) o.set_decision_reason("The payment provider reports the operation failed.");
      return outbox_.settle(txn, o, ok ? Event::reconcile_succeeded : Event::reconcile_failed,
                            "reconciler",
                            details({{"provider_object_id", o.provider_object_id()},
                                     {"provider_status", o.provider_status()}}));
    });
    if (!s) spdlog::error("cannot settle reconciled {}: {}", key, s.error().message);
    return;
  }
  if (found.lookup == adapters::Lookup::absent) {
    // Proven absent: execute again, under the same idempotency key.
    std::optional<pb::Operation> claimed;
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      auto cur = operations::load(txn.store(), key);
      if (!cur) return cur.error();
      if (!cur->has_value() || (*cur)->state() != "outcome_unknown") {
        txn.batch().del(Cf::outbox, entry.key);
        return Status::Ok();
      }
      auto& o = **cur;
      o.set_attempts(o.attempts() + 1);
      if (Status s = operations::apply(txn, o, Event::reconcile_absent, "reconciler",
                                       details({{"idempotency_key", o.idempotency_key()}}));
          !s)
        return s;
      claimed = o;
      return Status::Ok();
    });
    if (!s || !claimed) return;
    call_provider(*claimed, entry.key, "reconciler");
    return;
  }
  // Unreachable, or found but still pending: stay outcome_unknown, try later.
  std::string error = found.lookup == adapters::Lookup::found
                          ? "the provider's object is still pending"
                          : "reconciliation: " + found.error;
  Status s = journal_.run([&](store::Txn& txn) -> Status {
    auto cur = operations::load(txn.store(), key);
    if (!cur || !cur->has_value()) return Status::Ok();
    auto& o = **cur;
    o.set_attempts(o.attempts() + 1);
    o.set_last_error(error);
    operations::save(txn, o);
    pb::OutboxItem item = entry.item;
    item.set_attempts(item.attempts() + 1);
    item.set_last_error(error);
    item.set_not_before_ms(txn.now_ms() + backoff(item.attempts()));
    // A manual pass leaves the scheduled item to its own time.
    if (!entry.key.starts_with(kManualPrefix)) txn.batch().put(Cf::outbox, entry.key, item);
    return Status::Ok();
  });
  if (!s) spdlog::error("cannot reschedule reconciliation of {}: {}", key, s.error().message);
}

Status Drainer::reconcile_now(const std::string& operation_key) {
  auto op = operations::load(journal_.store(), operation_key);
  if (!op) return op.error();
  if (!op->has_value()) return make_error("not_found", "No operation with that key.");
  if ((*op)->state() != "outcome_unknown")
    return make_error("invalid_state",
                      "Only operations in outcome_unknown are reconciled; this "
                      "one is " +
                          (*op)->state() + ".");
  // Run the reconciliation against a fresh item; the scheduled one, if any,
  // finds the operation settled and removes itself.
  Outbox::Entry entry;
  entry.item.set_kind(std::string(kReconcile));
  entry.item.set_operation_key(operation_key);
  entry.key = std::string(kManualPrefix) + operation_key;
  reconcile(entry);
  return Status::Ok();
}

void Drainer::deliver(const Outbox::Entry& entry) {
  const auto& ref = entry.item.call();
  auto call = journal_.store().get_message<pb::ToolCall>(Cf::calls, call_key(ref));
  if (!call || !call->has_value() || !(*call)->result_saved()) {
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      txn.batch().del(Cf::outbox, entry.key);
      return Status::Ok();
    });
    (void)s;
    return;
  }
  auto verdict =
      agents_.submit_result(ref.session_id(), ref, (*call)->result(), result_idempotency_key(ref));
  if (!verdict) {
    metrics_.inc("opgate_result_deliveries_total", {{"result", "retry"}});
    return retry_later(entry, verdict.error().message, verdict.error().retry_after_ms);
  }
  std::string delivery = "delivered";
  std::string error;
  if (*verdict == adapters::SubmitVerdict::conflict) {
    delivery = "conflict";
    error = "the session holds a different result for this call";
  } else if (*verdict == adapters::SubmitVerdict::unknown_call) {
    delivery = "stale";
    error = "the session no longer waits for this call";
  }
  metrics_.inc("opgate_result_deliveries_total", {{"result", delivery}});
  if (delivery != "delivered")
    spdlog::warn("tool result for {} needs attention: {}", call_key(ref), error);
  Status s = journal_.run([&](store::Txn& txn) -> Status {
    auto cur = txn.store().get_message<pb::ToolCall>(Cf::calls, call_key(ref));
    if (!cur) return cur.error();
    if (cur->has_value()) {
      auto& c = **cur;
      c.set_delivery(delivery);
      c.set_delivery_error(error);
      c.set_delivered_at_ms(txn.now_ms());
      txn.batch().put(Cf::calls, call_key(ref), c);
    }
    txn.batch().del(Cf::outbox, entry.key);
    return Status::Ok();
  });
  if (!s) spdlog::error("cannot record delivery of {}: {}", call_key(ref), s.error().message);
}

}  // namespace opgate::outbox
