#include "sim/orders_sim.h"

#include <fmt/format.h>

#include <fstream>

#include "sim/fault_replies.h"
#include "sim/log.h"
#include "sim/sim_http.h"

namespace opgate::sim {

namespace json = boost::json;

namespace {

http::Response server_error() {
  return json_reply(
      500, json::object{{"error", json::object{{"code", "server_error"},
                                               {"message", "The order service failed."}}}});
}
http::Response rate_limited() {
  return json_reply(429, json::object{{"error", json::object{{"code", "rate_limited"},
                                                             {"message", "Too many requests."}}}});
}
constexpr FaultReplies kReplies{server_error, rate_limited};
constexpr FaultActionSet kAllowed = kTransportFaults | fault_bit(FaultAction::kMalformed);

http::Response error_reply(int status, std::string_view code, std::string_view message) {
  return json_reply(status,
                    json::object{{"error", json::object{{"code", code}, {"message", message}}}});
}

bool delivered(const json::object& order) {
  auto* events = order.if_contains("delivery");
  if (!events || !events->is_array()) return false;
  for (const auto& e : events->as_array())
    if (e.is_object())
      if (auto* st = e.as_object().if_contains("status"); st && *st == "delivered") return true;
  return false;
}

}  // namespace

OrdersSim::OrdersSim(std::string token, const Clock& clock)
    : token_(std::move(token)), idempotency_(clock) {
  add_fault_admin_routes(admin_, faults_, kAllowed, "order_id");
  admin_.add("PUT", "/_sim/orders/{id}", [this](const http::Request& r, const http::PathParams& p) {
    auto body = parse_json(r.body);
    if (!body || !body->is_object())
      return error_reply(400, "invalid_json", "The body must be a JSON object.");
    MutexLock lock(mu_);
    orders_[p.at("id")] = body->as_object();
    return json_reply(200, *body);
  });
  admin_.add("GET", "/_sim/orders/{id}", [this](const http::Request&, const http::PathParams& p) {
    MutexLock lock(mu_);
    auto it = orders_.find(p.at("id"));
    if (it == orders_.end()) return error_reply(404, "order_not_found", "No such order.");
    return json_reply(200, it->second);
  });
  admin_.add("GET", "/_sim/stats", [this](const http::Request&, const http::PathParams&) {
    json::object by_order;
    int64_t requests = 0, cancellations = 0;
    MutexLock lock(mu_);
    for (const auto& [id, c] : counts_) {
      by_order[id] =
          json::object{{"cancel_requests", c.cancel_requests}, {"cancellations", c.cancellations}};
      requests += c.cancel_requests;
      cancellations += c.cancellations;
    }
    return json_reply(200, json::object{{"cancel_requests", requests},
                                        {"cancellations", cancellations},
                                        {"by_order", std::move(by_order)}});
  });
  admin_.add("POST", "/_sim/reset", [this](const http::Request&, const http::PathParams&) {
    faults_.clear();
    idempotency_.clear();
    MutexLock lock(mu_);
    counts_.clear();
    return json_reply(200, json::object{{"reset", true}});
  });
}

Status OrdersSim::load_orders(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(errc::orders_file, "cannot open orders file " + path);
  std::string line;
  size_t number = 0;
  MutexLock lock(mu_);
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto value = parse_json(line);
    const json::value* id =
        value && value->is_object() ? value->as_object().if_contains("order_id") : nullptr;
    if (!id || !id->is_string())
      return make_error(errc::orders_file, fmt::format("{}:{}: not an order (a JSON object with "
                                                       "an order_id)",
                                                       path, number));
    orders_[std::string(id->as_string())] = value->as_object();
  }
  log_info("orders loaded", {{"path", path}, {"orders", orders_.size()}});
  return Status::Ok();
}

http::Response OrdersSim::handle(http::Request&& request) {
  const std::string path(request.path());
  if (path.starts_with("/_sim/")) return admin_.dispatch(request);
  std::vector<std::string> segments;
  if (!http::split_path(path, segments) || segments.size() < 2 || segments.size() > 3 ||
      segments[0] != "orders" || (segments.size() == 3 && segments[2] != "cancel"))
    return error_reply(404, "not_found", "No such resource.");
  const bool cancelling = segments.size() == 3;
  if (request.method != (cancelling ? "POST" : "GET"))
    return error_reply(405, "method_not_allowed",
                       cancelling ? "Cancellations are POSTed." : "Orders are read with GET.");
  auto key = api_key_of(request);
  if (!key || (!token_.empty() && *key != token_))
    return error_reply(401, "unauthorized", "A valid bearer token is required.");
  return cancelling ? cancel(request, segments[1]) : get_order(request, segments[1]);
}

http::Response OrdersSim::get_order(const http::Request& request, const std::string& id) {
  auto fault =
      faults_.take({.method = "GET", .path = request.path(), .subject = id, .supported = kAllowed});
  if (fault) log_info("fault", {{"action", to_string(fault->action)}, {"order_id", id}});
  apply_delay(fault);
  if (is_before_commit(fault)) return before_commit_response(*fault, kReplies);
  if (fault && fault->action == FaultAction::kMalformed)
    return json_reply(200, json::object{{"order_id", id}, {"amount_minor", "a great deal"}});
  MutexLock lock(mu_);
  auto it = orders_.find(id);
  http::Response found = it == orders_.end()
                             ? error_reply(404, "order_not_found", "No order with that id.")
                             : json_reply(200, it->second);
  return after_commit_response(fault, std::move(found), kReplies);
}

http::Response OrdersSim::cancel(const http::Request& request, const std::string& id) {
  const auto key = request.header("Idempotency-Key");
  if (!key || key->empty())
    return error_reply(400, "idempotency_key_required", "An Idempotency-Key header is required.");
  {
    MutexLock lock(mu_);
    ++counts_[id].cancel_requests;
  }
  auto fault = faults_.take(
      {.method = "POST", .path = request.path(), .subject = id, .supported = kTransportFaults});
  if (fault) log_info("fault", {{"action", to_string(fault->action)}, {"order_id", id}});
  apply_delay(fault);
  if (is_before_commit(fault)) return before_commit_response(*fault, kReplies);
  auto begun = idempotency_.begin("orders", *key, id);
  switch (begun.outcome) {
    case IdempotencyOutcome::kReplay:
      return after_commit_response(fault, begun.saved, kReplies);
    case IdempotencyOutcome::kMismatch:
    case IdempotencyOutcome::kInFlight:
      return error_reply(409, "idempotency_key_in_use",
                         "This key was used for another request, or its first request is still "
                         "running.");
    case IdempotencyOutcome::kFull:
      return server_error();
    case IdempotencyOutcome::kStarted:
      break;
  }
  http::Response answer = cancel_now(id);
  begun.claim.save(answer);
  return after_commit_response(fault, std::move(answer), kReplies);
}

http::Response OrdersSim::cancel_now(const std::string& id) {
  MutexLock lock(mu_);
  auto it = orders_.find(id);
  if (it == orders_.end()) return error_reply(404, "order_not_found", "No order with that id.");
  auto& order = it->second;
  auto* status = order.if_contains("status");
  if (status && *status == "cancelled")
    return error_reply(409, "already_cancelled", "The order is already cancelled.");
  if (!status || *status != "paid" || delivered(order))
    return error_reply(409, "not_cancellable",
                       "Only a paid order that was not delivered can be cancelled.");
  order["status"] = "cancelled";
  ++counts_[id].cancellations;
  log_info("order cancelled", {{"order_id", id}});
  return json_reply(200, order);
}

}  // namespace opgate::sim
