// The storage port on an embedded RocksDB: one node, one data directory.
// Transactions run through the Journal (serialised, group-committed, read
// what they wrote); the Reader reads the database, which holds durable
// writes only; webhook events are appended by the inbox's own synced writes.
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/clock.h"
#include "store/port.h"
#include "store/rocksdb/db.h"
#include "store/rocksdb/journal.h"
#include "store/rocksdb/scan_floor.h"

namespace opgate::store::rocks {

class RocksStorage final : public Storage {
 public:
  static Result<std::unique_ptr<RocksStorage>> open(const std::string& dir,
                                                    const OpenOptions& options, const Clock& clock);
  ~RocksStorage() override;

  Status transact(const std::function<Status(Transaction&)>& fn) override;
  Reader& reader() override { return *reader_; }
  Result<std::vector<Appended>> append_events(std::vector<NewEvent>& events) override;
  Result<AuditVerification> verify_audit() override;
  Status check_writable() override;
  StorageStats stats() const override;

  // A consistent copy of the data directory, taken while serving: DIR/data
  // (a data directory `opgate serve` starts on) and DIR/opgate-backup.json.
  Result<BackupInfo> backup_to(const std::string& dir) override;
  // Copies a backup made by backup_to into a new data directory, after
  // checking its format and its audit chain. The daemon must be stopped.
  static Result<BackupInfo> restore(const std::string& backup_dir, const std::string& data_dir,
                                    const Clock& clock);
  Db& db() { return *db_; }
  const Journal& journal() const { return *journal_; }

  // Allocates an id for a queue entry or outbox item (monotonic, also
  // across restarts).
  uint64_t next_queue_seq() { return queue_seq_++; }
  uint64_t peek_queue_seq() const { return queue_seq_.load(); }
  uint64_t next_outbox_seq() { return outbox_seq_++; }
  // Where scans of the time-keyed indexes start (scan_floor.h).
  ScanFloors& floors() { return floors_; }

 private:
  RocksStorage() = default;
  std::unique_ptr<Db> db_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<DbView> durable_;
  std::unique_ptr<Reader> reader_;
  const Clock* clock_ = nullptr;
  std::atomic<uint64_t> queue_seq_{1};
  std::atomic<uint64_t> outbox_seq_{1};
  ScanFloors floors_;
};

}  // namespace opgate::store::rocks
