#include "operations/decisions.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <vector>

#include "common/crypto.h"
#include "operations/agent_tokens.h"
#include "operations/escalation.h"
#include "operations/execution.h"
#include "operations/keys.h"
#include "operations/proposals.h"
#include "operations/settlement.h"
#include "operations/step_up.h"
#include "operations/transitions.h"
#include "operations/views.h"

namespace opgate::operations {

namespace json = boost::json;

Result<pb::Operation> visible_operation(store::Reader& reader, const std::string& key,
                                        const Principal& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto op, reader.operation(key));
  if (!op || !principal.may_act_for(op->proposal().owner()))
    return make_error(errc::not_found, "No operation with that key.");
  return std::move(*op);
}

Result<store::OperationHistory> visible_history(store::Reader& reader, const std::string& key,
                                                const Principal& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto found, reader.operation_history(key));
  if (!found || !principal.may_act_for(found->operation.proposal().owner()))
    return make_error(errc::not_found, "No operation with that key.");
  return std::move(*found);
}

namespace {

constexpr std::string_view kExpiredReason = "No decision was made before the approval time limit.";

// Settles a pending operation as expired.
Status settle_expired(store::Transaction& txn, pb::Operation& op, const std::string& noticed_by) {
  op.set_decision_reason(std::string(kExpiredReason));
  return settle(txn, op, Event::expire, "system",
                details({{"reason", "approval TTL passed"}, {"noticed_by", noticed_by}}));
}

// Settles a pending operation as denied by `principal` (an operator, or
// the agent withdrawing it), or, past its time limit, as the expiry it is,
// whether or not the sweeper has noticed yet.
Status settle_denied(store::Transaction& txn, pb::Operation& op, const std::string& principal,
                     const std::string& reason) {
  if (txn.now_ms() >= op.expires_at_ms()) return settle_expired(txn, op, principal);
  op.set_decided_by(principal);
  op.set_decision_reason(reason);
  return settle(txn, op, Event::deny, principal, details({{"reason", reason}}));
}

// Lowers a pending proposal's amount as the approver asked (see approve()),
// in memory: the request then names the lowered proposal. Returns the
// details the "narrow" audit record keeps once the approval is recorded.
Result<std::string> narrow(pb::Operation& op, const Principal& principal, ApprovalRequest& request,
                           const PolicyConfig& policy) {
  pb::Proposal& p = *op.mutable_proposal();
  // Lowering decides the proposal as it was made: a desk that may not
  // decide its tier may not lower it into its own either.
  if (!principal.decides_tier(p.tier()))
    return make_error(errc::forbidden,
                      fmt::format("This token may not decide {}-tier proposals, so it may not "
                                  "lower one either.",
                                  p.tier()));
  if (request.currency != p.currency())
    return make_error(errc::widening_refused,
                      "An approval cannot change the currency; only a lower amount.");
  if (request.amount_minor > p.amount_minor())
    return make_error(errc::widening_refused,
                      fmt::format("An approval may lower the amount, never raise it: {} is above "
                                  "the proposed {}.",
                                  format_money(request.amount_minor, p.currency()),
                                  format_money(p.amount_minor(), p.currency())));
  if (request.amount_minor <= 0)
    return make_error(errc::widening_refused, "A lowered amount must be above zero.");
  if (p.kind() == kCancelOrder)
    return make_error(errc::widening_refused,
                      "A cancellation refunds what remains of the order; its amount cannot be "
                      "lowered. Deny it instead.");
  const DeclaredOperation* declared =
      p.arguments_json().empty() ? nullptr : policy.declared_operation(p.kind());
  if (!p.arguments_json().empty() && (!declared || declared->money == Money::none))
    return make_error(errc::widening_refused,
                      "This operation's amount cannot be lowered; approve or deny it as "
                      "proposed.");
  if (request.edit_reason.empty())
    return make_error(errc::bad_request,
                      "edit_reason is required to approve a lower amount (what the agent is told "
                      "and the audit keeps).");
  const int64_t from = p.amount_minor();
  if (p.original_amount_minor() == 0) p.set_original_amount_minor(from);
  p.set_amount_minor(request.amount_minor);
  p.set_edited_by(principal.name);
  p.set_edit_reason(request.edit_reason);
  p.set_tier(tier_of(op, policy));
  if (!declared) {
    p.set_effect(effect_text(p));
  } else {
    // The executor is told the lowered amount: it is the amount argument.
    OPGATE_ASSIGN_OR_RETURN(auto arguments,
                            with_amount(*declared, p.arguments_json(), request.amount_minor));
    // The lowered arguments must still fit the declaration (its minimum):
    // refused here, the proposal stays as it is, for another decision.
    auto fits = check_declared_arguments(*declared, json::serialize(arguments));
    if (auto* why = std::get_if<std::string>(&fits))
      return make_error(errc::widening_refused,
                        fmt::format("The lowered amount does not fit the declaration: {}", *why));
    p.set_arguments_json(json::serialize(arguments));
    p.set_effect(fmt::format(
        "{} (lowered by the approver from {})",
        render_effect(*declared, arguments, format_money(p.amount_minor(), p.currency()),
                      p.order_id(), p.customer(), p.payment_method()),
        format_money(p.original_amount_minor(), p.currency())));
  }
  const std::string discarded = proposal_changed(op);
  request.fingerprint = op.fingerprint();
  return details({{"from_amount_minor", std::to_string(from)},
                  {"to_amount_minor", std::to_string(request.amount_minor)},
                  {"original_amount_minor", std::to_string(p.original_amount_minor())},
                  {"edit_reason", request.edit_reason},
                  {"tier", p.tier()},
                  {"discarded_approvals", discarded}});
}

// An approval names its token by this many hex digits of its SHA-256.
constexpr size_t kTokenIdDigits = 16;

// Discards the approvals of a pending operation whose approver may no
// longer approve it, or whose token is no longer configured (approve(),
// `in_force`).
Status drop_lapsed_approvals(store::Transaction& txn, pb::Operation& op,
                             const std::vector<Principal>& in_force, const std::string& by) {
  if (!is(op, State::pending)) return Status::Ok();
  std::string lapsed;
  google::protobuf::RepeatedPtrField<pb::Approval> kept;
  for (const auto& a : op.approvals()) {
    const bool holds = std::any_of(in_force.begin(), in_force.end(), [&](const Principal& p) {
      return p.name == a.principal() && p.token_sha256.starts_with(a.token_id()) &&
             may_approve(p, op.proposal());
    });
    if (holds)
      *kept.Add() = a;
    else
      lapsed += (lapsed.empty() ? "" : ",") + a.principal();
  }
  if (lapsed.empty()) return Status::Ok();
  *op.mutable_approvals() = std::move(kept);
  return save_with_audit(txn, op, "approval_lapsed", by,
                         details({{"discarded_approvals", lapsed},
                                  {"reason", "the approver may no longer approve this proposal"}}));
}

}  // namespace

