#include "sim/eval/runner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/webhook_signature.h"
#include "sim/eval/cluster.h"
#include "sim/eval/json_fields.h"
#include "sim/sim_errors.h"

namespace opgate::eval {

namespace json = boost::json;

namespace {

std::string text(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : json::serialize(v);
}

// Sums the samples of a Prometheus counter whose labels contain `labels`.
double metric_sum(const std::string& text, std::string_view name, std::string_view labels) {
  double total = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with(name) || line.size() <= name.size() || line[name.size()] != '{') continue;
    if (line.find(labels) == std::string::npos) continue;
    auto space = line.rfind(' ');
    if (space != std::string::npos) total += std::strtod(line.c_str() + space + 1, nullptr);
  }
  return total;
}

class Run {
 public:
  Run(const Scenario& scenario, Cluster& cluster) : sc_(scenario), c_(cluster) {}

  // Runs every step; the first that fails ends the run (its error is kept).
  void steps(PropertyResult& log) {
    if (!sc_.agents.empty()) {
      auto minted = guarded([&] { return mint_agents(); });
      log.evidence.push_back(minted ? *minted : "FAIL " + minted.error().message);
      if (!minted) {
        log.passed = false;
        return;
      }
    }
    for (const auto& step : sc_.steps) {
      auto done = guarded([&] { return run_step(step); });
      const auto line = fmt::format("step {} {}: {}", step.index, step.action,
                                    done ? *done : done.error().message);
      if (!done) {
        log.passed = false;
        log.evidence.push_back("FAIL " + line);
        return;
      }
      log.evidence.push_back(line);
    }
  }

  // Collects what the three services recorded.
  Result<Trace> collect() {
    return guarded([&] { return collect_unguarded(); });
  }

