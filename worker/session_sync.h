// Session sync: turns inbox events into tool results. For each session with
// queued events it fetches the session once (a burst of webhooks is one
// fetch), answers every required action it has not answered yet, and stores
// the results, new operations and outbox items in the same batch that marks
// the events processed. Events for an unbound session wait for binding.
// Thread-safety: process_inbox() and sync() are called from the worker
// thread; bind() from operator threads (it only moves queue entries).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "adapters/agents/agents_client.h"
#include "common/backoff.h"
#include "common/metrics.h"
#include "ingress/inbox.h"
#include "outbox/outbox.h"
#include "store/journal.h"
#include "worker/policy.h"

namespace opgate::worker {

class SessionSync {
 public:
  // One pass over the inbox queue handles at most kPassEvents events and
  // looks at most kPassExamined entries (those of sessions in backoff).
  static constexpr size_t kPassEvents = 1024;
  static constexpr size_t kPassExamined = 16384;
  SessionSync(store::Journal& journal, ingress::Inbox& inbox, outbox::Outbox& outbox,
              adapters::AgentsClient& agents, PolicyConfig policy, Metrics& metrics, Random random);

  // One pass over queued inbox events; returns how many were handled.
  size_t process_inbox();
  // Fetches the session and answers its required actions now.
  Status sync(const std::string& session_id);
  // Binds a session to an owner (idempotent; another owner is a conflict)
  // and releases the events that waited for it.
  Status bind(const std::string& session_id, const std::string& owner,
              const std::string& principal);
  // Pending operations past their TTL become settled/expired.
  size_t expire_pending();
  // Re-syncs sessions that may still need us (a call awaiting its result or
  // its delivery, or activity within window_ms), so a lost webhook delays
  // nothing for long. Returns the number of sessions synced.
  size_t sweep(int64_t window_ms, size_t max_sessions = 1000);

  const PolicyConfig& policy() const { return policy_; }

 private:
  Status answer(store::Txn& txn, const pb::Session& session,
                const adapters::RequiredAction& action);
  void link_call(store::Txn& txn, pb::Operation& op, pb::ToolCall& call);
  static std::optional<pb::Operation> existing_refund(const store::Store& store,
                                                      const std::string& owner,
                                                      const std::string& arguments_json);

  store::Journal& journal_;
  ingress::Inbox& inbox_;
  outbox::Outbox& outbox_;
  adapters::AgentsClient& agents_;
  PolicyConfig policy_;
  Metrics& metrics_;
  std::mutex sync_mu_;  // one sync at a time: per-session order and no duplicate work
  // A queue entry, its event's key, and the event if it could be read.
  struct Queued {
    std::string queue_key;
    std::string event_key;
    std::optional<pb::InboxEvent> event;
  };
  // Removes a queue entry and marks its event processed, in the txn.
  static void mark_processed(store::Txn& txn, const Queued& entry);
  bool is_open(const std::string& session_id, int64_t now_ms, int64_t window_ms);

  struct Retry {
    int attempts = 0;
    int64_t at_ms = 0;
  };
  std::map<std::string, Retry> retries_;  // sessions whose fetch failed
  // Where the next pass over the inbox queue starts (engine thread only).
  std::string queue_cursor_;
  int64_t last_full_scan_ms_ = 0;
  std::atomic<bool> rescan_{false};  // bind() queued entries: scan from the start
  std::mutex random_mu_;
  Random random_;
};

}  // namespace opgate::worker
