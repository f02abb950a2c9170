// The durable store: one RocksDB database with a column family per record
// kind. A WriteBatch across column families, written with sync=true, is the
// unit of truth: nothing is acknowledged before commit() returns Ok.
// Thread-safe: RocksDB is; callers serialise read-modify-write sequences
// themselves (see store/txn.h).
#pragma once

#include <google/protobuf/message_lite.h>

#include <array>
#include <atomic>
#include <functional>
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
class WriteBatch;
class CompactionFilter;
}  // namespace rocksdb

namespace opgate::store {

enum class Cf { inbox, sessions, calls, operations, outbox, ledger, audit, orders, meta };
inline constexpr size_t kCfCount = 9;
std::string_view cf_name(Cf cf);

class Batch {
 public:
  Batch();
  ~Batch();
  Batch(Batch&&) noexcept;
  void put(Cf cf, std::string_view key, std::string_view value);
  void put(Cf cf, std::string_view key, const google::protobuf::MessageLite& message);
  void del(Cf cf, std::string_view key);
  size_t count() const;

 private:
  friend class Store;

 public:
  struct Op;

 private:
  std::unique_ptr<std::vector<Op>> ops_;
};

struct OpenOptions {
  // Refuse a data directory that group or others can read: it holds
  // proposals, ledger rows and webhook bodies.
  bool check_permissions = true;
  bool create_if_missing = true;
  // Open read-only (offline audit verification on a stopped daemon's data).
  bool read_only = false;
  // Inbox retention: processed events older than this are dropped by
  // compaction, never by a scan that would block ingest. 0 keeps them all.
  // Needs `clock`, which must outlive the store.
  int64_t inbox_retention_ms = 0;
  const Clock* clock = nullptr;
};

class Store {
 public:
  static Result<std::unique_ptr<Store>> open(const std::string& dir, const OpenOptions& options);
  ~Store();

  // Atomic across column families and synced to disk before returning.
  Status commit(Batch& batch);
  // Atomic and visible to readers at once, but durable only after a later
  // sync_wal() returns: the caller must not act on it (acknowledge, call a
  // provider) before then. The WAL keeps writes in order, so a sync makes
  // every earlier write durable too.
  Status write_unsynced(Batch& batch);
  Status sync_wal();

  Result<std::optional<std::string>> get(Cf cf, std::string_view key) const;
  template <typename Message>
  Result<std::optional<Message>> get_message(Cf cf, std::string_view key) const {
    auto raw = get(cf, key);
    if (!raw) return raw.error();
    if (!raw->has_value()) return std::optional<Message>();
    Message m;
    if (!m.ParseFromString(**raw))
      return make_error("corrupt_record", "a stored record does not parse");
    return std::optional<Message>(std::move(m));
  }

  // Visits keys with the given prefix in order (from `start` if not empty);
  // the visitor returns false to stop. Status reports iterator errors.
  using Visitor = std::function<bool(std::string_view key, std::string_view value)>;
  Status scan(Cf cf, std::string_view prefix, const Visitor& visit,
              std::string_view start = {}) const;
  // Last key with the prefix, if any.
  Result<std::optional<std::string>> last_key(Cf cf, std::string_view prefix) const;

  // Compacts a whole column family now (tests; operators rarely need it).
  Status compact(Cf cf);

  // Number of synced writes requested since open, for /metrics.
  uint64_t synced_writes() const;
  // Number of WAL fsyncs RocksDB performed: concurrent synced writes share one.
  uint64_t wal_syncs() const;
  const std::string& dir() const { return dir_; }

 private:
  Store() = default;
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  std::atomic<uint64_t> synced_writes_{0};
  std::unique_ptr<rocksdb::CompactionFilter> inbox_filter_;
};

// Prefix-upper-bound helper: smallest string greater than every key with
// this prefix ("" if none exists).
std::string prefix_successor(std::string_view prefix);

}  // namespace opgate::store
