// Waiting in a test for what another thread does: for an event, not for a
// time. The bound only keeps a failure from hanging the suite.
#pragma once

#include <chrono>
#include <thread>

namespace opgate::testing {

// Calls `done`, yielding between calls, until it returns true (then true)
// or `bound` passes (then false).
template <typename Done>
bool becomes_true(Done&& done, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace opgate::testing
