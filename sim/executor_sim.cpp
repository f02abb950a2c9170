#include "sim/executor_sim.h"

#include <fmt/format.h>

#include "common/identifiers.h"
#include "sim/fault_replies.h"
#include "sim/log.h"
#include "sim/sim_http.h"

namespace opgate::sim {

namespace json = boost::json;

namespace {

http::Response error_reply(int status, std::string_view code, std::string_view message) {
  return json_reply(status,
                    json::object{{"error", json::object{{"code", code}, {"message", message}}}});
}
http::Response server_error() { return error_reply(500, "server_error", "The executor failed."); }
http::Response rate_limited() { return error_reply(429, "rate_limited", "Too many requests."); }
constexpr FaultReplies kReplies{server_error, rate_limited};
constexpr FaultActionSet kAllowed = kTransportFaults | fault_bit(FaultAction::kDecline);

bool has_string(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string();
}

}  // namespace

ExecutorSim::ExecutorSim(std::string token) : token_(std::move(token)) {
  add_fault_admin_routes(admin_, faults_, kAllowed, "operation_key");
  admin_.add("GET", "/_sim/executions", [this](const http::Request&, const http::PathParams&) {
    json::array out;
    MutexLock lock(mu_);
    for (const auto& [key, e] : executions_)
      out.push_back(json::object{{"operation_key", key},
                                 {"operation", e.operation},
                                 {"request", e.request},
                                 {"answer", e.answer}});
    return json_reply(200, json::object{{"executions", std::move(out)}});
  });
  admin_.add("GET", "/_sim/stats", [this](const http::Request&, const http::PathParams&) {
    MutexLock lock(mu_);
    int64_t succeeded = 0;
    for (const auto& [_, e] : executions_) succeeded += e.answer.at("status") == "succeeded";
    json::object by_key;
    for (const auto& [key, n] : posts_)
      by_key[key] = json::object{{"posts", n}, {"executed", executions_.count(key) > 0}};
    return json_reply(200, json::object{{"requests", requests_},
                                        {"executions", static_cast<int64_t>(executions_.size())},
                                        {"succeeded", succeeded},
                                        {"by_operation_key", std::move(by_key)}});
  });
  admin_.add("POST", "/_sim/reset", [this](const http::Request&, const http::PathParams&) {
    faults_.clear();
    MutexLock lock(mu_);
    executions_.clear();
    posts_.clear();
    requests_ = 0;
    return json_reply(200, json::object{{"reset", true}});
  });
}

http::Response ExecutorSim::handle(http::Request&& request) {
  const std::string path(request.path());
  if (path.starts_with("/_sim/")) return admin_.dispatch(request);
  std::vector<std::string> segments;
  if (!http::split_path(path, segments) || segments.empty() || segments.size() > 2)
    return error_reply(404, "not_found", "No such resource.");
  const bool reading = segments.size() == 2;
  if (request.method != (reading ? "GET" : "POST"))
    return error_reply(405, "method_not_allowed",
                       reading ? "Executions are read with GET." : "Operations are POSTed.");
  auto key = api_key_of(request);
  if (!key || (!token_.empty() && *key != token_))
    return error_reply(401, "unauthorized", "A valid bearer token is required.");
  return reading ? lookup(request, segments[1]) : execute(request, segments[0]);
}

http::Response ExecutorSim::execute(const http::Request& request, const std::string& operation) {
  const auto key = request.header("Idempotency-Key");
  if (!key || key->empty())
    return error_reply(400, "idempotency_key_required", "An Idempotency-Key header is required.");
  auto body = parse_json(request.body);
  if (!body || !body->is_object() || !has_string(body->as_object(), "operation_key") ||
      !has_string(body->as_object(), "order_id") || !body->as_object().contains("arguments") ||
      !body->as_object().at("arguments").is_object())
    return error_reply(400, "invalid_request",
                       "The body must hold operation_key, order_id and an arguments object.");
  if (body->as_object().at("operation_key").as_string() != *key)
    return error_reply(400, "invalid_request", "The Idempotency-Key must be the operation_key.");
  {
    MutexLock lock(mu_);
    ++requests_;
    ++posts_[std::string(*key)];
  }
  auto fault = faults_.take(
      {.method = "POST", .path = request.path(), .subject = *key, .supported = kAllowed});
  if (fault) log_info("fault", {{"action", to_string(fault->action)}, {"operation_key", *key}});
  apply_delay(fault);
  if (is_before_commit(fault)) return before_commit_response(*fault, kReplies);
  const bool declined = fault && fault->action == FaultAction::kDecline;
  json::object answer;
  {
    MutexLock lock(mu_);
    auto it = executions_.find(std::string(*key));
    if (it != executions_.end()) {
      if (it->second.request_body != request.body)
        return error_reply(409, "idempotency_key_in_use",
                           "This key was used for a different request.");
      answer = it->second.answer;  // a replay: done once, answered again
    } else {
      answer = declined ? json::object{{"status", "failed"},
                                       {"id", fmt::format("ex_{}", next_id_++)},
                                       {"detail", "The executor declined the operation."}}
                        : json::object{{"status", "succeeded"},
                                       {"id", fmt::format("ex_{}", next_id_++)},
                                       {"detail", fmt::format("{} carried out.", operation)}};
      executions_[std::string(*key)] = {operation, request.body, body->as_object(), answer};
      log_info("executed", {{"operation", operation},
                            {"operation_key", std::string(*key)},
                            {"status", std::string(answer.at("status").as_string())}});
    }
  }
  return after_commit_response(declined ? std::nullopt : fault, json_reply(200, answer), kReplies);
}

http::Response ExecutorSim::lookup(const http::Request& request, const std::string& key) {
  return faulted_get(faults_, kReplies, request, [&] {
    MutexLock lock(mu_);
    auto it = executions_.find(key);
    if (it == executions_.end())
      return json_reply(
          404, json::object{{"operation_key", key},
                            {"error", json::object{{"code", "not_found"},
                                                   {"message", "No execution with that key."}}}});
    return json_reply(200, it->second.answer);
  });
}

}  // namespace opgate::sim
