#include "sim/agent_sim.h"

#include <boost/json.hpp>

#include "common/crypto.h"
#include "sim/fault_replies.h"
#include "sim/form.h"
#include "sim/ids.h"
#include "sim/log.h"
#include "sim/sim_errors.h"
#include "sim/sim_http.h"

namespace opgate::sim {
namespace json = boost::json;

namespace {

constexpr size_t kMaxIdempotencyKeyLength = 255;
constexpr size_t kMaxInputLength = 10'000;
constexpr int64_t kMaxThinkMs = 60'000;
constexpr int64_t kDefaultItemsLimit = 20;

http::Response openai_error(int status, std::string_view message, std::string_view type,
                            std::string_view code) {
  json::object e{{"message", message},
                 {"type", type},
                 {"param", nullptr},
                 {"code", code.empty() ? json::value(nullptr) : json::value(code)}};
  return json_reply(status, json::object{{"error", std::move(e)}});
}

http::Response invalid_request(std::string_view message, std::string_view code = "") {
  return openai_error(400, message, "invalid_request_error", code);
}

http::Response session_not_found(const std::string& id) {
  return openai_error(404, "No session found with id '" + id + "'.", "invalid_request_error",
                      "not_found");
}

http::Response server_error_500() {
  return openai_error(500, "The server had an error while processing your request.", "server_error",
                      "");
}

http::Response rate_limited_429() {
  return openai_error(429, "Rate limit reached. Please try again later.", "requests",
                      "rate_limit_exceeded");
}

constexpr FaultReplies kFaultReplies{server_error_500, rate_limited_429};

bool has_agents_beta(const http::Request& request) {
  auto header = request.header("OpenAI-Beta");
  if (!header) return false;
  std::string_view h = *header;
  while (!h.empty()) {
    auto comma = h.find(',');
    std::string_view token = h.substr(0, comma);
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
    if (token == "agents=v1") return true;
    if (comma == std::string_view::npos) break;
    h.remove_prefix(comma + 1);
  }
  return false;
}

std::string make_agent_id(std::string_view prefix, std::atomic<uint64_t>& next_item) {
  if (prefix == "item_") return "item_" + std::to_string(next_item++);
  return new_id(prefix);
}

// {"input","script"?} of a session or a new message.
struct TurnRequest {
  std::string input;
  std::vector<ScriptStep> script;
  int64_t think_ms = 0;
};

Result<TurnRequest> parse_turn_request(const std::string& body, bool allow_think) {
  auto value = body.empty() ? std::optional<json::value>(json::object{}) : parse_json(body);
  if (!value || !value->is_object())
    return make_error(sim_errc::invalid, "The body must be a JSON object.");
  const auto& o = value->as_object();
  TurnRequest t;
  if (const auto* input = o.if_contains("input")) {
    if (!input->is_string()) return make_error(sim_errc::invalid, "input must be a string");
    if (input->as_string().size() > kMaxInputLength)
      return make_error(sim_errc::invalid, "input may have at most 10000 characters");
    t.input = std::string(input->as_string());
  }
  if (const auto* script = o.if_contains("script"); script && !script->is_null()) {
    auto steps = parse_script(*script);
    if (!steps) return steps.error();
    t.script = std::move(steps.value());
  } else {
    t.script = default_script(t.input);
  }
  if (const auto* think = o.if_contains("think_ms"); think && allow_think) {
    if (!think->is_int64() || think->as_int64() < 0 || think->as_int64() > kMaxThinkMs)
      return make_error(sim_errc::invalid, "think_ms must be an integer in 0..60000");
    t.think_ms = think->as_int64();
  }
  for (const auto& [key, v] : o)
    if (key != "input" && key != "script" && key != "think_ms")
      return make_error(sim_errc::invalid, "unknown field \"" + std::string(key) + "\"");
  return t;
}

}  // namespace

AgentSim::AgentSim(AgentOptions options, const Clock& clock, WebhookSender& webhooks)
    : options_(std::move(options)),
      clock_(clock),
      webhooks_(webhooks),
      idempotency_(clock, options_.max_sessions) {
  add_routes();
}

AgentSim::~AgentSim() { stop(); }

void AgentSim::stop() { thinking_.stop(); }

void AgentSim::add_routes() {
  const std::string base = "/v1/agents/sessions/{id}";
  api_.add("GET", base, [this](const http::Request& r, const http::PathParams& p) {
    return guarded_get(r, [&] { return get_session(p.at("id")); });
  });
  api_.add("POST", base + "/events", [this](const http::Request& r, const http::PathParams& p) {
    return post_events(r, p.at("id"));
  });
  api_.add("GET", base + "/turns", [this](const http::Request& r, const http::PathParams& p) {
    return guarded_get(r, [&] { return list_turns(p.at("id")); });
  });
  api_.add("GET", base + "/items", [this](const http::Request& r, const http::PathParams& p) {
    return guarded_get(r, [&] { return list_items(r, p.at("id")); });
  });

  admin_.add("POST", "/_sim/sessions", [this](const http::Request& r, const http::PathParams&) {
    return admin_create_session(r);
  });
  admin_.add("GET", "/_sim/sessions/{id}", [this](const http::Request&, const http::PathParams& p) {
    return admin_session(p.at("id"));
  });
  admin_.add("POST", "/_sim/sessions/{id}/messages",
             [this](const http::Request& r, const http::PathParams& p) {
               return admin_new_message(r, p.at("id"));
             });
  admin_.add(
      "POST", "/_sim/sessions/{id}/notify",
      [this](const http::Request&, const http::PathParams& p) { return admin_notify(p.at("id")); });
  add_fault_admin_routes(admin_, faults_, kTransportFaults, "call_id");
  admin_.add("POST", "/_sim/webhook_target",
             [this](const http::Request& r, const http::PathParams&) {
               return admin_set_webhook_target(r);
             });
  admin_.add("GET", "/_sim/webhook_target", [this](const http::Request&, const http::PathParams&) {
    std::string url = webhooks_.url();
    return json_reply(200,
                      json::object{{"url", url.empty() ? json::value(nullptr) : json::value(url)}});
  });
  admin_.add("GET", "/_sim/stats",
             [this](const http::Request&, const http::PathParams&) { return admin_stats(); });
  admin_.add("POST", "/_sim/reset",
             [this](const http::Request&, const http::PathParams&) { return admin_reset(); });
}

std::optional<http::Response> AgentSim::check_auth(const http::Request& request) const {
  auto key = api_key_of(request);
  if (!key || (options_.api_key && *key != *options_.api_key))
    return openai_error(401,
                        key ? "Incorrect API key provided."
                            : "You didn't provide an API key. Provide it in the Authorization "
                              "header as 'Bearer YOUR_KEY'.",
                        "invalid_request_error", "invalid_api_key");
  if (!has_agents_beta(request))
    return invalid_request(
        "You must provide the 'OpenAI-Beta: agents=v1' header to use the "
        "Agents API.",
        "missing_beta_header");
  return std::nullopt;
}

http::Response AgentSim::handle(http::Request&& request) {
  try {
    const std::string path(request.path());
    if (path.starts_with("/_sim/")) return admin_.dispatch(request);
    if (auto refused = check_auth(request)) return *refused;
    auto response = api_.dispatch(request);
    if (is_router_miss(response))
      return reshaped_miss(
          response,
          openai_error(response.status, "Invalid URL (" + request.method + " " + path + ")",
                       "invalid_request_error", ""));
    return response;
  } catch (const std::exception& e) {
    log_warn("agent handler failed", {{"error", e.what()}});
    return server_error_500();
  }
}

http::Response AgentSim::guarded_get(const http::Request& request,
                                     const std::function<http::Response()>& produce) {
  return faulted_get(faults_, kFaultReplies, request, produce);
}

http::Response AgentSim::get_session(const std::string& id) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return session_not_found(id);
  return json_reply(200, it->second->session.session_json());
}

