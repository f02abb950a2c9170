// The tools offered to the model and their dispatch: the
// arguments are validated outside the model, and the server computes every
// consequential field. Pure: orders come through a lookup function and time
// is a parameter. Thread-safe.
#pragma once

#include <boost/json/array.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "operations/policy.h"
#include "opgate.pb.h"

namespace opgate::operations {

// The longest internal note accepted, in bytes.
inline constexpr size_t kNoteMaxChars = 2000;
inline constexpr size_t kDraftMaxChars = 4000;

// The JSON tool definitions for session creation: the tools the policy
// enables, in kToolNames order.
std::string tool_definitions_json(const operations::PolicyConfig& policy = {});
// The same, as JSON: [{"type":"function","name","description","parameters",
// "strict"}], for the MCP front door to publish with its own fields.
boost::json::array tool_definitions(const PolicyConfig& policy);

// An order and what opgate already moved for it.
struct OrderView {
  pb::Order order;
  pb::OrderFunds funds;
};
// The order with this id, or nothing; an error if it cannot be read (the
// tool call then fails as a whole rather than answering "not found"), except
// "orders_unavailable" (the order service did not answer), which the tool
// answers as a temporary refusal.
using OrderLookup = std::function<Result<std::optional<OrderView>>(const std::string& order_id)>;

// The session's call with that id, if it has one (the evidence an internal
// note may cite).
using CallsLookup = std::function<Result<std::optional<pb::ToolCall>>(const std::string& call_id)>;

// An internal note the server accepted: its evidence was checked.
struct Note {
  std::string order_id;
  std::string text;
  std::vector<std::string> evidence;  // call ids of this session
};

// A reply to the customer the agent drafted, for a person to send.
struct DraftReply {
  std::string order_id;
  std::string text;
};

// Exactly one of `result` (answer now), `proposal` (create or link an
// operation, answer when it settles), `note` (store it, then answer with
// note_result) or `draft` (store it, then answer with draft_result) is set.
struct ToolOutcome {
  std::optional<pb::ToolResult> result;
  std::optional<pb::Proposal> proposal;
  // The order the call was shown or acted on (kept on the call: evidence).
  std::string order_id;
  // Set with a successful add_internal_note: stored and audited.
  std::optional<Note> note;
  // Set with a successful draft_customer_reply: stored and audited.
  std::optional<DraftReply> draft;
};

// `owner` is the session's bound owner. `arguments_json` is the model's
// arguments as JSON text (an object).
// `session_calls` is needed by add_internal_note only. A tool the policy
// disables is refused like an unknown one.
Result<ToolOutcome> dispatch_tool(std::string_view name, std::string_view arguments_json,
                                  const std::string& owner, const OrderLookup& lookup,
                                  const PolicyConfig& policy, int64_t now_s,
                                  const CallsLookup& session_calls = {});

// The answer to a stored note: {"status":"noted","note_id",...}; `note_id`
// is the note's key (operations::note_key of its call).
pb::ToolResult note_result(const Note& note, std::string_view note_id);
// The answer to draft_customer_reply once the draft is stored.
pb::ToolResult draft_result(const DraftReply& draft, std::string_view draft_id);

// The kind of operation a proposing tool proposes (request_refund's
// "full-refund", a declared operation's name), or nothing for a tool that
// proposes none.
std::optional<std::string> proposal_kind(std::string_view tool, const PolicyConfig& policy);

// The valid order_id argument of any tool call, or nothing.
std::optional<std::string> order_id_argument(std::string_view arguments_json);

// The order id of a well-formed request_refund call (the same checks the
// tool makes), or nothing.
std::optional<std::string> refund_order_id(std::string_view arguments_json);

}  // namespace opgate::operations
