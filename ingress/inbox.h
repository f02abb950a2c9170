// The durable inbox: webhook events keyed by source and webhook-id, plus a
// queue of events the worker has not processed yet.
//
// Events reach the disk by group commit: submit() queues an event and returns
// at once; one committer thread takes everything queued, checks each event
// against the store (a duplicate or a conflicting reuse of its webhook-id),
// writes the new ones in one synced RocksDB batch, and only then reports each
// event's result. Requests that arrive while a batch is being synced form
// the next batch, so the number of events per fsync grows with the load.
// Because one thread writes every event, two copies racing store one event,
// and queue entries become visible in sequence order.
//
// Thread-safe. The queue of submissions is bounded: past `max_pending` a
// submission fails at once with "overloaded".
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/result.h"
#include "ingress/envelope.h"
#include "store/port.h"

namespace opgate::ingress {

struct Accepted {
  bool duplicate = false;
};

struct Submission {
  std::string source;
  std::string webhook_id;
  std::string body;
  Envelope envelope;
};

// Receives an event's result once the write holding it is on disk: on the
// committer thread, or wherever answer_with() sends a batch's answers.
// Errors: conflict (same id, other body), overloaded, shutting_down,
// storage_unavailable (or the store's own code).
using Committed = std::function<void(Result<Accepted>)>;

struct InboxOptions {
  size_t max_pending = 16384;  // submissions waiting for the committer
  size_t max_batch = 2048;     // events in one synced write
  // Other processes share the store: they queue and process events too, so
  // recount() takes the backlog from the store instead of this process's
  // own count.
  bool shared_store = false;
};

class Inbox {
 public:
  // Counts the queued events (an error if the store cannot be read).
  static Result<std::unique_ptr<Inbox>> open(store::Storage& storage, const Clock& clock,
                                             InboxOptions options = {});
  // stop()s.
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  void submit(Submission submission, Committed committed) EXCLUDES(mu_);
  // Called on the committer thread after a write that queued work for the
  // worker (set it before events arrive; e.g. to wake the worker).
  void on_queued(std::function<void()> notify) EXCLUDES(mu_);
  // Hands each batch's answers to `run` (one call per synced write) instead
  // of calling them on the committer: the daemon runs them on the ingress
  // threads, so the one committer goes back to writing sooner. Set it before
  // events arrive.
  using AnswerRunner = std::function<void(std::function<void()> answers)>;
  void answer_with(AnswerRunner run) EXCLUDES(mu_);
  // Commits and answers what was submitted, then stops the committer; later
  // submissions fail with "shutting_down". Idempotent. Call it before
  // whatever the answers go to (the HTTP server) is torn down.
  void stop() EXCLUDES(mu_);
  // submit() and wait for the result.
  Result<Accepted> accept(const std::string& source, const std::string& webhook_id,
                          const std::string& body, const Envelope& envelope);

  // Events waiting for the worker (counted from the store at start).
  size_t backlog() const { return backlog_.load(); }
  // The worker finished (or parked) n queued events.
  void processed(size_t n);
  // A binding moved n parked events back to the queue.
  void requeued(size_t n) { backlog_ += n; }
  // With a shared store: the backlog is counted in the store again (every
  // process ingests and processes). Otherwise nothing.
  void recount();
  // Before a read of the whole queue: a token if no commit is under way.
  std::optional<uint64_t> quiet() const EXCLUDES(count_mu_);
  // That read, from the queue's start, found `queued` events: the count is
  // set to that, mending any drift (an event a stale pass handed out again
  // is counted processed twice), if no commit began since `quiet` (its
  // events are counted before they are written, and the read may have
  // missed them). Nothing with a shared store: recount() counts there.
  void counted(size_t queued, uint64_t quiet_token) EXCLUDES(count_mu_);

  // Synced writes of new events, and the events they held.
  uint64_t group_commits() const { return group_commits_.load(); }
  uint64_t committed_events() const { return committed_events_.load(); }

  // True for events the worker acts on (a session's action_required); the
  // others are stored already processed and never queued.
  static bool needs_work(std::string_view type, std::string_view session_id);

 private:
  Inbox(store::Storage& storage, const Clock& clock, InboxOptions options);
  struct Pending {
    store::NewEvent event;  // made by the submitter, serialized
    Committed committed;
  };
  void run() EXCLUDES(mu_);
  // Writes a batch and answers each event (through `answer`, if set); true
  // if it queued work.
  bool commit(std::vector<Pending>& batch, const AnswerRunner& answer);

  store::Storage& storage_;
  const Clock& clock_;
  InboxOptions options_;
  std::atomic<size_t> backlog_{0};
  // Commits begun and done, for counted(): a commit counts its events in
  // the backlog under count_mu_.
  mutable Mutex count_mu_;
  uint64_t commits_begun_ GUARDED_BY(count_mu_) = 0;
  uint64_t commits_done_ GUARDED_BY(count_mu_) = 0;
  std::atomic<uint64_t> group_commits_{0};
  std::atomic<uint64_t> committed_events_{0};

  Mutex mu_;
  CondVar wake_;
  std::deque<Pending> pending_ GUARDED_BY(mu_);
  std::atomic<size_t> waiting_{0};  // pending_.size(), for a check without the lock
  std::function<void()> on_queued_ GUARDED_BY(mu_);
  AnswerRunner answer_with_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread committer_;  // last: starts after everything it uses
};

}  // namespace opgate::ingress
