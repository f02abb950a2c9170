// Operator authentication and authority: bearer tokens matched by SHA-256
// (only hashes are configured), scopes, owner patterns and per-currency
// approval limits. Pure functions; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "opgate.pb.h"

namespace opgate::operator_api {

struct Principal {
  std::string name;
  std::string token_sha256;  // lowercase hex
  std::vector<std::string> scopes;
  std::vector<std::string> owners{"*"};  // glob patterns
  std::map<std::string, int64_t> max_amount_minor;
  // Approval tiers this token may decide ("refund", "support", "supervisor");
  // empty means every tier. A support desk token lists only "support".
  std::vector<std::string> tiers;

  bool has_scope(std::string_view scope) const;
  bool may_act_for(const std::string& owner) const;
};

// The principal whose token hash matches the "Authorization: Bearer" value;
// every configured hash is compared, in constant time.
const Principal* authenticate(const std::vector<Principal>& principals,
                              const std::optional<std::string>& authorization);

struct ApprovalRequest {
  int64_t amount_minor = 0;
  std::string currency;
  std::string fingerprint;
};

enum class ApprovalStep { recorded, complete, repeat };

// Checks a principal's approval of a pending operation. Errors carry the
// HTTP-facing code: "forbidden" (403), "proposal_mismatch" (409),
// "self_approval" (403), "invalid_state" (409). `two_person_threshold` is the
// amount above which two distinct approvers are needed (absent: never).
Result<ApprovalStep> check_approval(const pb::Operation& op, const Principal& principal,
                                    const ApprovalRequest& request,
                                    std::optional<int64_t> two_person_threshold);

}  // namespace opgate::operator_api
