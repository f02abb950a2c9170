// Proposals nobody decides: after [policy.escalation] remind_after_s the
// approvers are reminded (operation.reminder), after escalate_after_s the
// proposal's tier is raised to escalate_to_tier (operation.escalated):
// a new fingerprint, the approvals given for the lower tier discarded, and
// a re-tier on reload never lowers it again. Both once per operation,
// measured from its proposal on the store's clock (the database's on
// PostgreSQL); the dispatcher of the node that leads runs them. Expiry is
// unchanged: it still fails closed.
#pragma once

#include <string>

#include "common/result.h"
#include "operations/policy.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

struct EscalationDue {
  bool remind = false;
  bool escalate = false;
  explicit operator bool() const { return remind || escalate; }
};

// What is due for the operation at `now_ms`: nothing unless it is pending.
// Pure.
EscalationDue escalation_due(const pb::Operation& operation, int64_t now_ms,
                             const EscalationPolicy& policy);

// The tier a pending operation is decided under: the one the policy in force
// gives its proposal, or the one it was escalated to, whichever is higher.
std::string tier_of(const pb::Operation& operation, const PolicyConfig& policy);

// Raises what is due for the operation (audited as "remind" and "escalate",
// notified); returns what it raised. Call inside Storage::transact.
Result<EscalationDue> remind_or_escalate(store::Transaction& txn, const std::string& key,
                                         const PolicyConfig& policy);

}  // namespace opgate::operations
