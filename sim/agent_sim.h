// The OpenAI Agents API (beta) simulator as an HTTP handler: sessions run by
// a scripted model, tool results with safe-resend and conflict semantics,
// idempotency keys, signed action_required webhooks, fault injection and the
// /_sim/ admin API. Thread-safe: handle() may run on many threads at once.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "http/message.h"
#include "http/router.h"
#include "sim/agent_session.h"
#include "sim/faults.h"
#include "sim/idempotency.h"
#include "sim/scheduler.h"
#include "sim/webhook_sender.h"

namespace opgate::sim {

struct AgentOptions {
  std::optional<std::string> api_key;  // if set, the only accepted key
  size_t max_sessions = 100'000;
};

class AgentSim {
 public:
  AgentSim(AgentOptions options, const Clock& clock, WebhookSender& webhooks);
  ~AgentSim();
  AgentSim(const AgentSim&) = delete;
  AgentSim& operator=(const AgentSim&) = delete;

  http::Response handle(http::Request&& request);
  // Stops the model's background thinking. Idempotent.
  void stop();

 private:
  struct Entry {
    explicit Entry(AgentSession s) : session(std::move(s)) {}
    AgentSession session;
    int64_t think_ms = 0;
    int64_t webhooks_sent = 0;
  };

  void add_routes();
  std::optional<http::Response> check_auth(const http::Request& request) const;
  http::Response guarded_get(const http::Request& request,
                             const std::function<http::Response()>& produce);

  http::Response get_session(const std::string& id) EXCLUDES(mu_);
  http::Response post_events(const http::Request& request, const std::string& id) EXCLUDES(mu_);
  http::Response list_turns(const std::string& id) EXCLUDES(mu_);
  http::Response list_items(const http::Request& request, const std::string& id) EXCLUDES(mu_);

  http::Response admin_create_session(const http::Request& request) EXCLUDES(mu_);
  http::Response admin_new_message(const http::Request& request, const std::string& id)
      EXCLUDES(mu_);
  http::Response admin_notify(const std::string& id) EXCLUDES(mu_);
  http::Response admin_set_webhook_target(const http::Request& request);
  http::Response admin_session(const std::string& id) EXCLUDES(mu_);
  http::Response admin_stats() EXCLUDES(mu_);
  http::Response admin_reset() EXCLUDES(mu_);

  // Lets the model make its next move now, or after the session's think
  // time.
  void schedule_advance_locked(Entry& entry) REQUIRES(mu_);
  // Runs the model until it needs a tool result or finishes.
  void advance_locked(Entry& entry) REQUIRES(mu_);
  // Sends the session's action_required webhook.
  void notify_locked(Entry& entry) REQUIRES(mu_);

  AgentOptions options_;
  const Clock& clock_;
  WebhookSender& webhooks_;
  IdempotencyStore idempotency_;
  FaultTable faults_;
  http::Router api_;
  http::Router admin_;

  // Guards the sessions and the counters; an Entry (and its session) is
  // reached only through sessions_, under mu_.
  mutable Mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> sessions_ GUARDED_BY(mu_);
  int64_t results_received_ GUARDED_BY(mu_) = 0;
  int64_t conflicts_ GUARDED_BY(mu_) = 0;
  int64_t unknown_calls_ GUARDED_BY(mu_) = 0;
  int64_t event_posts_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> next_item_{1};
  Scheduler thinking_{1, 100'000};  // last: its thread stops first
};

}  // namespace opgate::sim
