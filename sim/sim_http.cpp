#include "sim/sim_http.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <chrono>

#include "common/crypto.h"
#include "common/mutex.h"

namespace opgate::sim {

std::optional<boost::json::value> parse_json(std::string_view text) {
  boost::system::error_code ec;
  auto value = boost::json::parse(text, ec);
  if (ec) return std::nullopt;
  return value;
}

http::Response json_reply(int status, const boost::json::value& body) {
  return http::json_response(status, boost::json::serialize(body));
}

std::optional<std::string> api_key_of(const http::Request& request) {
  auto header = request.header("Authorization");
  if (!header) return std::nullopt;
  std::string_view h = *header;
  auto scheme_is = [&](std::string_view scheme) {
    if (h.size() <= scheme.size() || h[scheme.size()] != ' ') return false;
    for (size_t i = 0; i < scheme.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(h[i])) != scheme[i]) return false;
    return true;
  };
  if (scheme_is("bearer")) {
    std::string key(h.substr(7));
    while (!key.empty() && key.front() == ' ') key.erase(key.begin());
    while (!key.empty() && key.back() == ' ') key.pop_back();
    if (key.empty()) return std::nullopt;
    return key;
  }
  if (scheme_is("basic")) {
    auto decoded = crypto::base64_decode(h.substr(6));
    if (!decoded) return std::nullopt;
    auto colon = decoded->find(':');
    std::string user = decoded->substr(0, colon);
    if (user.empty()) return std::nullopt;
    return user;
  }
  return std::nullopt;
}

namespace {

struct DelayGate {
  Mutex mu;
  CondVar cv;
  bool interrupted GUARDED_BY(mu) = false;
};

DelayGate& delay_gate() {
  static DelayGate gate;
  return gate;
}

}  // namespace

void apply_delay(const std::optional<FaultRule>& rule) {
  if (!rule || rule->delay_ms <= 0) return;
  auto& gate = delay_gate();
  MutexLock lock(gate.mu);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(rule->delay_ms);
  while (!gate.interrupted) {
    if (gate.cv.wait_until(gate.mu, deadline) == std::cv_status::timeout) break;
  }
}

void interrupt_delays() {
  auto& gate = delay_gate();
  {
    MutexLock lock(gate.mu);
    gate.interrupted = true;
  }
  gate.cv.notify_all();
}

bool is_before_commit(const std::optional<FaultRule>& rule) {
  return rule && (rule->action == FaultAction::kDropBeforeCommit ||
                  rule->action == FaultAction::kError500BeforeCommit ||
                  rule->action == FaultAction::kRateLimit);
}

}  // namespace opgate::sim

namespace opgate::sim {

bool is_router_miss(const http::Response& response) {
  if (response.status != 404 && response.status != 405) return false;
  auto body = parse_json(response.body);
  if (!body || !body->is_object()) return false;
  const auto* error = body->as_object().if_contains("error");
  return error && error->is_object() && !error->as_object().contains("type");
}

http::Response reshaped_miss(const http::Response& miss, http::Response reply) {
  if (auto allow = miss.headers.find("Allow"); allow != miss.headers.end())
    reply.headers["Allow"] = allow->second;
  return reply;
}

}  // namespace opgate::sim
