// POST /v1/webhooks/{source}: the status table of DESIGN.md §3.1 as one
// function from request to response. Verification is pure; the only I/O is
// Inbox::accept. Thread-safe.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/clock.h"
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
};

class WebhookHandler {
 public:
  WebhookHandler(IngressConfig config, Inbox& inbox, const Clock& clock, Metrics& metrics);
  http::Response handle(const http::Request& request, const std::string& source);
  // While draining, new events get 503 so the sender retries elsewhere/later.
  void set_draining(bool draining) { draining_ = draining; }

 private:
  http::Response reject(const std::string& source, int status, std::string_view reason,
                        std::string_view message);
  IngressConfig config_;
  Inbox& inbox_;
  const Clock& clock_;
  Metrics& metrics_;
  std::atomic<bool> draining_{false};
};

}  // namespace opgate::ingress