 private:
  // A reply of an unexpected shape (a missing field) is a failure of the
  // run, reported like any other, not a crash of the gate.
  template <typename Fn>
  static auto guarded(Fn fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const std::exception& e) {
      return fail(std::string("unexpected reply: ") + e.what());
    }
  }

  Result<Trace> collect_unguarded() {
    for (auto& [name, s] : trace_.sessions) {
      auto r = c_.agent_admin("GET", "/_sim/sessions/" + s.id);
      if (!r) return r.error();
      if (r->status != 200 || !r->body.is_object())
        return fail("the platform does not know session " + name + ": " + r->raw);
      s.platform = r->body.as_object();
    }
    auto list = c_.op("GET", "/v1/operations?limit=1000");
    if (!list) return list.error();
    if (list->status != 200) return fail("list operations: " + list->raw);
    trace_.operations.clear();
    for (const auto& summary : list->body.at("operations").as_array()) {
      auto op = c_.op("GET", "/v1/operations/" + str(summary, "key"));
      if (!op) return op.error();
      if (op->status != 200) return fail("get operation: " + op->raw);
      trace_.operations.push_back(op->body);
    }
    auto audit = c_.op("GET", "/v1/audit/verify");
    if (!audit) return audit.error();
    if (audit->status != 200 || !audit->body.is_object())
      return fail("verify the audit chain: " + audit->raw);
    trace_.audit_check = audit->body.as_object();
    auto ledger = c_.op("GET", "/v1/ledger");
    if (!ledger) return ledger.error();
    trace_.ledger = ledger->body.at("ledger").as_array();
    auto provider = c_.payments_admin("GET", "/_sim/ledger");
    if (!provider) return provider.error();
    trace_.provider_objects = provider->body.at("refunds").as_array();
    for (const auto& b : provider->body.at("balance_transactions").as_array())
      trace_.provider_objects.push_back(b);
    auto stats = c_.payments_admin("GET", "/_sim/stats");
    if (!stats) return stats.error();
    trace_.provider_by_key = stats->body.at("by_operation_key").as_object();
    if (sc_.settings.declared_operations) OPGATE_TRY(collect_executions());
    auto agent = c_.agent_admin("GET", "/_sim/stats");
    if (!agent) return agent.error();
    trace_.agent_stats = agent->body.as_object();
    OPGATE_TRY(probe_as_outsider());
    OPGATE_TRY(collect_notifications());
    OPGATE_TRY(collect_agent_results());
    return trace_;
  }

  // Each execution of a declared operation, shaped as a provider object
  // ("object": "execution") so that every money property covers it.
  Status collect_executions() {
    auto list = c_.executor_admin("GET", "/_sim/executions");
    if (!list) return list.error();
    for (const auto& e : list->body.at("executions").as_array()) {
      const auto& request = e.at("request").as_object();
      const auto& answer = e.at("answer").as_object();
      trace_.provider_objects.push_back(
          json::object{{"object", "execution"},
                       {"id", answer.at("id")},
                       {"status", answer.at("status")},
                       {"amount", request.at("amount_minor")},
                       {"currency", request.at("currency")},
                       {"arguments", request.at("arguments")},
                       {"metadata", json::object{{"operation_key", e.at("operation_key")}}}});
    }
    auto stats = c_.executor_admin("GET", "/_sim/stats");
    if (!stats) return stats.error();
    for (const auto& [key, v] : stats->body.at("by_operation_key").as_object())
      trace_.provider_by_key[key] = v;
    return Status::Ok();
  }

  // --- MCP agents

  Result<std::string> mint_agents() {
    std::vector<std::string> done;
    for (const auto& spec : sc_.agents) {
      auto r = c_.op("POST", "/v1/agent-tokens",
                     json::serialize(json::object{{"owner", spec.owner}, {"label", spec.name}}));
      if (!r) return r.error();
      if (r->status != 201) return fail("mint an agent token: " + r->raw);
      AgentTrace a;
      a.token_id = str(r->body, "id");
      a.token = str(r->body, "token");
      a.owner = spec.owner;
      trace_.agents[spec.name] = std::move(a);
      OPGATE_TRY(initialize_agent(spec.name));
      done.push_back(fmt::format("{} (token {} for {})", spec.name,
                                 trace_.agents[spec.name].token_id, spec.owner));
    }
    return "agents connected over MCP: " + fmt::format("{}", fmt::join(done, ", "));
  }

  Status initialize_agent(const std::string& name) {
    auto& a = trace_.agents.at(name);
    auto r = mcp(
        a, json::object{{"jsonrpc", "2.0"},
                        {"id", 0},
                        {"method", "initialize"},
                        {"params", json::object{{"protocolVersion", "2025-11-25"},
                                                {"capabilities", json::object{}},
                                                {"clientInfo", json::object{{"name", "gate"},
                                                                            {"version", "1"}}}}}});
    if (!r) return r.error();
    if (r->status != 200 || !r->headers.count("Mcp-Session-Id"))
      return fail("initialize over MCP: " + r->raw);
    a.session = r->headers.at("Mcp-Session-Id");
    return Status::Ok();
  }

  Result<Reply> mcp(const AgentTrace& a, const json::object& message) {
    http::Headers h{{"Content-Type", "application/json"},
                    {"Accept", "application/json, text/event-stream"}};
    if (!a.session.empty()) {
      h["Mcp-Session-Id"] = a.session;
      h["MCP-Protocol-Version"] = "2025-11-25";
    }
    return c_.mcp("POST", "/mcp/" + a.token, json::serialize(message), h);
  }

  // The result of a JSON-RPC request, or its error as a failed step.
  Result<json::object> rpc(const AgentTrace& a, const std::string& method, json::object params) {
    auto r =
        mcp(a, json::object{
                   {"jsonrpc", "2.0"}, {"id", ++rpc_id_}, {"method", method}, {"params", params}});
    if (!r) return r.error();
    if (r->status != 200 || !r->body.is_object() || !r->body.as_object().contains("result"))
      return fail(fmt::format("{} over MCP: {} {}", method, r->status, r->raw.substr(0, 300)));
    return r->body.at("result").as_object();
  }

  // What a tools/call result tells the agent, as a session's result would.
  static void take_result(McpCall& call, const json::object& result) {
    const auto* structured = result.if_contains("structuredContent");
    const bool is_error = result.contains("isError") && result.at("isError").as_bool();
    std::string text;
    if (auto* content = result.if_contains("content");
        content && content->is_array() && !content->as_array().empty())
      text = str(content->as_array().front(), "text");
    if (structured && structured->is_object()) {
      if (call.call_id.empty()) call.call_id = str(*structured, "call_id");
      const auto status = str(*structured, "status");
      if (status == "pending_approval") {
        call.operation_key = str(*structured, "operation_key");
        return;  // not answered yet
      }
      call.answered = true;
      call.success = true;  // an answer, or a settled result whatever its outcome
      call.output = json::serialize(*structured);
      return;
    }
    call.answered = true;
    call.success = !is_error;
    (is_error ? call.error : call.output) = text;
  }

  Result<std::string> mcp_call(const json::object& a) {
    const auto name = text(a.at("agent"));
    auto& agent = trace_.agents.at(name);
    McpCall call;
    call.name = text(a.at("tool"));
    const json::object arguments =
        a.contains("arguments") ? a.at("arguments").as_object() : json::object{};
    call.arguments = json::serialize(arguments);
    call.task = a.contains("task") && a.at("task").as_bool();
    json::object params{{"name", call.name}, {"arguments", arguments}};
    if (call.task) params["task"] = json::object{{"ttl", 600000}};
    const int64_t expect = i64(a, "expect_status", 200);
    auto r = mcp(
        agent,
        json::object{
            {"jsonrpc", "2.0"}, {"id", ++rpc_id_}, {"method", "tools/call"}, {"params", params}});
    if (!r) return r.error();
    const auto line = fmt::format("agent {} called {}{} → {}", name, call.name,
                                  call.task ? " as a task" : "", r->status);
    if (r->status != expect) return fail(fmt::format("{} (expected {}): {}", line, expect, r->raw));
    if (r->status != 200) return line;  // refused before any call was made
    const auto& body = r->body.as_object();
    if (const auto* e = body.if_contains("error")) {
      call.answered = true;
      call.error = str(*e, "message");
      agent.calls.push_back(call);
      return line + ": protocol error " + call.error;
    }
    const auto& result = body.at("result").as_object();
    if (call.task) {
      call.call_id = str(result.at("task"), "taskId");
      if (a.contains("name")) tasks_[name + "/" + text(a.at("name"))] = call.call_id;
      agent.calls.push_back(call);
      return fmt::format("{}: task {} {}", line, call.call_id, str(result.at("task"), "status"));
    }
    take_result(call, result);
    agent.calls.push_back(call);
    return fmt::format("{}: {}", line,
                       !call.answered ? "pending approval (" + call.operation_key + ")"
                       : call.success ? call.output.substr(0, 160)
                                      : "refused: " + call.error);
  }

  Result<std::string> await_task(const json::object& a) {
    const auto name = text(a.at("agent"));
    const auto& agent = trace_.agents.at(name);
    auto id = tasks_.find(name + "/" + text(a.at("task")));
    if (id == tasks_.end()) return fail("no task by that name was started");
    const auto want = text(a.at("status"));
    std::string last;
    bool ok = poll_until([&] {
      auto t = rpc(agent, "tasks/get", json::object{{"taskId", id->second}});
      if (t) last = str(*t, "status") + ": " + str(*t, "statusMessage");
      return t && str(*t, "status") == want;
    });
    if (!ok) return fail(fmt::format("task {} never became {} (last: {})", id->second, want, last));
    return fmt::format("agent {}'s task {} is {}", name, id->second, last);
  }

  Result<std::string> revoke_agent(const json::object& a) {
    const auto name = text(a.at("agent"));
    auto& agent = trace_.agents.at(name);
    auto r = c_.op("DELETE", "/v1/agent-tokens/" + agent.token_id);
    if (!r) return r.error();
    if (r->status != 200) return fail("revoke: " + r->raw);
    agent.revoked = true;
    for (auto& call : agent.calls) call.readable = false;
    return fmt::format("agent {}'s token {} revoked", name, agent.token_id);
  }

  // What each agent's calls finally received: a task's result, or the
  // operation's result for a plain call that proposed (get_operation), as
  // the agent reads them.
  Status collect_agent_results() {
    for (auto& [name, agent] : trace_.agents) {
      if (agent.revoked) continue;
      for (auto& call : agent.calls) {
        if (call.answered) continue;
        if (call.task) {
          OPGATE_ASSIGN_OR_RETURN(auto t,
                                  rpc(agent, "tasks/get", json::object{{"taskId", call.call_id}}));
          const auto status = str(t, "status");
          if (status != "completed" && status != "cancelled") continue;
          OPGATE_ASSIGN_OR_RETURN(
              auto result, rpc(agent, "tasks/result", json::object{{"taskId", call.call_id}}));
          take_result(call, result);
        } else if (!call.operation_key.empty()) {
          OPGATE_ASSIGN_OR_RETURN(
              auto read, rpc(agent, "tools/call",
                             json::object{{"name", "get_operation"},
                                          {"arguments",
                                           json::object{{"operation_key", call.operation_key}}}}));
          const auto* structured = read.if_contains("structuredContent");
          if (structured && structured->is_object() && structured->as_object().contains("result")) {
            call.answered = true;
            call.success = true;
            call.output = json::serialize(structured->at("result"));
          }
        }
      }
    }
    return Status::Ok();
  }

  // The receiver's deliveries, once every operation's proposal has arrived
  // at both endpoints (and, for a settled one, its settlement at ops) or 20 s
  // have passed: they are sent asynchronously, after the changes that raise
  // them, and each endpoint has its own queue, so one may lag the other.
  Status collect_notifications() {
    auto arrived = [&](const json::array& deliveries) {
      for (const auto& op : trace_.operations) {
        const auto key = str(op, "key");
        bool proposed = false, chatted = false, settled = str(op, "state") != "settled";
        for (const auto& d : deliveries) {
          chatted = chatted || is_chat_proposal(d, key);
          if (str(d, "path") != "/hooks/ops" || str(d, "key") != key) continue;
          proposed = proposed || str(d, "type") == "operation.proposed";
          settled = settled || str(d, "type") == "operation.settled";
        }
        if (!proposed || !chatted || !settled) return false;
      }
      return true;
    };
    json::array deliveries;
    std::optional<Error> failed;
    poll_until([&] {
      auto r = c_.receiver_admin("GET", "/_sim/received");
      if (!r) {
        failed = r.error();
        return true;
      }
      deliveries = r->body.at("deliveries").as_array();
      return arrived(deliveries);
    });
    if (failed) return *failed;
    trace_.notifications = std::move(deliveries);
    return Status::Ok();
  }

  // Asks for everything this run left behind as a principal whose owner
  // patterns match none of its owners: each answer must be 404 or empty.
  Status probe_as_outsider() {
    const std::string token = token_for("outsider");
    json::array seen;
    int64_t probes = 0;
    auto probe = [&](const std::string& method, const std::string& path, const std::string& body,
                     const std::function<bool(const Reply&)>& leaked) -> Status {
      auto r = c_.op(method, path, body, token);
      if (!r) return r.error();
      ++probes;
      if (leaked(*r))
        seen.push_back(json::value(
            fmt::format("{} {}: {} {}", method, path, r->status, r->raw.substr(0, 200))));
      return Status::Ok();
    };
    auto not_404 = [](const Reply& r) { return r.status != 404; };
    auto non_empty = [](const char* field) {
      return [field](const Reply& r) {
        if (r.status != 200 || !r.body.is_object()) return true;
        auto* list = r.body.as_object().if_contains(field);
        return !list || !list->is_array() || !list->as_array().empty();
      };
    };
    OPGATE_TRY(probe("GET", "/v1/operations?limit=1000", "", non_empty("operations")));
    OPGATE_TRY(probe("GET", "/v1/ledger", "", non_empty("ledger")));
    OPGATE_TRY(probe("GET", "/v1/audit", "", non_empty("audit")));
    // The chain's verification: whether it holds, never its length or what
    // it found (a problem names a record of another owner).
    OPGATE_TRY(probe("GET", "/v1/audit/verify", "", [](const Reply& r) {
      if (r.status != 200 || !r.body.is_object()) return true;
      const auto& o = r.body.as_object();
      return o.contains("records") || o.contains("head") || o.contains("problem");
    }));
    for (const auto& op : trace_.operations) {
      const auto key = str(op, "key");
      OPGATE_TRY(probe("GET", "/v1/operations/" + key, "", not_404));
      OPGATE_TRY(probe("GET", "/v1/operations/" + key + "/context", "", not_404));
      OPGATE_TRY(probe("GET", "/v1/audit?operation=" + key, "", not_404));
      // Settled or not, a visible operation answers these with 409 or 200.
      OPGATE_TRY(
          probe("POST", "/v1/operations/" + key + "/deny", R"({"reason":"probe"})", not_404));
      OPGATE_TRY(probe("POST", "/v1/operations/" + key + "/reconcile", "", not_404));
      OPGATE_TRY(probe("POST", "/v1/operations/" + key + "/resolve",
                       R"({"outcome":"failed","evidence":"probe"})", not_404));
    }
    for (const auto& [name, s] : trace_.sessions) {
      if (s.owner.empty()) continue;
      OPGATE_TRY(probe("GET", "/v1/sessions/" + s.id, "", not_404));
      OPGATE_TRY(probe("GET", "/v1/sessions/" + s.id + "/transcript", "", not_404));
      OPGATE_TRY(probe("POST", "/v1/sessions/" + s.id + "/recover", "", not_404));
    }
    trace_.outsider = json::object{{"probes", probes}, {"seen", std::move(seen)}};
    return Status::Ok();
  }

  static Error fail(std::string message) {
    return make_error(sim_errc::step_failed, std::move(message));
  }

  Result<std::string> run_step(const Step& step) {
    const auto& a = step.args;
    if (step.action == "start_session") return start_session(a);
    if (step.action == "await_proposal") return await_proposal(a);
    if (step.action == "approve") return approve(a);
    if (step.action == "deny") return deny(a);
    if (step.action == "await_state") return await_state(a);
    if (step.action == "await_turn") return await_turn(a);
    if (step.action == "fault") return fault(a);
    if (step.action == "restart_daemon") return restart(a);
    if (step.action == "update_order") return update_order(a);
    if (step.action == "webhook") return webhook(a);
    if (step.action == "reconcile") return reconcile(a);
    if (step.action == "settle_refund") return settle_refund(a);
    if (step.action == "reload") return reload(a);
    if (step.action == "mcp_call") return mcp_call(a);
    if (step.action == "await_task") return await_task(a);
    if (step.action == "revoke_agent") return revoke_agent(a);
    return fail("unknown action");
  }

  const SessionSpec& spec(const json::object& a) const {
    const auto name = std::string(a.at("session").as_string());
    for (const auto& s : sc_.sessions)
      if (s.name == name) return s;
    return sc_.sessions.front();  // parse_scenario guarantees the name exists
  }

  Result<std::string> start_session(const json::object& a) {
    const auto& s = spec(a);
    auto created =
        c_.agent_admin("POST", "/_sim/sessions",
                       json::serialize(json::object{{"input", s.input}, {"script", s.script}}));
    if (!created) return created.error();
    if (created->status != 200) return fail("create session: " + created->raw);
    const auto id = str(created->body, "id");
    trace_.sessions[s.name] = SessionTrace{id, s.owner, {}};
    if (s.owner.empty()) return fmt::format("session {} created ({}), left unbound", s.name, id);
    auto bound = c_.op("POST", "/v1/sessions/" + id + "/bind",
                       json::serialize(json::object{{"owner", s.owner}}));
    if (!bound) return bound.error();
    if (bound->status != 200) return fail("bind: " + bound->raw);
    return fmt::format("session {} created ({}) and bound to {}", s.name, id, s.owner);
  }

  Result<json::object> wait_operation(const std::string& key,
                                      const std::function<bool(const json::object&)>& done,
                                      const std::string& what) {
    json::object last;
    std::string error;
    bool ok = poll_until([&] {
      auto r = c_.op("GET", "/v1/operations/" + key);
      if (!r) {
        error = r.error().message;
        return false;
      }
      if (r->status != 200 || !r->body.is_object()) return false;
      last = r->body.as_object();
      return done(last);
    });
    if (ok) return last;
    return fail(
        fmt::format("{} never became {} (last: {}){}", key, what,
                    last.empty() ? "absent" : str(last, "state") + " " + str(last, "outcome"),
                    error.empty() ? "" : "; " + error));
  }

  Result<std::string> await_proposal(const json::object& a) {
    const auto key = text(a.at("key"));
    auto op = wait_operation(
        key, [](const json::object& o) { return str(o, "state") == "pending"; }, "pending");
    if (!op) return op.error();
    seen_[key] = *op;
    // What the platform and the provider show while the proposal waits.
    Pause pause;
    pause.key = key;
    const auto session_id = str(*op, "session_id");
    if (session_id.starts_with("mcp:")) return await_mcp_proposal(key, *op, std::move(pause));
    auto session = c_.agent_admin("GET", "/_sim/sessions/" + session_id);
    if (!session) return session.error();
    pause.session_status = str(session->body, "status");
    std::set<std::string> linked;
    for (const auto& call : op->at("calls").as_array()) linked.insert(str(call, "call_id"));
    if (auto* actions = session->body.as_object().if_contains("required_actions"))
      for (const auto& action : actions->as_array())
        if (linked.count(str(action, "call_id"))) pause.call_pending = true;
    auto stats = c_.payments_admin("GET", "/_sim/stats");
    if (!stats) return stats.error();
    if (auto* k = stats->body.at("by_operation_key").as_object().if_contains(key))
      pause.provider_posts = i64(k->as_object(), "posts", 0);
    trace_.pauses.push_back(pause);
    return fmt::format("{} pending: {} {}, fingerprint {}; session {}", key,
                       str(*op, "amount_minor"), str(*op, "currency"),
                       str(*op, "fingerprint").substr(0, 12), pause.session_status);
  }

  // A proposal an MCP agent made: what its agent sees while it waits (a
  // task still working, or a plain call holding the pending proposal) and
  // what the provider holds.
  Result<std::string> await_mcp_proposal(const std::string& key, const json::object& op,
                                         Pause pause) {
    const auto token_id = str(op, "session_id").substr(4);
    pause.session_status = "mcp";
    std::set<std::string> linked;
    for (const auto& call : op.at("calls").as_array()) linked.insert(str(call, "call_id"));
    for (const auto& [name, agent] : trace_.agents) {
      if (agent.token_id != token_id) continue;
      for (const auto& call : agent.calls) {
        if (!linked.count(call.call_id)) continue;
        if (!call.task) {
          pause.call_pending = pause.call_pending || !call.answered;
          continue;
        }
        OPGATE_ASSIGN_OR_RETURN(auto t,
                                rpc(agent, "tasks/get", json::object{{"taskId", call.call_id}}));
        pause.call_pending = pause.call_pending || str(t, "status") == "working";
      }
    }
    auto stats = c_.payments_admin("GET", "/_sim/stats");
    if (!stats) return stats.error();
    if (auto* k = stats->body.at("by_operation_key").as_object().if_contains(key))
      pause.provider_posts = i64(k->as_object(), "posts", 0);
    trace_.pauses.push_back(pause);
    return fmt::format("{} pending: {} {}, fingerprint {}; its MCP agent {}", key,
                       str(op, "amount_minor"), str(op, "currency"),
                       str(op, "fingerprint").substr(0, 12),
                       pause.call_pending ? "waits" : "was answered");
  }

  Result<std::string> decide(const json::object& a, const std::string& verb, json::object body) {
    const auto key = text(a.at("key"));
    const auto as = text(a.at("as"));
    const int64_t expect = i64(a, "expect_status", 200);
    auto r =
        c_.op("POST", "/v1/operations/" + key + "/" + verb, json::serialize(body), token_for(as));
    if (!r) return r.error();
    const auto line = fmt::format(
        "{} {} {} → {} {}", as, verb, key, r->status,
        r->status == 200 ? str(r->body, "state")
                         : str(r->body.is_object() ? r->body.at("error") : json::value(), "code"));
    if (r->status != expect) return fail(fmt::format("{} (expected {}): {}", line, expect, r->raw));
    return line;
  }

  Result<std::string> approve(const json::object& a) {
    const auto key = text(a.at("key"));
    // The operator approves what they were shown: the proposal as it was
    // when it was awaited, or as it is now.
    json::object shown;
    const bool fresh = a.contains("fresh") && a.at("fresh").as_bool();
    if (auto it = seen_.find(key); it != seen_.end() && !fresh) {
      shown = it->second;
    } else {
      auto r = c_.op("GET", "/v1/operations/" + key);
      if (!r) return r.error();
      if (r->status != 200) return fail("no such operation: " + r->raw);
      shown = r->body.as_object();
    }
    json::object body{{"amount_minor", shown.at("amount_minor")},
                      {"currency", shown.at("currency")},
                      {"fingerprint", shown.at("fingerprint")}};
    if (auto* v = a.if_contains("amount_minor")) body["amount_minor"] = *v;
    if (auto* v = a.if_contains("currency")) body["currency"] = *v;
    if (auto* v = a.if_contains("edit_reason")) body["edit_reason"] = *v;
    return decide(a, "approve", std::move(body));
  }

  Result<std::string> deny(const json::object& a) {
    const auto reason = a.contains("reason") ? text(a.at("reason")) : "not eligible";
    return decide(a, "deny", json::object{{"reason", reason}});
  }

  Result<std::string> await_state(const json::object& a) {
    const auto key = text(a.at("key"));
    const auto state = text(a.at("state"));
    const auto outcome = a.contains("outcome") ? text(a.at("outcome")) : "";
    const int64_t calls = i64(a, "linked_calls", 0);
    const auto tier = a.contains("tier") ? text(a.at("tier")) : "";
    auto op = wait_operation(
        key,
        [&](const json::object& o) {
          return str(o, "state") == state && (outcome.empty() || str(o, "outcome") == outcome) &&
                 (tier.empty() || str(o.at("proposal"), "tier") == tier) &&
                 (calls == 0 || static_cast<int64_t>(o.at("calls").as_array().size()) == calls);
        },
        state + (outcome.empty() ? "" : "/" + outcome) +
            (calls == 0 ? "" : fmt::format(" with {} linked calls", calls)));
    if (!op) return op.error();
    return fmt::format("{} is {}{} after {} attempt(s), {} linked call(s)", key, state,
                       outcome.empty() ? "" : " (" + outcome + ")", str(*op, "attempts"),
                       op->at("calls").as_array().size());
  }

  Result<std::string> await_turn(const json::object& a) {
    const auto& s = spec(a);
    auto it = trace_.sessions.find(s.name);
    if (it == trace_.sessions.end()) return fail("session " + s.name + " was not started");
    const auto want = text(a.at("status"));
    std::string last;
    bool ok = poll_until([&] {
      auto r = c_.agent_admin("GET", "/_sim/sessions/" + it->second.id);
      if (!r || r->status != 200) return false;
      const auto& turns = r->body.at("turns").as_array();
      last = turns.empty() ? "" : str(turns.back(), "status");
      return last == want;
    });
    if (!ok)
      return fail(fmt::format("session {}'s turn never became {} (last: {})", s.name, want, last));
    return fmt::format("session {}'s turn is {}", s.name, want);
  }

  Result<std::string> fault(const json::object& a) {
    const auto service = text(a.at("service"));
    const auto body = json::serialize(json::object{{"rules", a.at("rules")}});
    // No rules: the service's faults are cleared.
    const bool clear = a.at("rules").is_array() && a.at("rules").as_array().empty();
    const char* method = clear ? "DELETE" : "POST";
    Result<Reply> r =
        service == "payments" ? c_.payments_admin(method, "/_sim/faults", body)
        : service == "agent"  ? c_.agent_admin(method, "/_sim/faults", body)
        : service == "orders" ? c_.orders_admin(method, "/_sim/faults", body)
        : service == "executor"
            ? c_.executor_admin(method, "/_sim/faults", body)
            : Result<Reply>(fail("service must be payments, agent, orders or executor"));
    if (!r) return r.error();
    if (r->status != 200) return fail("the simulator refused the faults: " + r->raw);
    std::vector<std::string> actions;
    for (const auto& rule : a.at("rules").as_array())
      actions.push_back(fmt::format("{} on {} {}", str(rule, "action"), str(rule, "method"),
                                    str(rule, "path_prefix")));
    auto line = clear ? fmt::format("{} faults cleared", service)
                      : fmt::format("{} faults: {}", service, fmt::join(actions, "; "));
    trace_.interruptions.push_back(line);
    return line;
  }

  Result<std::string> restart(const json::object& a) {
    const bool kill = !a.contains("kill") || (a.at("kill").is_bool() && a.at("kill").as_bool());
    if (auto s = c_.restart_daemon(kill); !s) return s.error();
    auto line = kill ? std::string("daemon killed (SIGKILL) and started again")
                     : std::string("daemon stopped (SIGTERM, exit 0) and started again");
    trace_.interruptions.push_back(line);
    return line;
  }

  // Changes an order where it lives: in opgate's store (an admin's PUT), or
  // at the order service when the scenario has one, which may also forget
  // the idempotency keys it kept (as a service restarted without them).
  Result<std::string> update_order(const json::object& a) {
    const auto id = text(a.at("order_id"));
    const bool at_service = sc_.settings.order_service;
    auto r = at_service ? c_.orders_admin("GET", "/_sim/orders/" + id)
                        : c_.op("GET", "/v1/orders/" + id);
    if (!r) return r.error();
    if (r->status != 200) return fail("no such order: " + r->raw);
    json::object order = r->body.as_object();
    std::vector<std::string> changes;
    for (const auto& kv : a) {
      if (kv.key() == "order_id" || kv.key() == "forget_idempotency_keys") continue;
      if (kv.key() == "delivered") {
        if (!kv.value().as_bool()) continue;
        json::array events;
        if (auto* d = order.if_contains("delivery"); d && d->is_array()) events = d->as_array();
        events.push_back(json::object{
            {"at", SystemClock().now_s()}, {"status", "delivered"}, {"detail", "delivered"}});
        order["delivery"] = std::move(events);
        changes.push_back("delivered");
        continue;
      }
      changes.push_back(fmt::format("{} {} → {}", std::string(kv.key()), str(order, kv.key()),
                                    json::serialize(kv.value())));
      order[kv.key()] = kv.value();
    }
    order.erase("updated_at_ms");
    auto put = at_service ? c_.orders_admin("PUT", "/_sim/orders/" + id, json::serialize(order))
                          : c_.op("PUT", "/v1/orders/" + id, json::serialize(order));
    if (!put) return put.error();
    if (put->status != 200) return fail("update refused: " + put->raw);
    if (auto* f = a.if_contains("forget_idempotency_keys"); f && f->as_bool()) {
      if (!at_service) return fail("only an order service forgets idempotency keys");
      auto reset = c_.orders_admin("POST", "/_sim/reset");
      if (!reset) return reset.error();
      changes.push_back("the order service forgot its idempotency keys");
    }
    return fmt::format("order {} changed{}: {}", id, at_service ? " at the order service" : "",
                       fmt::join(changes, ", "));
  }

  Result<std::string> reload(const json::object& a) {
    const auto toml = text(a.at("config"));
    if (auto s = c_.reload(toml); !s) return s.error();
    auto line = "configuration reloaded (SIGHUP) with: " + toml;
    trace_.interruptions.push_back(line);
    return line;
  }

  Result<std::string> webhook(const json::object& a) {
    const auto& s = spec(a);
    auto it = trace_.sessions.find(s.name);
    if (it == trace_.sessions.end()) return fail("session " + s.name + " was not started");
    const auto kind = text(a.at("kind"));
    const int64_t expect = i64(a, "expect_status", 0);
    const int64_t now = SystemClock().now_s();
    auto key = webhooks::decode_secret(Cluster::webhook_secret());
    if (!key) return key.error();
    std::string secret_key = *key;
    int64_t ts = now;
    if (kind == "forged") {
      secret_key = crypto::random_hex(16);  // not the source's secret
    } else if (kind == "stale") {
      ts = now - 3600;  // a captured delivery replayed an hour later
    } else if (kind != "valid") {
      return fail("kind must be forged, stale or valid");
    }
    const auto id = "msg_eval_" + crypto::random_hex(8);
    const auto body = json::serialize(json::object{{"id", "evt_" + crypto::random_hex(8)},
                                                   {"object", "event"},
                                                   {"created_at", ts},
                                                   {"type", "agent.session.action_required"},
                                                   {"data", json::object{{"id", it->second.id}}}});
    auto before = c_.op("GET", "/metrics");
    if (!before) return before.error();
    auto r = c_.webhook({{"webhook-id", id},
                         {"webhook-timestamp", std::to_string(ts)},
                         {"webhook-signature", webhooks::sign(secret_key, id, ts, body)},
                         {"Content-Type", "application/json"}},
                        body);
    if (!r) return r.error();
    auto after = c_.op("GET", "/metrics");
    if (!after) return after.error();
    const auto accepted = [](const Reply& m) {
      return metric_sum(m.raw, "opgate_webhooks_accepted_total", R"(source="agents")");
    };
    const auto rejected = [](const Reply& m) {
      return metric_sum(m.raw, "opgate_webhooks_rejected_total", R"(source="agents")");
    };
    const double accepted_delta = accepted(*after) - accepted(*before);
    const double rejected_delta = rejected(*after) - rejected(*before);
    json::error_code ec;
    auto reply = json::parse(r->body, ec);
    const auto code = !ec && reply.is_object() && reply.as_object().contains("error")
                          ? str(reply.at("error"), "code")
                          : "";
    const auto line = fmt::format("{} webhook for {} → {} {}; stored: {:+}, rejected: {:+}", kind,
                                  s.name, r->status, code, accepted_delta, rejected_delta);
    if (r->status != expect) return fail(fmt::format("{} (expected {})", line, expect));
    const bool refused = r->status >= 400;
    if (refused && (accepted_delta != 0 || rejected_delta != 1))
      return fail(line + " (a refused webhook must store nothing and count one rejection)");
    return line;
  }

  Result<std::string> reconcile(const json::object& a) {
    const auto key = text(a.at("key"));
    const auto as = a.contains("as") ? text(a.at("as")) : "oncall";
    auto r = c_.op("POST", "/v1/operations/" + key + "/reconcile", "{}", token_for(as));
    if (!r) return r.error();
    if (r->status >= 300) return fail(fmt::format("reconcile {} → {}: {}", key, r->status, r->raw));
    return fmt::format("{} asked to reconcile {} → {} {}", as, key, r->status,
                       str(r->body, "state"));
  }

  Result<std::string> settle_refund(const json::object& a) {
    const auto key = text(a.at("key"));
    const auto status = text(a.at("status"));
    std::string id;
    bool found = poll_until([&] {
      auto r = c_.payments_admin("GET", "/_sim/ledger");
      if (!r || r->status != 200) return false;
      for (const auto& refund : r->body.at("refunds").as_array())
        if (str(refund.at("metadata"), "operation_key") == key) id = str(refund, "id");
      return !id.empty();
    });
    if (!found) return fail("the provider never held a refund for " + key);
    auto r = c_.payments_admin("POST", "/_sim/refunds/" + id + "/settle",
                               json::serialize(json::object{{"status", status}}));
    if (!r) return r.error();
    if (r->status != 200) return fail("settle refused: " + r->raw);
    return fmt::format("the provider settled refund {} for {} as {}", id, key, status);
  }

  const Scenario& sc_;
  Cluster& c_;
  Trace trace_;
  std::map<std::string, json::object> seen_;  // proposals as the operator saw them
  std::map<std::string, std::string> tasks_;  // "agent/name" -> task id
  int64_t rpc_id_ = 0;
};

}  // namespace

