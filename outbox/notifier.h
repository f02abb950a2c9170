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
#include <optional>
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
  // The decoded whsec_ secret; a slack endpoint may have none (Slack reads
  // no signature: its URL is the secret), and then sends none.
  std::string raw_key;
  std::set<std::string> events;  // empty: every event
  enum class Format { standard, slack } format = Format::standard;
  int64_t timeout_ms = 10'000;
  int max_in_flight = 4;
  // A standard delivery carries on-call's resolution evidence and the last
  // provider error only to endpoints that ask for them (they stay in the
  // audit trail either way).
  bool include_evidence = false;
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

// Deliveries for an endpoint this node does not know (renamed, removed, or
// not yet in its configuration during a rolling reload) are held: left
// queued, looked at again this often, and sent once a configuration knows
// the endpoint; an operator may replay them to another endpoint or discard
// them (counted and logged), never lose them in silence.
inline constexpr int64_t kHeldRecheckMs = 60'000;

// Slack's mrkdwn escapes: "&", "<" and ">" as &amp; &lt; &gt;, so text from
// order data cannot make a link, a mention or a channel alert.
std::string slack_escape(std::string_view text);

// The body and headers of one delivery at one attempt (pure).
http::ClientRequest delivery_request(const NotifyEndpoint& endpoint, const pb::Notification& n,
                                     const std::string& console_url, int64_t now_s);

using HttpSend = std::function<Result<http::Response>(const http::ClientRequest&)>;

class Notifier {
 public:
  Notifier(store::Storage& storage, Lanes& lanes, const Live<NotifyConfig>& config,
           Metrics& metrics, const Clock& clock, Random random, HttpSend send = http::send);

  // Fans out due events and hands due deliveries to lanes; returns how many.
  size_t dispatch() EXCLUDES(mu_);
  // Queues again, for one endpoint, every kept event since since_ms that it
  // subscribes to (same webhook-ids: receivers see repeats as such), for
  // `principal`. Past the first kReplayAtOnce, one every kReplayPaceMs: a
  // long replay does not stand in front of new events.
  Result<size_t> replay(const std::string& endpoint, int64_t since_ms,
                        const std::string& principal);
  static constexpr size_t kReplayAtOnce = 100;
  static constexpr int64_t kReplayPaceMs = 10;
  // Re-enables an endpoint disabled by a 410.
  Status enable(const std::string& endpoint);
  // The deliveries held for an endpoint no longer configured here: sent
  // again to `to` (a configured endpoint, with its own webhook-ids; events
  // it does not subscribe to stay held), or, with `to` empty, discarded
  // (counted and logged). Returns how many.
  Result<size_t> release_held(const std::string& from, const std::string& to,
                              const std::string& principal);

  static std::string webhook_id(const std::string& event_id, const std::string& endpoint);

  // Other processes share the store (PostgreSQL): each delivery is leased
  // before it is sent, so that one process sends each attempt. Call before
  // the first dispatch().
  void set_shared_store(bool shared) { shared_store_ = shared; }
  // How long past its timeout a leased delivery is left to its holder.
  static constexpr int64_t kLeaseMarginMs = 10'000;
  // How soon a delivery waiting behind an earlier one that is due or being
  // sent looks again.
  static constexpr int64_t kOrderRecheckMs = 500;
  // How soon a delivery that found its endpoint at max_in_flight looks
  // again: postponed out of the way, so that the deliveries queued behind
  // it (other endpoints', new events to fan out) are reached.
  static constexpr int64_t kBusyRecheckMs = 1'000;

 private:
  // Fans each event out to one delivery per endpoint that wants it.
  void expand(const std::vector<store::OutboxEntry>& events);
  // Removes a delivery nobody will send (its endpoint disabled by a 410).
  void drop(const store::OutboxEntry& entry);
  // Leaves a pass's deliveries for endpoints this node does not know
  // queued, to be looked at again after kHeldRecheckMs (set aside, on a
  // shared store; else moved on in one transaction); logged once per
  // endpoint.
  void hold(const std::vector<store::OutboxEntry>& entries) EXCLUDES(mu_);
  // Moves deliveries `by_ms` later in the queue, in one transaction (those
  // another process took since are left as they are); how many it moved.
  Result<size_t> postpone(const std::vector<store::OutboxEntry>& entries, int64_t by_ms);
  // One attempt of a delivery: leased (on a shared store), held back while
  // an earlier event of its operation is queued for the endpoint, sent,
  // recorded (fenced), then counted and logged.
  void deliver(const store::OutboxEntry& entry, const NotifyEndpoint& endpoint);
  struct Attempt {
    bool ok = false;       // 2xx
    bool gone = false;     // 410: the endpoint is disabled
    bool give_up = false;  // the schedule is used up
    std::string error;
    size_t attempts = 0;  // this one included
    int64_t wait_ms = 0;  // before the next, when it is retried
  };
  // The entry this process may send (leased when the store is shared);
  // nothing if another process has it.
  std::optional<store::OutboxEntry> lease_attempt(const store::OutboxEntry& dispatched,
                                                  const NotifyEndpoint& endpoint);
  // True (and the entry rescheduled just after it) while an earlier event
  // of the same operation waits for this endpoint.
  bool waits_for_earlier(const store::OutboxEntry& entry);
  Attempt send_attempt(const store::OutboxEntry& entry, const NotifyEndpoint& endpoint);
  // False when another process took the delivery over meanwhile.
  Result<bool> record_attempt(const store::OutboxEntry& entry, const Attempt& attempt);
  void report_attempt(const store::OutboxEntry& entry, const Attempt& attempt);
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
  // On a shared store, deliveries for an endpoint this node does not know
  // are set aside here until kHeldRecheckMs has passed, not rewritten: a
  // rewrite would make each this node's again (the store records its
  // writer), and a node that knows the endpoint takes a live node's item
  // only once it has been left due a while. At most kMaxSetAside; past
  // that, held in the store. Dispatcher thread only: id -> until (ms).
  static constexpr size_t kMaxSetAside = 4096;
  std::map<std::string, int64_t, std::less<>> set_aside_;
  Mutex mu_;
  std::map<std::string, int> in_flight_ GUARDED_BY(mu_);  // per endpoint
  std::set<std::string> held_logged_ GUARDED_BY(mu_);     // endpoints logged as held
  Random random_ GUARDED_BY(mu_);
};

}  // namespace opgate::outbox
