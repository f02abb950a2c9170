// The RocksDB database behind the storage port: one column family per
// record kind, opened with the options that make a synced WriteBatch the
// unit of truth. A write with sync=true is visible to readers only after it
// is durable (RocksDB inserts into the memtable after the WAL sync, and not
// at all if the sync fails). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class CompactionFilter;
class FileSystem;
class Cache;
class Env;
}  // namespace rocksdb

namespace opgate::store::rocks {

enum class Cf { inbox, events, sessions, calls, operations, outbox, ledger, audit, orders, meta };
inline constexpr size_t kCfCount = 10;
std::string_view cf_name(Cf cf);

// Writes staged by a transaction (or a generation of them): the last write
// to a key wins; std::nullopt is a deletion.
class WriteSet {
 public:
  using Map = std::map<std::string, std::optional<std::string>, std::less<>>;
  void put(Cf cf, std::string key, std::string value);
  void del(Cf cf, std::string key);
  // Applies `later` on top of this set.
  void merge(WriteSet&& later);
  // The staged value of a key: nullptr if not staged; a disengaged optional
  // if staged as deleted.
  const std::optional<std::string>* find(Cf cf, std::string_view key) const;
  const Map& of(Cf cf) const { return maps_[static_cast<size_t>(cf)]; }
  bool empty() const;
  size_t size() const;
  void clear();

 private:
  std::array<Map, kCfCount> maps_;
};

// The current data format; a data directory records the format it holds.
// 1: inbox events under their webhook-id. 2: events in arrival order in
// `events`, found through an index in `inbox`. The first writable open of
// a format-1 directory upgrades it (RocksStorage::open).
inline constexpr int kFormatVersion = 2;

struct OpenOptions {
  // Refuse a data directory that group or others can read: it holds
  // proposals, ledger rows and webhook bodies.
  bool check_permissions = true;
  bool create_if_missing = true;
  // Open read-only (offline audit verification on a stopped daemon's data).
  bool read_only = false;
  // Inbox retention: processed events older than this are dropped by
  // compaction, never by a scan that would block ingest. 0 keeps them all.
  // Needs `clock`, which must outlive the database.
  int64_t inbox_retention_ms = 0;
  const Clock* clock = nullptr;
  // Memory: the block cache shared by every column family, and the size of
  // each memtable. Larger values trade resident memory for fewer reads.
  size_t block_cache_bytes = 32 << 20;
  size_t write_buffer_bytes = 64 << 20;
  // Table files kept open (each a file descriptor); -1 keeps them all.
  int max_open_files = -1;
  // Tests inject faults (a sync that fails or blocks) through this.
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // Called once (on a RocksDB thread) when the database stops accepting
  // writes: a WAL sync, a flush or a compaction failed hard, and RocksDB is
  // read-only until it is opened again. The argument says why.
  std::function<void(const std::string&)> on_read_only;
  // Called now and then while an older data format is upgraded at open,
  // with the events moved so far (a service manager's start timeout is
  // extended on it).
  std::function<void(size_t moved)> on_upgrade_progress;
};

class Db {
 public:
  static Result<std::unique_ptr<Db>> open(const std::string& dir, const OpenOptions& options);
  ~Db();

  // Atomic across column families. With sync, durable before it returns and
  // visible only then.
  Status write(const WriteSet& writes, bool sync);

  Result<std::optional<std::string>> get(Cf cf, std::string_view key) const;
  // Many point reads in one call, answered in the order of `keys`: RocksDB
  // probes each table file's filter for the whole batch at once.
  Result<std::vector<std::optional<std::string>>> multi_get(
      Cf cf, const std::vector<std::string>& keys) const;
  // Visits keys with the prefix in order (from `start` if not empty); the
  // visitor returns false to stop. The status reports iterator errors.
  using Visitor = std::function<bool(std::string_view key, std::string_view value)>;
  Status scan(Cf cf, std::string_view prefix, const Visitor& visit,
              std::string_view start = {}) const;
  // The last key with the prefix, if any.
  Result<std::optional<std::string>> last_key(Cf cf, std::string_view prefix) const;

  // Compacts a whole column family now (tests; operators rarely need it).
  Status compact(Cf cf);
  // Writes a consistent copy of the database into `dir` (which must not
  // exist) while it serves: RocksDB's checkpoint, hard links where it can.
  Status checkpoint(const std::string& dir);

  uint64_t synced_writes() const { return synced_writes_.load(); }
  // WAL fsyncs RocksDB performed: concurrent synced writes share one.
  uint64_t wal_syncs() const;
  const std::string& dir() const { return dir_; }
  // The data format the directory records.
  int format_version() const { return format_version_; }
  // Records `version` as the directory's format, durably, in one write with
  // `also`.
  Status set_format_version(int version, WriteSet also = {});
  rocksdb::DB& raw() { return *db_; }

 private:
  Db() = default;
  // Records the format version in a new directory; refuses one with none
  // that `existed` (or any, read-only), or a newer one.
  Status check_format(bool existed);
  std::string dir_;
  bool read_only_ = false;
  int format_version_ = 0;
  std::unique_ptr<rocksdb::Env> env_;  // a test's file system; outlives db_
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  std::atomic<uint64_t> synced_writes_{0};
  std::unique_ptr<rocksdb::CompactionFilter> index_filter_, events_filter_;
  std::shared_ptr<rocksdb::Cache> cache_;
};

// The smallest string greater than every key with this prefix ("" if none).
std::string prefix_successor(std::string_view prefix);

}  // namespace opgate::store::rocks
