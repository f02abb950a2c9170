// Time as an injected dependency: everything that waits, expires or backs off
// asks a Clock, so tests move time by hand instead of sleeping.
// Thread-safe: SystemClock trivially; ManualClock uses an atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace opgate {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t now_ms() const = 0;
  int64_t now_s() const { return now_ms() / 1000; }
};

class SystemClock final : public Clock {
 public:
  int64_t now_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ms) : ms_(start_ms) {}
  int64_t now_ms() const override { return ms_.load(); }
  void advance_ms(int64_t d) { ms_ += d; }
  void set_ms(int64_t v) { ms_ = v; }

 private:
  std::atomic<int64_t> ms_;
};

}  // namespace opgate
