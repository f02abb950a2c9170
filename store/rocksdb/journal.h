// Transactions over the RocksDB database, with group commit and no read of
// anything that is not durable outside a transaction.
//
// run() executes a transaction under the journal lock, so transactions are
// serialised and each sees every one before it. Its reads go through its own
// writes, then the writes of earlier transactions not yet on disk, then the
// database. Its writes join the open generation; one committer thread seals
// that generation and writes it as one synced WriteBatch while the next one
// fills, so one fsync covers every transaction of a generation. run()
// returns Ok once the generation holding its writes (or, for a transaction
// that wrote nothing, every generation it could have read) is durable.
//
// Because RocksDB makes a synced write visible only once it is durable,
// everything read from the database directly (outside run) is durable: the
// drainer, the API and every other reader can act on what they read. If a
// synced write fails, its generation and the open one fail together (the
// open one may have read the failed one), nothing of them becomes visible,
// and their transactions return the error.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/result.h"
#include "store/port.h"
#include "store/rocksdb/db.h"

namespace opgate::store::rocks {

// Key-value reads, from the database alone or through staged layers.
class KvView {
 public:
  virtual ~KvView() = default;
  virtual Result<std::optional<std::string>> get(Cf cf, std::string_view key) const = 0;
  virtual Status scan(Cf cf, std::string_view prefix, const Db::Visitor& visit,
                      std::string_view start = {}) const = 0;
};

// Durable state.
class DbView final : public KvView {
 public:
  explicit DbView(const Db& db) : db_(db) {}
  Result<std::optional<std::string>> get(Cf cf, std::string_view key) const override {
    return db_.get(cf, key);
  }
  Status scan(Cf cf, std::string_view prefix, const Db::Visitor& visit,
              std::string_view start = {}) const override {
    return db_.scan(cf, prefix, visit, start);
  }

 private:
  const Db& db_;
};

// Staged layers (newest first) over the database.
class LayeredView final : public KvView {
 public:
  LayeredView(const Db& db, std::vector<const WriteSet*> layers)
      : db_(db), layers_(std::move(layers)) {}
  Result<std::optional<std::string>> get(Cf cf, std::string_view key) const override;
  Status scan(Cf cf, std::string_view prefix, const Db::Visitor& visit,
              std::string_view start = {}) const override;

 private:
  const Db& db_;
  std::vector<const WriteSet*> layers_;
};

class Journal {
 public:
  // What a transaction works with; valid during run()'s callback only.
  struct Txn {
    int64_t now_ms;
    const KvView& view;  // its own writes, then unsynced ones, then the database
    WriteSet& writes;
    AuditHead head;  // advance it when appending audit records
  };

  // Reads the audit chain's head and starts the committer.
  static Result<std::unique_ptr<Journal>> open(Db& db, const Clock& clock);
  // Commits what is staged, then stops the committer.
  ~Journal();

  Status run(const std::function<Status(Txn&)>& fn) EXCLUDES(mu_);

  // Generations written, and the transactions they held.
  uint64_t commits() const;
  uint64_t transactions() const;
  // True after a synced write failed, until one succeeds.
  bool failing() const;

 private:
  // A generation's outcome. The committer sets status under the lock, then
  // publishes done; its transactions wait on done alone, so a commit wakes
  // them without each one taking the lock again behind the next ones.
  struct Outcome {
    std::atomic<int> done{0};
    Status status;  // read only once done is 1
    void publish() {
      done.store(1, std::memory_order_release);
      done.notify_all();
    }
    void wait() const {
      while (done.load(std::memory_order_acquire) == 0) done.wait(0, std::memory_order_acquire);
    }
  };
  Journal(Db& db, const Clock& clock) : db_(db), clock_(clock) {}
  void committer() EXCLUDES(mu_);
  // Writes writing_ with the lock released; called with it held.
  Status write_unlocked() REQUIRES(mu_);
  Result<AuditHead> read_head() const;
  // Reads the durable head into head_; false (head_known_ false) if it
  // cannot be read.
  bool try_read_head() REQUIRES(mu_);

  Db& db_;
  const Clock& clock_;
  mutable Mutex mu_;
  CondVar staged_cv_;              // the committer waits for work
  WriteSet open_ GUARDED_BY(mu_);  // staged, not yet being written
  std::shared_ptr<Outcome> open_outcome_ GUARDED_BY(mu_) = std::make_shared<Outcome>();
  size_t open_transactions_ GUARDED_BY(mu_) = 0;
  // Being written by the committer, which reads it without the lock while
  // writing: it is only changed under the lock, by the committer itself.
  WriteSet writing_ GUARDED_BY(mu_);
  std::shared_ptr<Outcome> writing_outcome_ GUARDED_BY(mu_);
  AuditHead head_ GUARDED_BY(mu_);          // the chain's head including staged records
  bool head_known_ GUARDED_BY(mu_) = true;  // false: re-read before the next transaction
  bool stopping_ GUARDED_BY(mu_) = false;
  // Written by the committer, read without the lock (a metrics scrape or
  // a readiness check must not wait behind a transaction).
  std::atomic<bool> failing_{false};
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> transactions_{0};
  std::thread committer_;
};

}  // namespace opgate::store::rocks
