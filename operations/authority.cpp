#include "operations/authority.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>

#include "common/crypto.h"
#include "operations/state_machine.h"

namespace opgate::operations {

bool Principal::has_scope(std::string_view s) const {
  return std::find(scopes.begin(), scopes.end(), s) != scopes.end() ||
         std::find(scopes.begin(), scopes.end(), scope::admin) != scopes.end();
}

bool Principal::may_act_for(const std::string& owner) const {
  for (const auto& pattern : owners)
    if (fnmatch(pattern.c_str(), owner.c_str(), 0) == 0) return true;
  return false;
}

bool Principal::decides_tier(std::string_view tier) const {
  return tiers.empty() || std::find(tiers.begin(), tiers.end(), tier) != tiers.end();
}

bool Principal::sees_every_owner() const {
  return std::find(owners.begin(), owners.end(), "*") != owners.end();
}

namespace {

// Why `principal`'s tier, limit or name keep it from approving `p`.
std::optional<Error> authority_refusal(const Principal& principal, const pb::Proposal& p) {
  if (!principal.decides_tier(p.tier()))
    return make_error(errc::forbidden,
                      fmt::format("This token may not approve {}-tier proposals.", p.tier()));
  auto limit = principal.max_amount_minor.find(p.currency());
  if (limit == principal.max_amount_minor.end() || p.amount_minor() > limit->second)
    return make_error(errc::forbidden, "The amount is above this token's approval limit.");
  if (principal.name == p.owner())
    return make_error(errc::self_approval, "A principal cannot approve its own operation.");
  return std::nullopt;
}

}  // namespace

bool may_approve(const Principal& principal, const pb::Proposal& proposal) {
  return principal.has_scope(scope::approve) && principal.may_act_for(proposal.owner()) &&
         !authority_refusal(principal, proposal);
}

Result<ApprovalStep> check_approval(const pb::Operation& op, const Principal& principal,
                                    const ApprovalRequest& request, int approvals_needed) {
  const auto& p = op.proposal();
  if (!principal.has_scope(scope::approve))
    return make_error(errc::forbidden, "This token may not approve operations.");
  if (!is(op, State::pending))
    return make_error(
        errc::invalid_state,
        fmt::format("The operation is {}{}; it cannot be approved.", state_text(op),
                    is(op, Outcome::none) ? "" : "/" + std::string(outcome_text(op))));
  if (request.amount_minor != p.amount_minor() || request.currency != p.currency() ||
      !crypto::equal_constant_time(request.fingerprint, op.fingerprint()))
    return make_error(errc::proposal_mismatch,
                      "The approval does not match the stored proposal (amount, currency or "
                      "fingerprint); fetch the operation again and approve what it shows.");
  if (auto refused = authority_refusal(principal, p)) return *refused;
  for (const auto& a : op.approvals())
    if (a.principal() == principal.name) return ApprovalStep::repeat;
  return op.approvals_size() + 1 >= approvals_needed ? ApprovalStep::complete
                                                     : ApprovalStep::recorded;
}

}  // namespace opgate::operations
