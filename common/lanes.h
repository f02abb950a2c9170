// A bounded pool of threads that runs tasks by lane: at most one task of a
// lane runs at a time, and a lane that is busy or a pool that is full turns
// a new task away at once (the caller tries again later), so one slow lane
// never holds up another and nothing queues without bound. Used for the
// work of one session (sync) and of one operation or tool call (outbox).
// Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace opgate {

class Lanes {
 public:
  // `threads` run tasks; at most `max_waiting` accepted tasks wait for one.
  // `name` names the threads.
  Lanes(std::string name, size_t threads, size_t max_waiting);
  // Runs what was accepted, then joins.
  ~Lanes();
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  // Accepts the task unless its lane is busy or the pool is full.
  bool try_post(const std::string& lane, std::function<void()> task) EXCLUDES(mu_);
  // Like try_post, but waits up to `max_wait` for the lane to be free and
  // the pool to have room. While it waits, try_post turns the lane away, so
  // the waiter goes next (an operator's request is not starved by the
  // dispatcher). False when the wait ran out or the pool stopped.
  bool post_when_free(const std::string& lane, std::function<void()> task,
                      std::chrono::milliseconds max_wait) EXCLUDES(mu_);
  bool busy(const std::string& lane) const EXCLUDES(mu_);
  // A post_when_free waits for this lane.
  bool awaited(const std::string& lane) const EXCLUDES(mu_);
  // Called (on a pool thread) after a task when fewer tasks wait than there
  // are threads: to wake a dispatcher when the pool could take more.
  void on_done(std::function<void()> notify) EXCLUDES(mu_);
  // Tasks accepted and not finished.
  size_t in_flight() const EXCLUDES(mu_);
  // Threads with nothing to run now.
  size_t idle() const EXCLUDES(mu_);
  // Threads in the pool.
  size_t threads() const { return threads_.size(); }
  // How many due tasks a dispatcher pass should load, at most `most`: until
  // twice as many as there are threads are in flight (every thread busy and
  // as many queued behind them, so none runs dry before the next pass), and
  // a few more for tasks whose lane is busy. Loading the backlog while every
  // thread was busy cost a dispatcher most of its time: the queued tasks
  // were read, or stepped over, again in every pass.
  size_t batch_for(size_t most) const EXCLUDES(mu_);
  // Waits until no task is in flight (tests, shutdown).
  void wait_idle() EXCLUDES(mu_);
  // Stops accepting; the tasks accepted still run, or with `drop_waiting`
  // only those already running (for work that is durable and redone after
  // a restart). Idempotent.
  void stop(bool drop_waiting = false) EXCLUDES(mu_);
  // Waits until every thread has ended, on_done's last call returned
  // included (after stop; not from a pool thread). Idempotent.
  void join();

 private:
  void run() EXCLUDES(mu_);
  struct Task {
    std::string lane;
    std::function<void()> fn;
  };
  mutable Mutex mu_;
  CondVar work_cv_;
  CondVar idle_cv_;
  CondVar free_cv_;  // a lane was freed, or a waiting task started
  std::deque<Task> waiting_ GUARDED_BY(mu_);
  std::set<std::string, std::less<>> busy_ GUARDED_BY(mu_);           // accepted and not finished
  std::multiset<std::string, std::less<>> reserved_ GUARDED_BY(mu_);  // post_when_free waits
  std::function<void()> on_done_ GUARDED_BY(mu_);
  const size_t max_waiting_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace opgate
