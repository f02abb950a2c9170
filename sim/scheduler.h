// Runs tasks at or after their due time on a small pool of threads, with a
// bounded backlog. Used for webhook delivery and retries and for the scripted
// model's think time. Thread-safe: schedule() from any thread, also from a task.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace opgate::sim {

class Scheduler {
 public:
  using Task = std::function<void()>;

  Scheduler(size_t threads, size_t capacity);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // False if stopped, or if the backlog is at capacity and `over_capacity`
  // is not set (a task rescheduling itself may pass it: it freed its slot).
  bool schedule_after(std::chrono::milliseconds delay, Task task, bool over_capacity = false)
      EXCLUDES(mu_);
  // Drops the tasks not yet started and joins the threads. Idempotent.
  void stop() EXCLUDES(mu_);
  size_t pending() const EXCLUDES(mu_);

 private:
  void run() EXCLUDES(mu_);

  const size_t capacity_;
  mutable Mutex mu_;
  CondVar cv_;
  std::multimap<std::chrono::steady_clock::time_point, Task> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace opgate::sim