http::Response AgentSim::list_turns(const std::string& id) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return session_not_found(id);
  json::array turns = it->second->session.turns_json();
  json::value first = turns.empty() ? json::value(nullptr) : turns.front().as_object().at("id");
  json::value last = turns.empty() ? json::value(nullptr) : turns.back().as_object().at("id");
  return json_reply(200, json::object{{"object", "list"},
                                      {"data", std::move(turns)},
                                      {"first_id", first},
                                      {"last_id", last},
                                      {"has_more", false}});
}

http::Response AgentSim::list_items(const http::Request& request, const std::string& id) {
  int64_t limit = kDefaultItemsLimit;
  if (auto text = request.query_param("limit")) {
    auto n = parse_int(*text);
    if (!n || *n < 1 || *n > 100)
      return invalid_request("limit must be an integer between 1 and 100.", "invalid_limit");
    limit = *n;
  }
  std::string order = request.query_param("order").value_or("desc");
  if (order != "asc" && order != "desc")
    return invalid_request("order must be 'asc' or 'desc'.", "invalid_order");
  auto after = request.query_param("after");
  if (after && after->empty()) after.reset();

  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return session_not_found(id);
  const auto& items = it->second->session.items();
  std::vector<const json::object*> ordered;
  ordered.reserve(items.size());
  for (const auto& item : items) ordered.push_back(&item);
  if (order == "desc") std::reverse(ordered.begin(), ordered.end());
  size_t begin = 0;
  if (after) {
    auto pos = std::find_if(ordered.begin(), ordered.end(), [&](const json::object* item) {
      return item->at("id").as_string() == *after;
    });
    if (pos == ordered.end())
      return invalid_request("No item with id '" + *after + "' in this session.", "invalid_cursor");
    begin = static_cast<size_t>(pos - ordered.begin()) + 1;
  }
  const size_t end = std::min(ordered.size(), begin + static_cast<size_t>(limit));
  json::array data;
  for (size_t i = begin; i < end; ++i) data.push_back(*ordered[i]);
  json::value first = data.empty() ? json::value(nullptr) : data.front().as_object().at("id");
  json::value last = data.empty() ? json::value(nullptr) : data.back().as_object().at("id");
  return json_reply(200, json::object{{"object", "list"},
                                      {"data", std::move(data)},
                                      {"first_id", first},
                                      {"last_id", last},
                                      {"has_more", end < ordered.size()}});
}

