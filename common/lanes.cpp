#include "common/lanes.h"

#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace opgate {

Lanes::Lanes(std::string name, size_t threads, size_t max_waiting) : max_waiting_(max_waiting) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this, name] {
      name_this_thread(name);
      run();
    });
}

Lanes::~Lanes() {
  stop();
  join();
}

void Lanes::stop(bool drop_waiting) {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    if (drop_waiting) {
      for (const auto& task : waiting_) busy_.erase(task.lane);
      waiting_.clear();
      if (busy_.empty()) idle_cv_.notify_all();
    }
  }
  work_cv_.notify_all();
  free_cv_.notify_all();
}

void Lanes::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

bool Lanes::try_post(const std::string& lane, std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (stopping_ || busy_.count(lane) || reserved_.count(lane) || waiting_.size() >= max_waiting_)
      return false;
    busy_.insert(lane);
    waiting_.push_back({lane, std::move(task)});
  }
  work_cv_.notify_one();
  return true;
}

bool Lanes::post_when_free(const std::string& lane, std::function<void()> task,
                           std::chrono::milliseconds max_wait) {
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  {
    MutexLock lock(mu_);
    auto reservation = reserved_.insert(lane);
    while (!stopping_ && (busy_.count(lane) || waiting_.size() >= max_waiting_)) {
      if (free_cv_.wait_until(mu_, deadline) == std::cv_status::timeout) break;
    }
    reserved_.erase(reservation);
    if (stopping_ || busy_.count(lane) || waiting_.size() >= max_waiting_) return false;
    busy_.insert(lane);
    waiting_.push_back({lane, std::move(task)});
  }
  work_cv_.notify_one();
  return true;
}

bool Lanes::busy(const std::string& lane) const {
  MutexLock lock(mu_);
  return busy_.count(lane) > 0;
}

bool Lanes::awaited(const std::string& lane) const {
  MutexLock lock(mu_);
  return reserved_.count(lane) > 0;
}

void Lanes::on_done(std::function<void()> notify) {
  MutexLock lock(mu_);
  on_done_ = std::move(notify);
}

size_t Lanes::in_flight() const {
  MutexLock lock(mu_);
  return busy_.size();
}

size_t Lanes::batch_for(size_t most) const {
  MutexLock lock(mu_);
  const size_t full = 2 * threads_.size();
  return busy_.size() >= full ? 0 : std::min(most, full - busy_.size() + 8);
}

size_t Lanes::idle() const {
  MutexLock lock(mu_);
  return busy_.size() >= threads_.size() ? 0 : threads_.size() - busy_.size();
}

void Lanes::wait_idle() {
  MutexLock lock(mu_);
  while (!busy_.empty()) idle_cv_.wait(mu_);
}

void Lanes::run() {
  for (;;) {
    Task task;
    {
      MutexLock lock(mu_);
      while (!stopping_ && waiting_.empty()) work_cv_.wait(mu_);
      if (waiting_.empty()) return;  // stopping, and nothing accepted is left
      task = std::move(waiting_.front());
      waiting_.pop_front();
    }
    free_cv_.notify_all();
    try {
      task.fn();
    } catch (const std::exception& e) {
      spdlog::error("task of lane {} failed: {}", task.lane, e.what());
    }
    std::function<void()> notify;
    {
      MutexLock lock(mu_);
      busy_.erase(task.lane);
      // While more tasks wait than there are threads, a dispatcher pass
      // would only re-read work already accepted: it is woken when the
      // pool could take more (its tick covers the rest).
      if (waiting_.size() < threads_.size()) notify = on_done_;
      if (busy_.empty()) idle_cv_.notify_all();
    }
    free_cv_.notify_all();
    if (notify) notify();
  }
}

}  // namespace opgate
