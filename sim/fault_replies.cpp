#include "sim/fault_replies.h"

#include <boost/json.hpp>
#include <string>

#include "sim/log.h"
#include "sim/sim_http.h"

namespace opgate::sim {

http::Response faulted_get(FaultTable& faults, const FaultReplies& replies,
                           const http::Request& request,
                           const std::function<http::Response()>& produce) {
  const std::string path(request.path());
  std::optional<FaultRule> fault =
      faults.take({.method = "GET", .path = path, .subject = std::nullopt});
  if (fault) log_info("fault", {{"action", to_string(fault->action)}, {"path", path}});
  apply_delay(fault);
  if (is_before_commit(fault)) return before_commit_response(*fault, replies);
  return after_commit_response(fault, produce(), replies);
}

http::Response before_commit_response(const FaultRule& rule, const FaultReplies& replies) {
  http::Response r;
  switch (rule.action) {
    case FaultAction::kDropBeforeCommit:
      r.drop = true;
      return r;
    case FaultAction::kRateLimit:
      r = replies.rate_limited();
      r.headers["Retry-After"] = std::to_string(rule.retry_after_s);
      return r;
    default:
      return replies.server_error();
  }
}

http::Response after_commit_response(const std::optional<FaultRule>& rule, http::Response processed,
                                     const FaultReplies& replies) {
  if (rule && rule->action == FaultAction::kDropAfterCommit) {
    http::Response r;
    r.drop = true;
    return r;
  }
  if (rule && rule->action == FaultAction::kError500AfterCommit) return replies.server_error();
  return processed;
}

void add_fault_admin_routes(http::Router& admin, FaultTable& faults, FaultActionSet allowed,
                            std::string_view subject_field) {
  auto list = [&faults, field = std::string(subject_field)] {
    boost::json::array rules;
    for (const auto& rule : faults.list()) rules.push_back(fault_rule_to_json(rule, field));
    return json_reply(200, boost::json::object{{"rules", std::move(rules)}});
  };
  admin.add("POST", "/_sim/faults",
            [&faults, allowed, list, field = std::string(subject_field)](const http::Request& r,
                                                                         const http::PathParams&) {
              auto body = parse_json(r.body);
              if (!body) return http::error_response(400, "invalid_json", "The body must be JSON.");
              auto rules = parse_fault_rules(*body, allowed, field);
              if (!rules)
                return http::error_response(400, rules.error().code, rules.error().message);
              if (auto added = faults.add(std::move(rules.value())); !added)
                return http::error_response(400, added.error().code, added.error().message);
              return list();
            });
  admin.add("GET", "/_sim/faults",
            [list](const http::Request&, const http::PathParams&) { return list(); });
  admin.add("DELETE", "/_sim/faults", [&faults](const http::Request&, const http::PathParams&) {
    faults.clear();
    return json_reply(200, boost::json::object{{"cleared", true}});
  });
}

}  // namespace opgate::sim
