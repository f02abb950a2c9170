// The outbox: durable work items (execute an operation, reconcile it,
// deliver a tool result) written in the same batch as the state change that
// creates them, and drained by the worker. Also the staging of settled
// results to every call linked to an operation. Thread-safe: staging calls
// run inside Journal::run; the sequence counter is atomic.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "operations/state_machine.h"
#include "opgate.pb.h"
#include "store/journal.h"

namespace opgate::outbox {

inline constexpr std::string_view kExecute = "execute";
inline constexpr std::string_view kReconcile = "reconcile";
inline constexpr std::string_view kDeliverResult = "deliver_result";

class Outbox {
 public:
  explicit Outbox(store::Store& store);

  void enqueue(store::Txn& txn, pb::OutboxItem item);
  struct Entry {
    std::string key;
    pb::OutboxItem item;
  };
  // Items due at now_ms, oldest first, at most `limit`.
  Result<std::vector<Entry>> due(int64_t now_ms, size_t limit) const;

  // Saves `result` on the call and queues its delivery.
  void stage_result(store::Txn& txn, pb::ToolCall& call, const pb::ToolResult& result);
  // A settled operation: its result goes to every linked call that has none.
  Status stage_settled_results(store::Txn& txn, const pb::Operation& operation);
  // A succeeded operation: its ledger row, and for a refund the order's
  // refunded amount.
  Status stage_success(store::Txn& txn, const pb::Operation& operation,
                       const std::string& recorded_by);
  // Applies an event that settles the operation (operations::apply), then
  // stages what settling owes: for a success the ledger row (recorded by
  // `recorded_by`, or the principal if empty), and every linked call's result.
  Status settle(store::Txn& txn, pb::Operation& operation, operations::Event event,
                const std::string& principal, const std::string& details_json,
                const std::string& recorded_by = "");

 private:
  store::Store& store_;
  std::atomic<uint64_t> seq_;
};

// When an operation whose outcome is unknown needs a person: after this many
// provider attempts, or this long in outcome_unknown.
struct AttentionPolicy {
  int after_attempts = 10;
  int64_t after_ms = 3'600'000;
};
bool needs_attention(const pb::Operation& operation, int64_t now_ms, const AttentionPolicy& policy);

std::string call_key(const pb::CallRef& call);
std::string call_key(const pb::ToolCall& call);
std::string call_key(const std::string& session, const std::string& turn, const std::string& call);
// The reference to a call: its session, turn and call id.
pb::CallRef call_ref(const pb::ToolCall& call);
// Stable per call: a resend carries the same key.
std::string result_idempotency_key(const pb::CallRef& call);

}  // namespace opgate::outbox
