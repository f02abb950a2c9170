// The agent platform as opgate sees it: read a session's
// required actions, submit tool results, read turns and items. An interface,
// so the worker and outbox never see HTTP; AgentsHttpClient implements it.
// Implementations are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "opgate.pb.h"

namespace opgate::adapters {

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
};

struct Page {
  std::string json;  // the page as received
  bool has_more = false;
  std::string last_id;
};

class AgentsClient {
 public:
  virtual ~AgentsClient() = default;
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

struct AgentsHttpOptions {
  std::string base_url;  // ".../v1"
  std::string api_key;
  int timeout_ms = 10000;
  std::string ca_file;  // https only; empty = system store
};

std::unique_ptr<AgentsClient> make_agents_http_client(AgentsHttpOptions options);

}  // namespace opgate::adapters
