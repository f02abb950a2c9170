#include "operator/auth.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>

#include "common/crypto.h"

namespace opgate::operator_api {

bool Principal::has_scope(std::string_view scope) const {
  return std::find(scopes.begin(), scopes.end(), scope) != scopes.end() ||
         std::find(scopes.begin(), scopes.end(), "admin") != scopes.end();
}

bool Principal::may_act_for(const std::string& owner) const {
  for (const auto& pattern : owners)
    if (fnmatch(pattern.c_str(), owner.c_str(), 0) == 0) return true;
  return false;
}

const Principal* authenticate(const std::vector<Principal>& principals,
                              const std::optional<std::string>& authorization) {
  if (!authorization) return nullptr;
  constexpr std::string_view prefix = "Bearer ";
  if (authorization->size() <= prefix.size() ||
      authorization->compare(0, prefix.size(), prefix) != 0)
    return nullptr;
  const std::string digest = crypto::sha256_hex(authorization->substr(prefix.size()));
  const Principal* found = nullptr;
  for (const auto& p : principals)
    if (crypto::equal_constant_time(digest, p.token_sha256) && !found) found = &p;
  return found;
}

Result<ApprovalStep> check_approval(const pb::Operation& op, const Principal& principal,
                                    const ApprovalRequest& request,
                                    std::optional<int64_t> two_person_threshold) {
  const auto& p = op.proposal();
  if (!principal.has_scope("operations:approve"))
    return make_error("forbidden", "This token may not approve operations.");
  if (op.state() != "pending")
    return make_error("invalid_state",
                      fmt::format("The operation is {}{}; it cannot be approved.", op.state(),
                                  op.outcome().empty() ? "" : "/" + op.outcome()));
  if (request.amount_minor != p.amount_minor() || request.currency != p.currency() ||
      !crypto::equal_constant_time(request.fingerprint, op.fingerprint()))
    return make_error("proposal_mismatch",
                      "The approval does not match the stored proposal (amount, currency or "
                      "fingerprint); fetch the operation again and approve what it shows.");
  if (!principal.may_act_for(p.owner()))
    return make_error("forbidden", "This token may not act for the operation's owner.");
  if (!principal.tiers.empty() &&
      std::find(principal.tiers.begin(), principal.tiers.end(), p.tier()) == principal.tiers.end())
    return make_error("forbidden",
                      fmt::format("This token may not approve {}-tier proposals.", p.tier()));
  auto limit = principal.max_amount_minor.find(p.currency());
  if (limit == principal.max_amount_minor.end() || p.amount_minor() > limit->second)
    return make_error("forbidden", "The amount is above this token's approval limit.");
  if (principal.name == p.owner())
    return make_error("self_approval", "A principal cannot approve its own operation.");
  for (const auto& a : op.approvals())
    if (a.principal() == principal.name) return ApprovalStep::repeat;
  const bool two_person = two_person_threshold && p.amount_minor() > *two_person_threshold;
  const int needed = two_person ? 2 : 1;
  return op.approvals_size() + 1 >= needed ? ApprovalStep::complete : ApprovalStep::recorded;
}

}  // namespace opgate::operator_api
