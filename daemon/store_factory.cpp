#include "daemon/store_factory.h"

#include <fmt/format.h>

#include "daemon/service_manager.h"
#include "store/rocksdb/rocks_storage.h"
#ifdef OPGATE_WITH_POSTGRES
#include "store/postgres/pg_storage.h"
#include "store/postgres/schema.h"
#endif

namespace opgate::daemon {

namespace {

#ifdef OPGATE_WITH_POSTGRES
store::pg::ConnOptions conn_options(const Config::Store& s) {
  store::pg::ConnOptions o;
  o.url = s.url;
  o.connect_timeout_s = static_cast<int>(s.connect_timeout_s);
  o.statement_timeout_ms = s.statement_timeout_ms;
  for (auto [key, value] :
       {std::pair{"sslmode", &s.sslmode}, std::pair{"sslrootcert", &s.sslrootcert},
        std::pair{"sslcert", &s.sslcert}, std::pair{"sslkey", &s.sslkey}})
    if (!value->empty()) o.params.emplace_back(key, *value);
  return o;
}
#endif

#ifndef OPGATE_WITH_POSTGRES
Error not_built() {
  return make_error(errc::config,
                    "store.backend = \"postgres\": this opgate was built without the PostgreSQL "
                    "backend");
}
#endif

}  // namespace

Result<OpenedStore> open_store(const Config& config, const Clock& clock, int rocksdb_max_open_files,
                               std::function<void(const std::string&)> on_read_only) {
  OpenedStore out;
  if (config.store.backend == "postgres") {
#ifdef OPGATE_WITH_POSTGRES
    store::pg::PgOptions o;
    o.conn = conn_options(config.store);
    o.pool_size = static_cast<size_t>(config.store.pool_size);
    o.database_clock = true;
    OPGATE_ASSIGN_OR_RETURN(auto pg, store::pg::PgStorage::open(o, clock));
    auto* raw = pg.get();
    out.clock = &raw->clock();
    out.listen = [raw](std::function<void()> wake) { raw->listen(std::move(wake)); };
    out.stop_listening = [raw] { raw->stop_listening(); };
    out.hold_lease = [raw](const std::string& name, const std::string& holder, int64_t ttl_ms) {
      return raw->hold_lease(name, holder, ttl_ms);
    };
    out.storage = std::move(pg);
    out.description = "PostgreSQL";
    return out;
#else
    return not_built();
#endif
  }
  store::rocks::OpenOptions o;
  o.max_open_files = rocksdb_max_open_files;
  o.block_cache_bytes = static_cast<size_t>(config.store.block_cache_bytes);
  o.write_buffer_bytes = static_cast<size_t>(config.store.write_buffer_bytes);
  o.inbox_retention_ms = config.inbox_retention_s * 1000;
  o.clock = &clock;
  o.on_read_only = std::move(on_read_only);
  // An upgrade of a large store at open may outlast the unit's start
  // timeout: each step of it extends the timeout.
  o.on_upgrade_progress = [](size_t moved) {
    notify_extend_start(std::chrono::seconds(60),
                        fmt::format("upgrading the data directory: {} inbox events moved", moved));
  };
  OPGATE_ASSIGN_OR_RETURN(auto rocks, store::rocks::RocksStorage::open(config.data_dir, o, clock));
  out.rocks = rocks.get();
  out.storage = std::move(rocks);
  out.description = config.data_dir;
  return out;
}

Result<std::string> migrate_store(const Config& config) {
  if (config.store.backend != "postgres")
    return std::string("store.backend is \"rocksdb\": nothing to migrate");
#ifdef OPGATE_WITH_POSTGRES
  OPGATE_ASSIGN_OR_RETURN(auto report, store::pg::migrate(conn_options(config.store)));
  std::string out;
  for (const auto& m : report.applied) out += "applied " + m + "\n";
  out += fmt::format("database schema at version {}", report.to_version);
  return out;
#else
  return not_built();
#endif
}

}  // namespace opgate::daemon
