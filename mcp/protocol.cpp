#include "mcp/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "common/crypto.h"
#include "common/version.h"
#include "operations/policy.h"
#include "operations/state_machine.h"
#include "operations/tools.h"

namespace opgate::mcp {

bool known_version(std::string_view version) {
  return std::find(std::begin(kProtocolVersions), std::end(kProtocolVersions), version) !=
         std::end(kProtocolVersions);
}

std::string_view negotiate(std::string_view requested) {
  return known_version(requested) ? requested : kProtocolVersions[0];
}

std::variant<Message, RpcError> parse_message(std::string_view body) {
  json::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return RpcError{rpc::parse_error, "The body is not JSON."};
  if (v.is_array())
    return RpcError{rpc::invalid_request, "Batches are not part of this protocol version."};
  if (!v.is_object()) return RpcError{rpc::invalid_request, "A message is a JSON object."};
  const auto& o = v.as_object();
  const auto* version = o.if_contains("jsonrpc");
  if (!version || *version != "2.0") return RpcError{rpc::invalid_request, "jsonrpc must be 2.0."};
  Message m;
  if (const auto* id = o.if_contains("id")) {
    if (!id->is_string() && !id->is_int64() && !id->is_uint64())
      return RpcError{rpc::invalid_request, "An id is a string or an integer."};
    m.id = *id;
    m.has_id = true;
  }
  if (const auto* method = o.if_contains("method")) {
    if (!method->is_string() || method->as_string().empty() || method->as_string().size() > 128)
      return RpcError{rpc::invalid_request, "method must be a non-empty string."};
    m.method = std::string(method->as_string());
  }
  if (const auto* params = o.if_contains("params")) {
    if (!params->is_object()) return RpcError{rpc::invalid_request, "params must be an object."};
    m.params = params->as_object();
  }
  if (m.method.empty() && !m.has_id)
    return RpcError{rpc::invalid_request, "A message has a method, an id, or both."};
  if (m.method.empty() && !o.contains("result") && !o.contains("error"))
    return RpcError{rpc::invalid_request, "A response carries a result or an error."};
  return m;
}

std::string result_body(const json::value& id, json::object result) {
  return json::serialize(
      json::object{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
}

std::string error_body(const json::value& id, int code, std::string_view message) {
  return json::serialize(
      json::object{{"jsonrpc", "2.0"},
                   {"id", id},
                   {"error", json::object{{"code", code}, {"message", message}}}});
}

namespace {

std::string session_mac(const pb::AgentToken& token, std::string_view payload) {
  return crypto::to_hex(crypto::hmac_sha256(token.token_sha256(), payload)).substr(0, 32);
}

}  // namespace

std::string mint_session(const pb::AgentToken& token, std::string_view version, int64_t now_ms) {
  // "mcps.{token id}.{version}.{issued ms}.{mac}": visible ASCII only.
  const std::string payload = fmt::format("{}.{}.{}", token.id(), version, now_ms);
  return "mcps." + payload + "." + session_mac(token, payload);
}

std::optional<std::string> session_version(std::string_view session_id,
                                           const pb::AgentToken& token) {
  constexpr std::string_view prefix = "mcps.";
  if (!session_id.starts_with(prefix) || session_id.size() > 200) return std::nullopt;
  const auto last = session_id.rfind('.');
  if (last == std::string_view::npos || last < prefix.size()) return std::nullopt;
  const std::string_view payload = session_id.substr(prefix.size(), last - prefix.size());
  if (!crypto::equal_constant_time(session_id.substr(last + 1), session_mac(token, payload)))
    return std::nullopt;
  // payload: {token id}.{version}.{issued}
  const auto first = payload.find('.');
  const auto second = payload.rfind('.');
  if (first == std::string_view::npos || second == first) return std::nullopt;
  if (payload.substr(0, first) != token.id()) return std::nullopt;
  const std::string version(payload.substr(first + 1, second - first - 1));
  if (!known_version(version)) return std::nullopt;
  return version;
}

json::object initialize_result(std::string_view version) {
  return json::object{
      {"protocolVersion", version},
      {"capabilities",
       json::object{
           {"tools", json::object{{"listChanged", false}}},
           {"tasks",
            json::object{
                {"list", json::object{}},
                {"cancel", json::object{}},
                {"requests", json::object{{"tools", json::object{{"call", json::object{}}}}}}}}}},
      {"serverInfo",
       json::object{{"name", "opgate"}, {"title", "opgate"}, {"version", std::string(kVersion)}}},
      {"instructions",
       "Tools that change money (refunds, credits, cancellations) only propose: the server "
       "computes every amount, a person approves the exact proposal, and the result reports "
       "the verified outcome. Call them as a task to wait for it, or follow the operation with "
       "get_operation. You act for one customer, the one your token is bound to."}};
}

json::array tools(const operations::PolicyConfig& policy) {
  json::array out;
  for (const auto& def : operations::tool_definitions(policy)) {
    const auto& d = def.as_object();
    const std::string name(d.at("name").as_string());
    const bool proposes = policy.proposes(name);
    const bool reads = name == "lookup_order";
    out.push_back(json::object{
        {"name", name},
        {"description", d.at("description")},
        {"inputSchema", d.at("parameters")},
        {"annotations", json::object{{"readOnlyHint", reads},
                                     {"destructiveHint", proposes},
                                     // A note or a draft is stored anew each call.
                                     {"idempotentHint", name != "add_internal_note" &&
                                                            name != "draft_customer_reply"},
                                     {"openWorldHint", false}}},
        {"execution", json::object{{"taskSupport", proposes ? "optional" : "forbidden"}}}});
  }
  out.push_back(json::object{
      {"name", kGetOperation},
      {"description",
       "Read an operation you proposed, by its operation_key: its state and, once settled, the "
       "verified result. Read-only."},
      {"inputSchema",
       json::object{
           {"type", "object"},
           {"properties",
            json::object{{"operation_key", json::object{{"type", "string"},
                                                        {"minLength", 1},
                                                        {"maxLength", 300},
                                                        {"description", "The operation's key."}}}}},
           {"required", json::array{"operation_key"}},
           {"additionalProperties", false}}},
      {"annotations", json::object{{"readOnlyHint", true},
                                   {"destructiveHint", false},
                                   {"idempotentHint", true},
                                   {"openWorldHint", false}}},
      {"execution", json::object{{"taskSupport", "forbidden"}}}});
  return out;
}

json::object call_tool_result(const pb::ToolResult& result, bool linked_to_operation) {
  const std::string& text = result.success() ? result.output() : result.error();
  json::object out{{"content", json::array{json::object{{"type", "text"}, {"text", text}}}}};
  bool is_error = !result.success();
  if (result.success()) {
    json::error_code ec;
    auto parsed = json::parse(result.output(), ec);
    if (!ec && parsed.is_object()) {
      if (linked_to_operation) {
        const auto* status = parsed.as_object().if_contains("status");
        is_error = !status || *status != "succeeded";
      }
      out["structuredContent"] = std::move(parsed);
    }
  }
  out["isError"] = is_error;
  return out;
}

json::object pending_result(const pb::Operation& op) {
  json::object structured{
      {"status", "pending_approval"},         {"operation_key", op.key()},
      {"fingerprint", op.fingerprint()},      {"amount_minor", op.proposal().amount_minor()},
      {"currency", op.proposal().currency()}, {"expires_at", iso8601(op.expires_at_ms())}};
  // The text is the same JSON (what a client that reads text only sees).
  const std::string text = json::serialize(structured);
  return json::object{{"content", json::array{json::object{{"type", "text"}, {"text", text}}}},
                      {"structuredContent", std::move(structured)},
                      {"isError", false}};
}

TaskState task_state(const pb::ToolCall& call, const std::optional<pb::Operation>& op,
                     const operations::PolicyConfig& policy) {
  using operations::State;
  if (op && operations::is(*op, State::settled) && op->decided_by().starts_with("agent:") &&
      op->decision_reason() == kWithdrawnReason)
    return {"cancelled", "withdrawn by the agent before a decision", true};
  if (call.result_saved()) {
    const std::string outcome = op ? std::string(operations::outcome_text(*op)) : "";
    return {"completed", outcome.empty() ? std::string("answered") : "settled: " + outcome, true};
  }
  if (!op) return {"working", "being answered", false};
  switch (operations::state_of(*op)) {
    case State::pending:
      return {"working",
              fmt::format("waiting for approval ({} of {})", op->approvals_size(),
                          operations::approvals_needed(op->proposal(), policy)),
              false};
    case State::approved:
      return {"working", "approved; about to be paid out", false};
    case State::executing:
      return {"working", "being executed at the payment provider", false};
    case State::outcome_unknown:
      return {"working", "the provider's answer is not known yet; reconciling", false};
    case State::settled:
      return {"working", "settled; the result is being recorded", false};
  }
  return {"working", "", false};
}

json::object task_json(const pb::ToolCall& call, const std::optional<pb::Operation>& op,
                       const TaskState& state, int64_t poll_interval_ms) {
  int64_t updated = call.created_at_ms();
  if (op) updated = std::max(updated, op->updated_at_ms());
  if (call.result_saved()) updated = std::max(updated, call.result().saved_at_ms());
  json::object task{
      {"taskId", call.call_id()},          {"status", state.status},
      {"statusMessage", state.message},    {"createdAt", iso8601(call.created_at_ms())},
      {"lastUpdatedAt", iso8601(updated)}, {"ttl", nullptr}};
  if (!state.terminal) task["pollInterval"] = poll_interval_ms;
  return task;
}

std::string iso8601(int64_t ms) {
  const std::time_t s = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buf, ms % 1000);
}

}  // namespace opgate::mcp
