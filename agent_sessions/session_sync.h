// Session sync: turns inbox events into tool results. The dispatcher hands
// the queued events of each session to its own lane (see common/lanes.h),
// so sessions are synced concurrently and one slow fetch delays only its
// own session. A sync fetches the session once (a burst of webhooks is one
// fetch), answers every required action it has not answered yet, and
// stores the results, new operations and outbox items in the same
// transaction that marks the events processed. Events for an unbound
// session, or one the platform says does not exist, wait (parked) until a
// binding or `recover` releases them.
// Thread-safety: dispatch() from one dispatcher thread; the rest from any.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/lanes.h"
#include "common/live.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "ingress/inbox.h"
#include "operations/agent_platform.h"
#include "operations/order_service.h"
#include "operations/policy.h"
#include "operations/tool_calls.h"
#include "store/port.h"

namespace opgate::agent_sessions {

class SessionSync {
 public:
  // One dispatch pass reads the queue a page of this many entries at a
  // time, and at most this many pages.
  static constexpr size_t kPassEntries = 4096;
  static constexpr size_t kPassPages = 4;
  // `orders`: the business's order service (orders.source = "http"), read
  // afresh for every order a sync's tool calls name; nullptr when the
  // orders are kept in the store (embedded).
  SessionSync(store::Storage& storage, ingress::Inbox& inbox, operations::AgentPlatform& agents,
              const Live<operations::PolicyConfig>& policy, Metrics& metrics, const Clock& clock,
              Random random, operations::OrderService* orders = nullptr);

  // Hands the queued events of each session that is neither busy nor
  // backing off to its lane; returns how many sessions it handed over.
  size_t dispatch(Lanes& lanes);
  // Fetches the session and answers its required actions now.
  Status sync(const std::string& session_id);
  // Binds a session to an owner (idempotent; another owner is a conflict)
  // and releases the events that waited for it.
  Status bind(const std::string& session_id, const std::string& owner,
              const std::string& principal);
  // Reopens a session the platform had said does not exist (its waiting
  // events go back to the queue), then syncs it now. An error: nothing was
  // reopened. Else the sync's own outcome: the session stays reopened when
  // the sync fails, and its events are processed as the platform answers.
  Result<Status> recover(const std::string& session_id) EXCLUDES(mu_);
  // Re-syncs sessions that may still need us (a call awaiting its result or
  // its delivery, or activity within window_ms), so a lost webhook delays
  // nothing for long. One call looks at no more than `scan` sessions and
  // resumes where the last one stopped, so the cost of a dispatcher pass
  // stays bounded however many sessions history holds; `sweeping()` is true
  // until a cycle has looked at them all. Returns the number handed to lanes.
  size_t sweep(Lanes& lanes, int64_t window_ms, size_t max_sessions = 1000, size_t scan = 2000);
  bool sweeping() const { return !sweep_cursor_.empty(); }

  static std::string lane(const std::string& session_id) { return "session:" + session_id; }

  // A lane's work: syncs one session and settles the queued events handed
  // over for it, those not processed since they were read.
  void process(const std::string& session_id, const std::vector<store::QueuedEvent>& handed)
      EXCLUDES(mu_);

 private:
  // One page of the queue from cursor_: read_through when every entry of a
  // full page was handed over or is backing off.
  size_t dispatch_page(Lanes& lanes, int64_t now, bool& read_through);
  // The events not yet processed: a pass that read the queue while a lane
  // was finishing these events hands them over again, after that lane. The
  // queue entries of those processed are removed (one can still stand: an
  // event parked, released under a new entry and then finished by a lane
  // that held its old one), uncounted.
  Result<std::vector<store::QueuedEvent>> unprocessed(
      const std::vector<store::QueuedEvent>& events);
  // Answers one required action not answered yet (operations/tool_calls.h);
  // `fetched`: the order service's answers, read before the transaction
  // (nullptr for embedded orders).
  Status answer(store::Transaction& txn, const pb::Session& session,
                const operations::RequiredAction& action, const operations::PolicyConfig& policy,
                const operations::FetchedOrders* fetched);
  Status answer_all(const pb::Session& session, const operations::SessionView& view,
                    const std::vector<store::QueuedEvent>& events);
  bool is_open(const std::string& session_id, int64_t now_ms, int64_t window_ms);
  bool backing_off(const std::string& session_id, int64_t now_ms) EXCLUDES(mu_);
  void back_off(const std::string& session_id, const Error& error, int64_t now_ms) EXCLUDES(mu_);

  store::Storage& storage_;
  ingress::Inbox& inbox_;
  operations::AgentPlatform& agents_;
  const Live<operations::PolicyConfig>& policy_;
  Metrics& metrics_;
  const Clock& clock_;
  operations::OrderService* orders_;

  struct Retry {
    int attempts = 0;
    int64_t at_ms = 0;
  };
  Mutex mu_;
  std::map<std::string, Retry> retries_ GUARDED_BY(mu_);  // sessions whose fetch failed
  Random random_ GUARDED_BY(mu_);
  // Where the next dispatch pass starts (dispatcher thread only).
  std::string cursor_;
  int64_t last_full_scan_ms_ = 0;
  // The last session the sweep looked at; empty between cycles.
  std::string sweep_cursor_;
};

}  // namespace opgate::agent_sessions