bool ScenarioReport::passed() const {
  return std::all_of(properties.begin(), properties.end(),
                     [](const PropertyResult& p) { return p.passed; });
}

ScenarioReport run_scenario(const Scenario& scenario, const RunOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  ScenarioReport report{scenario.name, scenario.description, {}};
  PropertyResult steps;
  steps.name = "every step ran as scripted";
  ClusterOptions cluster_options;
  cluster_options.opgate_bin = options.opgate_bin;
  cluster_options.sim_bin = options.sim_bin;
  cluster_options.orders = scenario.orders;
  cluster_options.settings = scenario.settings;
  cluster_options.order_service = scenario.settings.order_service;
  cluster_options.declared_operations = scenario.settings.declared_operations;
  cluster_options.keep_dir = options.keep_dirs;
  auto cluster = Cluster::start(cluster_options);
  if (!cluster) {
    steps.passed = false;
    steps.evidence.push_back("FAIL cannot start the cluster: " + cluster.error().message);
    report.properties.push_back(std::move(steps));
  } else {
    if (options.keep_dirs) steps.evidence.push_back("directory: " + (*cluster)->dir().string());
    Run run(scenario, **cluster);
    run.steps(steps);
    report.properties.push_back(std::move(steps));
    auto trace = run.collect();
    if (!trace) {
      report.properties.push_back(
          {"the trace was collected", false, {"FAIL " + trace.error().message}});
    } else {
      for (auto& p : check_properties(scenario, *trace)) report.properties.push_back(std::move(p));
      report.properties.push_back(check_expected_outcome(scenario, *trace));
    }
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

void print_report(std::ostream& out, const ScenarioReport& report, bool verbose) {
  out << fmt::format("{} {} ({:.1f} s)\n  {}\n", report.passed() ? "PASS" : "FAIL", report.name,
                     report.seconds, report.description);
  for (const auto& p : report.properties) {
    out << fmt::format("  [{}] {}\n", p.passed ? "pass" : "FAIL", p.name);
    if (!verbose && p.passed) continue;
    for (const auto& e : p.evidence) out << "         " << e << "\n";
  }
  out.flush();
}

int run_gate(const std::filesystem::path& dir, const std::string& only, const RunOptions& options,
             bool verbose, std::ostream& out) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".json" && (only.empty() || entry.path().stem() == only))
      files.push_back(entry.path());
  if (ec) {
    out << fmt::format("cannot read {}: {}\n", dir.string(), ec.message());
    return 2;
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    out << fmt::format("no scenarios (*.json) in {}\n", dir.string());
    return 2;
  }
  // Workers take the next file; each report is printed, in the files'
  // order, as soon as it and those before it are done.
  const int64_t now_s = SystemClock().now_s();
  std::vector<std::optional<std::pair<std::string, bool>>> done(files.size());
  std::mutex mu;
  std::condition_variable ready;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      std::ostringstream text;
      bool ok = false;
      if (auto scenario = load_scenario(files[i], now_s); !scenario) {
        text << fmt::format("FAIL {}\n  [FAIL] the scenario is valid\n         {}\n",
                            files[i].stem().string(), scenario.error().message);
      } else {
        try {
          const auto report = run_scenario(*scenario, options);
          print_report(text, report, verbose);
          ok = report.passed();
        } catch (const std::exception& e) {  // one scenario's, not the gate's, end
          text << fmt::format("FAIL {}\n  [FAIL] the scenario ran to its end\n         {}\n",
                              files[i].stem().string(), e.what());
        }
      }
      std::lock_guard lock(mu);
      done[i].emplace(text.str(), ok);
      ready.notify_all();
    }
  };
  const size_t workers =
      std::clamp<size_t>(static_cast<size_t>(std::max(options.jobs, 1)), 1, files.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) threads.emplace_back(work);
  for (size_t i = 0; i < files.size(); ++i) {
    std::unique_lock lock(mu);
    ready.wait(lock, [&] { return done[i].has_value(); });
    out << done[i]->first << std::flush;
  }
  for (auto& t : threads) t.join();
  const size_t passed = static_cast<size_t>(
      std::count_if(done.begin(), done.end(), [](auto& d) { return d->second; }));
  const size_t failed = done.size() - passed;
  out << fmt::format("{} passed, {} failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace opgate::eval
