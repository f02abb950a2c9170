// Jittered exponential backoff ("full jitter"): attempt n waits a uniform
// random time in [base*2^n / 2, base*2^n], capped. The random source is
// injected so tests are deterministic. Pure; thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace opgate {

// Returns values uniformly in [0, 1).
using Random = std::function<double()>;

inline int64_t backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms, const Random& random) {
  int64_t ceiling = base_ms;
  for (int i = 0; i < attempt && ceiling < cap_ms; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap_ms);
  return ceiling / 2 + static_cast<int64_t>(random() * static_cast<double>(ceiling / 2));
}

}  // namespace opgate
