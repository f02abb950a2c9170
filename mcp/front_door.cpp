#include "mcp/front_door.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "common/crypto.h"
#include "common/identifiers.h"
#include "common/text.h"
#include "common/thread_name.h"
#include "operations/agent_tokens.h"
#include "operations/decisions.h"
#include "operations/settlement.h"
#include "operations/state_machine.h"
#include "operations/tool_calls.h"

namespace opgate::mcp {

namespace {

constexpr std::string_view kRelatedTask = "io.modelcontextprotocol/related-task";
constexpr size_t kTasksPerPage = 100;

bool same_call(const pb::CallRef& a, const pb::CallRef& b) {
  return a.session_id() == b.session_id() && a.turn_id() == b.turn_id() &&
         a.call_id() == b.call_id();
}

http::Response json_answer(int status, std::string body) {
  http::Response r = http::json_response(status, std::move(body));
  return r;
}

// A refusal at the HTTP level, with a JSON-RPC error body that has no id.
http::Response refusal(const ErrorCode& code, int rpc_code, std::string_view message) {
  return json_answer(code.http_status, error_body(nullptr, rpc_code, message));
}

// The JSON-RPC code for an error of the domain.
int rpc_code_of(const Error& e) {
  if (e.is(errc::method_not_allowed)) return rpc::method_not_found;
  if (e.is(errc::bad_request) || e.is(errc::not_found) || e.is(errc::invalid_state) ||
      e.is(errc::conflict))
    return rpc::invalid_params;
  if (e.is(errc::overloaded) || e.is(errc::unauthorized)) return rpc::server_error;
  return rpc::internal_error;
}

// "host" of "host:port", "[::1]:port" or "host".
std::string host_part(std::string_view host) {
  if (host.starts_with('[')) {
    const auto close = host.find(']');
    return std::string(close == std::string_view::npos ? host : host.substr(0, close + 1));
  }
  return std::string(host.substr(0, host.find(':')));
}

std::optional<std::string> string_param(const json::object& o, std::string_view key,
                                        size_t max = 300) {
  const auto* v = o.if_contains(key);
  if (!v || !v->is_string() || v->as_string().empty() || v->as_string().size() > max)
    return std::nullopt;
  return std::string(v->as_string());
}

// A task id or a cursor, as this server gives them (identifier
// characters): anything else names no task and never reaches the store.
std::optional<std::string> task_param(const json::object& o, std::string_view key) {
  auto v = string_param(o, key, 100);
  if (v && !valid_identifier(*v)) return std::nullopt;
  return v;
}

}  // namespace

struct FrontDoor::Caller {
  pb::AgentToken token;
  std::string principal;  // "agent:{id}"
  std::string session;    // the calls' session: "mcp:{id}"

