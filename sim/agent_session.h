// One agent session driven by a scripted model: a script of steps, each one
// function call or several issued together (as models do in one step); the
// step's results are recorded, and once all are in the script advances; at
// the end the model answers with a message that reflects the last result.
// Pure state machine with no clock, sockets or locks of its own.
// Not thread-safe: the owner serialises access.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace opgate::sim {

struct ScriptCall {
  std::string name;  // the function to call
  // Its arguments. A string "$call:N" anywhere in them is replaced by the
  // id of the turn's Nth call (0-based, in the order issued): a note cites
  // the lookup it rests on.
  boost::json::object arguments;
};

struct ScriptStep {
  std::vector<ScriptCall> calls;  // issued together, in one step
  bool fail = false;              // instead of calls: the model fails the turn
};

constexpr size_t kMaxScriptSteps = 100;
constexpr size_t kMaxCallsPerStep = 16;

// Parses [{"name","arguments":{...}} | {"calls":[{"name","arguments"}, ...]}
// | {"fail":true}, ...].
Result<std::vector<ScriptStep>> parse_script(const boost::json::value& value);
// lookup_order then request_refund for the first ORDER-xxx in the input
// (ORDER-100 if none).
std::vector<ScriptStep> default_script(std::string_view input);

struct ToolResult {
  std::string turn_id;
  std::string call_id;
  bool success = false;
  std::string output;
  std::string error;
  bool operator==(const ToolResult&) const = default;
};

// Parses one "agent.session.input.tool_result" event.
Result<ToolResult> parse_tool_result(const boost::json::value& event);

// The model's closing sentence for the last call and its result.
std::string closing_message(std::string_view function_name, const boost::json::object& arguments,
                            const ToolResult& result);

enum class ResultCheck {
  kAccept,     // answers the pending call
  kDuplicate,  // the same result was already recorded: safe resend
  kConflict,   // a different result was already recorded for this call
  kUnknown,    // the call is not pending (never was, or the turn does not match)
};

class AgentSession {
 public:
  // Makes identifiers: called with "turn_", "call_" or "item_".
  using IdSource = std::function<std::string(std::string_view prefix)>;

  static constexpr size_t kMaxTurns = 100;

  AgentSession(std::string id, int64_t created_at, IdSource ids);

  // Adds the user's message and a new root turn that will run `script`.
  // Errors: "session_busy" while a turn is running, "too_many_turns".
  Result<std::string> start_turn(std::string input, std::vector<ScriptStep> script, int64_t now);
  // True while the model has its next move to make (no call pending).
  bool wants_advance() const;
  // The model's next move: issue the next call (returns true: a tool result
  // is now required), or finish or fail the turn (returns false).
  bool advance(int64_t now);

  ResultCheck check(const ToolResult& result) const;
  // Records a result that check() accepted; the session then wants_advance().
  void record(const ToolResult& result);

  const std::string& id() const { return id_; }
  // "idle" | "in_progress" | "requires_action" | "failed"
  const std::string& status() const { return status_; }
  bool requires_action() const { return !pending_.empty(); }

  boost::json::object session_json() const;  // the API's agents.session object
  boost::json::array turns_json() const;
  const std::vector<boost::json::object>& items() const { return items_; }
  boost::json::object debug_json() const;  // everything, for /_sim/

 private:
  struct Turn {
    std::string id;
    std::string status;  // in_progress | waiting | completed | failed
    int64_t created_at = 0;
    std::vector<ScriptStep> script;
    size_t next_step = 0;
    std::vector<std::string> call_ids;  // every call issued in the turn, in order
  };
  struct Call {
    std::string call_id;
    std::string turn_id;
    std::string name;
    boost::json::object arguments;
  };

  void add_item(boost::json::object item);

  std::string id_;
  int64_t created_at_;
  IdSource ids_;
  std::string status_ = "idle";
  std::vector<Turn> turns_;
  std::vector<boost::json::object> items_;
  std::vector<Call> pending_;  // the calls of the current step not answered yet
  std::optional<Call> last_call_;
  std::optional<ToolResult> last_result_;
  std::map<std::string, ToolResult> answered_;  // call_id -> recorded result
  std::map<std::string, Call> calls_;           // every call issued
};

}  // namespace opgate::sim
