// Trying a policy on recorded history before rolling it out: what a
// recorded proposal would meet under another policy than the one in force —
// its tier, the approvals it needs, a passkey step-up, or a refusal (the
// tool disabled; a credit over the cap, in a currency without one, or with
// a reason code no longer allowed). Judged from what was recorded: the
// refund window and what remained of the order are not (the order as it
// was then is not kept). Pure; thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "operations/policy.h"
#include "opgate.pb.h"

namespace opgate::operations {

struct ReplayDifference {
  std::string what;  // "tier", "approvals_needed", "step_up", "refused"
  std::string was;
  std::string would_be;
};

// The differences for `proposal` (as recorded, with the tier it was given)
// between `current` and `next`; none if the policies agree on it.
std::vector<ReplayDifference> replay_proposal(const pb::Proposal& proposal,
                                              const PolicyConfig& current,
                                              const PolicyConfig& next);

// The policy that policy_json() (views.h) shows, read back: how the CLI
// learns the policy in force from GET /v1/policy. bad_request if a field is
// missing or of the wrong type.
Result<PolicyConfig> policy_from_json(const boost::json::object& shown);

}  // namespace opgate::operations
