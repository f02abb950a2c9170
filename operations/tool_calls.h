// A tool call of an agent, answered in one transaction: recorded, then
// answered at once (a lookup, a note, a refusal) or linked to the operation
// it proposes, whose settlement answers it later. The same for a session's
// required action (agent_sessions/) and an MCP tools/call (mcp/). Call
// inside Storage::transact; fetch_orders before it (no network call is made
// inside a transaction).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/result.h"
#include "operations/order_service.h"
#include "operations/policy.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// What the order service answered for each order some calls name, by id.
using FetchedOrders = std::map<std::string, FetchedOrder>;

// Reads from `service` every order the calls' arguments name (their
// order_id), counting each read; empty without a service (embedded orders).
FetchedOrders fetch_orders(OrderService* service, const std::vector<std::string>& arguments_json,
                           Metrics& metrics);

// The most a call's arguments may hold: kept whole in its record, larger
// ones are refused (a declared tool of many long strings can reach it).
inline constexpr size_t kMaxArgumentBytes = 64 * 1024;

struct AgentCall {
  pb::CallRef ref;
  std::string name;
  std::string arguments_json;  // a JSON object's text, as the model sent it
  // Whom the agent acts for: the session's bound owner, or the agent
  // token's owner. Never taken from the arguments.
  std::string owner;
  // Who proposes, in the audit: "system" for a session's call, or
  // "agent:{id}" for an agent token's.
  std::string principal = "system";
  bool mcp = false;  // its result is read over MCP, not posted to a session
  // An MCP call's agent token (its SHA-256, hex): checked again in the
  // transaction that stores the call, so that a call racing the token's
  // revocation makes nothing (mcp/call_committer.h).
  std::string agent_token_sha256{};
};

struct AnsweredCall {
  pb::ToolCall call;    // as recorded: its result, or the operation it is linked to
  std::string outcome;  // "ok", "refused" or "proposal" (metrics)
};

// Answers a call not recorded yet. `fetched` holds the order service's
// answers (nullptr for embedded orders: the store's copy is the order).
Result<AnsweredCall> answer_call(store::Transaction& txn, const AgentCall& request,
                                 const PolicyConfig& policy, const FetchedOrders* fetched);

}  // namespace opgate::operations
