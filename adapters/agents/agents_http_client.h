// The agent platform port (operations/agent_platform.h) over an
// OpenAI-style Agents API (beta header, bearer key, Idempotency-Key on every
// result). Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "operations/agent_platform.h"

namespace opgate::adapters {

struct AgentsHttpOptions {
  std::string base_url;  // ".../v1"
  std::string api_key;
  int timeout_ms = 10000;
  std::string ca_file;  // https only; empty = system store
};

std::unique_ptr<operations::AgentPlatform> make_agents_http_client(AgentsHttpOptions options);

}  // namespace opgate::adapters
