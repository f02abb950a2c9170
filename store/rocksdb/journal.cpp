#include "store/rocksdb/journal.h"

#include <spdlog/spdlog.h>

#include <map>

#include "common/thread_name.h"
#include "opgate.pb.h"

namespace opgate::store::rocks {

Result<std::optional<std::string>> LayeredView::get(Cf cf, std::string_view key) const {
  for (const auto* layer : layers_)
    if (const auto* staged = layer->find(cf, key)) return *staged;
  return db_.get(cf, key);
}

Status LayeredView::scan(Cf cf, std::string_view prefix, const Db::Visitor& visit,
                         std::string_view start) const {
  // The staged entries in range, newest layer winning; then one ordered
  // merge with the database's keys, the staged side winning ties.
  const std::string from(start.empty() || start < prefix ? prefix : start);
  const std::string upper = prefix_successor(prefix);
  std::map<std::string_view, const std::optional<std::string>*> staged;
  for (auto layer = layers_.rbegin(); layer != layers_.rend(); ++layer) {
    const auto& m = (*layer)->of(cf);
    auto end = upper.empty() ? m.end() : m.lower_bound(upper);
    for (auto it = m.lower_bound(from); it != end; ++it) staged[it->first] = &it->second;
  }
  auto next = staged.begin();
  bool stopped = false;
  // Visits staged entries before `key` (all of them if key is empty).
  auto drain_until = [&](std::optional<std::string_view> key) {
    while (!stopped && next != staged.end() && (!key || next->first < *key)) {
      if (*next->second && !visit(next->first, **next->second)) stopped = true;
      ++next;
    }
  };
  Status s = db_.scan(
      cf, prefix,
      [&](std::string_view k, std::string_view v) {
        drain_until(k);
        if (stopped) return false;
        if (next != staged.end() && next->first == k) {
          const auto* value = next->second;
          ++next;
          if (*value && !visit(k, **value)) stopped = true;
          return !stopped;
        }
        if (!visit(k, v)) stopped = true;
        return !stopped;
      },
      from);
  if (!s) return s;
  drain_until(std::nullopt);
  return Status::Ok();
}

Result<std::unique_ptr<Journal>> Journal::open(Db& db, const Clock& clock) {
  std::unique_ptr<Journal> j(new Journal(db, clock));
  auto head = j->read_head();
  if (!head) return head.error();
  {
    MutexLock lock(j->mu_);
    j->head_ = *head;
  }
  j->committer_ = std::thread([raw = j.get()] {
    name_this_thread("journal-commit");
    raw->committer();
  });
  return j;
}

Result<AuditHead> Journal::read_head() const {
  AuditHead head;
  auto last = db_.last_key(Cf::audit, "");
  if (!last) return last.error();
  if (!last->has_value()) return head;
  auto raw = db_.get(Cf::audit, **last);
  if (!raw) return raw.error();
  pb::AuditRecord record;
  if (!raw->has_value() || !record.ParseFromString(**raw))
    return make_error(errc::corrupt_record, "the audit chain's last record does not parse");
  head.seq = record.seq();
  head.hash = record.hash();
  return head;
}

Journal::~Journal() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  staged_cv_.notify_all();
  if (committer_.joinable()) committer_.join();
}

Status Journal::run(const std::function<Status(Txn&)>& fn) {
  std::shared_ptr<Outcome> outcome;
  {
    MutexLock lock(mu_);
    if (stopping_) return make_error(errc::shutting_down, "The store is closing.");
    // After a failed write whose audit head could not be read again, a
    // record chained now could follow records that were never written.
    if (!head_known_ && !try_read_head())
      return make_error(errc::storage_unavailable,
                        "The audit chain's head is unknown since a write failed; retry shortly.");
    // The transaction reads its own writes first.
    WriteSet writes;
    LayeredView view(db_, {&writes, &open_, &writing_});
    Txn txn{clock_.now_ms(), view, writes, head_};
    if (Status s = fn(txn); !s) return s;
    if (!writes.empty()) {
      open_.merge(std::move(writes));
      head_ = txn.head;
      ++open_transactions_;
      outcome = open_outcome_;
      staged_cv_.notify_one();
    } else if (!open_.empty()) {
      outcome = open_outcome_;  // it may have read staged writes
    } else if (!writing_.empty()) {
      outcome = writing_outcome_;
    } else {
      return Status::Ok();
    }
  }
  outcome->wait();
  return outcome->status;
}

void Journal::committer() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stopping_ && open_.empty()) staged_cv_.wait(mu_);
    if (open_.empty()) return;  // stopping, and nothing left to write
    std::swap(writing_, open_);
    writing_outcome_ = std::move(open_outcome_);
    open_outcome_ = std::make_shared<Outcome>();
    const size_t transactions = open_transactions_;
    open_transactions_ = 0;
    Status s = write_unlocked();
    if (s) {
      failing_ = false;
      ++commits_;
      transactions_ += transactions;
      writing_outcome_->publish();
      // Durable and visible in the database: no transaction needs these
      // writes staged any more. Freed without the lock.
      WriteSet written;
      std::swap(written, writing_);
      mu_.unlock();
      written = WriteSet();
      mu_.lock();
    } else {
      // Nothing of these generations is visible (RocksDB inserts a synced
      // batch only after its sync succeeds); the open one may have read
      // the failed one, so it fails with it.
      spdlog::critical("a synced write failed; its transactions are refused: {}",
                       s.error().message);
      failing_ = true;
      for (auto* o : {writing_outcome_.get(), open_outcome_.get()}) {
        o->status = s;
        o->publish();
      }
      writing_.clear();
      open_.clear();
      open_transactions_ = 0;
      open_outcome_ = std::make_shared<Outcome>();
      if (!try_read_head())
        spdlog::critical(
            "cannot re-read the audit chain's head; transactions are refused until "
            "it can be");
    }
    writing_outcome_.reset();
  }
}

bool Journal::try_read_head() {
  auto head = read_head();
  head_known_ = head.ok();
  if (head) head_ = *head;
  return head_known_;
}

// The only access to writing_ without the lock: no one else changes it
// while the committer writes it (transactions only read it, under the lock).
Status Journal::write_unlocked() NO_THREAD_SAFETY_ANALYSIS {
  mu_.unlock();
  Status s = db_.write(writing_, true);
  mu_.lock();
  return s;
}

uint64_t Journal::commits() const { return commits_.load(); }

uint64_t Journal::transactions() const { return transactions_.load(); }

bool Journal::failing() const { return failing_.load(); }

}  // namespace opgate::store::rocks
