// Delivers Standard Webhooks-signed events to one URL from background
// threads: a bounded backlog, retries with capped exponential backoff, the
// same webhook-id and body on every attempt and a fresh timestamp/signature.
// The target URL may change at run time (each attempt uses the current one);
// while there is none, messages wait. Thread-safe: any method from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/mutex.h"
#include "sim/scheduler.h"

namespace opgate::sim {

struct WebhookSenderOptions {
  std::string url;      // "" = none yet: messages wait for set_url()
  std::string raw_key;  // decoded from "whsec_..."
  size_t max_backlog = 10'000;
  int max_attempts = 20;
  std::chrono::milliseconds first_backoff{100};
  std::chrono::milliseconds max_backoff{2'000};
  std::chrono::milliseconds timeout{3'000};
  size_t threads = 2;
};

struct WebhookStats {
  int64_t sent = 0;      // messages accepted for delivery
  int64_t acked = 0;     // messages answered 2xx
  int64_t attempts = 0;  // HTTP attempts, retries included
  int64_t failed = 0;    // messages given up after max_attempts
  int64_t dropped = 0;   // messages refused because the backlog was full
  int64_t pending = 0;   // messages not yet acked nor given up
};

// Backoff before attempt `attempt` (2, 3, ...): first * 2^(attempt-2), capped.
std::chrono::milliseconds webhook_backoff(int attempt, std::chrono::milliseconds first,
                                          std::chrono::milliseconds cap);

class WebhookSender {
 public:
  WebhookSender(WebhookSenderOptions options, const Clock& clock);
  ~WebhookSender();
  WebhookSender(const WebhookSender&) = delete;
  WebhookSender& operator=(const WebhookSender&) = delete;

  // Queues a message with a new webhook-id; returns that id, or "" if the
  // backlog is full (the message is dropped and logged).
  std::string send(std::string body);
  WebhookStats stats() const;
  void set_url(std::string url) EXCLUDES(url_mu_);
  std::string url() const EXCLUDES(url_mu_);
  void stop();

 private:
  struct Message {
    std::string webhook_id;
    std::string body;
    int attempt = 0;
  };
  void attempt(std::shared_ptr<Message> message);

  WebhookSenderOptions options_;
  const Clock& clock_;
  mutable Mutex url_mu_;
  std::string url_ GUARDED_BY(url_mu_);
  std::atomic<int64_t> sent_{0}, acked_{0}, attempts_{0}, failed_{0}, dropped_{0};
  Scheduler scheduler_;  // last: its threads stop before the rest goes
};

}  // namespace opgate::sim
