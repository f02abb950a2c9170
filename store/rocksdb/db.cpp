#include "store/rocksdb/db.h"

#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <vector>

#include "common/text.h"
#include "opgate.pb.h"

namespace opgate::store::rocks {

namespace {
constexpr std::array<std::string_view, kCfCount> kNames = {
    "inbox",  "events", "sessions", "calls",  "operations",
    "outbox", "ledger", "audit",    "orders", "default"};

constexpr std::string_view kFormatKey = "format_version";

Error from_rocks(const rocksdb::Status& s, std::string_view what) {
  return make_error(errc::storage_unavailable, std::string(what) + ": " + s.ToString());
}

// Drops what the inbox keeps of an event processed longer ago than the
// retention: its index entry in `inbox`, its record in `events` (one filter
// each, with the same rule). Queue entries and unprocessed events are kept.
template <typename Record>
class InboxRetentionFilter final : public rocksdb::CompactionFilter {
 public:
  InboxRetentionFilter(const Clock& clock, int64_t retention_ms, std::string_view prefix)
      : clock_(clock), retention_ms_(retention_ms), prefix_(prefix) {}
  bool Filter(int, const rocksdb::Slice& key, const rocksdb::Slice& value, std::string*,
              bool*) const override {
    if (!key.starts_with(rocksdb::Slice(prefix_.data(), prefix_.size()))) return false;
    Record record;
    if (!record.ParseFromArray(value.data(), static_cast<int>(value.size()))) return false;
    return record.processed() && record.processed_at_ms() < clock_.now_ms() - retention_ms_;
  }
  const char* Name() const override { return "opgate.InboxRetention"; }

 private:
  const Clock& clock_;
  int64_t retention_ms_;
  std::string_view prefix_;
};

// Tells the owner, once, that RocksDB stopped accepting writes: an error of
// hard severity or worse (a failed WAL sync always is) makes the database
// read-only until it is opened again.
class ReadOnlyListener final : public rocksdb::EventListener {
 public:
  explicit ReadOnlyListener(std::function<void(const std::string&)> notify)
      : notify_(std::move(notify)) {}
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* error) override {
    if (!error || error->ok() || error->severity() < rocksdb::Status::Severity::kHardError) return;
    if (told_.exchange(true)) return;
    notify_(error->ToString());
  }

 private:
  std::function<void(const std::string&)> notify_;
  std::atomic<bool> told_{false};
};
}  // namespace

std::string_view cf_name(Cf cf) { return kNames[static_cast<size_t>(cf)]; }

void WriteSet::put(Cf cf, std::string key, std::string value) {
  maps_[static_cast<size_t>(cf)].insert_or_assign(std::move(key), std::move(value));
}

void WriteSet::del(Cf cf, std::string key) {
  maps_[static_cast<size_t>(cf)].insert_or_assign(std::move(key), std::nullopt);
}

void WriteSet::merge(WriteSet&& later) {
  for (size_t i = 0; i < kCfCount; ++i) {
    if (maps_[i].empty()) {
      maps_[i] = std::move(later.maps_[i]);
      continue;
    }
    for (auto& [k, v] : later.maps_[i]) maps_[i].insert_or_assign(k, std::move(v));
  }
  later.clear();
}

const std::optional<std::string>* WriteSet::find(Cf cf, std::string_view key) const {
  const auto& m = maps_[static_cast<size_t>(cf)];
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

bool WriteSet::empty() const {
  for (const auto& m : maps_)
    if (!m.empty()) return false;
  return true;
}

size_t WriteSet::size() const {
  size_t n = 0;
  for (const auto& m : maps_) n += m.size();
  return n;
}

void WriteSet::clear() {
  for (auto& m : maps_) m.clear();
}

std::string prefix_successor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty()) {
    unsigned char c = static_cast<unsigned char>(s.back());
    if (c != 0xff) {
      s.back() = static_cast<char>(c + 1);
      return s;
    }
    s.pop_back();
  }
  return s;
}

namespace {

// The data directory: made 0700 if missing (and allowed), and refused when
// group or others may read it.
Status prepare_dir(const std::string& dir, const OpenOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (!o.create_if_missing || o.read_only)
      return make_error(errc::no_data_dir, "data directory does not exist: " + dir);
    fs::create_directories(dir, ec);
    if (ec) return make_error(errc::data_dir, "cannot create " + dir + ": " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  if (o.check_permissions) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0)
      return make_error(errc::data_dir, "cannot stat data directory " + dir);
    if (st.st_mode & (S_IRWXG | S_IRWXO))
      return make_error(
          errc::data_dir_permissions,
          "data directory " + dir + " is accessible by group or others; run chmod 700 on it");
  }
  return Status::Ok();
}