http::Response AgentSim::post_events(const http::Request& request, const std::string& id) {
  const std::string path(request.path());
  auto idem_key = request.header("Idempotency-Key");
  if (!idem_key || idem_key->empty() || idem_key->size() > kMaxIdempotencyKeyLength)
    return invalid_request("The Idempotency-Key header is required (1 to 255 characters).",
                           "missing_idempotency_key");
  auto body = parse_json(request.body);
  if (!body || !body->is_object())
    return invalid_request("The body must be a JSON object.", "invalid_json");
  const auto* events_value = body->as_object().if_contains("events");
  if (!events_value || !events_value->is_array() || events_value->as_array().empty())
    return invalid_request("events must be a non-empty array.", "invalid_events");
  std::vector<ToolResult> results;
  for (const auto& event : events_value->as_array()) {
    auto r = parse_tool_result(event);
    if (!r) return invalid_request(r.error().message, "invalid_event");
    results.push_back(std::move(r.value()));
  }
  {
    MutexLock lock(mu_);
    ++event_posts_;
  }

  std::optional<FaultRule> fault = faults_.take(
      {.method = "POST", .path = path, .subject = std::string_view(results.front().call_id)});
  if (fault)
    log_info("fault", {{"action", to_string(fault->action)},
                       {"path", path},
                       {"call_id", results.front().call_id}});
  if (is_before_commit(fault)) {
    apply_delay(fault);
    return before_commit_response(*fault, kFaultReplies);
  }

  const std::string fingerprint =
      crypto::sha256_hex("POST\n" + path + "\n" + json::serialize(*body));
  auto begun = idempotency_.begin(*api_key_of(request), *idem_key, fingerprint);
  switch (begun.outcome) {
    case IdempotencyOutcome::kReplay:
      apply_delay(fault);
      begun.saved.headers["Idempotent-Replayed"] = "true";
      return after_commit_response(fault, std::move(begun.saved), kFaultReplies);
    case IdempotencyOutcome::kMismatch:
      return openai_error(400,
                          "This Idempotency-Key was already used with a different request body.",
                          "invalid_request_error", "idempotency_key_reused");
    case IdempotencyOutcome::kInFlight:
      return openai_error(409,
                          "Another request with this Idempotency-Key is still being processed.",
                          "invalid_request_error", "idempotency_key_in_use");
    case IdempotencyOutcome::kFull:
      return openai_error(503, "Too many idempotency keys are held; retry later.", "server_error",
                          "overloaded");
    case IdempotencyOutcome::kStarted:
      break;
  }
  IdempotencyClaim claim = std::move(begun.claim);
  apply_delay(fault);

  auto finish = [&](http::Response response) {
    claim.save(response);
    return response;
  };

  auto process = [&]() -> http::Response {
    MutexLock lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return finish(session_not_found(id));
    Entry& entry = *it->second;
    // All events are checked before any is recorded: a request applies whole
    // or not at all.
    std::map<std::string, const ToolResult*> in_request;
    std::vector<const ToolResult*> to_record;
    for (const auto& r : results) {
      ResultCheck check = entry.session.check(r);
      if (auto seen = in_request.find(r.call_id); seen != in_request.end())
        check = *seen->second == r ? ResultCheck::kDuplicate : ResultCheck::kConflict;
      switch (check) {
        case ResultCheck::kUnknown:
          ++unknown_calls_;
          return finish(invalid_request("Unknown pending tool call", "unknown_pending_tool_call"));
        case ResultCheck::kConflict:
          ++conflicts_;
          return finish(openai_error(409, "A different result was already submitted for this call",
                                     "invalid_request_error", "conflict"));
        case ResultCheck::kAccept:
          in_request[r.call_id] = &r;
          to_record.push_back(&r);
          break;
        case ResultCheck::kDuplicate:
          break;
      }
    }
    for (const ToolResult* r : to_record) {
      entry.session.record(*r);
      ++results_received_;
    }
    if (!to_record.empty()) schedule_advance_locked(entry);
    return finish(json_reply(202, json::object{{"accepted", true}}));
  };
  // An after-commit fault replaces whatever the server answered; what was
  // saved under the key stays saved.
  return after_commit_response(fault, process(), kFaultReplies);
}

