#include "sim/idempotency.h"

#include <utility>

namespace opgate::sim {

IdempotencyClaim::IdempotencyClaim(IdempotencyStore* store, std::string composite_key)
    : store_(store), key_(std::move(composite_key)) {}

IdempotencyClaim::IdempotencyClaim(IdempotencyClaim&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), key_(std::move(other.key_)) {}

IdempotencyClaim& IdempotencyClaim::operator=(IdempotencyClaim&& other) noexcept {
  if (this != &other) {
    release();
    store_ = std::exchange(other.store_, nullptr);
    key_ = std::move(other.key_);
  }
  return *this;
}

IdempotencyClaim::~IdempotencyClaim() { release(); }

void IdempotencyClaim::save(const http::Response& response) {
  if (!store_) return;
  store_->save(key_, response);
  store_ = nullptr;
}

void IdempotencyClaim::release() {
  if (!store_) return;
  store_->release(key_);
  store_ = nullptr;
}

IdempotencyStore::IdempotencyStore(const Clock& clock, size_t max_keys, int64_t ttl_ms)
    : clock_(clock), max_keys_(max_keys), ttl_ms_(ttl_ms) {}

IdempotencyBegin IdempotencyStore::begin(std::string_view scope, std::string_view key,
                                         std::string_view fingerprint) {
  std::string composite;
  composite.reserve(scope.size() + key.size() + 1);
  composite.append(scope).push_back('\n');
  composite.append(key);

  const int64_t now = clock_.now_ms();
  MutexLock lock(mu_);
  prune_locked(now);
  IdempotencyBegin result;
  auto it = entries_.find(composite);
  if (it != entries_.end()) {
    const Entry& e = it->second;
    if (e.in_flight) {
      result.outcome = IdempotencyOutcome::kInFlight;
    } else if (e.fingerprint != fingerprint) {
      result.outcome = IdempotencyOutcome::kMismatch;
    } else {
      result.outcome = IdempotencyOutcome::kReplay;
      result.saved = e.response;
    }
    return result;
  }
  if (entries_.size() >= max_keys_) {
    result.outcome = IdempotencyOutcome::kFull;
    return result;
  }
  Entry e;
  e.fingerprint = std::string(fingerprint);
  e.created_ms = now;
  e.generation = next_generation_++;
  order_.emplace_back(composite, e.generation);
  entries_.emplace(composite, std::move(e));
  result.outcome = IdempotencyOutcome::kStarted;
  result.claim = IdempotencyClaim(this, std::move(composite));
  return result;
}

void IdempotencyStore::save(const std::string& composite, const http::Response& response) {
  MutexLock lock(mu_);
  auto it = entries_.find(composite);
  if (it == entries_.end() || !it->second.in_flight) return;
  it->second.in_flight = false;
  it->second.response = response;
  it->second.response.drop = false;
  it->second.response.close = false;
}

void IdempotencyStore::release(const std::string& composite) {
  MutexLock lock(mu_);
  auto it = entries_.find(composite);
  if (it != entries_.end() && it->second.in_flight) entries_.erase(it);
}

void IdempotencyStore::clear() {
  MutexLock lock(mu_);
  // In-flight keys stay, so their claims still resolve; they are new anyway.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.in_flight)
      ++it;
    else
      it = entries_.erase(it);
  }
}

size_t IdempotencyStore::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

void IdempotencyStore::prune_locked(int64_t now_ms) {
  while (!order_.empty()) {
    auto& [key, generation] = order_.front();
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.generation != generation) {
      order_.pop_front();  // already gone or reused
      continue;
    }
    if (it->second.in_flight || now_ms - it->second.created_ms < ttl_ms_) break;
    entries_.erase(it);
    order_.pop_front();
  }
  // Bound the order queue even when its head is a long-lived in-flight key.
  if (order_.size() > 2 * max_keys_ + 16) {
    std::deque<std::pair<std::string, uint64_t>> kept;
    for (auto& item : order_) {
      auto it = entries_.find(item.first);
      if (it != entries_.end() && it->second.generation == item.second) kept.push_back(item);
    }
    order_ = std::move(kept);
  }
}

}  // namespace opgate::sim
