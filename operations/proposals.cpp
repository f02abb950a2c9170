#include "operations/proposals.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <charconv>

#include "operations/keys.h"
#include "operations/settlement.h"
#include "operations/transitions.h"
#include "operations/views.h"

namespace opgate::operations {

namespace json = boost::json;

namespace {

// Two calls' arguments as JSON values (key order and spacing aside).
bool same_arguments(std::string_view a, std::string_view b) {
  boost::json::error_code ea, eb;
  const auto va = boost::json::parse(a, ea);
  const auto vb = boost::json::parse(b, eb);
  return !ea && !eb && va == vb;
}

pb::CallRef ref_of(const pb::ToolCall& call) {
  pb::CallRef ref;
  ref.set_session_id(call.session_id());
  ref.set_turn_id(call.turn_id());
  ref.set_call_id(call.call_id());
  return ref;
}

Status link(store::Transaction& txn, pb::Operation& op, pb::ToolCall& call,
            const std::string& principal) {
  // Each linked call is kept on the operation and answered when it
  // settles: bounded, so that an agent calling in a loop cannot grow it
  // without end.
  if (op.calls_size() >= kMaxLinkedCalls) {
    if (is(op, State::settled)) {
      // Answered with the outcome, and named as the operation's, so that it
      // reads as that outcome (a denial is an error), though not kept on it.
      call.set_operation_key(op.key());
      stage_result(txn, call, settled_result(op));
    } else {
      stage_result(txn, call,
                   failure_result(fmt::format(
                       "{} calls already wait on {}; read it with get_operation instead of "
                       "asking again.",
                       op.calls_size(), op.key())));
    }
    return Status::Ok();
  }
  call.set_operation_key(op.key());
  *op.add_calls() = ref_of(call);
  OPGATE_TRY(
      save_with_audit(txn, op, "link_call", principal,
                      details({{"session_id", call.session_id()}, {"call_id", call.call_id()}})));
  if (is(op, State::settled))
    stage_result(txn, call, settled_result(op));  // decided: answer, never ask again
  else
    txn.put_call(call);
  return Status::Ok();
}

Status create_version(store::Transaction& txn, pb::ToolCall& call, const pb::Proposal& proposal,
                      const std::string& fp, int version, const PolicyConfig& policy,
                      const std::string& principal) {
  pb::Operation op;
  op.set_key(operation_key(proposal.owner(), proposal.order_id(), proposal.kind(), version));
  *op.mutable_proposal() = proposal;
  op.set_fingerprint(fp);
  op.set_session_id(call.session_id());
  op.set_call_id(call.call_id());
  *op.add_calls() = ref_of(call);
  // A declared operation's executor is sent its operation key as the
  // Idempotency-Key: the one on-call sees is the one the executor logged.
  op.set_idempotency_key(proposal.arguments_json().empty() ? provider_idempotency_key(op.key())
                                                           : op.key());
  op.set_expires_at_ms(txn.now_ms() + policy.approval_ttl_s * 1000);
  call.set_operation_key(op.key());
  // The policy it was proposed under, for the evidence pack.
  OPGATE_TRY(
      create(txn, op, principal,
             details({{"session_id", call.session_id()},
                      {"call_id", call.call_id()},
                      {"tool", call.name()},
                      {"tier", proposal.tier()},
                      {"approvals_needed", std::to_string(approvals_needed(proposal, policy))},
                      {"policy_sha256", policy_sha256(policy)}})));
  txn.put_call(call);
  return Status::Ok();
}

// The fingerprint of what the agent proposed: an operation whose amount an
// approver lowered, or whose tier was escalated, still answers the same call
// made again.
std::string proposed_fingerprint(const pb::Operation& op, const pb::Proposal& incoming,
                                 const PolicyConfig& policy) {
  if (op.proposal().original_amount_minor() == 0 && op.escalated_to_tier().empty())
    return op.fingerprint();
  pb::Proposal as_proposed = op.proposal();
  if (as_proposed.original_amount_minor() != 0)
    as_proposed.set_amount_minor(as_proposed.original_amount_minor());
  as_proposed.set_original_amount_minor(0);
  as_proposed.clear_edited_by();
  as_proposed.clear_edit_reason();
  as_proposed.set_tier(incoming.tier());
  // A declared operation carries its amount among the arguments as well.
  const auto* declared = policy.declared_operation(as_proposed.kind());
  if (declared && declared->money != Money::none && op.proposal().original_amount_minor() != 0) {
    auto arguments =
        with_amount(*declared, as_proposed.arguments_json(), op.proposal().original_amount_minor());
    if (arguments) as_proposed.set_arguments_json(json::serialize(*arguments));
  }
  return fingerprint(as_proposed);
}

}  // namespace

std::string effect_text(const pb::Proposal& p) {
  std::string money = format_money(p.amount_minor(), p.currency());
  if (p.original_amount_minor() != 0)
    money += fmt::format(" (lowered by the approver from {})",
                         format_money(p.original_amount_minor(), p.currency()));
  if (p.kind() == kAccountCredit)
    return fmt::format("{} is added to the customer's account balance ({}) for order {}.", money,
                       p.reason(), p.order_id());
  if (p.kind() == kCancelOrder)
    return p.amount_minor() > 0
               ? fmt::format(
                     "Order {} is cancelled at the order service, and {} is returned to "
                     "the customer's {}.",
                     p.order_id(), money, p.payment_method())
               : fmt::format(
                     "Order {} is cancelled at the order service; nothing remains to "
                     "refund.",
                     p.order_id());
  return fmt::format("{} is returned to the customer's {} for order {}.", money, p.payment_method(),
                     p.order_id());
}

Result<std::optional<pb::Operation>> latest_operation(store::Reader& reader,
                                                      const std::string& owner,
                                                      const std::string& order_id,
                                                      std::string_view kind) {
  OPGATE_ASSIGN_OR_RETURN(auto all, reader.operations_of_order(order_id));
  std::optional<pb::Operation> latest;
  int latest_version = 0;
  for (auto& op : all) {
    if (op.proposal().owner() != owner || op.proposal().kind() != kind) continue;
    const int v = key_version(op.key());
    if (v > latest_version) {
      latest_version = v;
      latest = std::move(op);
    }
  }
  return latest;
}

Status propose(store::Transaction& txn, pb::ToolCall& call, const pb::Proposal& proposal,
               const PolicyConfig& policy, const std::string& principal) {
  const std::string fp = fingerprint(proposal);
  OPGATE_ASSIGN_OR_RETURN(
      auto latest, latest_operation(txn, proposal.owner(), proposal.order_id(), proposal.kind()));
  if (!latest) return create_version(txn, call, proposal, fp, 1, policy, principal);
  if (proposed_fingerprint(*latest, proposal, policy) == fp)
    return link(txn, *latest, call, principal);
  if (!is(*latest, State::settled)) {
    stage_result(txn, call,
                 failure_result(fmt::format("A different proposal for this order ({}) is already "
                                            "awaiting a decision; it must settle first.",
                                            latest->key())));
    return Status::Ok();
  }
  // Bounded: every proposal reads the order's operations, and an agent
  // that proposes and withdraws in a loop would make that read grow.
  const int next = key_version(latest->key()) + 1;
  if (next > kMaxVersions) {
    stage_result(txn, call,
                 failure_result(fmt::format("This order has had {} proposals of this kind; no "
                                            "more are taken for it.",
                                            kMaxVersions)));
    return Status::Ok();
  }
  return create_version(txn, call, proposal, fp, next, policy, principal);
}

Result<bool> link_to_refund(store::Transaction& txn, pb::ToolCall& call, const std::string& owner,
                            const std::string& order_id, const std::string& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto latest, latest_operation(txn, owner, order_id, kFullRefund));
  if (!latest) return false;
  if (is(*latest, Outcome::rejected) || is(*latest, Outcome::expired)) return false;
  OPGATE_TRY(link(txn, *latest, call, principal));
  return true;
}

Result<bool> link_to_same_call(store::Transaction& txn, pb::ToolCall& call,
                               const std::string& owner, const std::string& order_id,
                               std::string_view kind, const std::string& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto latest, latest_operation(txn, owner, order_id, std::string(kind)));
  if (!latest || latest->calls_size() == 0) return false;
  if (is(*latest, Outcome::rejected) || is(*latest, Outcome::expired)) return false;
  OPGATE_ASSIGN_OR_RETURN(auto proposing, txn.call(latest->calls(0)));
  if (!proposing || !same_arguments(proposing->arguments_json(), call.arguments_json()))
    return false;
  OPGATE_TRY(link(txn, *latest, call, principal));
  return true;
}

}  // namespace opgate::operations
