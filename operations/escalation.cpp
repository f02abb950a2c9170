#include "operations/escalation.h"

#include "operations/notifications.h"
#include "operations/state_machine.h"
#include "operations/transitions.h"

namespace opgate::operations {

EscalationDue escalation_due(const pb::Operation& op, int64_t now_ms,
                             const EscalationPolicy& policy) {
  EscalationDue due;
  if (!is(op, State::pending)) return due;
  const int64_t waited_ms = now_ms - op.created_at_ms();
  due.remind = policy.remind_after_s > 0 && op.reminded_at_ms() == 0 &&
               waited_ms >= policy.remind_after_s * 1000;
  due.escalate = policy.escalate_after_s > 0 && op.escalated_at_ms() == 0 &&
                 waited_ms >= policy.escalate_after_s * 1000 &&
                 tier_rank(op.proposal().tier()) < tier_rank(policy.escalate_to_tier);
  return due;
}

std::string tier_of(const pb::Operation& op, const PolicyConfig& policy) {
  std::string tier = tier_in_force(op.proposal(), policy);
  if (tier_rank(op.escalated_to_tier()) > tier_rank(tier)) tier = op.escalated_to_tier();
  return tier;
}

Result<EscalationDue> remind_or_escalate(store::Transaction& txn, const std::string& key,
                                         const PolicyConfig& policy) {
  OPGATE_ASSIGN_OR_RETURN(auto found, txn.operation(key));
  if (!found) return EscalationDue{};
  pb::Operation& op = *found;
  const int64_t now = txn.now_ms();
  const EscalationDue due = escalation_due(op, now, policy.escalation);
  const std::string waited = std::to_string((now - op.created_at_ms()) / 1000);
  int order_in_change = 0;
  if (due.remind) {
    op.set_reminded_at_ms(now);
    OPGATE_TRY(save_with_audit(txn, op, "remind", "system", details({{"waited_s", waited}})));
    emit(txn, op, notify::reminder, order_in_change++);
  }
  if (due.escalate) {
    const std::string from = op.proposal().tier();
    op.set_escalated_at_ms(now);
    op.set_escalated_to_tier(policy.escalation.escalate_to_tier);
    op.mutable_proposal()->set_tier(policy.escalation.escalate_to_tier);
    const std::string discarded = proposal_changed(op);
    OPGATE_TRY(save_with_audit(txn, op, "escalate", "system",
                               details({{"from_tier", from},
                                        {"to_tier", op.proposal().tier()},
                                        {"waited_s", waited},
                                        {"discarded_approvals", discarded}})));
    emit(txn, op, notify::escalated, order_in_change++);
  }
  return due;
}

}  // namespace opgate::operations
