// The storage port on PostgreSQL: any number of opgate processes share one
// database. Records are protobuf bytes in bytea columns beside the columns
// they are found by; the schema is applied at open (store/postgres/schema.h).
//
// Transactions run at READ COMMITTED with strict two-phase locking on the
// records they touch: every record a transaction reads or writes (and every
// set it scans and adds to, e.g. an order's operations) is locked with a
// transaction-scoped advisory lock before it is read, so a transaction sees
// the latest committed version of each and holds it until it ends;
// transactions touching the same records are serialised, others run side
// by side. A deadlock between two of them fails one, which runs again (the
// port allows it). SERIALIZABLE without these locks is the alternative
// (Isolation::serializable, retried on serialisation failures); README
// compares the two.
//
// Writes are sent with the next read (one pipeline, one round trip). At
// commit a transaction inserts its count changes (every kFoldEvery of them
// one folds the changes into the counts, so that no transaction waits on a
// count row), then locks the chain's head row and writes its audit records:
// a node's audited commits go one at a time on the head its last one left
// (HeadGuess), so the chain's serial section is the commit's one round
// trip, or two when another node moved the head. transact() returns Ok
// only after COMMIT succeeded. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "store/port.h"
#include "store/postgres/database_clock.h"
#include "store/postgres/pg.h"

namespace opgate::store::pg {

enum class Isolation { read_committed, serializable };

// Outbox work goes first to the node that queued it (or last wrote it):
// each process is a node with an id of its own, and others see its items
// due `after_ms` later. So the node that commits work does it, as it is
// woken for it at once, and the others do not race it for every item (a
// claim that finds the item taken is a transaction wasted); they take over
// what waits longer from a node gone. A node that listens for work keeps a
// lease named after it ("node:" and its id) while it runs; with the lease
// lapsed (or never taken) it is gone. A node alive keeps its work: the
// audited commits of every node go through one audit chain, so another
// node's help adds commits that miss their guess of the head and settles
// less, not more. Only what a node alive has left for `busy_after_ms` goes
// to others all the same (a node that runs but does not get to its work).
struct Handoff {
  std::string node;
  int64_t after_ms = 0;
  int64_t busy_after_ms = 0;
};

// The audit head this node's last audited commit left, and its audited
// commits sent one at a time (PgTransaction::commit).
//
// Each transaction that may commit on a guess first holds a lock of its
// own (its ticket, an advisory lock taken in a round trip already
// answered). A commit sent on a guess while the one before it may not
// have committed yet waits, in the database, for that one's ticket: so a
// node's commits reach the chain's head in the order they were sent, one
// right behind the other, without a round trip to the node in between.
struct HeadGuess {
  Mutex mu;
  std::optional<AuditHead> head GUARDED_BY(mu);
  // The ticket of the last commit sent on a guess, until it is known to
  // have committed.
  std::optional<int64_t> in_flight GUARDED_BY(mu);
  int misses GUARDED_BY(mu) = 0;  // wrong guesses in a row (up to 6)
  int skip GUARDED_BY(mu) = 0;    // commits left to make without a guess
  // Guesses that held in a row since the last miss. Past kSureAfter of them
  // a commit guesses without a savepoint to roll back to: a miss then runs
  // its whole transaction again (lost), and a guess that holds, as it
  // nearly always does when one node commits alone, saves the savepoint's
  // statement and subtransaction.
  static constexpr int kSureAfter = 32;
  int held GUARDED_BY(mu) = 0;
  // Tickets: a random base (apart from every other process's) counted up.
  std::atomic<uint64_t> next_ticket{0};
  // Commits sent behind another still in flight, guesses that missed, and
  // those of them whose transaction ran again (without a savepoint).
  std::atomic<uint64_t> sent_behind{0};
  std::atomic<uint64_t> missed{0};
  std::atomic<uint64_t> lost{0};
};

// The flush that an audited commit, released early (it commits without
// waiting for the flush: PgTransaction::finish), waits for before it is
// reported: a transaction that writes one WAL record and commits
// synchronously, started after that commit. The log is flushed in order,
// so when it returns the commit is on disk. One at a time per node, each
// for every commit waiting when it started: the first waiter with none
// running runs it, on a connection of the pool, and the others wait.
class SharedFlush {
 public:
  Status wait_past(Pool& pool) EXCLUDES(mu_);
  uint64_t flushes() const { return flushes_.load(); }