void AgentSim::schedule_advance_locked(Entry& entry) {
  if (!entry.session.wants_advance()) return;
  if (entry.think_ms == 0) return advance_locked(entry);
  std::string id = entry.session.id();
  bool scheduled = thinking_.schedule_after(std::chrono::milliseconds(entry.think_ms), [this, id] {
    MutexLock lock(mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) advance_locked(*it->second);
  });
  if (!scheduled) advance_locked(entry);  // no room to think later: think now
}

void AgentSim::advance_locked(Entry& entry) {
  if (entry.session.advance(clock_.now_s())) notify_locked(entry);
}

void AgentSim::notify_locked(Entry& entry) {
  json::object event{{"id", new_id("evt_")},
                     {"object", "event"},
                     {"created_at", clock_.now_s()},
                     {"type", "agent.session.action_required"},
                     {"data", json::object{{"id", entry.session.id()}}}};
  std::string webhook_id = webhooks_.send(json::serialize(event));
  if (!webhook_id.empty()) ++entry.webhooks_sent;
}

http::Response AgentSim::admin_create_session(const http::Request& request) {
  auto turn = parse_turn_request(request.body, true);
  if (!turn) return invalid_request(turn.error().message, "invalid_request");
  MutexLock lock(mu_);
  if (sessions_.size() >= options_.max_sessions)
    return openai_error(503, "Too many sessions.", "server_error", "overloaded");
  std::string id = new_id("sess_");
  auto entry =
      std::make_unique<Entry>(AgentSession(id, clock_.now_s(), [this](std::string_view prefix) {
        return make_agent_id(prefix, next_item_);
      }));
  entry->think_ms = turn->think_ms;
  auto turn_id =
      entry->session.start_turn(std::move(turn->input), std::move(turn->script), clock_.now_s());
  if (!turn_id) return invalid_request(turn_id.error().message, turn_id.error().code);
  Entry& e = *entry;
  sessions_.emplace(id, std::move(entry));
  schedule_advance_locked(e);
  return json_reply(200, json::object{{"id", id}, {"turn_id", turn_id.value()}});
}

