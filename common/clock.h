// Time as an injected dependency: everything that waits, expires or backs off
// asks a Clock, so tests move time by hand instead of sleeping. Two clocks:
// wall time for what is recorded (created_at, expires_at) and compared with
// other machines, and monotonic time for durations and intervals here
// (sweeps, liveness, latencies), which a wall-clock step cannot bend.
// Thread-safe: SystemClock trivially; ManualClock uses atomics.
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
  // Nanoseconds on a clock that never goes back (its origin means nothing).
  virtual int64_t monotonic_ns() const = 0;
  int64_t monotonic_ms() const { return monotonic_ns() / 1'000'000; }
};

class SystemClock final : public Clock {
 public:
  int64_t now_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int64_t monotonic_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// Both clocks move only when a test says so: advance_ms moves both, set_ms
// steps the wall clock alone (as an NTP correction would).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ms) : ms_(start_ms) {}
  int64_t now_ms() const override { return ms_.load(); }
  int64_t monotonic_ns() const override { return mono_ns_.load(); }
  void advance_ms(int64_t d) {
    ms_ += d;
    mono_ns_ += d * 1'000'000;
  }
  void set_ms(int64_t v) { ms_ = v; }

 private:
  std::atomic<int64_t> ms_;
  std::atomic<int64_t> mono_ns_{0};
};

}  // namespace opgate
