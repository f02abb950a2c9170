// Serialised read-modify-write transactions over the Store, each committed
// as one atomic batch, with a SHA-256 hash-chained audit trail: every audit
// record in a transaction chains to the previous one.
//
// Group commit: run() holds a mutex for the read-modify-write and the write
// (so transitions never interleave and each sees the one before), releases
// it, and then waits until the WAL is synced past its write. One fsync
// covers every transaction written meanwhile, and run() returns Ok only once
// its own batch (and so every earlier one) is durable: callers act on
// nothing that a crash could take back. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "opgate.pb.h"
#include "store/store.h"

namespace opgate::store {

class Txn {
 public:
  Txn(Store& store, int64_t now_ms) : store_(store), now_ms_(now_ms) {}
  Store& store() { return store_; }
  Batch& batch() { return batch_; }
  int64_t now_ms() const { return now_ms_; }
  // seq, at_ms, prev_hash and hash are filled in at commit.
  void audit(pb::AuditRecord record) { audits_.push_back(std::move(record)); }

 private:
  friend class Journal;
  Store& store_;
  int64_t now_ms_;
  Batch batch_;
  std::vector<pb::AuditRecord> audits_;
};

class Journal {
 public:
  static Result<std::unique_ptr<Journal>> open(Store& store, const Clock& clock);

  // Runs fn under the journal lock; if fn returns Ok and staged anything,
  // commits its batch (and audit records) synced. fn's error aborts without
  // writing.
  Status run(const std::function<Status(Txn&)>& fn);

  Store& store() { return store_; }
  const Clock& clock() const { return clock_; }

 private:
  Journal(Store& store, const Clock& clock) : store_(store), clock_(clock) {}
  Store& store_;
  const Clock& clock_;
  Status sync_through(uint64_t write_number);

  std::mutex mu_;
  uint64_t next_seq_ = 1;
  std::string head_hash_;             // raw 32 bytes; empty before the first record
  std::atomic<uint64_t> written_{0};  // batches written (visible), in order

  std::mutex sync_mu_;
  std::condition_variable synced_cv_;
  uint64_t synced_ = 0;  // batches known durable
  bool syncing_ = false;
};

std::string audit_key(uint64_t seq);
// Index of an operation's audit records, kept in the operations family.
std::string audit_index_key(const std::string& operation_key, uint64_t seq);
Result<std::vector<pb::AuditRecord>> audit_records_for(const Store& store,
                                                       const std::string& operation_key);
// The chain hash of a record given its predecessor's hash.
std::string audit_hash(const pb::AuditRecord& record, const std::string& prev_hash);

struct AuditVerification {
  uint64_t records = 0;
  bool ok = true;
  uint64_t first_bad_seq = 0;
  std::string problem;
};
Result<AuditVerification> verify_audit(const Store& store);

}  // namespace opgate::store