Result<Approved> approve(store::Transaction& txn, const std::string& key,
                         const Principal& authenticated, const ApprovalRequest& request,
                         const PolicyConfig& policy, const std::optional<SourcedOrder>& sourced,
                         const std::optional<ClaimAtOnce>& claim_at_once,
                         const std::vector<Principal>* in_force) {
  // The approver as configured now, not as when its request came in (it may
  // have waited on the order service across a reload): a token revoked or
  // replaced meanwhile approves nothing, and changed scopes, tiers and
  // limits apply at once.
  const Principal* current = &authenticated;
  if (in_force) {
    auto it = std::find_if(in_force->begin(), in_force->end(), [&](const Principal& p) {
      return p.name == authenticated.name && p.token_sha256 == authenticated.token_sha256;
    });
    if (it == in_force->end())
      return make_error(errc::unauthorized,
                        "This token was revoked or replaced while the approval was on its way; "
                        "it approves nothing.");
    current = &*it;
  }
  const Principal& principal = *current;
  OPGATE_ASSIGN_OR_RETURN(pb::Operation op, visible_operation(txn, key, principal));
  if (!principal.has_scope(scope::approve))
    return make_error(errc::forbidden, "This token may not approve operations.");
  Approved out;
  const std::string shown_tier = op.proposal().tier();
  OPGATE_ASSIGN_OR_RETURN(const bool retiered, retier(txn, op, policy, principal.name));
  if (retiered) {
    out.refusal = make_error(
        errc::proposal_mismatch,
        fmt::format("The policy in force puts this proposal in the {} tier, not {}: it was "
                    "re-tiered (new fingerprint, earlier approvals discarded). Fetch it again "
                    "and approve what it shows.",
                    op.proposal().tier(), shown_tier));
    return out;
  }
  if (in_force) OPGATE_TRY(drop_lapsed_approvals(txn, op, *in_force, principal.name));
  // A lower amount is applied to a copy first: an approval refused below
  // keeps nothing of it, and an expiry or rejection settles what was proposed.
  ApprovalRequest asked = request;
  const pb::Operation as_proposed = op;
  std::optional<std::string> narrowed;
  if (is(op, State::pending) &&
      (asked.amount_minor != op.proposal().amount_minor() ||
       asked.currency != op.proposal().currency()) &&
      crypto::equal_constant_time(asked.fingerprint, op.fingerprint())) {
    OPGATE_ASSIGN_OR_RETURN(narrowed, narrow(op, principal, asked, policy));
  }
  const auto& p = op.proposal();
  OPGATE_ASSIGN_OR_RETURN(const ApprovalStep step,
                          check_approval(op, principal, asked, approvals_needed(p, policy)));
  out.step = step;
  if (step == ApprovalStep::repeat) return out;  // the same answer; nothing written
  // Proposed through an agent token this principal minted: its own, too.
  OPGATE_ASSIGN_OR_RETURN(auto minted, agent_token_of_session(txn, op.session_id()));
  if (minted && minted->created_by() == principal.name)
    return make_error(errc::self_approval,
                      "A principal cannot approve what an agent token it minted proposed.");
  const bool step_up = step_up_required(as_proposed.proposal(), policy.step_up) ||
                       step_up_required(p, policy.step_up);
  if (step_up && !request.step_up)
    return make_error(errc::step_up_required,
                      "Approving this proposal needs a passkey: approve it in the console, "
                      "which asks your passkey to sign it.");

  if (txn.now_ms() >= op.expires_at_ms()) {
    op = as_proposed;
    OPGATE_TRY(settle_expired(txn, op, principal.name));
    out.refusal = make_error(errc::expired,
                             "The approval time limit passed before this approval; the operation "
                             "expired and the session is told.");
    return out;
  }
  OPGATE_ASSIGN_OR_RETURN(const Recheck now, recheck_now(txn, p, policy, sourced));
  if (now.refusal) {
    op = as_proposed;
    const std::string& reason = *now.refusal;
    op.set_decided_by(principal.name);
    op.set_decision_reason(reason);
    OPGATE_TRY(settle(txn, op, Event::reject, principal.name, details({{"reason", reason}})));
    out.refusal = make_error(now.order_changed ? errc::order_changed : errc::policy_refused,
                             reason + " The operation is rejected and the session is told.");
    return out;
  }

  // Last before the approval is written, so that nothing after it can fail
  // but the write itself: the challenge is used up with the approval.
  if (step_up)
    OPGATE_TRY(check_step_up(txn, principal.name, key, request.fingerprint, *request.step_up));
  if (narrowed) OPGATE_TRY(save_with_audit(txn, op, "narrow", principal.name, *narrowed));
  auto* approval = op.add_approvals();
  approval->set_principal(principal.name);
  approval->set_at_ms(txn.now_ms());
  approval->set_token_id(principal.token_sha256.substr(0, kTokenIdDigits));
  // What was approved, and the policy it was approved under.
  json::object shown{{"amount_minor", asked.amount_minor},
                     {"currency", asked.currency},
                     {"tier", p.tier()},
                     {"approvals_needed", approvals_needed(p, policy)},
                     {"step_up", step_up},
                     {"policy_sha256", policy_sha256(policy)}};
  if (p.original_amount_minor() != 0) shown["original_amount_minor"] = p.original_amount_minor();
  const std::string d = json::serialize(shown);
  if (step == ApprovalStep::recorded) {
    OPGATE_TRY(save_with_audit(txn, op, "approval_recorded", principal.name, d));
    return out;
  }
  OPGATE_TRY(apply(txn, op, Event::approve, principal.name, d));
  pb::OutboxItem item;
  item.set_kind(pb::OUTBOX_EXECUTE);
  item.set_operation_key(key);
  item.set_order_id(op.proposal().order_id());
  if (claim_at_once) {
    // The order and the policy were re-checked above, in this transaction.
    OPGATE_ASSIGN_OR_RETURN(out.claimed, claim_checked(txn, std::move(op), policy));
    item.set_not_before_ms(txn.now_ms() + claim_at_once->lease_ms);
    item.set_lease_token(claim_at_once->lease_token);
  }
  txn.enqueue(std::move(item));
  return out;
}

