// The worker thread: processes queued inbox events, expires pending
// operations, and drains the outbox, then sleeps until woken or the tick
// passes. One thread, so per-session and per-operation work never overlaps.
// Thread-safe: wake() and stop() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "outbox/drainer.h"
#include "worker/session_sync.h"

namespace opgate::worker {

class Engine {
 public:
  struct Options {
    std::chrono::milliseconds tick{200};
    std::chrono::seconds sweep_interval{30};  // 0: no sweep
    std::chrono::seconds sweep_window{3600};
  };
  Engine(SessionSync& sync, outbox::Drainer& drainer, Options options);
  ~Engine();
  void start();
  void wake();
  // Finishes the pass in progress, then returns.
  void stop();

 private:
  void loop();
  SessionSync& sync_;
  outbox::Drainer& drainer_;
  Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace opgate::worker
