// Outbound notifications: the notifier fans each queued notification event
// out to the configured endpoints (one delivery each, in one transaction)
// and delivers them as Standard Webhooks requests (or Slack messages): a
// webhook-id stable across retries, a fresh webhook-timestamp and v1
// signature per attempt, a timeout per attempt, the retry schedule with
// jitter and no sooner than Retry-After. 2xx ends a delivery; 410 disables
// the endpoint; a delivery that uses up the schedule marks it failing.
// Deliveries of one operation to one endpoint arrive in order; each endpoint
// has its own bound on deliveries in flight, and notifications run on lanes
// of their own, so a slow endpoint delays neither another endpoint nor the
// payment outbox.
// Thread-safety: dispatch() from the dispatcher thread; the rest from any.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/lanes.h"
#include "common/live.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "http/client.h"
#include "outbox/held_items.h"
#include "store/port.h"

namespace opgate::outbox {

struct NotifyEndpoint {
  std::string name;
  std::string url;
  std::string raw_key;           // the decoded whsec_ secret
  std::set<std::string> events;  // empty: every event
  enum class Format { standard, slack } format = Format::standard;
  int64_t timeout_ms = 10'000;
  int max_in_flight = 4;
  bool wants(std::string_view type) const {
    return events.empty() || events.count(std::string(type)) > 0;
  }
};

struct NotifyConfig {
  // Waits before the 2nd, 3rd, ... attempt (Standard Webhooks' schedule).
  std::vector<int64_t> retry_schedule_s{5, 300, 1800, 7200, 18000, 36000, 36000};
  // Links in notifications: console_url + "/operations/" + key.
  std::string console_url;
  std::vector<NotifyEndpoint> endpoints;
};

// The body and headers of one delivery at one attempt (pure).
http::ClientRequest delivery_request(const NotifyEndpoint& endpoint, const pb::Notification& n,
                                     const std::string& console_url, int64_t now_s);

using HttpSend = std::function<Result<http::Response>(const http::ClientRequest&)>;

class Notifier {
 public:
  Notifier(store::Storage& storage, Lanes& lanes, const Live<NotifyConfig>& config,
           Metrics& metrics, const Clock& clock, Random random, HttpSend send = http::send);

  // Fans out due events and hands due deliveries to lanes; returns how many.
  size_t dispatch();
  // Queues again, for one endpoint, every kept event since since_ms that it
  // subscribes to (same webhook-ids: receivers see repeats as such).
  Result<size_t> replay(const std::string& endpoint, int64_t since_ms);
  // Re-enables an endpoint disabled by a 410.
  Status enable(const std::string& endpoint);

  static std::string webhook_id(const std::string& event_id, const std::string& endpoint);

  // Other processes share the store (PostgreSQL): each delivery is leased
  // before it is sent, so that one process sends each attempt. Call before
  // the first dispatch().
  void set_shared_store(bool shared) { shared_store_ = shared; }
  // How long past its timeout a leased delivery is left to its holder.
  static constexpr int64_t kLeaseMarginMs = 10'000;

 private:
  // Fans each event out to one delivery per endpoint that wants it.
  void expand(const std::vector<store::OutboxEntry>& events);
  // Removes a delivery nobody will send (endpoint gone or disabled).
  void drop(const store::OutboxEntry& entry);
  void deliver(const store::OutboxEntry& entry, const NotifyEndpoint& endpoint);
  void finish(const std::string& endpoint) EXCLUDES(mu_);
  int64_t retry_delay_ms(size_t attempt, int64_t retry_after_ms) EXCLUDES(mu_);

  store::Storage& storage_;
  Lanes& lanes_;
  const Live<NotifyConfig>& config_;
  Metrics& metrics_;
  const Clock& clock_;
  HttpSend send_;
  bool shared_store_ = false;
  HeldItems held_;  // handed to a lane, not finished; see held_items.h
  Mutex mu_;
  std::map<std::string, int> in_flight_ GUARDED_BY(mu_);  // per endpoint
  Random random_ GUARDED_BY(mu_);
};

}  // namespace opgate::outbox
