// A mutex that clang's thread-safety analysis understands, and the macros
// that name what it guards. Shared state says which mutex guards it
// (GUARDED_BY) and functions say which they need (REQUIRES); CI builds with
// clang -Wthread-safety -Werror, so an unguarded access fails the build.
// Condition waits are written as loops around cv.wait(mu) while a
// MutexLock is held, so the analysis sees the predicate under the lock.
#pragma once

#include <condition_variable>
#include <mutex>
#include <shared_mutex>

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

// Waits on a Mutex held by the caller (through a MutexLock).
using CondVar = std::condition_variable_any;

}  // namespace opgate
