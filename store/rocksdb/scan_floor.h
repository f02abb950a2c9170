// Where a scan of an index that loses its entries oldest first may start:
// due outbox items, due notifications, pending operations by expiry (keyed
// by time, then id) and the inbox queue (keyed by sequence number). Each
// removal leaves a deletion marker below the live entries, which a scan
// from the index's start steps over, every pass, until compaction drops it;
// with thousands settled a minute that was most of the dispatcher's time.
// The floor is a key at or below every live entry: a transaction that
// stages an entry pins its key until its commit is done (so no scan raises
// the floor past an entry not yet visible), and a scan that found nothing
// below a key raises the floor to it, unless an entry it may have missed
// lies lower. Entries due at the same time (0: now) follow their
// increasing ids, so the markers of removed ones lie below the live ones.
// Thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "common/mutex.h"

namespace opgate::store::rocks {

class ScanFloor {
 public:
  struct Start {
    std::string at;                            // scan from this key
    uint64_t generation = 0;                   // pins staged before the scan began
    std::optional<std::string> lowest_active;  // the lowest staged, not yet visible then
  };
  Start start() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return {floor_, generation_,
            pinned_.empty() ? std::nullopt : std::optional<std::string>(*pinned_.begin())};
  }
  // An entry with this key is staged: the floor goes down to it, and no scan
  // that may have missed it raises the floor past it.
  void pin(const std::string& key) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    floor_ = std::min(floor_, key);
    pinned_.insert(key);
    ++generation_;
    recent_.emplace_back(generation_, key);
    if (recent_.size() > kRecent) recent_.pop_front();
  }
  // The transaction that staged the entry committed (or failed).
  void unpin(const std::string& key) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (auto it = pinned_.find(key); it != pinned_.end()) pinned_.erase(it);
  }
  // A scan that began at `from` found no entry below `key`. Entries it may
  // have missed: those staged before it began and not visible yet, those
  // staged while it ran, those still staged now.
  void raise(const Start& from, std::string key) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!recent_.empty() && recent_.front().first > from.generation + 1) return;  // history lost
    if (from.lowest_active) key = std::min(key, *from.lowest_active);
    for (auto it = recent_.rbegin(); it != recent_.rend() && it->first > from.generation; ++it)
      key = std::min(key, it->second);
    if (!pinned_.empty()) key = std::min(key, *pinned_.begin());
    floor_ = std::max(floor_, key);
  }

 private:
  static constexpr size_t kRecent = 4096;
  mutable Mutex mu_;
  std::string floor_ GUARDED_BY(mu_);  // "" : the index's start
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  std::multiset<std::string> pinned_ GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, std::string>> recent_ GUARDED_BY(mu_);  // generation, key
};

// The floors of one store's time-keyed indexes.
struct ScanFloors {
  ScanFloor work;           // due outbox items
  ScanFloor notifications;  // due notification events and deliveries
  ScanFloor expiry;         // pending operations by expiry
  ScanFloor queue;          // the inbox queue, by sequence number instead of time
};

}  // namespace opgate::store::rocks
