// A value that a reload replaces as a whole (configuration: tokens, policy,
// secrets): readers take a snapshot and use it for one request or one
// transaction, so no reader ever sees half of an old value and half of a
// new one. Thread-safe: get() and set() from any thread, without a lock
// that a reader could wait on for long.
#pragma once

#include <memory>

#include "common/mutex.h"

namespace opgate {

template <typename T>
class Live {
 public:
  explicit Live(T initial) : value_(std::make_shared<const T>(std::move(initial))) {}
  std::shared_ptr<const T> get() const {
    MutexLock lock(mu_);
    return value_;
  }
  void set(T next) {
    auto fresh = std::make_shared<const T>(std::move(next));
    MutexLock lock(mu_);
    value_.swap(fresh);
  }

 private:
  mutable Mutex mu_;  // held only to copy or swap the pointer
  std::shared_ptr<const T> value_ GUARDED_BY(mu_);
};

}  // namespace opgate