  pb::CallRef ref(std::string_view turn, std::string call_id) const {
    pb::CallRef r;
    r.set_session_id(session);
    r.set_turn_id(std::string(turn));
    r.set_call_id(std::move(call_id));
    return r;
  }
};

FrontDoor::FrontDoor(store::Storage& storage, const Live<operations::PolicyConfig>& policy,
                     const Live<Access>& access, operations::OrderService* orders, Metrics& metrics,
                     const Clock& clock, std::function<void()> wake, FrontDoorOptions options)
    : storage_(storage),
      policy_(policy),
      access_(access),
      orders_(orders),
      metrics_(metrics),
      clock_(clock),
      wake_(std::move(wake)),
      options_(options),
      committer_(storage) {
  watcher_ = std::thread([this] {
    name_this_thread("mcp-tasks");
    watch();
  });
}

FrontDoor::~FrontDoor() { stop(); }

void FrontDoor::stop() {
  // Calls submitted before are answered; later ones are refused.
  committer_.stop();
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void FrontDoor::handle(http::Request&& request, http::Respond respond) {
  bool parked = false;
  http::Response response = answer(request, respond, parked);
  if (!parked) respond(std::move(response));
}

std::optional<http::Response> FrontDoor::refuse_origin(const http::Request& request) const {
  auto access = access_.get();
  const std::string_view host = request.header("Host").value_or("");
  const auto& hosts = access->allowed_hosts;
  if (!hosts.empty() && std::find(hosts.begin(), hosts.end(), host_part(host)) == hosts.end())
    return refusal(errc::forbidden, rpc::server_error,
                   "This Host is not one the MCP listener serves (DNS rebinding protection).");
  const auto origin = request.header("Origin");
  if (!origin) return std::nullopt;  // not a browser
  const auto& origins = access->allowed_origins;
  if (std::find(origins.begin(), origins.end(), *origin) != origins.end()) return std::nullopt;
  // The listener's own origin, as the (checked) Host names it.
  const bool same_origin = !hosts.empty() && (*origin == "http://" + std::string(host) ||
                                              *origin == "https://" + std::string(host));
  if (same_origin) return std::nullopt;
  return refusal(errc::forbidden, rpc::server_error,
                 "Requests from this Origin are not allowed (DNS rebinding protection).");
}

http::Response FrontDoor::answer(const http::Request& request, http::Respond& respond,
                                 bool& parked) {
  std::vector<std::string> segments;
  if (!http::split_path(request.path(), segments) || segments.empty() ||
      segments.front() != "mcp" || segments.size() > 2)
    return http::error_response(errc::not_found, "No such resource; MCP is served at /mcp.");
  if (auto refused = refuse_origin(request)) return *refused;
  if (request.method != "POST") {
    // No server-initiated stream (GET) and no session to end (DELETE):
    // sessions are stateless.
    auto r = refusal(errc::method_not_allowed, rpc::server_error, "Only POST is served here.");
    r.headers["Allow"] = "POST";
    return r;
  }
  std::string token;
  if (segments.size() == 2) {
    token = segments[1];
  } else if (auto auth = request.header("Authorization"); auth && auth->starts_with("Bearer ")) {
    token = auth->substr(7);
  }
  auto found = operations::authenticate_agent(storage_.reader(), token, clock_.now_ms());
  if (!found) return http::error_response(found.error());
  if (!*found) {
    metrics_.inc("opgate_mcp_requests_total", {{"method", ""}, {"result", "unauthorized"}});
    auto r = refusal(errc::unauthorized, rpc::server_error,
                     "A valid agent token is required (Authorization: Bearer, or /mcp/{token}).");
    r.headers["WWW-Authenticate"] = "Bearer";
    return r;
  }
  const auto content_type = request.header("Content-Type").value_or("");
  if (!content_type.starts_with("application/json"))
    return refusal(errc::unsupported_media_type, rpc::invalid_request,
                   "Messages are sent as application/json.");
  auto parsed = parse_message(request.body);
  if (auto* e = std::get_if<RpcError>(&parsed))
    return json_answer(400, error_body(nullptr, e->code, e->message));
  const Message& m = std::get<Message>(parsed);
  // A notification, or a response to the server: taken, nothing to say.
  if (!m.is_request()) {
    http::Response r;
    r.status = 202;
    return r;
  }
  const auto version = request.header("MCP-Protocol-Version");
  if (version && !known_version(*version))
    return json_answer(400, error_body(m.id, rpc::invalid_request,
                                       fmt::format("Protocol version {} is not supported.",
                                                   version->substr(0, 40))));
  Caller caller{**found, operations::agent_principal(**found), operations::agent_session(**found)};
  if (m.method == "initialize") {
    const auto asked = string_param(m.params, "protocolVersion", 40).value_or("");
    const std::string agreed(negotiate(asked));
    auto r = json_answer(200, result_body(m.id, initialize_result(agreed)));
    r.headers["Mcp-Session-Id"] = mint_session(caller.token, agreed, clock_.now_ms());
    metrics_.inc("opgate_mcp_requests_total", {{"method", "initialize"}, {"result", "ok"}});
    return r;
  }
  const auto session = request.header("Mcp-Session-Id");
  if (!session)
    return json_answer(400, error_body(m.id, rpc::invalid_request,
                                       "Mcp-Session-Id is required after initialize."));
  const auto agreed = session_version(*session, caller.token);
  if (!agreed)
    return json_answer(404, error_body(m.id, rpc::invalid_request,
                                       "No such session for this token; initialize again."));
  // The header, when sent, names the version this session agreed: a client
  // speaking another one would read answers shaped for a version it did not
  // ask for.
  if (version && *version != *agreed)
    return json_answer(400, error_body(m.id, rpc::invalid_request,
                                       fmt::format("MCP-Protocol-Version {} is not the version "
                                                   "this session agreed ({}).",
                                                   *version, *agreed)));
  return dispatch(m, caller, std::string(*session), respond, parked);
}

http::Response FrontDoor::dispatch(const Message& m, const Caller& caller,
                                   const std::string& session, http::Respond& respond,
                                   bool& parked) {
  Result<json::object> result = json::object{};
  if (m.method == "ping") {
    result = json::object{};
  } else if (m.method == "tools/list") {
    result = json::object{{"tools", tools(*policy_.get())}};
  } else if (m.method == "tools/call") {
    // Answered once the call's answer is durable, by the committer.
    parked = true;
    call_tool(caller, m.params,
              [this, id = m.id, token_id = caller.token.id(),
               respond = std::move(respond)](Result<json::object> result) mutable {
                respond(reply("tools/call", id, token_id, std::move(result)));
              });
    return {};
  } else if (m.method == "tasks/get") {
    result = get_task(caller, m.params);
  } else if (m.method == "tasks/list") {
    result = list_tasks(caller, m.params);
  } else if (m.method == "tasks/cancel") {
    result = cancel_task(caller, m.params);
  } else if (m.method == "tasks/result") {
    auto id = task_param(m.params, "taskId");
    if (!id) {
      result = make_error(errc::bad_request, "taskId is required, as this server gave it.");
    } else {
      const pb::CallRef ref = caller.ref("task", *id);
      auto call = storage_.reader().call(ref);
      auto ended = task_result(ref);
      if (!call) {
        result = call.error();
      } else if (!*call) {
        result = make_error(errc::not_found, "No task with that id.");
      } else if (!ended) {
        result = ended.error();
      } else if (*ended) {
        result = std::move(**ended);
      } else if (auto refused = park({ref,
                                      m.id,
                                      {},
                                      session,
                                      clock_.monotonic_ms() + options_.longest_wait.count(),
                                      caller.token.token_sha256()},
                                     respond)) {
        result = make_error(errc::overloaded, *refused);
      } else {
        parked = true;
        metrics_.inc("opgate_mcp_requests_total", {{"method", m.method}, {"result", "waiting"}});
        return {};
      }
    }
  } else {
    metrics_.inc("opgate_mcp_requests_total", {{"method", "other"}, {"result", "unknown"}});
    return json_answer(
        200, error_body(m.id, rpc::method_not_found,
                        fmt::format("Method {} is not served here.", utf8_prefix(m.method, 64))));
  }
  return reply(m.method, m.id, caller.token.id(), std::move(result));
}

http::Response FrontDoor::reply(std::string_view method, const json::value& id,
                                std::string_view token_id, Result<json::object> result) {
  const bool ok = result.ok();
  metrics_.inc("opgate_mcp_requests_total",
               {{"method", std::string(method)}, {"result", ok ? "ok" : "error"}});
  if (!ok) {
    if (!result.error().is(errc::bad_request) && !result.error().is(errc::not_found) &&
        !result.error().is(errc::invalid_state) && !result.error().is(errc::method_not_allowed))
      spdlog::warn("mcp {} for agent token {} failed: {}", method, token_id,
                   result.error().message);
    return json_answer(200, error_body(id, rpc_code_of(result.error()), result.error().message));
  }
  return json_answer(200, result_body(id, std::move(*result)));
}

void FrontDoor::call_tool(const Caller& caller, const json::object& params, ToolAnswered done) {
  const auto name = string_param(params, "name", 128);
  if (!name) return done(make_error(errc::bad_request, "name (the tool) is required."));
  json::object arguments;
  if (const auto* a = params.if_contains("arguments")) {
    if (!a->is_object()) return done(make_error(errc::bad_request, "arguments must be an object."));
    arguments = a->as_object();
  }
  const auto* task = params.if_contains("task");
  if (task && !task->is_object())
    return done(make_error(errc::bad_request, "task must be an object."));
  auto policy = policy_.get();
  if (*name == kGetOperation) {
    if (task)
      return done(make_error(errc::method_not_allowed, "get_operation does not run as a task."));
    return done(get_operation(caller, arguments));
  }
  if (!policy->offers(*name))
    return done(make_error(errc::bad_request, fmt::format("Unknown tool {}.", *name)));
  if (task && !policy->proposes(*name))
    return done(
        make_error(errc::method_not_allowed, fmt::format("{} does not run as a task.", *name)));
  operations::AgentCall request;
  request.ref = caller.ref(task ? "task" : "call", "mcp_" + crypto::random_hex(12));
  request.name = *name;
  request.arguments_json = json::serialize(arguments);
  request.owner = caller.token.owner();
  request.principal = caller.principal;
  request.mcp = true;
  request.agent_token_sha256 = caller.token.token_sha256();
  std::optional<operations::FetchedOrders> fetched;
  if (orders_) fetched = operations::fetch_orders(orders_, {request.arguments_json}, metrics_);
  committer_.submit(std::move(request), policy, std::move(fetched),
                    [this, name = *name, as_task = task != nullptr, policy,
                     done = std::move(done)](Result<CallAnswer> answer) {
                      if (!answer) return done(answer.error());
                      done(shape_answer(name, as_task, *policy, *answer));
                    });
}

Result<json::object> FrontDoor::shape_answer(const std::string& name, bool as_task,
                                             const operations::PolicyConfig& policy,
                                             const CallAnswer& answer) {
  const auto& [answered, op] = answer;
  metrics_.inc("opgate_mcp_tool_calls_total", {{"tool", name}, {"result", answered.outcome}});
  metrics_.inc("opgate_tool_calls_total", {{"tool", name}, {"result", answered.outcome}});
  if (answered.outcome == "proposal" && wake_) wake_();
  const pb::ToolCall& call = answered.call;
  if (as_task)
    return json::object{
        {"task", task_json(call, op, task_state(call, op, policy), options_.poll_interval_ms)}};
  if (!call.result_saved() && !op)
    return make_error(errc::internal, "The proposal was not recorded.");
  json::object result = call.result_saved()
                            ? call_tool_result(call.result(), !call.operation_key().empty())
                            : pending_result(*op);
  // The call's id: what an internal note cites as its evidence, and what
  // the operator's records name the call by.
  if (auto* structured = result.if_contains("structuredContent")) {
    structured->as_object()["call_id"] = call.call_id();
    result["content"] =
        json::array{json::object{{"type", "text"}, {"text", json::serialize(*structured)}}};
  }
  return result;
}

Result<json::object> FrontDoor::get_operation(const Caller& caller, const json::object& arguments) {
  const auto key = string_param(arguments, "operation_key");
  if (!key || arguments.size() != 1)
    return make_error(errc::bad_request, "operation_key is the one argument.");
  OPGATE_ASSIGN_OR_RETURN(auto op, storage_.reader().operation(*key));
  if (!op || op->proposal().owner() != caller.token.owner())
    return call_tool_result(operations::failure_result("No operation with that key."), false);
  json::object view{{"operation_key", op->key()},
                    {"state", operations::state_text(*op)},
                    {"outcome", operations::is(*op, operations::Outcome::none)
                                    ? json::value(nullptr)
                                    : json::value(operations::outcome_text(*op))},
                    {"kind", op->proposal().kind()},
                    {"order_id", op->proposal().order_id()},
                    {"amount_minor", op->proposal().amount_minor()},
                    {"currency", op->proposal().currency()},
                    {"approvals", op->approvals_size()},
                    {"expires_at", iso8601(op->expires_at_ms())}};
  if (operations::is(*op, operations::State::settled))
    view["result"] = json::parse(operations::settled_result(*op).output());
  const std::string text = json::serialize(view);
  return json::object{{"content", json::array{json::object{{"type", "text"}, {"text", text}}}},
                      {"structuredContent", std::move(view)},
                      {"isError", false}};
}

Result<json::object> FrontDoor::get_task(const Caller& caller, const json::object& params) {
  const auto id = task_param(params, "taskId");
  if (!id) return make_error(errc::bad_request, "taskId is required, as this server gave it.");
  auto& reader = storage_.reader();
  OPGATE_ASSIGN_OR_RETURN(auto call, reader.call(caller.ref("task", *id)));
  if (!call) return make_error(errc::not_found, "No task with that id.");
  std::optional<pb::Operation> op;
  if (!call->operation_key().empty()) {
    OPGATE_ASSIGN_OR_RETURN(op, reader.operation(call->operation_key()));
  }
  return task_json(*call, op, task_state(*call, op, *policy_.get()), options_.poll_interval_ms);
}

Result<json::object> FrontDoor::list_tasks(const Caller& caller, const json::object& params) {
  std::string after;
  if (params.contains("cursor")) {
    auto cursor = task_param(params, "cursor");
    if (!cursor) return make_error(errc::bad_request, "cursor is not one this server gave.");
    after = *cursor;
  }
  auto& reader = storage_.reader();
  // A page and one more, to know whether another follows: never the
  // token's whole history.
  OPGATE_ASSIGN_OR_RETURN(auto tasks,
                          reader.calls_of_turn(caller.session, "task", after, kTasksPerPage + 1));
  json::array out;
  auto policy = policy_.get();
  for (size_t i = 0; i < tasks.size() && i < kTasksPerPage; ++i) {
    std::optional<pb::Operation> op;
    if (!tasks[i].operation_key().empty()) {
      OPGATE_ASSIGN_OR_RETURN(op, reader.operation(tasks[i].operation_key()));
    }
    out.push_back(
        task_json(tasks[i], op, task_state(tasks[i], op, *policy), options_.poll_interval_ms));
  }
  json::object result{{"tasks", std::move(out)}};
  if (tasks.size() > kTasksPerPage) result["nextCursor"] = tasks[kTasksPerPage - 1].call_id();
  return result;
}

Result<json::object> FrontDoor::cancel_task(const Caller& caller, const json::object& params) {
  const auto id = task_param(params, "taskId");
  if (!id) return make_error(errc::bad_request, "taskId is required, as this server gave it.");
  const pb::CallRef ref = caller.ref("task", *id);
  auto policy = policy_.get();
  std::optional<pb::ToolCall> call;
  std::optional<pb::Operation> op;
  OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
    // Revoked since it authenticated: the withdrawal does not commit.
    OPGATE_TRY(
        operations::require_live_agent_token(txn, caller.token.token_sha256(), txn.now_ms()));
    OPGATE_ASSIGN_OR_RETURN(call, txn.call(ref));
    if (!call) return make_error(errc::not_found, "No task with that id.");
    op.reset();
    if (!call->operation_key().empty()) {
      OPGATE_ASSIGN_OR_RETURN(op, txn.operation(call->operation_key()));
    }
    if (call->result_saved() || !op)
      return make_error(errc::invalid_state, "The task has ended; it cannot be cancelled.");
    // A task that linked to an operation another call proposed waits on it
    // but does not own it: only the proposing call's task withdraws it.
    if (op->calls_size() == 0 || !same_call(op->calls(0), ref))
      return make_error(errc::invalid_state,
                        "The task waits on an operation another call proposed; only that "
                        "call's task can withdraw it.");
    return operations::withdraw(txn, op->key(), caller.token.owner(), caller.principal,
                                std::string(kWithdrawnReason));
  }));
  OPGATE_ASSIGN_OR_RETURN(call, storage_.reader().call(ref));
  OPGATE_ASSIGN_OR_RETURN(op, storage_.reader().operation(call->operation_key()));
  return task_json(*call, op, task_state(*call, op, *policy), options_.poll_interval_ms);
}

