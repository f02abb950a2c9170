#include "sim/agent_session.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cctype>
#include <charconv>

#include "sim/sim_errors.h"

namespace opgate::sim {
namespace json = boost::json;

namespace {

constexpr size_t kMaxNameLength = 64;
constexpr size_t kMaxQuotedOutput = 500;

const json::string* string_field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? &v->as_string() : nullptr;
}

std::string scalar_text(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  return json::serialize(v);
}

std::string subject_of(std::string_view function_name) {
  if (function_name == "request_refund") return "Refund";
  if (function_name == "issue_account_credit") return "Account credit";
  if (function_name == "lookup_order") return "Order lookup";
  return std::string(function_name);
}

}  // namespace

namespace {

Result<ScriptCall> parse_call(const json::object& o, const std::string& where) {
  ScriptCall call;
  for (const auto& [key, v] : o) {
    if (key == "name") {
      if (!v.is_string() || v.as_string().empty() || v.as_string().size() > kMaxNameLength)
        return make_error(sim_errc::invalid_script,
                          where + "name must be a string of 1-64 characters");
      call.name = std::string(v.as_string());
    } else if (key == "arguments") {
      if (!v.is_object())
        return make_error(sim_errc::invalid_script, where + "arguments must be an object");
      call.arguments = v.as_object();
    } else {
      return make_error(sim_errc::invalid_script,
                        where + "unknown field \"" + std::string(key) + "\"");
    }
  }
  if (call.name.empty()) return make_error(sim_errc::invalid_script, where + "name is required");
  return call;
}

// A copy of `v` with every string "$call:N" replaced by the id of call N.
Result<json::value> with_call_ids(const json::value& v, const std::vector<std::string>& ids) {
  if (v.is_string() && v.as_string().starts_with("$call:")) {
    const std::string n(v.as_string().subview(6));
    size_t index = 0;
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec != std::errc() || end != n.data() + n.size() || index >= ids.size())
      return make_error(sim_errc::invalid_script,
                        "\"" + std::string(v.as_string()) + "\" names no call issued before it");
    return json::value(ids[index]);
  }
  if (v.is_array()) {
    json::array out;
    for (const auto& e : v.as_array()) {
      OPGATE_ASSIGN_OR_RETURN(auto x, with_call_ids(e, ids));
      out.push_back(std::move(x));
    }
    return json::value(std::move(out));
  }
  if (v.is_object()) {
    json::object out;
    for (const auto& [k, e] : v.as_object()) {
      OPGATE_ASSIGN_OR_RETURN(auto x, with_call_ids(e, ids));
      out[k] = std::move(x);
    }
    return json::value(std::move(out));
  }
  return v;
}

}  // namespace

Result<std::vector<ScriptStep>> parse_script(const json::value& value) {
  if (!value.is_array()) return make_error(sim_errc::invalid_script, "script must be an array");
  const auto& arr = value.as_array();
  if (arr.size() > kMaxScriptSteps)
    return make_error(sim_errc::invalid_script, "script may have at most 100 steps");
  std::vector<ScriptStep> steps;
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string where = "script[" + std::to_string(i) + "]: ";
    if (!arr[i].is_object())
      return make_error(sim_errc::invalid_script, where + "must be an object");
    const auto& o = arr[i].as_object();
    ScriptStep step;
    if (const auto* fail = o.if_contains("fail")) {
      if (o.size() != 1) return make_error(sim_errc::invalid_script, where + "fail stands alone");
      if (!fail->is_bool())
        return make_error(sim_errc::invalid_script, where + "fail must be a boolean");
      step.fail = fail->as_bool();
    } else if (const auto* calls = o.if_contains("calls")) {
      if (o.size() != 1) return make_error(sim_errc::invalid_script, where + "calls stands alone");
      if (!calls->is_array() || calls->as_array().empty() ||
          calls->as_array().size() > kMaxCallsPerStep)
        return make_error(sim_errc::invalid_script,
                          where + "calls must be a list of 1-16 calls made together");
      for (size_t j = 0; j < calls->as_array().size(); ++j) {
        const auto& c = calls->as_array()[j];
        const std::string at = where + "calls[" + std::to_string(j) + "]: ";
        if (!c.is_object()) return make_error(sim_errc::invalid_script, at + "must be an object");
        OPGATE_ASSIGN_OR_RETURN(auto call, parse_call(c.as_object(), at));
        step.calls.push_back(std::move(call));
      }
    } else {
      OPGATE_ASSIGN_OR_RETURN(auto call, parse_call(o, where));
      step.calls.push_back(std::move(call));
    }
    if (!step.fail && step.calls.empty())
      return make_error(sim_errc::invalid_script, where + "name is required");
    steps.push_back(std::move(step));
  }
  return steps;
}

