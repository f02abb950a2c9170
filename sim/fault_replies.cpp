#include "sim/fault_replies.h"

#include <string>

namespace opgate::sim {

http::Response before_commit_response(const FaultRule& rule, const FaultReplies& replies) {
  http::Response r;
  switch (rule.action) {
    case FaultAction::kDropBeforeCommit:
      r.drop = true;
      return r;
    case FaultAction::kRateLimit:
      r = replies.rate_limited();
      r.headers["Retry-After"] = std::to_string(rule.retry_after_s);
      return r;
    default:
      return replies.server_error();
  }
}

http::Response after_commit_response(const std::optional<FaultRule>& rule, http::Response processed,
                                     const FaultReplies& replies) {
  if (rule && rule->action == FaultAction::kDropAfterCommit) {
    http::Response r;
    r.drop = true;
    return r;
  }
  if (rule && rule->action == FaultAction::kError500AfterCommit) return replies.server_error();
  return processed;
}

}  // namespace opgate::sim
