// The agent platform as the domain needs it (a port): read a session's
// required actions, submit tool results, read turns and items. Session
// sync, the outbox and the operator API never see HTTP
// (adapters/agents implements it over the Agents API). Implementations are
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "opgate.pb.h"

namespace opgate::operations {

struct RequiredAction {
  std::string call_id;
  std::string turn_id;
  std::string name;
  std::string arguments_json;  // always a JSON object's text
};

struct SessionView {
  std::string status;
  std::vector<RequiredAction> required_actions;
};

enum class SubmitVerdict {
  accepted,      // 2xx: the session has this result
  conflict,      // 409: a different result exists for the call
  unknown_call,  // 400 "Unknown pending tool call": the session moved on
  session_gone,  // 404 the platform's own, about this session: it has none
};

struct Page {
  std::string json;  // the page as received
  bool has_more = false;
  std::string last_id;
};

class AgentPlatform {
 public:
  virtual ~AgentPlatform() = default;
  // Error "session_not_found" is final (the platform has no such session);
  // any other error may be retried.
  virtual Result<SessionView> get_session(const std::string& session_id) = 0;
  // Errors are retryable (network, 5xx, 429); verdicts are final answers.
  virtual Result<SubmitVerdict> submit_result(const std::string& session_id,
                                              const pb::CallRef& call, const pb::ToolResult& result,
                                              const std::string& idempotency_key) = 0;
  virtual Result<std::string> get_turns(const std::string& session_id) = 0;
  virtual Result<Page> get_items(const std::string& session_id, const std::string& after,
                                 int limit) = 0;
};

}  // namespace opgate::operations
