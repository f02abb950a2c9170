#include "operations/attention.h"

#include <spdlog/spdlog.h>

#include "operations/notifications.h"
#include "operations/state_machine.h"
#include "operations/transitions.h"

namespace opgate::operations {

bool needs_attention(const pb::Operation& op, int64_t now_ms, const AttentionPolicy& policy) {
  if (!is(op, State::outcome_unknown)) return false;
  return op.attempts() >= policy.after_attempts ||
         now_ms - op.unknown_since_ms() >= policy.after_ms;
}

Result<bool> raise_attention(store::Transaction& txn, const std::string& key,
                             const AttentionPolicy& policy) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op || op->attention_notified() || !needs_attention(*op, txn.now_ms(), policy)) return false;
  op->set_attention_notified(true);
  OPGATE_TRY(save_with_audit(
      txn, *op, "needs_attention", "system",
      details({{"attempts", std::to_string(op->attempts())}, {"last_error", op->last_error()}})));
  emit(txn, *op, notify::needs_attention);
  return true;
}

Status raise_settled_attention(store::Transaction& txn, pb::Operation& op,
                               const std::string& reason) {
  op.set_attention_notified(true);
  op.set_last_error(reason);
  OPGATE_TRY(save_with_audit(txn, op, "needs_attention", "system", details({{"reason", reason}})));
  emit(txn, op, notify::needs_attention);
  spdlog::warn("operation {} needs a person: {}", op.key(), reason);
  return Status::Ok();
}

}  // namespace opgate::operations
