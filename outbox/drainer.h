// The outbox drainer: queue mechanics only. It hands due outbox items to
// lanes (one per operation, one per tool call), calls the payment provider
// or the agent platform for each, and records what they answered through
// the domain's functions (operations/execution.h), in the same transaction
// that removes or reschedules the item. It never decides what an answer
// means. An execute item is kept, with a lease past the provider timeout,
// until the answer is recorded: an answer lost to a crash or a failed write
// is found later as an operation still executing, and reconciled.
// Thread-safety: dispatch() from one dispatcher thread; reconcile_now() from
// any; items run on the lanes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/lanes.h"
#include "common/live.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "operations/agent_platform.h"
#include "operations/authority.h"
#include "operations/decisions.h"
#include "operations/order_service.h"
#include "operations/orders.h"
#include "operations/payment_provider.h"
#include "operations/policy.h"
#include "outbox/delivery_recorder.h"
#include "outbox/held_items.h"
#include "store/port.h"

namespace opgate::outbox {

struct DrainerOptions {
  // Items one dispatch pass looks at.
  size_t batch = 256;
  int64_t retry_base_ms = 500;
  int64_t retry_cap_ms = 60'000;
  // How long a claimed execute item is left alone: longer than a provider
  // call can take.
  int64_t claim_lease_ms = 30'000;
  // The longest a provider call can take (its timeouts): a call starts only
  // with at least this much of its lease left, so that it ends within it. A
  // claim whose commit came back late leaves its item to fall due, to be
  // recovered and reconciled.
  int64_t call_budget_ms = 20'000;
  // Other processes share the store (PostgreSQL): at start only operations
  // executing for longer than the lease are recovered (younger ones are
  // another process's calls in flight), and every half lease any process
  // recovers those whose claimer died.
  bool shared_store = false;
};

class Drainer {
 public:
  // `orders`: the business's order service (orders.source = "http"); an
  // operation's order is read there afresh before it is claimed, and its
  // cancellations go through `provider` (adapters/orders). nullptr for
  // embedded orders.
  Drainer(store::Storage& storage, Lanes& lanes, operations::PaymentProvider& provider,
          operations::AgentPlatform& agents, const Live<operations::PolicyConfig>& policy,
          Metrics& metrics, const Clock& clock, Random random, DrainerOptions options = {},
          operations::OrderService* orders = nullptr);

  // On start-up: every `executing` operation becomes `outcome_unknown`
  // (with a reconcile item), because its provider call may have happened;
  // with a shared store, only those executing for longer than the lease.
  Status recover_after_restart();
  // Hands due items whose lane is free to the lanes; returns how many.
  size_t dispatch();
  // For an approval made in this process: the lease under which it may
  // claim the operation at once (operations::ClaimAtOnce), a fresh token.
  operations::ClaimAtOnce claim_at_once() const;
  // The provider call of an operation such an approval claimed, in the
  // operation's lane, on the execute item leased under `lease_token`
  // (found among the operation's `items` as read after the commit, or read
  // by the operation if not given: the store named it as it committed),
  // while the lease lasts. If the lanes cannot take it by then, or the
  // item cannot be read, the item falls due when its lease ends, and the
  // operation is recovered and reconciled.
  void execute_claimed(pb::Operation claimed, const std::string& lease_token,
                       std::optional<std::vector<store::OutboxEntry>> items = std::nullopt);
  // Reconciles one operation now (an operator's request), in its lane.
  Status reconcile_now(const std::string& operation_key, const operations::Principal& principal);

  static std::string lane_of(const pb::OutboxItem& item);
  // The lane of an operation's items (execute, reconcile).
  static std::string operation_lane(const std::string& key);

 private:
  void run(const store::OutboxEntry& entry);
  void execute(const store::OutboxEntry& entry);
  void reconcile(const store::OutboxEntry& entry);
  // An operator's reconcile pass, in the operation's lane: its reconcile
  // item (made if it has none) due now and run like any other.
  Status reconcile_due_now(const std::string& key);
  void deliver(const store::OutboxEntry& entry);
  // With an order service: the order of the approved operation `op` (as
  // read just now) as the service reads now; an error (the item waits) when
  // it cannot say.
  Result<std::optional<operations::SourcedOrder>> source_order(
      const std::optional<pb::Operation>& op);
  // Calls the provider for a claimed operation (timed, counted) and records
  // its answer; the entry is removed in the same transaction.
  void call_provider(const pb::Operation& claimed, const store::OutboxEntry& entry,
                     const std::string& principal);
  // Reschedules with jittered backoff, and no sooner than the peer asked.
  void retry_later(const store::OutboxEntry& entry, const std::string& error,
                   int64_t at_least_ms = 0);
  // Keeps the item out of this process's scans for a backoff: the store
  // failed its handling and would not take it back for later either.
  void rest(const store::OutboxEntry& entry);
  // Removes the item in a transaction of its own.
  void remove(const store::OutboxEntry& entry);
  // The entry held by this process until the lease passes, fenced by token.
  store::OutboxEntry lease(const store::OutboxEntry& entry, int64_t now_ms,
                           const std::string& token) const;
  // Executing operations last changed more than age_ms ago (every one if
  // negative) become outcome_unknown; returns how many.
  Result<size_t> recover_executing_older_than(int64_t age_ms, const std::string& reason);
  int64_t backoff(int attempt);

  store::Storage& storage_;
  Lanes& lanes_;
  operations::PaymentProvider& provider_;
  operations::AgentPlatform& agents_;
  const Live<operations::PolicyConfig>& policy_;
  Metrics& metrics_;
  const Clock& clock_;
  Mutex random_mu_;
  Random random_ GUARDED_BY(random_mu_);
  DrainerOptions options_;
  operations::OrderService* orders_;
  int64_t last_stale_check_ms_ = 0;  // dispatcher thread only
  HeldItems held_;                   // handed to a lane, not finished
  DeliveryRecorder deliveries_;      // what became of delivered results
};

// Stable per call: a resend of its result carries the same key.
std::string result_idempotency_key(const pb::CallRef& call);

}  // namespace opgate::outbox