rocksdb::DBOptions db_options_for(const OpenOptions& o) {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  // Concurrent synced writers share one WAL write and one fsync.
  db_options.enable_pipelined_write = false;
  db_options.allow_concurrent_memtable_write = true;
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db_options.keep_log_file_num = 4;
  // A WAL file lives until every column family has flushed what it holds;
  // a family written rarely (meta, orders) would keep gigabytes of WAL
  // alive. Past this total the families holding the oldest file flush.
  db_options.max_total_wal_size = 64 << 20;
  db_options.max_open_files = o.max_open_files;
  // After a crash, what the WAL replays stays in the memtables (and the WAL
  // stays until they flush) instead of being written to table files before
  // the store opens: a restart is ready sooner.
  db_options.avoid_flush_during_recovery = true;
  // Tickers only (no histograms): WAL syncs for /metrics and benchmarks.
  db_options.statistics = rocksdb::CreateDBStatistics();
  db_options.statistics->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);
  if (o.on_read_only)
    db_options.listeners.push_back(std::make_shared<ReadOnlyListener>(o.on_read_only));
  return db_options;
}

// The retention filters of the inbox's index and of its events.
struct RetentionFilters {
  std::unique_ptr<rocksdb::CompactionFilter> index, events;
};

// Every column family with its table options; `retention` drops the
// inbox's expired events at compaction.
std::vector<rocksdb::ColumnFamilyDescriptor> column_families(
    const OpenOptions& o, const std::shared_ptr<rocksdb::Cache>& cache,
    const RetentionFilters& retention) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (auto name : kNames) {
    rocksdb::ColumnFamilyOptions cf_options;
    cf_options.write_buffer_size = o.write_buffer_bytes;
    cf_options.max_write_buffer_number = 2;
    rocksdb::BlockBasedTableOptions table;
    table.block_cache = cache;
    table.cache_index_and_filter_blocks = true;
    // Point reads (an incoming webhook-id's duplicate check above all) look
    // for keys that mostly do not exist: a Bloom filter answers for each
    // table file without reading and decompressing its blocks, and the
    // filters and indexes of level 0 stay in the cache. Without them ingest
    // fell from 15,000 to 5,000 acks/s as level 0 filled.
    table.pin_l0_filter_and_index_blocks_in_cache = true;
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    // A table file's index and filter are split into 4 KiB partitions under
    // a small top level that stays pinned: a seek into a store with months
    // of history reads one partition, not the whole index of every file it
    // touches. With one index block per file, approve->settled fell from 600
    // to 22 per second over 1,000,000 settled operations, as every seek read
    // and decompressed indexes the 32 MiB cache could not hold.
    table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
    table.partition_filters = true;
    table.metadata_block_size = 4096;
    table.cache_index_and_filter_blocks_with_high_priority = true;
    table.pin_top_level_index_and_filter = true;
    cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
    if (name == cf_name(Cf::inbox)) {
      cf_options.compaction_filter = retention.index.get();
      // Every incoming webhook-id is looked up before it is stored, and
      // almost every lookup misses: a filter over the memtable's keys answers
      // those without a search of its skip list.
      cf_options.memtable_prefix_bloom_size_ratio = 0.05;
      cf_options.memtable_whole_key_filtering = true;
      // Webhook-ids are random, so every index table flushed to level 0
      // overlaps all of level 1, and each compaction into level 1 rewrites
      // it whole: after twelve tables, not four, it is rewritten a third as
      // often. A duplicate check probes each level-0 table's Bloom filter,
      // which stays in memory.
      cf_options.level0_file_num_compaction_trigger = 12;
    }
    if (name == cf_name(Cf::events)) {
      cf_options.compaction_filter = retention.events.get();
      // Events are written in key order, so RocksDB moves their table files
      // down the levels without rewriting them, and the filter above sees
      // them only when a file is rewritten: one older than the retention
      // is, so what expired in it goes within about twice the retention.
      if (retention.events)
        cf_options.periodic_compaction_seconds =
            static_cast<uint64_t>(std::max<int64_t>(3600, o.inbox_retention_ms / 1000));
    }
    cfs.emplace_back(std::string(name), cf_options);
  }
  return cfs;
}

}  // namespace

