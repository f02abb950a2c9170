#include "adapters/agents/agents_http_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>

#include "common/json_fields.h"
#include "http/client.h"

namespace opgate::adapters {

namespace json = boost::json;
using operations::AgentPlatform;
using operations::Page;
using operations::RequiredAction;
using operations::SessionView;
using operations::SubmitVerdict;

namespace {

class AgentsHttpClient final : public AgentPlatform {
 public:
  explicit AgentsHttpClient(AgentsHttpOptions o) : o_(std::move(o)) {
    while (!o_.base_url.empty() && o_.base_url.back() == '/') o_.base_url.pop_back();
  }

  Result<SessionView> get_session(const std::string& id) override {
    auto res = call("GET", "/agents/sessions/" + http::url_component(id), "", "");
    if (!res) return res.error();
    if (says_session_missing(*res, id))
      return make_error(errc::session_not_found, "the agent platform has no session " + id);
    if (res->status != 200) return status_error(*res);
    json::error_code ec;
    auto v = json::parse(res->body, ec);
    if (ec || !v.is_object()) return make_error(errc::bad_response, "session is not a JSON object");
    SessionView view;
    auto& o = v.as_object();
    if (auto* s = o.if_contains("status"); s && s->is_string())
      view.status = std::string(s->as_string());
    if (auto* ra = o.if_contains("required_actions"); ra && ra->is_array()) {
      for (auto& a : ra->as_array()) {
        if (!a.is_object()) continue;
        auto& ao = a.as_object();
        auto str = [&](std::string_view k) { return string_field(ao, k); };
        if (str("type") != "function_call") continue;
        RequiredAction action{str("call_id"), str("turn_id"), str("name"), "{}"};
        if (auto* args = ao.if_contains("arguments")) {
          // The platform may send arguments as an object or as JSON text.
          action.arguments_json =
              args->is_string() ? std::string(args->as_string()) : json::serialize(*args);
        }
        view.required_actions.push_back(std::move(action));
      }
    }
    return view;
  }

  Result<SubmitVerdict> submit_result(const std::string& session_id, const pb::CallRef& call,
                                      const pb::ToolResult& result,
                                      const std::string& idempotency_key) override {
    json::object event{{"type", "agent.session.input.tool_result"},
                       {"turn_id", call.turn_id()},
                       {"call_id", call.call_id()},
                       {"success", result.success()}};
    if (result.success())
      event["output"] = result.output();
    else
      event["error"] = result.error();
    std::string body = json::serialize(json::object{{"events", json::array{event}}});
    auto res = this->call("POST", "/agents/sessions/" + http::url_component(session_id) + "/events",
                          body, idempotency_key);
    if (!res) return res.error();
    if (res->status >= 200 && res->status < 300) return SubmitVerdict::accepted;
    // 409 is also "idempotency_key_in_use" while our own earlier request is
    // still being processed: that one is retried, not a conflict.
    if (res->status == 409 && res->body.find("idempotency_key_in_use") == std::string::npos)
      return SubmitVerdict::conflict;
    if (res->status == 400 && res->body.find("Unknown pending tool call") != std::string::npos)
      return SubmitVerdict::unknown_call;
    if (says_session_missing(*res, session_id)) return SubmitVerdict::session_gone;
    return status_error(*res);
  }

  Result<std::string> get_turns(const std::string& id) override {
    auto res = call("GET", "/agents/sessions/" + http::url_component(id) + "/turns", "", "");
    if (!res) return res.error();
    if (res->status != 200) return status_error(*res);
    return res->body;
  }

  Result<Page> get_items(const std::string& id, const std::string& after, int limit) override {
    std::string path =
        fmt::format("/agents/sessions/{}/items?order=asc&limit={}", http::url_component(id), limit);
    if (!after.empty()) path += "&after=" + http::url_component(after);
    auto res = call("GET", path, "", "");
    if (!res) return res.error();
    if (res->status != 200) return status_error(*res);
    Page page;
    page.json = res->body;
    json::error_code ec;
    auto v = json::parse(res->body, ec);
    if (ec || !v.is_object()) return make_error(errc::bad_response, "items page is not JSON");
    if (auto* m = v.as_object().if_contains("has_more"); m && m->is_bool())
      page.has_more = m->as_bool();
    if (auto* l = v.as_object().if_contains("last_id"); l && l->is_string())
      page.last_id = std::string(l->as_string());
    return page;
  }

 private:
  Result<http::Response> call(const std::string& method, const std::string& path,
                              const std::string& body, const std::string& idempotency_key) {
    http::ClientRequest req;
    req.method = method;
    req.url = o_.base_url + path;
    req.timeout = std::chrono::milliseconds(o_.timeout_ms);
    req.ca_file = o_.ca_file;
    req.headers["OpenAI-Beta"] = "agents=v1";
    req.headers["Authorization"] = "Bearer " + o_.api_key;
    if (!body.empty()) {
      req.headers["Content-Type"] = "application/json";
      req.body = body;
    }
    if (!idempotency_key.empty()) req.headers["Idempotency-Key"] = idempotency_key;
    return http::send(req);
  }

  // A 404 proves the session does not exist only when the platform's own
  // error body says so about this session; a 404 from a wrong base_url, a
  // proxy or a hiccup is not that proof, and is retried.
  static bool says_session_missing(const http::Response& res, const std::string& id) {
    if (res.status != 404) return false;
    json::error_code ec;
    auto v = json::parse(res.body, ec);
    if (ec || !v.is_object()) return false;
    const auto* err = v.as_object().if_contains("error");
    if (!err || !err->is_object()) return false;
    const auto* code = err->as_object().if_contains("code");
    const auto* message = err->as_object().if_contains("message");
    if (!code || !code->is_string() || !message || !message->is_string()) return false;
    const std::string_view c = code->as_string();
    return (c == "not_found" || c == "session_not_found") &&
           std::string_view(message->as_string()).find("'" + id + "'") != std::string_view::npos;
  }

  static Error status_error(const http::Response& res) {
    const bool retry =
        res.status >= 500 || res.status == 429 || res.status == 404 || res.status == 408;
    Error e = make_error(retry ? errc::agents_unavailable : errc::agents_refused,
                         fmt::format("agents API answered {}", res.status));
    // Retry-After in seconds (the HTTP-date form is not used by these APIs).
    if (auto it = res.headers.find("Retry-After"); it != res.headers.end()) {
      try {
        e.retry_after_ms = std::clamp<int64_t>(std::stoll(it->second), 0, 3600) * 1000;
      } catch (...) {
      }
    }
    return e;
  }

  AgentsHttpOptions o_;
};

}  // namespace

std::unique_ptr<AgentPlatform> make_agents_http_client(AgentsHttpOptions options) {
  return std::make_unique<AgentsHttpClient>(std::move(options));
}

}  // namespace opgate::adapters
