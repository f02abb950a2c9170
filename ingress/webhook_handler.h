// POST /v1/webhooks/{source}: every status it answers, and why. Checking a
// request (source, draining, media type, headers, signature, envelope,
// backlog) is pure; the only I/O is the inbox's group commit, and the answer
// is sent when the write that holds the event is on disk. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/live.h"
#include "common/metrics.h"
#include "http/message.h"
#include "ingress/inbox.h"

namespace opgate::ingress {

struct Source {
  std::string name;
  std::vector<std::string> raw_keys;  // decoded whsec_ secrets
};

struct IngressConfig {
  std::vector<Source> sources;
  int64_t timestamp_tolerance_s = 300;
  size_t max_backlog = 100000;
  // After a request that fails verification (400 or 401), its connection
  // waits this long before its next request is read.
  std::chrono::milliseconds reject_cooldown{250};
};

class WebhookHandler {
  // One source's counters, looked up once per configuration, not per event.
  struct Counters {
    std::atomic<uint64_t>* received;
    std::atomic<uint64_t>* accepted;
    std::atomic<uint64_t>* duplicate;
  };
  struct Configured {
    IngressConfig config;
    std::vector<Counters> counters;  // one per source, in the same order
  };

 public:
  WebhookHandler(IngressConfig config, Inbox& inbox, const Clock& clock, Metrics& metrics);
  // Answers through `respond`: at once for a rejection, after the group
  // commit for an accepted event.
  void handle(http::Request&& request, const std::string& source, http::Respond respond);
  // handle() and wait for the answer.
  http::Response handle(const http::Request& request, const std::string& source);
  // While draining, new events get 503 so the sender retries elsewhere/later.
  void set_draining(bool draining) { draining_ = draining; }
  // A reload: sources and their secrets, tolerance, backlog bound, cooldown.
  // Requests already being checked finish with the configuration they began
  // with.
  void set_config(IngressConfig config) { config_.set(configure(std::move(config))); }

 private:
  // The rejection for a request that may not be stored, or nothing (and
  // `submission` filled in) for one to submit.
  std::optional<http::Response> check(const http::Request& request, const std::string& source,
                                      Submission& submission, Counters& counters);
  Configured configure(IngressConfig config);
  // Refuses with a catalogue code, which is also the reason it is counted
  // and logged under.
  http::Response reject(const std::string& source, const ErrorCode& code, std::string_view message,
                        std::string_view webhook_id = "");
  http::Response answer(const std::string& source, const Counters& counters,
                        const Result<Accepted>& accepted, int64_t started_ns);

  Live<Configured> config_;
  Inbox& inbox_;
  const Clock& clock_;
  Metrics& metrics_;
  Histogram& latency_;
  std::atomic<bool> draining_{false};
};

}  // namespace opgate::ingress
