// Failed attempts per key (a client's address): after `max_failures`
// within `window_ms`, further attempts are refused until the oldest of them
// leaves the window. Guessing a token from many connections is then as slow
// as from one. Memory is bounded: at most `max_keys` keys are tracked, the
// quietest forgotten first. Time comes from the caller (monotonic ms).
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/mutex.h"

namespace opgate {

struct FailureLimits {
  int max_failures = 10;
  int64_t window_ms = 60'000;
  size_t max_keys = 10'000;
};

class FailureLimiter {
 public:
  explicit FailureLimiter(FailureLimits limits = {}) : limits_(limits) {}

  // Checks and counts an attempt in one step: how long the key must wait
  // before its next attempt, or nothing and the attempt counted as failed
  // until succeeded() takes it back. Attempts that arrive together cannot
  // all pass one check.
  std::optional<int64_t> attempt(const std::string& key, int64_t now_ms) EXCLUDES(mu_);
  // The attempt counted at `at_ms` succeeded: it no longer counts.
  void succeeded(const std::string& key, int64_t at_ms) EXCLUDES(mu_);

 private:
  void forget_old(int64_t now_ms) REQUIRES(mu_);
  // The wait before the key's next attempt, if any; a failed attempt.
  std::optional<int64_t> wait_locked(const std::string& key, int64_t now_ms) REQUIRES(mu_);
  void failed_locked(const std::string& key, int64_t now_ms) REQUIRES(mu_);

  const FailureLimits limits_;
  Mutex mu_;
  // Each key's failures in the window, oldest first (at most max_failures).
  std::unordered_map<std::string, std::deque<int64_t>> failures_ GUARDED_BY(mu_);
};

}  // namespace opgate
