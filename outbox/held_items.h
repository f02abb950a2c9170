// The outbox items a dispatcher has handed to its lanes whose tasks have not
// finished. Its next scans leave them out (Reader::due's `except`) rather
// than read them again: under load they are the earliest due, and reading
// them again every pass was most of what a pass cost. current() and hold()
// on the dispatcher's thread; a task reports its end through a Release, from
// any thread, and what was released is dropped at the next current(), so an
// end reported before its hold() still ends it.
//
// A task whose item's handling failed, and which could not write the item
// back for later either (the store refused both), asks it to rest: still
// due, it would be handed out again at once, every pass, each a store
// round trip, a logged error and perhaps a call sent again. It stays held,
// from any thread's rest() until the time given once its task has ended.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "store/port.h"

namespace opgate::outbox {

class HeldItems {
 public:
  // Reports, when it goes out of scope (also by an exception), that the
  // task holding these items has ended.
  class Release {
   public:
    Release(HeldItems& items, std::vector<std::string> ids) : items_(items), ids_(std::move(ids)) {}
    Release(HeldItems& items, std::string id) : Release(items, std::vector{std::move(id)}) {}
    ~Release() {
      MutexLock lock(items_.mu_);
      for (auto& id : ids_) items_.ended_.push_back(std::move(id));
    }
    Release(const Release&) = delete;
    Release& operator=(const Release&) = delete;

   private:
    HeldItems& items_;
    std::vector<std::string> ids_;
  };

  // Items resting at once, at most: past it, an item is not kept out.
  static constexpr size_t kMaxResting = 4096;

  // What the next scan leaves out, `now_ms` on the clock rest() was told in.
  const store::OutboxIds& current(int64_t now_ms) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (const auto& id : ended_) {
      if (auto r = resting_.find(id); r != resting_.end())
        r->second.ended = true;
      else
        held_.erase(id);
    }
    ended_.clear();
    std::erase_if(resting_, [&](const auto& r) {
      // One not handed out by this dispatcher (a reconcile an operator
      // asked for runs outside its lanes) has nothing to rest from.
      if (!held_.contains(r.first)) return true;
      if (!r.second.ended || r.second.until_ms > now_ms) return false;
      held_.erase(r.first);
      return true;
    });
    return held_;
  }
  void hold(std::string id) { held_.insert(std::move(id)); }
  // Called by the item's task, before it ends; for an item not held, it
  // does nothing.
  void rest(const std::string& id, int64_t until_ms) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (resting_.size() < kMaxResting) resting_[id] = {until_ms, false};
  }

 private:
  struct Resting {
    int64_t until_ms = 0;
    bool ended = false;  // its task has ended
  };
  store::OutboxIds held_;  // dispatcher thread only
  Mutex mu_;
  std::vector<std::string> ended_ GUARDED_BY(mu_);
  std::map<std::string, Resting, std::less<>> resting_ GUARDED_BY(mu_);
};

}  // namespace opgate::outbox