Result<bool> retier(store::Transaction& txn, pb::Operation& op, const PolicyConfig& policy,
                    const std::string& principal) {
  if (!is(op, State::pending)) return false;
  const std::string tier = tier_of(op, policy);
  if (tier == op.proposal().tier()) return false;
  const std::string from = op.proposal().tier();
  op.mutable_proposal()->set_tier(tier);
  const std::string discarded = proposal_changed(op);
  OPGATE_TRY(save_with_audit(
      txn, op, "retier", principal,
      details({{"from_tier", from}, {"to_tier", tier}, {"discarded_approvals", discarded}})));
  return true;
}

Result<size_t> retier_pending(store::Storage& storage, const PolicyConfig& policy) {
  store::OperationQuery q;
  q.state = pb::STATE_PENDING;
  q.limit = 500;
  size_t changed = 0;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, storage.reader().operations(q));
    for (const auto& found : page.operations) {
      if (tier_of(found, policy) == found.proposal().tier()) continue;
      bool done = false;
      OPGATE_TRY(storage.transact([&](store::Transaction& txn) -> Status {
        OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(found.key()));
        if (!op) return Status::Ok();
        OPGATE_ASSIGN_OR_RETURN(done, retier(txn, *op, policy, "system"));
        return Status::Ok();
      }));
      if (done) ++changed;
    }
    if (page.next_after.empty()) return changed;
    q.after = page.next_after;
  }
}

