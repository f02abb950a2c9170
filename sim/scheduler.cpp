#include "sim/scheduler.h"

#include <exception>

#include "sim/log.h"

namespace opgate::sim {

Scheduler::Scheduler(size_t threads, size_t capacity) : capacity_(capacity) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this] { run(); });
}

Scheduler::~Scheduler() { stop(); }

bool Scheduler::schedule_after(std::chrono::milliseconds delay, Task task, bool over_capacity) {
  {
    MutexLock lock(mu_);
    if (stopping_) return false;
    if (!over_capacity && tasks_.size() >= capacity_) return false;
    tasks_.emplace(std::chrono::steady_clock::now() + delay, std::move(task));
  }
  cv_.notify_one();
  return true;
}

void Scheduler::stop() {
  {
    MutexLock lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    tasks_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  threads_.clear();
}

size_t Scheduler::pending() const {
  MutexLock lock(mu_);
  return tasks_.size();
}

void Scheduler::run() {
  for (;;) {
    Task task;
    {
      MutexLock lock(mu_);
      for (;;) {
        if (stopping_) return;
        if (tasks_.empty()) {
          cv_.wait(mu_);
          continue;
        }
        auto first = tasks_.begin();
        // A copy: while this thread waits, another may run and erase that task.
        const auto due = first->first;
        if (due > std::chrono::steady_clock::now()) {
          cv_.wait_until(mu_, due);
          continue;
        }
        task = std::move(first->second);
        tasks_.erase(first);
        break;
      }
    }
    try {
      task();
    } catch (const std::exception& e) {
      log_warn("scheduled task failed", {{"error", e.what()}});
    }
  }
}

}  // namespace opgate::sim
