// Who may read and decide what: a principal's scopes, the owners it may
// see and act for (glob patterns; none configured means none), the approval
// tiers it may decide and its per-currency approval limit, and the checks
// an approval must pass. Pure; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "operations/step_up.h"
#include "opgate.pb.h"

namespace opgate::operations {

namespace scope {
inline constexpr std::string_view read = "operations:read";
inline constexpr std::string_view approve = "operations:approve";
inline constexpr std::string_view resolve = "operations:resolve";
inline constexpr std::string_view bind = "sessions:bind";
inline constexpr std::string_view admin = "admin";
}  // namespace scope

struct Principal {
  std::string name;
  std::string token_sha256;  // lowercase hex
  std::vector<std::string> scopes;
  // Glob patterns of the owners whose operations, sessions, ledger rows,
  // audit records and transcripts this principal may read or act on. Empty
  // means none: an unscoped token sees nothing.
  std::vector<std::string> owners;
  std::map<std::string, int64_t> max_amount_minor;
  // Approval tiers this token may decide ("refund", "support", "supervisor");
  // empty means every tier. A support desk token lists only "support".
  std::vector<std::string> tiers;

  // "admin" holds every scope.
  bool has_scope(std::string_view scope) const;
  bool may_act_for(const std::string& owner) const;
  // Whether this token may decide (approve or deny) proposals of `tier`.
  bool decides_tier(std::string_view tier) const;
  // A pattern "*": every owner, so whole-store facts (the audit chain's
  // length and its problems, which name other owners' keys) may be shown.
  bool sees_every_owner() const;
};

// What the approver saw (currency and fingerprint) and approves. An amount
// below the proposal's, with an edit_reason, lowers it (decisions.h).
struct ApprovalRequest {
  int64_t amount_minor = 0;
  std::string currency;
  std::string fingerprint;
  std::string edit_reason;
  // A passkey's assertion, where the policy asks for a step-up (step_up.h).
  std::optional<StepUpProof> step_up;
};

enum class ApprovalStep {
  recorded,  // one approval of the two needed
  complete,  // every approval needed is present
  repeat,    // this principal approved before: nothing changes
};

// Whether `principal` may approve `proposal` now: the scope, its owner in
// sight and not the principal's own, the tier and the limit.
bool may_approve(const Principal& principal, const pb::Proposal& proposal);

// Checks a principal's approval of a pending operation that needs
// `approvals_needed` distinct approvers. Errors: forbidden, self_approval,
// proposal_mismatch, invalid_state.
Result<ApprovalStep> check_approval(const pb::Operation& op, const Principal& principal,
                                    const ApprovalRequest& request, int approvals_needed);

}  // namespace opgate::operations
