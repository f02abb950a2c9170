// What executing an approved operation means, as functions over a
// transaction: the claim (re-checked, funds held, durably `executing`
// before any provider call), the recording of the provider's answer, the
// recovery of an operation found `executing` with no answer recorded, and
// the outcomes of reconciliation. The outbox calls the provider and these;
// it never decides what an answer means. Call inside Storage::transact.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"
#include "operations/orders.h"
#include "operations/payment_provider.h"
#include "operations/policy.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// What executing the operation asks of the payment provider: its kind,
// amount and payee, under the operation's idempotency key.
PaymentRequest payment_request(const pb::Operation& operation);

struct Claim {
  // Set when the operation is now durably executing: call the provider.
  std::optional<pb::Operation> claimed;
  // Whether the execute item is done with (claimed, rejected, or nothing
  // left to execute); false only when it must wait.
  bool item_done = true;
};

// Claims an approved operation: re-checks the order and the policy (a
// change rejects it), holds its amount against the order and moves it to
// executing. An operation found executing (its call may have happened,
// nothing was recorded) goes to outcome_unknown with a reconcile item.
// The order is as `sourced` from the order service, if given (orders.h).
Result<Claim> claim(store::Transaction& txn, const std::string& key, const PolicyConfig& policy,
                    const std::optional<SourcedOrder>& sourced = std::nullopt);

// The claim of an approved operation whose order and policy this
// transaction has re-checked already (`op` as it read or wrote it): its
// amount held, and executing; a declared operation's executor, as `policy`
// names it, recorded on its first claim. Used by claim(), and by the
// approval that claims at once (decisions.h).
Result<pb::Operation> claim_checked(store::Transaction& txn, pb::Operation op,
                                    const PolicyConfig& policy);

// Records the provider's answer for an executing operation: settled
// (succeeded or failed), or outcome_unknown with a reconcile item due at
// now + reconcile_in_ms, its attempts counted from reconcile_attempts (a
// re-execution's item keeps its predecessor's count, so its backoff keeps
// growing). An answer for an operation no longer executing (recovered
// meanwhile) is a late answer: see record_late_answer.
Status record_answer(store::Transaction& txn, const std::string& key, const PaymentResult& answer,
                     const std::string& principal, int64_t reconcile_in_ms,
                     int reconcile_attempts = 0);

// An answer that arrived after the operation left `executing` (another
// process recovered it, or took its claim over): recorded, never lost. A
// success proves the outcome, so an operation still outcome_unknown is
// settled by it; anything else is audited ("late_answer") and the
// operation's reconcile item goes on to prove what happened.
Status record_late_answer(store::Transaction& txn, const std::string& key,
                          const PaymentResult& answer, const std::string& principal);

// An executing operation whose provider call may have happened without a
// recorded answer (restart, crash, storage error): outcome_unknown, with a
// reconcile item unless `with_item` is false (the caller keeps its own).
Status recover_executing(store::Transaction& txn, pb::Operation& operation,
                         const std::string& reason, bool with_item = true);

// The reconciler found the provider's object with a final result.
Status settle_found(store::Transaction& txn, const std::string& key, const PaymentResult& found);

// The provider proved it has no object for the key: executing again under
// the same idempotency key. Returns the claimed operation, or nothing if it
// is no longer outcome_unknown.
Result<std::optional<pb::Operation>> execute_again(store::Transaction& txn, const std::string& key);

// The provider could not be asked, or its object is still pending: stays
// outcome_unknown with the error recorded, and a pending object's id and
// status (what a resolution as failed is checked against).
Status note_unresolved(store::Transaction& txn, const std::string& key, const std::string& error,
                       const PaymentResult* pending = nullptr);

}  // namespace opgate::operations