std::vector<ScriptStep> default_script(std::string_view input) {
  std::string order = "ORDER-100";
  for (size_t at = input.find("ORDER-"); at != std::string_view::npos;
       at = input.find("ORDER-", at + 1)) {
    size_t end = at + 6;
    while (end < input.size() && std::isalnum(static_cast<unsigned char>(input[end]))) ++end;
    if (end > at + 6) {
      order = std::string(input.substr(at, end - at));
      break;
    }
  }
  return {ScriptStep{{ScriptCall{"lookup_order", json::object{{"order_id", order}}}}, false},
          ScriptStep{{ScriptCall{"request_refund", json::object{{"order_id", order}}}}, false}};
}

Result<ToolResult> parse_tool_result(const json::value& event) {
  if (!event.is_object())
    return make_error(sim_errc::invalid_event, "each event must be an object");
  const auto& o = event.as_object();
  const auto* type = string_field(o, "type");
  if (!type) return make_error(sim_errc::invalid_event, "event type is required");
  if (*type != "agent.session.input.tool_result")
    return make_error(sim_errc::invalid_event, "unsupported event type: " + std::string(*type));
  ToolResult r;
  const auto* turn = string_field(o, "turn_id");
  const auto* call = string_field(o, "call_id");
  if (!turn || turn->empty())
    return make_error(sim_errc::invalid_event, "turn_id must be a string");
  if (!call || call->empty())
    return make_error(sim_errc::invalid_event, "call_id must be a string");
  r.turn_id = std::string(*turn);
  r.call_id = std::string(*call);
  const auto* success = o.if_contains("success");
  if (!success || !success->is_bool())
    return make_error(sim_errc::invalid_event, "success must be a boolean");
  r.success = success->as_bool();
  for (auto [name, target] : {std::pair{"output", &r.output}, std::pair{"error", &r.error}}) {
    const auto* v = o.if_contains(name);
    if (!v || v->is_null()) continue;
    if (!v->is_string())
      return make_error(sim_errc::invalid_event, std::string(name) + " must be a string");
    *target = std::string(v->as_string());
  }
  return r;
}

std::string closing_message(std::string_view function_name, const json::object& arguments,
                            const ToolResult& result) {
  if (!result.success)
    return "I could not complete that: " +
           (result.error.empty() ? std::string("the tool reported an error.") : result.error);
  boost::system::error_code ec;
  json::value output = json::parse(result.output, ec);
  if (!ec && output.is_object()) {
    const auto& o = output.as_object();
    if (const auto* status = o.if_contains("status")) {
      std::string text = subject_of(function_name);
      if (const auto* order = arguments.if_contains("order_id"))
        text += " for " + scalar_text(*order);
      text += " — status: " + scalar_text(*status) + ".";
      if (const auto* amount = o.if_contains("amount_minor")) {
        text += " Amount: " + scalar_text(*amount);
        if (const auto* currency = o.if_contains("currency")) text += " " + scalar_text(*currency);
        text += ".";
      }
      if (const auto* key = o.if_contains("operation_key"))
        text += " Operation key: " + scalar_text(*key) + ".";
      return text;
    }
  }
  std::string quoted = result.output.substr(0, kMaxQuotedOutput);
  if (result.output.size() > kMaxQuotedOutput) quoted += "…";
  return "Here is what " + std::string(function_name) + " returned: " + quoted;
}

AgentSession::AgentSession(std::string id, int64_t created_at, IdSource ids)
    : id_(std::move(id)), created_at_(created_at), ids_(std::move(ids)) {}

Result<std::string> AgentSession::start_turn(std::string input, std::vector<ScriptStep> script,
                                             int64_t now) {
  if (status_ == "in_progress" || status_ == "requires_action")
    return make_error(sim_errc::session_busy, "The session is still working on a turn.");
  if (turns_.size() >= kMaxTurns)
    return make_error(sim_errc::too_many_turns, "The session has reached its turn limit.");
  Turn turn;
  turn.id = ids_("turn_");
  turn.status = "in_progress";
  turn.created_at = now;
  turn.script = std::move(script);
  turns_.push_back(std::move(turn));
  status_ = "in_progress";
  last_call_.reset();
  last_result_.reset();
  add_item(json::object{{"type", "message"}, {"role", "user"}, {"content", std::move(input)}});
  return turns_.back().id;
}

bool AgentSession::wants_advance() const {
  return status_ == "in_progress" && pending_.empty() && !turns_.empty() &&
         turns_.back().status == "in_progress";
}

