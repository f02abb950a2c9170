// A mutex that clang's thread-safety analysis understands, and the macros
// that name what it guards. Shared state says which mutex guards it
// (GUARDED_BY) and functions say which they need (REQUIRES); CI builds with
// clang -Wthread-safety -Werror, so an unguarded access fails the build.
// Condition waits are written as loops around cv.wait(mu) while a
// MutexLock is held, so the analysis sees the predicate under the lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#if defined(__clang__)
#define OPGATE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define OPGATE_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) OPGATE_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY OPGATE_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) OPGATE_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) OPGATE_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) OPGATE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) OPGATE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) OPGATE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) OPGATE_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) OPGATE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) OPGATE_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) OPGATE_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS OPGATE_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace opgate {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;  // waits on mu_ itself
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Many readers or one writer.
class CAPABILITY("shared mutex") SharedMutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() RELEASE_GENERIC() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Waits on a Mutex held by the caller (through a MutexLock): a
// std::condition_variable on the Mutex's own std::mutex, so a wait or a
// notify takes no second lock (std::condition_variable_any locks an
// internal mutex of its own around each, a contended futex more on the
// connection pool's and the lanes' hot paths).
class CondVar {
  // Runs `wait` on a unique_lock that adopts the caller's hold of `mu` and
  // hands it back, held, however the wait ends.
  template <class Wait>
  static auto on(Mutex& mu, Wait wait) REQUIRES(mu) {
    std::unique_lock<std::mutex> held(mu.mu_, std::adopt_lock);
    struct HandBack {
      std::unique_lock<std::mutex>& held;
      ~HandBack() { held.release(); }
    } hand_back{held};
    return wait(held);
  }

 public:
  void wait(Mutex& mu) REQUIRES(mu) {
    on(mu, [&](std::unique_lock<std::mutex>& held) { cv_.wait(held); });
  }
  template <class Clock, class Duration>
  std::cv_status wait_until(Mutex& mu, const std::chrono::time_point<Clock, Duration>& until)
      REQUIRES(mu) {
    return on(mu, [&](std::unique_lock<std::mutex>& held) { return cv_.wait_until(held, until); });
  }
  template <class Rep, class Period>
  std::cv_status wait_for(Mutex& mu, const std::chrono::duration<Rep, Period>& period)
      REQUIRES(mu) {
    return on(mu, [&](std::unique_lock<std::mutex>& held) { return cv_.wait_for(held, period); });
  }
  // Until `done()` holds or the period passes; whether it holds.
  template <class Rep, class Period, class Predicate>
  bool wait_for(Mutex& mu, const std::chrono::duration<Rep, Period>& period, Predicate done)
      REQUIRES(mu) {
    return on(mu, [&](std::unique_lock<std::mutex>& held) {
      return cv_.wait_for(held, period, std::move(done));
    });
  }
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace opgate