 private:
  Mutex mu_;
  CondVar ended_cv_;
  uint64_t started_ GUARDED_BY(mu_) = 0;  // flushes started, counted up
  uint64_t ended_ GUARDED_BY(mu_) = 0;    // the last that succeeded
  bool running_ GUARDED_BY(mu_) = false;
  // The last flush that failed, and why: its waiters are told.
  uint64_t failed_ GUARDED_BY(mu_) = 0;
  std::optional<Error> failure_ GUARDED_BY(mu_);
  std::atomic<uint64_t> flushes_{0};
};

struct PgOptions {
  ConnOptions conn;
  size_t pool_size = 8;
  Isolation isolation = Isolation::read_committed;
  // Apply the schema migrations at open.
  bool migrate = true;
  // How often a transaction runs again after a deadlock or serialisation
  // failure before its error is returned.
  int max_attempts = 64;
  // Keep time by the database's clock (database_clock.h), as every node
  // sharing it does; off, the given clock is used as it is (tests that move
  // time by hand).
  bool database_clock = false;
  // How long other nodes leave an outbox item to the node that queued it.
  int64_t handoff_ms = 1000;
};

class PgStorage final : public Storage {
 public:
  static Result<std::unique_ptr<PgStorage>> open(const PgOptions& options, const Clock& clock);
  ~PgStorage() override;

  Status transact(const std::function<Status(Transaction&)>& fn) override;
  Reader& reader() override { return *reader_; }
  Result<std::vector<Appended>> append_events(std::vector<NewEvent>& events) override;
  Result<AuditVerification> verify_audit() override;
  Status check_writable() override;
  // Refused with a clear error: PostgreSQL's own tools copy the database.
  Result<BackupInfo> backup_to(const std::string& dir) override;
  StorageStats stats() const override;

  // Calls `wake` (on a thread of its own) whenever any process commits work
  // for the dispatchers: queued events or outbox items (LISTEN/NOTIFY on a
  // connection of its own, reconnecting if it drops). Work another node
  // committed wakes this one only a handoff later (by the clock's
  // monotonic time), when it may be due here: until then it is that
  // node's. Polling stays the fallback: a notification lost with a
  // connection delays, never loses.
  void listen(std::function<void()> wake);
  // The time every record and lease of this store is written with: the
  // database's clock with `database_clock`, else the clock given at open.
  const Clock& clock() const { return *clock_; }
  // Stops the listener; `wake` is not called after this returns.
  void stop_listening();

  // A lease on a named duty, by the database's clock: its fencing token
  // while `holder` holds it (taken, or renewed for another ttl_ms); none
  // while another holder's lease runs. The token grows whenever the lease
  // changes hands.
  Result<std::optional<int64_t>> hold_lease(const std::string& name, const std::string& holder,
                                            int64_t ttl_ms);
  // Takes or renews this node's lease for ttl_ms (0: gone from now on), by
  // which other nodes know it is alive (Handoff); the listener renews it
  // while it listens and ends it when it stops.
  Status stay_alive(int64_t ttl_ms);

  // Folds every count change committed so far into the counts, in a
  // transaction of its own; a count reads the same before and after. Done
  // by transact() after every kFoldEvery transactions that changed counts.
  Status fold_counts();

  Pool& pool() { return *pool_; }
  const PgOptions& options() const { return options_; }
  // Transactions run again after a deadlock or serialisation failure.
  uint64_t retries() const { return retries_.load(); }
  // Audited commits sent on a guess behind another not yet answered,
  // commits whose guess of the head missed, and those of them that ran
  // their transaction again (HeadGuess).
  uint64_t commits_sent_behind() const { return head_guess_.sent_behind.load(); }
  uint64_t guesses_missed() const { return head_guess_.missed.load(); }
  uint64_t guesses_lost() const { return head_guess_.lost.load(); }
  // Audited commits released early, and the flushes they waited for.
  uint64_t early_releases() const { return early_releases_.load(); }
  uint64_t flushes() const { return flush_.flushes(); }
  // Reads after a commit (Transaction::read_after_commit) made alone, after
  // it, rather than in its round trip.
  uint64_t reads_after_commit_alone() const { return reads_after_commit_alone_.load(); }

 private:
  PgStorage() = default;
  // Measures the database's clock again when the last time is long enough
  // ago (the listener's thread), on `own` if given, else a pooled connection.
  void resync_clock(Conn* own = nullptr);
  Status fold_counts(Conn& conn);
  static constexpr int64_t kClockSyncMs = 10'000;
  // A node's lease, renewed every third of it.
  static constexpr int64_t kNodeLeaseMs = 3'000;
  std::string node_lease() const;
  PgOptions options_;
  std::unique_ptr<DatabaseClock> db_clock_;
  const Clock* clock_ = nullptr;
  std::unique_ptr<Pool> pool_;
  Handoff handoff_;
  HeadGuess head_guess_;
  SharedFlush flush_;
  std::atomic<uint64_t> early_releases_{0};
  std::unique_ptr<Reader> reader_;
  std::atomic<uint64_t> commits_{0};
  std::thread listener_;
  std::atomic<bool> listening_{false};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> reads_after_commit_alone_{0};
  static constexpr uint64_t kFoldEvery = 512;  // transactions that changed counts
  std::atomic<uint64_t> count_changes_{0};
};

// The prepared statements every connection has.
Status prepare_statements(Conn& conn, Isolation isolation);

}  // namespace opgate::store::pg
