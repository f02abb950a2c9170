#include "operations/execution.h"

#include <fmt/format.h>

#include "common/crypto.h"
#include "operations/attention.h"
#include "operations/keys.h"
#include "operations/settlement.h"
#include "operations/state_machine.h"
#include "operations/transitions.h"

namespace opgate::operations {

namespace {
void enqueue_reconcile(store::Transaction& txn, const std::string& key, int64_t in_ms,
                       int attempts = 0) {
  pb::OutboxItem item;
  item.set_kind(pb::OUTBOX_RECONCILE);
  item.set_operation_key(key);
  item.set_attempts(attempts);
  item.set_not_before_ms(txn.now_ms() + in_ms);
  txn.enqueue(std::move(item));
}
}  // namespace

PaymentRequest payment_request(const pb::Operation& op) {
  const auto& p = op.proposal();
  using Kind = PaymentRequest::Kind;
  const bool declared = !p.arguments_json().empty();
  return {.kind = declared                     ? Kind::declared
                  : p.kind() == kAccountCredit ? Kind::customer_credit
                                               : Kind::refund,
          .operation_key = op.key(),
          .idempotency_key = op.idempotency_key(),
          .payment_intent = p.payment_intent(),
          .customer = p.customer(),
          .amount_minor = p.amount_minor(),
          .currency = p.currency(),
          .reason = p.reason(),
          .cancel_order = p.kind() == kCancelOrder,
          .order_id = p.order_id(),
          .operation = declared ? p.kind() : std::string(),
          .owner = p.owner(),
          .arguments_json = p.arguments_json(),
          .executor_url = op.executor_url(),
          .executor_token_sha256 = op.executor_token_sha256()};
}

Status recover_executing(store::Transaction& txn, pb::Operation& op, const std::string& reason,
                         bool with_item) {
  op.set_last_error(reason);
  OPGATE_TRY(apply(txn, op, Event::restart, "system", details({{"reason", reason}})));
  if (with_item) enqueue_reconcile(txn, op.key(), 0);
  return Status::Ok();
}

Result<Claim> claim(store::Transaction& txn, const std::string& key, const PolicyConfig& policy,
                    const std::optional<SourcedOrder>& sourced) {
  Claim out;
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op) return out;
  if (is(*op, State::executing)) {
    OPGATE_TRY(recover_executing(
        txn, *op, "the provider call's answer was never recorded; its outcome is unknown"));
    return out;
  }
  if (!is(*op, State::approved)) return out;  // nothing left to execute
  const auto& p = op->proposal();
  OPGATE_ASSIGN_OR_RETURN(const Recheck now, recheck_now(txn, p, policy, sourced));
  if (now.refusal) {
    op->set_decision_reason(*now.refusal);
    OPGATE_TRY(settle(txn, *op, Event::reject, "system",
                      details({{"reason", "before execution: " + *now.refusal}})));
    return out;
  }
  OPGATE_ASSIGN_OR_RETURN(out.claimed, claim_checked(txn, std::move(*op), policy));
  return out;
}

Result<pb::Operation> claim_checked(store::Transaction& txn, pb::Operation op,
                                    const PolicyConfig& policy) {
  op.set_attempts(op.attempts() + 1);
  if (op.executor_url().empty() && !op.proposal().arguments_json().empty())
    if (const auto* declared = policy.declared_operation(op.proposal().kind())) {
      op.set_executor_url(declared->executor.url);
      op.set_executor_token_sha256(crypto::sha256_hex(declared->executor.token));
    }
  OPGATE_TRY(reserve_funds(txn, op));
  OPGATE_TRY(
      apply(txn, op, Event::claim, "system", details({{"idempotency_key", op.idempotency_key()}})));
  return op;
}

