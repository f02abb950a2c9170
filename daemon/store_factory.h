// Opens the store the configuration names: RocksDB (embedded, the default)
// or PostgreSQL (shared by any number of nodes; the schema is migrated at
// open under an advisory lock). What only one backend has (RocksDB's
// journal gauges, its data directory) is reached through `rocks`.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "daemon/config.h"
#include "store/port.h"

namespace opgate::store::rocks {
class RocksStorage;
}

namespace opgate::daemon {

struct OpenedStore {
  std::unique_ptr<store::Storage> storage;
  store::rocks::RocksStorage* rocks = nullptr;  // set when the backend is RocksDB
  std::string description;                      // for the log: where the records are
  // Shared stores: calls wake when another process commits work, until
  // stop_listening() (both empty for RocksDB).
  std::function<void(std::function<void()>)> listen;
  std::function<void()> stop_listening;
  // Shared stores: a lease on a named duty (see PgStorage::hold_lease);
  // empty for RocksDB, whose one node performs every duty.
  std::function<Result<std::optional<int64_t>>(const std::string&, const std::string&, int64_t)>
      hold_lease;
  // The clock every record, lease and expiry is written with: for a shared
  // store the database's (nodes agree on time whatever their own clocks
  // say); null for RocksDB, which keeps the node's.
  const Clock* clock = nullptr;
};

// `rocksdb_max_open_files`: the table files RocksDB may keep open.
// `on_read_only` (RocksDB): called once if the store stops accepting writes.
Result<OpenedStore> open_store(const Config& config, const Clock& clock, int rocksdb_max_open_files,
                               std::function<void(const std::string&)> on_read_only = {});

// `opgate migrate`: brings the PostgreSQL schema up to date and says what it
// applied; for RocksDB there is nothing to migrate.
Result<std::string> migrate_store(const Config& config);

}  // namespace opgate::daemon