Status deny(store::Transaction& txn, const std::string& key, const Principal& principal,
            const std::string& reason) {
  OPGATE_ASSIGN_OR_RETURN(pb::Operation op, visible_operation(txn, key, principal));
  if (!principal.has_scope(scope::approve))
    return make_error(errc::forbidden, "This token may not deny operations.");
  if (!principal.decides_tier(op.proposal().tier()))
    return make_error(errc::forbidden, fmt::format("This token may not decide {}-tier proposals.",
                                                   op.proposal().tier()));
  if (is(op, Outcome::denied) && op.decided_by() == principal.name) return Status::Ok();
  // Expired (the sweeper's doing, or a late deny's): the denier, who wanted
  // nothing paid, reads that outcome in the answer, now and when it asks
  // again.
  if (is(op, Outcome::expired)) return Status::Ok();
  if (!is(op, State::pending))
    return make_error(errc::invalid_state, "Only pending operations can be denied.");
  return settle_denied(txn, op, principal.name, reason);
}

Status withdraw(store::Transaction& txn, const std::string& key, const std::string& owner,
                const std::string& principal, const std::string& reason) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op || op->proposal().owner() != owner)
    return make_error(errc::not_found, "No operation with that key.");
  if (!is(*op, State::pending))
    return make_error(errc::invalid_state,
                      fmt::format("The operation is {} already; it can no longer be withdrawn.",
                                  state_text(*op)));
  return settle_denied(txn, *op, principal, reason);
}

Result<bool> expire(store::Transaction& txn, const std::string& key) {
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op || !is(*op, State::pending) || op->expires_at_ms() > txn.now_ms()) return false;
  OPGATE_TRY(settle_expired(txn, *op, "system"));
  return true;
}

Status resolve(store::Transaction& txn, const std::string& key, const Principal& principal,
               const Resolution& r) {
  OPGATE_ASSIGN_OR_RETURN(pb::Operation op, visible_operation(txn, key, principal));
  if (!principal.has_scope(scope::resolve))
    return make_error(errc::forbidden, "This token may not resolve operations.");
  if (!is(op, State::outcome_unknown))
    return make_error(errc::invalid_state, "Only operations in outcome_unknown can be resolved.");
  if (r.outcome != Outcome::succeeded && r.outcome != Outcome::failed)
    return make_error(errc::bad_request, "outcome must be succeeded or failed.");
  const bool ok = r.outcome == Outcome::succeeded;
  // The provider answered with an object still on its way: it may yet pay
  // out, and a failure recorded now would free the order for another refund.
  // Its end is the provider's to say (the reconciler settles it then), or it
  // is cancelled there first.
  if (!ok && !op.provider_object_id().empty() &&
      (op.provider_status() == "pending" || op.provider_status() == "requires_action"))
    return make_error(
        errc::invalid_state,
        fmt::format("The provider holds {} in status {}: it may still pay out. It cannot be "
                    "resolved as failed while it may; cancel it at the provider, and the "
                    "reconciler settles it failed.",
                    op.provider_object_id(), op.provider_status()));
  op.set_decided_by(principal.name);
  op.set_evidence(r.evidence);
  // The session hears the outcome and a neutral reason; the evidence (ticket
  // numbers, names) stays in the record and the audit trail.
  op.set_decision_reason(ok ? "The payment provider's records confirm it was paid out."
                            : "The payment provider's records confirm it was not paid out.");
  // An object the provider named, replaced by another on-call names (one
  // tagged with the key by hand, say), stays named in the record.
  std::string replaced;
  if (!r.provider_object_id.empty() && op.provider_object_id() != r.provider_object_id)
    replaced = op.provider_object_id();
  if (!r.provider_object_id.empty()) op.set_provider_object_id(r.provider_object_id);
  std::string audited =
      replaced.empty()
          ? details({{"evidence", r.evidence}, {"provider_object_id", r.provider_object_id}})
          : details({{"evidence", r.evidence},
                     {"provider_object_id", r.provider_object_id},
                     {"replaced_provider_object_id", replaced}});
  return settle(txn, op, ok ? Event::resolve_succeeded : Event::resolve_failed, principal.name,
                audited);
}

}  // namespace opgate::operations