Result<std::optional<json::object>> FrontDoor::task_result(const pb::CallRef& ref) {
  OPGATE_ASSIGN_OR_RETURN(auto call, storage_.reader().call(ref));
  if (!call || !call->result_saved()) return std::optional<json::object>();
  json::object result = call_tool_result(call->result(), !call->operation_key().empty());
  result["_meta"] = json::object{{kRelatedTask, json::object{{"taskId", call->call_id()}}}};
  return std::optional<json::object>(std::move(result));
}

std::optional<std::string> FrontDoor::park(Waiting waiting, http::Respond& respond) {
  MutexLock lock(mu_);
  if (stopping_ || waiting_.size() >= options_.max_waiting)
    return "Too many tasks/result requests are waiting; poll tasks/get instead.";
  // By the token's calls' session ("mcp:{id}"), however many MCP sessions
  // it opened.
  const auto mine = std::count_if(waiting_.begin(), waiting_.end(), [&](const Waiting& w) {
    return w.ref.session_id() == waiting.ref.session_id();
  });
  if (static_cast<size_t>(mine) >= options_.max_waiting_per_token)
    return fmt::format(
        "This agent has {} tasks/result requests waiting already; poll tasks/get instead.", mine);
  waiting.respond = std::move(respond);  // only now: a refusal is answered with it
  waiting.number = ++parked_;
  waiting_.push_back(std::move(waiting));
  return std::nullopt;
}

