// The decisions people and time make about a pending or unknown operation:
// approve, deny, expire and resolve. Each is a function over a transaction,
// used alike by the operator API, the console and the worker. Operations
// whose owner the principal may not act for are "not found" (no existence
// oracle). Call inside Storage::transact.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "operations/authority.h"
#include "operations/orders.h"
#include "operations/policy.h"
#include "operations/state_machine.h"
#include "store/port.h"

namespace opgate::operations {

// The operation, if it exists and the principal may see its owner.
Result<pb::Operation> visible_operation(store::Reader& reader, const std::string& key,
                                        const Principal& principal);
// Likewise, with its audit records, as of one moment.
Result<store::OperationHistory> visible_history(store::Reader& reader, const std::string& key,
                                                const Principal& principal);

// An approval that also claims (execution.h): the last approval needed
// moves the operation on to executing in its own transaction, and its
// execute item is leased to the caller, who calls the provider once the
// transaction commits. One transaction fewer per operation; a caller that
// never calls leaves the item to fall due when the lease ends, and the
// operation is then recovered as after a crash (outcome_unknown, then
// reconciled).
struct ClaimAtOnce {
  std::string lease_token;
  int64_t lease_ms = 0;
};

struct Approved {
  ApprovalStep step = ApprovalStep::repeat;
  // With ClaimAtOnce: the operation, durably executing; call the provider.
  std::optional<pb::Operation> claimed;
  // Set when, instead of being approved, the operation was settled because
  // its approval time ran out ("expired") or the order or policy no longer
  // allows it ("order_changed", "policy_refused"). The transaction must
  // still commit; the caller reports this error.
  std::optional<Error> refusal;
};

// An approval of exactly the proposal the principal saw. Checks, in order:
// visibility, scope, that the proposal carries the tier the policy in force
// gives it (else it is re-tiered, see retier(), and this approval refused
// as a mismatch), state, the exact proposal, tier, limit, self-approval;
// then that the approval time has not run out and that the order and the
// policy still allow the proposal (the order as `sourced` from the order
// service, if given: see orders.h). The last approval needed moves it to
// approved with an execute item.
//
// Lowering: with the fingerprint shown and an amount below the proposal's
// (above zero) and an edit_reason, the proposal is lowered in place before
// the checks: the original amount kept, the effect and tier recomputed for
// the new amount, a new fingerprint, the approvals so far discarded (the
// editor's is then the first), audited as "narrow". A higher amount,
// another currency, or a cancellation (which refunds what remains) is
// widening_refused; if any later check fails, nothing of it is kept.
//
// With `claim_at_once`, the last approval also claims the operation (see
// ClaimAtOnce).
//
// With `in_force` (the principals configured now), an earlier approval
// counts only while the token it was given with is still configured and its
// principal may still approve the proposal (may_approve: tier, limit and
// owners still covering it); those that may not are discarded first,
// audited as "approval_lapsed". The operator API always passes them.
Result<Approved> approve(store::Transaction& txn, const std::string& key,
                         const Principal& principal, const ApprovalRequest& request,
                         const PolicyConfig& policy,
                         const std::optional<SourcedOrder>& sourced = std::nullopt,
                         const std::optional<ClaimAtOnce>& claim_at_once = std::nullopt,
                         const std::vector<Principal>* in_force = nullptr);

// Binds a pending operation to the tier the policy in force gives it: a
// new tier changes the proposal, so its fingerprint is computed again and
// the approvals given so far (for the old tier) are discarded, audited as
// "retier". Returns whether anything changed.
Result<bool> retier(store::Transaction& txn, pb::Operation& operation, const PolicyConfig& policy,
                    const std::string& principal);

// retier() for every pending operation, each in a transaction of its own
// (after a reload changed the policy, and at start); returns how many
// changed.
Result<size_t> retier_pending(store::Storage& storage, const PolicyConfig& policy);

// Denies a pending operation; the reason is what the session is told.
// The principal must decide the proposal's tier (Principal::decides_tier),
// as for an approval. Denying again by the same principal is not an error.
Status deny(store::Transaction& txn, const std::string& key, const Principal& principal,
            const std::string& reason);

// The agent that proposed a pending operation withdraws it (an MCP client's
// tasks/cancel): denied, with `reason` told to every linked call.
// `principal` is the agent ("agent:{id}"), which may act for `owner` only:
// another owner's operation is not found. invalid_state once it is no
// longer pending.
Status withdraw(store::Transaction& txn, const std::string& key, const std::string& owner,
                const std::string& principal, const std::string& reason);

// Expires a pending operation whose approval time has run out; false if it
// is not (any longer) such an operation.
Result<bool> expire(store::Transaction& txn, const std::string& key);

struct Resolution {
  Outcome outcome = Outcome::succeeded;  // succeeded | failed
  std::string evidence;                  // audited; never sent to the session
  std::string provider_object_id;        // optional: what the ledger row names
};

// On-call settles an outcome_unknown operation by hand.
Status resolve(store::Transaction& txn, const std::string& key, const Principal& principal,
               const Resolution& resolution);

}  // namespace opgate::operations
