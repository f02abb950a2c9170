// A mutex that clang's thread-safety analysis understands, and the macros
// that name what it guards. Shared state says which mutex guards it
// (GUARDED_BY) and functions say which they need (REQUIRES); CI builds with
// clang -Wthread-safety -Werror, so an unguarded access fails the build.
// Condition waits are written as loops around cv.wait(mu) while a
// MutexLock is held, so the analysis sees the predicate under the lock.
#pragma once

#include <condition_variable>
#include <mutex>

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
#define RELEASE(...) OPGATE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS OPGATE_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace opgate {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
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

// Waits on a Mutex held by the caller (through a MutexLock).
using CondVar = std::condition_variable_any;

}  // namespace opgate
