#include "store/store.h"

#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>

#include <filesystem>
#include <vector>

#include "opgate.pb.h"

namespace opgate::store {

namespace {
constexpr std::array<std::string_view, kCfCount> kNames = {
    "inbox", "sessions", "calls", "operations", "outbox", "ledger", "audit", "orders", "default"};

Error from_rocks(const rocksdb::Status& s, std::string_view what) {
  return make_error("storage_error", std::string(what) + ": " + s.ToString());
}

// Drops inbox events that were processed longer ago than the retention.
// Queue entries and unprocessed events are always kept.
class InboxRetentionFilter final : public rocksdb::CompactionFilter {
 public:
  InboxRetentionFilter(const Clock& clock, int64_t retention_ms)
      : clock_(clock), retention_ms_(retention_ms) {}
  bool Filter(int, const rocksdb::Slice& key, const rocksdb::Slice& value, std::string*,
              bool*) const override {
    if (!key.starts_with("e/")) return false;
    pb::InboxEvent event;
    if (!event.ParseFromArray(value.data(), static_cast<int>(value.size()))) return false;
    return event.processed() && event.processed_at_ms() < clock_.now_ms() - retention_ms_;
  }
  const char* Name() const override { return "opgate.InboxRetention"; }

 private:
  const Clock& clock_;
  int64_t retention_ms_;
};
}  // namespace

std::string_view cf_name(Cf cf) { return kNames[static_cast<size_t>(cf)]; }

struct Batch::Op {
  Cf cf;
  bool is_delete;
  std::string key;
  std::string value;
};

namespace {
Status to_write_batch(const std::vector<Batch::Op>& ops,
                      const std::array<rocksdb::ColumnFamilyHandle*, kCfCount>& handles,
                      rocksdb::WriteBatch& wb) {
  for (const auto& op : ops) {
    auto* h = handles[static_cast<size_t>(op.cf)];
    rocksdb::Status s = op.is_delete ? wb.Delete(h, op.key) : wb.Put(h, op.key, op.value);
    if (!s.ok()) return from_rocks(s, "cannot build write batch");
  }
  return Status::Ok();
}
}  // namespace

Batch::Batch() : ops_(std::make_unique<std::vector<Op>>()) {}
Batch::~Batch() = default;
Batch::Batch(Batch&&) noexcept = default;

void Batch::put(Cf cf, std::string_view key, std::string_view value) {
  ops_->push_back({cf, false, std::string(key), std::string(value)});
}

void Batch::put(Cf cf, std::string_view key, const google::protobuf::MessageLite& message) {
  ops_->push_back({cf, false, std::string(key), message.SerializeAsString()});
}

void Batch::del(Cf cf, std::string_view key) { ops_->push_back({cf, true, std::string(key), {}}); }

size_t Batch::count() const { return ops_->size(); }

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

Result<std::unique_ptr<Store>> Store::open(const std::string& dir, const OpenOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (!o.create_if_missing || o.read_only)
      return make_error("no_data_dir", "data directory does not exist: " + dir);
    fs::create_directories(dir, ec);
    if (ec) return make_error("data_dir", "cannot create " + dir + ": " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  if (o.check_permissions) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0)
      return make_error("data_dir", "cannot stat data directory " + dir);
    if (st.st_mode & (S_IRWXG | S_IRWXO))
      return make_error(
          "data_dir_permissions",
          "data directory " + dir + " is accessible by group or others; run chmod 700 on it");
  }

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  // Concurrent synced writers share one WAL write and one fsync.
  db_options.enable_pipelined_write = false;
  db_options.allow_concurrent_memtable_write = true;
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  // Tickers only (no histograms): WAL syncs for /metrics and benchmarks.
  db_options.statistics = rocksdb::CreateDBStatistics();
  db_options.statistics->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);
  std::unique_ptr<rocksdb::CompactionFilter> inbox_filter;
  if (o.inbox_retention_ms > 0 && o.clock)
    inbox_filter = std::make_unique<InboxRetentionFilter>(*o.clock, o.inbox_retention_ms);
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (auto name : kNames) {
    rocksdb::ColumnFamilyOptions cf_options;
    if (name == cf_name(Cf::inbox)) cf_options.compaction_filter = inbox_filter.get();
    cfs.emplace_back(std::string(name), cf_options);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = o.read_only
                          ? rocksdb::DB::OpenForReadOnly(db_options, dir, cfs, &handles, &raw)
                          : rocksdb::DB::Open(db_options, dir, cfs, &handles, &raw);
  if (!s.ok()) return from_rocks(s, "cannot open data directory " + dir);
  std::unique_ptr<Store> store(new Store());
  store->dir_ = dir;
  store->inbox_filter_ = std::move(inbox_filter);
  store->db_.reset(raw);
  for (size_t i = 0; i < kCfCount; ++i) store->handles_[i] = handles[i];
  return store;
}

Store::~Store() {
  if (!db_) return;
  for (auto* h : handles_)
    if (h) db_->DestroyColumnFamilyHandle(h);
  db_->Close();
}

Status Store::write_unsynced(Batch& batch) {
  rocksdb::WriteBatch wb;
  if (Status s = to_write_batch(*batch.ops_, handles_, wb); !s) return s;
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &wb);
  if (!s.ok()) return from_rocks(s, "write failed");
  return Status::Ok();
}

Status Store::sync_wal() {
  rocksdb::Status s = db_->SyncWAL();
  if (!s.ok()) return from_rocks(s, "WAL sync failed");
  synced_writes_++;
  return Status::Ok();
}

Status Store::commit(Batch& batch) {
  rocksdb::WriteBatch wb;
  if (Status s = to_write_batch(*batch.ops_, handles_, wb); !s) return s;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, &wb);
  if (!s.ok()) return from_rocks(s, "synced write failed");
  synced_writes_++;
  return Status::Ok();
}

Result<std::optional<std::string>> Store::get(Cf cf, std::string_view key) const {
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), handles_[static_cast<size_t>(cf)], key, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return from_rocks(s, "read failed");
  return std::optional<std::string>(std::move(value));
}

Status Store::scan(Cf cf, std::string_view prefix, const Visitor& visit,
                   std::string_view start) const {
  rocksdb::ReadOptions ro;
  std::string upper = prefix_successor(prefix);
  rocksdb::Slice upper_slice(upper);
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, handles_[static_cast<size_t>(cf)]));
  std::string_view from = start.empty() ? prefix : start;
  for (it->Seek(rocksdb::Slice(from.data(), from.size())); it->Valid(); it->Next()) {
    auto k = it->key();
    auto v = it->value();
    if (!visit(std::string_view(k.data(), k.size()), std::string_view(v.data(), v.size()))) break;
  }
  if (!it->status().ok()) return from_rocks(it->status(), "scan failed");
  return Status::Ok();
}

Result<std::optional<std::string>> Store::last_key(Cf cf, std::string_view prefix) const {
  rocksdb::ReadOptions ro;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, handles_[static_cast<size_t>(cf)]));
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

Status Store::compact(Cf cf) {
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  rocksdb::Status s =
      db_->CompactRange(options, handles_[static_cast<size_t>(cf)], nullptr, nullptr);
  if (!s.ok()) return from_rocks(s, "compaction failed");
  return Status::Ok();
}

uint64_t Store::synced_writes() const { return synced_writes_.load(); }

uint64_t Store::wal_syncs() const {
  auto stats = db_->GetOptions().statistics;
  return stats ? stats->getTickerCount(rocksdb::WAL_FILE_SYNCED) : 0;
}

}  // namespace opgate::store