Result<std::unique_ptr<Db>> Db::open(const std::string& dir, const OpenOptions& o) {
  OPGATE_TRY(prepare_dir(dir, o));
  std::error_code ec;
  const bool existed = std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec);
  rocksdb::DBOptions db_options = db_options_for(o);
  std::unique_ptr<rocksdb::Env> env;
  if (o.file_system) {
    env = rocksdb::NewCompositeEnv(o.file_system);
    db_options.env = env.get();
  }
  RetentionFilters retention;
  if (o.inbox_retention_ms > 0 && o.clock) {
    retention.index = std::make_unique<InboxRetentionFilter<pb::InboxIndex>>(
        *o.clock, o.inbox_retention_ms, "e/");
    retention.events =
        std::make_unique<InboxRetentionFilter<pb::InboxEvent>>(*o.clock, o.inbox_retention_ms, "");
  }
  // Half the cache is kept for index and filter partitions (high priority),
  // so a long history's data blocks cannot push out what every seek needs.
  auto cache = rocksdb::NewLRUCache(o.block_cache_bytes, -1, false, 0.5);
  auto cfs = column_families(o, cache, retention);
  if (o.read_only && existed) {
    // Read-only, a family an older format did not have cannot be created:
    // it is left out and reads as empty.
    std::vector<std::string> present;
    rocksdb::Status listed = rocksdb::DB::ListColumnFamilies(db_options, dir, &present);
    if (!listed.ok()) return from_rocks(listed, "cannot open data directory " + dir);
    std::erase_if(cfs, [&](const rocksdb::ColumnFamilyDescriptor& d) {
      return std::find(present.begin(), present.end(), d.name) == present.end();
    });
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = o.read_only
                          ? rocksdb::DB::OpenForReadOnly(db_options, dir, cfs, &handles, &raw)
                          : rocksdb::DB::Open(db_options, dir, cfs, &handles, &raw);
  if (!s.ok()) return from_rocks(s, "cannot open data directory " + dir);
  std::unique_ptr<Db> db(new Db());
  db->dir_ = dir;
  db->read_only_ = o.read_only;
  db->index_filter_ = std::move(retention.index);
  db->events_filter_ = std::move(retention.events);
  db->cache_ = std::move(cache);
  db->env_ = std::move(env);
  db->db_.reset(raw);
  for (size_t i = 0; i < kCfCount; ++i)
    for (auto* h : handles)
      if (h->GetName() == kNames[i]) db->handles_[i] = h;
  OPGATE_TRY(db->check_format(existed));
  return db;
}

Status Db::check_format(bool existed) {
  auto version = get(Cf::meta, kFormatKey);
  if (!version) return version.error();
  if (!version->has_value()) {
    // A directory holding nothing at all is new, whatever RocksDB left in
    // it: a first start cut short before its version was written.
    bool empty = true;
    for (size_t i = 0; i < kCfCount && empty; ++i) {
      if (!handles_[i]) continue;
      auto last = last_key(static_cast<Cf>(i), "");
      if (!last) return last.error();
      empty = !last->has_value();
    }
    // Read-only too: a copy or a directory with no version is not one
    // this opgate wrote, and nothing it reads from it could be trusted.
    if ((existed && !empty) || read_only_)
      return make_error(errc::data_format,
                        "data directory " + dir_ +
                            " records no format version: it was not written by this opgate (or "
                            "by one older than 0.2) and cannot be read");
    return set_format_version(kFormatVersion);
  }
  const auto number = whole_number(**version);
  if (!number || *number > 1'000'000)
    return make_error(errc::data_format, "data directory " + dir_ + " has a corrupt version");
  const int found = static_cast<int>(*number);
  if (found > kFormatVersion)
    return make_error(errc::data_format,
                      "data directory " + dir_ + " holds data format " + std::to_string(found) +
                          ", newer than this opgate understands (" +
                          std::to_string(kFormatVersion) + "); run a newer opgate");
  format_version_ = found;
  return Status::Ok();
}

Status Db::set_format_version(int version, WriteSet w) {
  w.put(Cf::meta, std::string(kFormatKey), std::to_string(version));
  OPGATE_TRY(write(w, true));
  format_version_ = version;
  return Status::Ok();
}

Db::~Db() {
  if (!db_) return;
  // A stop that drained writes the memtables out, so the next start has no
  // WAL to replay (a start after a million-operation bulk write spent 5.7 s
  // replaying and flushing it). Best effort: a store that failed keeps its
  // WAL instead.
  if (!read_only_) {
    rocksdb::FlushOptions flush;
    flush.wait = true;
    std::vector<rocksdb::ColumnFamilyHandle*> all(handles_.begin(), handles_.end());
    (void)db_->Flush(flush, all);
  }
  for (auto* h : handles_)
    if (h) db_->DestroyColumnFamilyHandle(h);
  db_->Close();
  db_.reset();  // before the Env it runs on
}