http::Response AgentSim::admin_new_message(const http::Request& request, const std::string& id) {
  auto turn = parse_turn_request(request.body, false);
  if (!turn) return invalid_request(turn.error().message, "invalid_request");
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return session_not_found(id);
  Entry& e = *it->second;
  auto turn_id =
      e.session.start_turn(std::move(turn->input), std::move(turn->script), clock_.now_s());
  if (!turn_id)
    return openai_error(409, turn_id.error().message, "invalid_request_error",
                        turn_id.error().code);
  schedule_advance_locked(e);
  return json_reply(200, json::object{{"id", id}, {"turn_id", turn_id.value()}});
}

http::Response AgentSim::admin_notify(const std::string& id) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return session_not_found(id);
  if (!it->second->session.requires_action())
    return openai_error(409, "The session does not require action.", "invalid_request_error",
                        "not_requires_action");
  notify_locked(*it->second);
  return json_reply(200, json::object{{"notified", true}});
}

http::Response AgentSim::admin_set_webhook_target(const http::Request& request) {
  auto body = parse_json(request.body);
  const json::value* url = nullptr;
  if (body && body->is_object()) url = body->as_object().if_contains("url");
  if (!url || !url->is_string() || !url->as_string().starts_with("http://") ||
      url->as_string().size() > 2048)
    return invalid_request("The body must be {\"url\":\"http://host:port/path\"}.",
                           "invalid_request");
  webhooks_.set_url(std::string(url->as_string()));
  log_info("webhook target set", {{"url", url->as_string()}});
  return json_reply(200, json::object{{"url", url->as_string()}});
}

http::Response AgentSim::admin_session(const std::string& id) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return session_not_found(id);
  json::object out = it->second->session.debug_json();
  out["think_ms"] = it->second->think_ms;
  out["webhooks_sent"] = it->second->webhooks_sent;
  return json_reply(200, out);
}

http::Response AgentSim::admin_stats() {
  WebhookStats w = webhooks_.stats();
  MutexLock lock(mu_);
  return json_reply(200, json::object{{"webhooks_sent", w.sent},
                                      {"webhooks_acked", w.acked},
                                      {"webhook_attempts", w.attempts},
                                      {"webhooks_failed", w.failed},
                                      {"webhooks_dropped", w.dropped},
                                      {"webhooks_pending", w.pending},
                                      {"results_received", results_received_},
                                      {"conflicts", conflicts_},
                                      {"unknown_calls", unknown_calls_},
                                      {"event_posts", event_posts_},
                                      {"sessions", sessions_.size()}});
}

http::Response AgentSim::admin_reset() {
  idempotency_.clear();
  faults_.clear();
  MutexLock lock(mu_);
  sessions_.clear();
  results_received_ = conflicts_ = unknown_calls_ = event_posts_ = 0;
  return json_reply(200, json::object{{"reset", true}});
}

}  // namespace opgate::sim