Status record_answer(store::Transaction& txn, const std::string& key, const PaymentResult& a,
                     const std::string& principal, int64_t reconcile_in_ms,
                     int reconcile_attempts) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op) return make_error(errc::not_found, "The operation vanished.");
  if (!is(*op, State::executing)) return record_late_answer(txn, key, a, principal);
  if (!a.object_id.empty()) op->set_provider_object_id(a.object_id);
  op->set_provider_status(a.provider_status);
  switch (a.verdict) {
    case Verdict::succeeded:
      op->set_last_error("");
      return settle(txn, *op, Event::provider_succeeded, principal,
                    details({{"provider_object_id", op->provider_object_id()}}), "provider");
    case Verdict::refused:
      op->set_last_error(a.error);
      op->set_decision_reason(a.error);
      OPGATE_TRY(
          settle(txn, *op, Event::provider_refused, principal, details({{"error", a.error}})));
      if (!a.attention.empty()) return raise_settled_attention(txn, *op, a.attention);
      return Status::Ok();
    case Verdict::pending:
    case Verdict::indeterminate:
      op->set_last_error(a.verdict == Verdict::pending
                             ? "the provider holds the object but its result is pending"
                             : a.error);
      OPGATE_TRY(apply(txn, *op, Event::provider_indeterminate, principal,
                       details({{"error", op->last_error()}})));
      enqueue_reconcile(txn, key, reconcile_in_ms, reconcile_attempts);
      return Status::Ok();
  }
  return Status::Ok();
}

Status record_late_answer(store::Transaction& txn, const std::string& key, const PaymentResult& a,
                          const std::string& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op) return make_error(errc::not_found, "The operation vanished.");
  if (is(*op, State::outcome_unknown) && a.verdict == Verdict::succeeded)
    return settle_found(txn, key, a);
  if (is(*op, State::settled) && op->provider_object_id() == a.object_id &&
      a.verdict == Verdict::succeeded)
    return Status::Ok();  // the same success, recorded already
  OPGATE_TRY(save_with_audit(txn, *op, "late_answer", principal,
                             details({{"verdict", std::string(to_string(a.verdict))},
                                      {"provider_object_id", a.object_id},
                                      {"provider_status", a.provider_status},
                                      {"error", a.error}})));
  // A success the record contradicts: settled failed (the order freed for
  // another refund), or succeeded with another object (paid twice?). A
  // success resolved by hand without an object id contradicts nothing.
  const bool contradicts = is(*op, Outcome::failed) || (!op->provider_object_id().empty() &&
                                                        op->provider_object_id() != a.object_id);
  if (is(*op, State::settled) && a.verdict == Verdict::succeeded && contradicts &&
      !op->attention_notified())
    return raise_settled_attention(
        txn, *op,
        fmt::format("the provider reports {} succeeded after the operation was settled {}{}",
                    a.object_id.empty() ? "its object" : a.object_id, outcome_text(*op),
                    op->provider_object_id().empty() ? "" : " with " + op->provider_object_id()));
  return Status::Ok();
}

Status settle_found(store::Transaction& txn, const std::string& key, const PaymentResult& found) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op || !is(*op, State::outcome_unknown)) return Status::Ok();
  op->set_provider_object_id(found.object_id);
  op->set_provider_status(found.provider_status);
  op->set_attempts(op->attempts() + 1);
  const bool ok = found.verdict == Verdict::succeeded;
  if (!ok) op->set_decision_reason("The payment provider reports the operation failed.");
  OPGATE_TRY(settle(txn, *op, ok ? Event::reconcile_succeeded : Event::reconcile_failed,
                    "reconciler",
                    details({{"provider_object_id", op->provider_object_id()},
                             {"provider_status", op->provider_status()}})));
  // Something was done all the same (the order cancelled at the order
  // service, its refund failed): the provider adapter says so.
  if (!ok && !found.attention.empty()) return raise_settled_attention(txn, *op, found.attention);
  return Status::Ok();
}

Result<std::optional<pb::Operation>> execute_again(store::Transaction& txn,
                                                   const std::string& key) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op || !is(*op, State::outcome_unknown)) return std::optional<pb::Operation>();
  op->set_attempts(op->attempts() + 1);
  OPGATE_TRY(apply(txn, *op, Event::reconcile_absent, "reconciler",
                   details({{"idempotency_key", op->idempotency_key()}})));
  return op;
}

Status note_unresolved(store::Transaction& txn, const std::string& key, const std::string& error,
                       const PaymentResult* pending) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op || !is(*op, State::outcome_unknown)) return Status::Ok();
  if (pending) {
    op->set_provider_object_id(pending->object_id);
    op->set_provider_status(pending->provider_status);
  }
  op->set_attempts(op->attempts() + 1);
  op->set_last_error(error);
  return save(txn, *op);
}

}  // namespace opgate::operations
