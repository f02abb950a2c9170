#include "common/failure_limiter.h"

#include <algorithm>

namespace opgate {

std::optional<int64_t> FailureLimiter::attempt(const std::string& key, int64_t now_ms) {
  MutexLock lock(mu_);
  if (auto wait = wait_locked(key, now_ms)) return wait;
  failed_locked(key, now_ms);
  return std::nullopt;
}

void FailureLimiter::succeeded(const std::string& key, int64_t at_ms) {
  MutexLock lock(mu_);
  auto it = failures_.find(key);
  if (it == failures_.end()) return;
  auto& times = it->second;
  if (auto t = std::find(times.rbegin(), times.rend(), at_ms); t != times.rend())
    times.erase(std::next(t).base());
  if (times.empty()) failures_.erase(it);
}

std::optional<int64_t> FailureLimiter::wait_locked(const std::string& key, int64_t now_ms) {
  auto it = failures_.find(key);
  if (it == failures_.end()) return std::nullopt;
  auto& times = it->second;
  while (!times.empty() && times.front() + limits_.window_ms <= now_ms) times.pop_front();
  if (times.empty()) {
    failures_.erase(it);
    return std::nullopt;
  }
  if (static_cast<int>(times.size()) < limits_.max_failures) return std::nullopt;
  return times.front() + limits_.window_ms - now_ms;
}

void FailureLimiter::failed_locked(const std::string& key, int64_t now_ms) {
  if (failures_.size() >= limits_.max_keys && !failures_.count(key)) forget_old(now_ms);
  auto& times = failures_[key];
  times.push_back(now_ms);
  while (static_cast<int>(times.size()) > limits_.max_failures) times.pop_front();
}

void FailureLimiter::forget_old(int64_t now_ms) {
  // Keys whose failures have all left the window go first; if none has,
  // the one whose newest failure is oldest.
  for (auto it = failures_.begin(); it != failures_.end();) {
    if (it->second.empty() || it->second.back() + limits_.window_ms <= now_ms)
      it = failures_.erase(it);
    else
      ++it;
  }
  if (failures_.size() < limits_.max_keys) return;
  auto quietest = std::min_element(failures_.begin(), failures_.end(), [](auto& a, auto& b) {
    return a.second.back() < b.second.back();
  });
  failures_.erase(quietest);
}

}  // namespace opgate
