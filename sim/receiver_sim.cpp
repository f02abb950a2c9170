#include "sim/receiver_sim.h"

#include <boost/json.hpp>

#include "common/webhook_signature.h"
#include "sim/fault_replies.h"
#include "sim/log.h"
#include "sim/sim_http.h"

namespace opgate::sim {

namespace json = boost::json;

namespace {
http::Response plain_500() {
  return http::error_response(500, "server_error", "The receiver failed.");
}
http::Response plain_429() { return http::error_response(429, "rate_limited", "Slow down."); }
constexpr FaultReplies kReplies{plain_500, plain_429};
constexpr FaultActionSet kAllowed =
    fault_set({FaultAction::kDelay, FaultAction::kDropBeforeCommit, FaultAction::kDropAfterCommit,
               FaultAction::kError500BeforeCommit, FaultAction::kError500AfterCommit,
               FaultAction::kRateLimit, FaultAction::kGone});
}  // namespace

ReceiverSim::ReceiverSim(std::string raw_key, const Clock& clock)
    : raw_key_(std::move(raw_key)), clock_(clock) {
  add_fault_admin_routes(admin_, faults_, kAllowed, "webhook_id");
  admin_.add("GET", "/_sim/received", [this](const http::Request&, const http::PathParams&) {
    MutexLock lock(mu_);
    return json_reply(200, json::object{{"deliveries", received_}});
  });
  admin_.add("POST", "/_sim/reset", [this](const http::Request&, const http::PathParams&) {
    faults_.clear();
    MutexLock lock(mu_);
    received_.clear();
    return json_reply(200, json::object{{"reset", true}});
  });
}

http::Response ReceiverSim::handle(http::Request&& request) {
  if (request.path().starts_with("/_sim/")) return admin_.dispatch(request);
  if (request.method != "POST")
    return http::error_response(405, "method_not_allowed", "Deliveries are POSTed.");
  const auto id = request.header("webhook-id").value_or("");
  auto fault = faults_.take({.method = "POST",
                             .path = request.path(),
                             .subject = std::string_view(id),
                             .supported = kAllowed});
  if (fault) log_info("fault", {{"action", to_string(fault->action)}, {"webhook_id", id}});
  apply_delay(fault);
  if (fault && fault->action == FaultAction::kGone)
    return http::error_response(410, "gone", "This endpoint no longer exists.");
  if (is_before_commit(fault)) return before_commit_response(*fault, kReplies);
  return after_commit_response(fault, receive(request), kReplies);
}

http::Response ReceiverSim::receive(const http::Request& request) {
  const auto id = request.header("webhook-id").value_or("");
  const auto ts = request.header("webhook-timestamp").value_or("");
  const auto sig = request.header("webhook-signature").value_or("");
  const bool verified =
      webhooks::verify({id, ts, sig, request.body}, {raw_key_}, clock_.now_s(), 300).ok();
  json::object record{{"path", request.path()},
                      {"webhook_id", id},
                      {"webhook_timestamp", ts},
                      {"verified", verified},
                      {"received_at_ms", clock_.now_ms()}};
  if (auto body = parse_json(request.body); body && body->is_object()) {
    const auto& o = body->as_object();
    if (auto* type = o.if_contains("type"); type && type->is_string()) record["type"] = *type;
    if (auto* text = o.if_contains("text"); text && text->is_string()) record["text"] = *text;
    if (auto* data = o.if_contains("data"); data && data->is_object()) {
      const auto& d = data->as_object();
      for (const char* k : {"key", "state", "outcome", "console_url", "audit_head"})
        if (auto* v = d.if_contains(k)) record[k] = *v;
    }
  }
  {
    MutexLock lock(mu_);
    received_.push_back(std::move(record));
  }
  if (!verified) return http::error_response(401, "bad_signature", "The signature is wrong.");
  http::Response r;
  r.status = 204;
  return r;
}

}  // namespace opgate::sim