void FrontDoor::watch() {
  struct Look {
    uint64_t number;
    pb::CallRef ref;
    json::value id;
    std::string token_sha256;
    int64_t deadline_ms;
  };
  for (;;) {
    // The waiters stay parked while their tasks are read, without the lock.
    std::vector<Look> looks;
    bool stopping = false;
    {
      MutexLock lock(mu_);
      if (!stopping_) cv_.wait_for(mu_, options_.recheck);
      stopping = stopping_;
      for (const auto& w : waiting_)
        looks.push_back({w.number, w.ref, w.id, w.token_sha256, w.deadline_ms});
    }
    std::map<uint64_t, http::Response> answers;
    for (const auto& l : looks) {
      auto ended = task_result(l.ref);
      const bool done = ended && *ended;
      // A token revoked or expired since it asked gets no result; one the
      // store could not read now waits for the next look.
      const Status live = done ? operations::require_live_agent_token(
                                     storage_.reader(), l.token_sha256, clock_.now_ms())
                               : Status::Ok();
      if (done && live) {
        answers.emplace(l.number, json_answer(200, result_body(l.id, std::move(**ended))));
      } else if (done && live.error().is(errc::unauthorized)) {
        answers.emplace(l.number, refusal(errc::unauthorized, rpc::server_error,
                                          "The agent token no longer authenticates."));
      } else if (stopping || clock_.monotonic_ms() >= l.deadline_ms) {
        const char* again = done       ? "Ask for the task's result again."
                            : stopping ? "The server is stopping; ask for the task's result again."
                                       : "The task is still working; ask for its result again "
                                         "(tasks/get shows its state).";
        answers.emplace(l.number, json_answer(200, error_body(l.id, rpc::server_error, again)));
      }
    }
    std::vector<std::pair<http::Respond, http::Response>> replies;
    {
      MutexLock lock(mu_);
      std::erase_if(waiting_, [&](Waiting& w) {
        auto a = answers.find(w.number);
        if (a == answers.end()) return false;
        replies.emplace_back(std::move(w.respond), std::move(a->second));
        return true;
      });
    }
    for (auto& [respond, response] : replies) respond(std::move(response));
    if (stopping) return;
  }
}

}  // namespace opgate::mcp
