// Idempotency keys as Stripe documents them: a key is scoped (to the API key),
// bound to the fingerprint of its first request, "in flight" while that
// request executes, and then replays the saved response. Keys expire after a
// TTL (24 h by default); the store is bounded. Thread-safe: locks itself.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "http/message.h"

namespace opgate::sim {

class IdempotencyStore;

enum class IdempotencyOutcome {
  kStarted,   // new key, now in flight: the caller executes, then saves or drops the claim
  kReplay,    // finished earlier with the same fingerprint: answer `saved`
  kMismatch,  // finished or in flight with another fingerprint
  kInFlight,  // the first request with this key is still executing
  kFull,      // the store is at capacity
};

// Held by the request that started a key. Saving stores the response; a
// claim dropped unsaved forgets the key (nothing was executed, a retry may
// run afresh). Movable, not copyable.
class IdempotencyClaim {
 public:
  IdempotencyClaim() = default;
  IdempotencyClaim(IdempotencyStore* store, std::string composite_key);
  IdempotencyClaim(IdempotencyClaim&& other) noexcept;
  IdempotencyClaim& operator=(IdempotencyClaim&& other) noexcept;
  IdempotencyClaim(const IdempotencyClaim&) = delete;
  IdempotencyClaim& operator=(const IdempotencyClaim&) = delete;
  ~IdempotencyClaim();

  bool active() const { return store_ != nullptr; }
  // Saves the response under the key (once); later requests replay it.
  void save(const http::Response& response);
  // Forgets the key now.
  void release();

 private:
  IdempotencyStore* store_ = nullptr;
  std::string key_;
};

struct IdempotencyBegin {
  IdempotencyOutcome outcome = IdempotencyOutcome::kStarted;
  IdempotencyClaim claim;  // active only for kStarted
  http::Response saved;    // for kReplay
};

class IdempotencyStore {
 public:
  static constexpr int64_t kDefaultTtlMs = 24LL * 3600 * 1000;

  IdempotencyStore(const Clock& clock, size_t max_keys = 100'000, int64_t ttl_ms = kDefaultTtlMs);

  IdempotencyBegin begin(std::string_view scope, std::string_view key, std::string_view fingerprint)
      EXCLUDES(mu_);
  void clear() EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

 private:
  friend class IdempotencyClaim;
  struct Entry {
    std::string fingerprint;
    bool in_flight = true;
    http::Response response;
    int64_t created_ms = 0;
    uint64_t generation = 0;
  };

  void save(const std::string& composite, const http::Response& response) EXCLUDES(mu_);
  void release(const std::string& composite) EXCLUDES(mu_);
  void prune_locked(int64_t now_ms) REQUIRES(mu_);

  const Clock& clock_;
  const size_t max_keys_;
  const int64_t ttl_ms_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
  // Keys in creation order with their generation, for expiry.
  std::deque<std::pair<std::string, uint64_t>> order_ GUARDED_BY(mu_);
  uint64_t next_generation_ GUARDED_BY(mu_) = 1;
};

}  // namespace opgate::sim