bool AgentSession::advance(int64_t now) {
  if (!wants_advance()) return false;
  Turn& turn = turns_.back();
  if (turn.next_step < turn.script.size()) {
    const ScriptStep& step = turn.script[turn.next_step++];
    if (step.fail) {
      add_item(json::object{{"type", "message"},
                            {"role", "assistant"},
                            {"content", "Sorry, something went wrong on my side."}});
      turn.status = "failed";
      status_ = "failed";
      return false;
    }
    for (const auto& spec : step.calls) {
      auto arguments = with_call_ids(spec.arguments, turn.call_ids);
      if (!arguments) {  // a script naming a call that never came: the model fails
        add_item(json::object{{"type", "message"},
                              {"role", "assistant"},
                              {"content", "Sorry: " + arguments.error().message}});
        turn.status = "failed";
        status_ = "failed";
        pending_.clear();
        return false;
      }
      Call call{ids_("call_"), turn.id, spec.name, arguments->as_object()};
      add_item(json::object{{"type", "function_call"},
                            {"call_id", call.call_id},
                            {"turn_id", call.turn_id},
                            {"name", call.name},
                            {"arguments", json::serialize(call.arguments)}});
      calls_[call.call_id] = call;
      turn.call_ids.push_back(call.call_id);
      pending_.push_back(std::move(call));
    }
    turn.status = "waiting";
    status_ = "requires_action";
    return true;
  }
  std::string text = last_call_ && last_result_
                         ? closing_message(last_call_->name, last_call_->arguments, *last_result_)
                         : std::string("How can I help you today?");
  add_item(json::object{{"type", "message"}, {"role", "assistant"}, {"content", std::move(text)}});
  turn.status = "completed";
  status_ = "idle";
  return false;
}

ResultCheck AgentSession::check(const ToolResult& result) const {
  if (auto it = answered_.find(result.call_id); it != answered_.end()) {
    if (it->second.turn_id != result.turn_id) return ResultCheck::kUnknown;
    return it->second == result ? ResultCheck::kDuplicate : ResultCheck::kConflict;
  }
  for (const auto& call : pending_)
    if (call.call_id == result.call_id && call.turn_id == result.turn_id)
      return ResultCheck::kAccept;
  return ResultCheck::kUnknown;
}

void AgentSession::record(const ToolResult& result) {
  if (check(result) != ResultCheck::kAccept) return;
  answered_[result.call_id] = result;
  json::object item{{"type", "function_call_output"},
                    {"call_id", result.call_id},
                    {"output", result.output},
                    {"success", result.success}};
  if (!result.success) item["error"] = result.error;
  add_item(std::move(item));
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const Call& c) { return c.call_id == result.call_id; });
  last_call_ = std::move(*it);
  last_result_ = result;
  pending_.erase(it);
  if (!pending_.empty()) return;  // the step's other calls still wait for theirs
  turns_.back().status = "in_progress";
  status_ = "in_progress";
}

void AgentSession::add_item(json::object item) {
  json::object with_id;
  with_id["id"] = ids_("item_");
  for (auto& [k, v] : item) with_id[k] = std::move(v);
  items_.push_back(std::move(with_id));
}

json::object AgentSession::session_json() const {
  json::array actions;
  for (const auto& call : pending_)
    actions.push_back(json::object{{"type", "function_call"},
                                   {"call_id", call.call_id},
                                   {"turn_id", call.turn_id},
                                   {"name", call.name},
                                   {"arguments", call.arguments}});
  return json::object{{"id", id_},
                      {"object", "agents.session"},
                      {"status", status_},
                      {"required_actions", std::move(actions)},
                      {"created_at", created_at_}};
}

json::array AgentSession::turns_json() const {
  json::array out;
  for (const auto& t : turns_)
    out.push_back(json::object{{"id", t.id},
                               {"object", "agents.turn"},
                               {"session_id", id_},
                               {"subagent_id", nullptr},
                               {"status", t.status},
                               {"created_at", t.created_at}});
  return out;
}

json::object AgentSession::debug_json() const {
  json::object results;
  for (const auto& [call_id, r] : answered_)
    results[call_id] = json::object{
        {"turn_id", r.turn_id}, {"success", r.success}, {"output", r.output}, {"error", r.error}};
  json::array items;
  for (const auto& item : items_) items.push_back(item);
  json::array turns = turns_json();
  for (size_t i = 0; i < turns.size(); ++i)
    turns[i].as_object()["script_steps_done"] = turns_[i].next_step;
  json::object out = session_json();
  out["turns"] = std::move(turns);
  out["items"] = std::move(items);
  out["results"] = std::move(results);
  return out;
}

}  // namespace opgate::sim
