// The Model Context Protocol as opgate's front door speaks it (Streamable
// HTTP with JSON answers, revisions 2025-11-25 and 2025-06-18): JSON-RPC
// messages parsed strictly, the protocol versions and their negotiation, the
// session ids it hands out, the tools it publishes, and the shapes of tool
// results and tasks. Pure; thread-safe.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "operations/policy.h"
#include "opgate.pb.h"

namespace opgate::mcp {

namespace json = boost::json;

// Newest first: an initialize asking for another gets the newest.
inline constexpr std::string_view kProtocolVersions[] = {"2025-11-25", "2025-06-18"};
bool known_version(std::string_view version);
std::string_view negotiate(std::string_view requested);

// JSON-RPC error codes.
namespace rpc {
inline constexpr int parse_error = -32700;
inline constexpr int invalid_request = -32600;
inline constexpr int method_not_found = -32601;
inline constexpr int invalid_params = -32602;
inline constexpr int internal_error = -32603;
inline constexpr int server_error = -32000;
}  // namespace rpc

// One JSON-RPC message from the client: a request (id and method), a
// notification (method, no id) or a response to the server (id, no
// method).
struct Message {
  json::value id;  // null when absent
  bool has_id = false;
  std::string method;
  json::object params;
  bool is_request() const { return has_id && !method.empty(); }
};

struct RpcError {
  int code = rpc::invalid_request;
  std::string message;
};

// A single message (batches are not part of these revisions: invalid
// request); the id is a string or an integer.
std::variant<Message, RpcError> parse_message(std::string_view body);

std::string result_body(const json::value& id, json::object result);
std::string error_body(const json::value& id, int code, std::string_view message);

// Mcp-Session-Id: handed out at initialize, bound to the agent token and the
// negotiated version, and checkable by any node without shared state (an
// HMAC keyed by the token's hash, which only the server and the token's
// holder can compute). It carries no authority: every request still
// presents the token.
std::string mint_session(const pb::AgentToken& token, std::string_view version, int64_t now_ms);
// The negotiated version if the id is one this token was given.
std::optional<std::string> session_version(std::string_view session_id,
                                           const pb::AgentToken& token);

// The initialize result: the negotiated version, tools and tasks
// capabilities, the server's name and version, and instructions.
json::object initialize_result(std::string_view version);

// tools/list: every enabled tool with its strict schema as inputSchema,
// annotations, and taskSupport "optional" on each tool that can propose an
// operation; plus get_operation.
json::array tools(const operations::PolicyConfig& policy);
inline constexpr std::string_view kGetOperation = "get_operation";

// A tool's result as MCP has it: the output as text and, when it is a JSON
// object, as structuredContent. `operation_outcome` for a call linked to an
// operation: isError unless it succeeded (denied, expired, rejected are
// never shown as success); else isError when the call was refused.
json::object call_tool_result(const pb::ToolResult& result, bool linked_to_operation);

// What a proposing tool answers at once, before the operation is decided.
json::object pending_result(const pb::Operation& operation);

// A task: a tool call made with params.task, followed through its
// operation. "working" until the operation settles, then "completed"
// (whatever the outcome: the result says it), or "cancelled" when the
// agent withdrew it (tasks/cancel).
struct TaskState {
  std::string status;
  std::string message;
  bool terminal = false;
};
TaskState task_state(const pb::ToolCall& call, const std::optional<pb::Operation>& operation,
                     const operations::PolicyConfig& policy);
json::object task_json(const pb::ToolCall& call, const std::optional<pb::Operation>& operation,
                       const TaskState& state, int64_t poll_interval_ms);

// The reason a proposal withdrawn by its agent is denied with.
inline constexpr std::string_view kWithdrawnReason = "withdrawn by the agent";

// ISO 8601 UTC with milliseconds: "2026-12-03T09:30:00.123Z".
std::string iso8601(int64_t ms);

}  // namespace opgate::mcp
