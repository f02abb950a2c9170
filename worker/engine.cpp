#include "worker/engine.h"

#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace opgate::worker {

Engine::Engine(SessionSync& sync, outbox::Drainer& drainer, Options options)
    : sync_(sync), drainer_(drainer), options_(options) {}

Engine::~Engine() { stop(); }

void Engine::start() {
  thread_ = std::thread([this] {
    name_this_thread("worker");
    loop();
  });
}

void Engine::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void Engine::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::loop() {
  auto last_sweep = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      woken_ = false;
    }
    size_t work = 0;
    try {
      work += sync_.process_inbox();
      work += sync_.expire_pending();
      work += drainer_.run_once();
      const auto now = std::chrono::steady_clock::now();
      if (options_.sweep_interval.count() > 0 && now - last_sweep >= options_.sweep_interval) {
        last_sweep = now;
        sync_.sweep(
            std::chrono::duration_cast<std::chrono::milliseconds>(options_.sweep_window).count());
      }
    } catch (const std::exception& e) {
      spdlog::error("worker pass failed: {}", e.what());
    }
    std::unique_lock lock(mu_);
    if (stopping_) return;
    // More may be waiting: go again at once; otherwise sleep until woken.
    if (work == 0) cv_.wait_for(lock, options_.tick, [&] { return woken_ || stopping_; });
  }
}

}  // namespace opgate::worker