Status Db::write(const WriteSet& writes, bool sync) {
  rocksdb::WriteBatch wb;
  for (size_t i = 0; i < kCfCount; ++i) {
    auto* h = handles_[i];
    for (const auto& [k, v] : writes.of(static_cast<Cf>(i))) {
      if (!h) return make_error(errc::storage_unavailable, "the store lacks a column family");
      rocksdb::Status s = v ? wb.Put(h, k, *v) : wb.Delete(h, k);
      if (!s.ok()) return from_rocks(s, "cannot build write batch");
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Write(wo, &wb);
  if (!s.ok()) return from_rocks(s, sync ? "synced write failed" : "write failed");
  if (sync) synced_writes_++;
  return Status::Ok();
}

Result<std::optional<std::string>> Db::get(Cf cf, std::string_view key) const {
  auto* h = handles_[static_cast<size_t>(cf)];
  if (!h) return std::optional<std::string>();  // a family this format lacks
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), h, key, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return from_rocks(s, "read failed");
  return std::optional<std::string>(std::move(value));
}

Result<std::vector<std::optional<std::string>>> Db::multi_get(
    Cf cf, const std::vector<std::string>& keys) const {
  auto* h = handles_[static_cast<size_t>(cf)];
  if (!h) return std::vector<std::optional<std::string>>(keys.size());
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  db_->MultiGet(rocksdb::ReadOptions(), h, keys.size(), slices.data(), values.data(),
                statuses.data());
  std::vector<std::optional<std::string>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) return from_rocks(statuses[i], "read failed");
    out[i] = values[i].ToString();
  }
  return out;
}

Status Db::scan(Cf cf, std::string_view prefix, const Visitor& visit,
                std::string_view start) const {
  auto* h = handles_[static_cast<size_t>(cf)];
  if (!h) return Status::Ok();
  rocksdb::ReadOptions ro;
  std::string upper = prefix_successor(prefix);
  rocksdb::Slice upper_slice(upper);
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, h));
  std::string_view from = start.empty() || start < prefix ? prefix : start;
  for (it->Seek(rocksdb::Slice(from.data(), from.size())); it->Valid(); it->Next()) {
    auto k = it->key();
    auto v = it->value();
    if (!visit(std::string_view(k.data(), k.size()), std::string_view(v.data(), v.size()))) break;
  }
  if (!it->status().ok()) return from_rocks(it->status(), "scan failed");
  return Status::Ok();
}

Result<std::optional<std::string>> Db::last_key(Cf cf, std::string_view prefix) const {
  auto* h = handles_[static_cast<size_t>(cf)];
  if (!h) return std::optional<std::string>();
  rocksdb::ReadOptions ro;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, h));
  std::string upper = prefix_successor(prefix);
  if (upper.empty())
    it->SeekToLast();
  else
    it->SeekForPrev(upper);
  // SeekForPrev lands on upper itself if it exists; step back past it.
  if (it->Valid() && !upper.empty() && it->key().compare(upper) >= 0) it->Prev();
  if (!it->status().ok()) return from_rocks(it->status(), "seek failed");
  if (!it->Valid() || !it->key().starts_with(rocksdb::Slice(prefix.data(), prefix.size())))
    return std::optional<std::string>();
  return std::optional<std::string>(it->key().ToString());
}

Status Db::compact(Cf cf) {
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  auto* h = handles_[static_cast<size_t>(cf)];
  if (!h) return Status::Ok();
  rocksdb::Status s = db_->CompactRange(options, h, nullptr, nullptr);
  if (!s.ok()) return from_rocks(s, "compaction failed");
  return Status::Ok();
}

Status Db::checkpoint(const std::string& dir) {
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_.get(), &raw);
  if (!s.ok()) return from_rocks(s, "cannot start a checkpoint");
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  // Flush first, so the copy holds every write as table files and a WAL
  // that is short to replay.
  s = cp->CreateCheckpoint(dir, 0);
  if (!s.ok()) return from_rocks(s, "checkpoint failed");
  return Status::Ok();
}

uint64_t Db::wal_syncs() const {
  auto stats = db_->GetOptions().statistics;
  return stats ? stats->getTickerCount(rocksdb::WAL_FILE_SYNCED) : 0;
}

}  // namespace opgate::store::rocks
