// The outbox items a dispatcher has handed to its lanes whose tasks have not
// finished. Its next scans leave them out (Reader::due's `except`) rather
// than read them again: under load they are the earliest due, and reading
// them again every pass was most of what a pass cost. current() and hold()
// on the dispatcher's thread; a task reports its end through a Release, from
// any thread, and what was released is dropped at the next current(), so an
// end reported before its hold() still ends it.
#pragma once

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

  const store::OutboxIds& current() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (const auto& id : ended_) held_.erase(id);
    ended_.clear();
    return held_;
  }
  void hold(std::string id) { held_.insert(std::move(id)); }

 private:
  store::OutboxIds held_;  // dispatcher thread only
  Mutex mu_;
  std::vector<std::string> ended_ GUARDED_BY(mu_);
};

}  // namespace opgate::outbox
