// The benchmark drivers' latency quantiles: the value at quantile q of
// latencies sorted ascending, in microseconds, reported in milliseconds (0
// when there are none).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace opgate::sim {

inline double percentile_ms(const std::vector<uint32_t>& sorted_us, double q) {
  if (sorted_us.empty()) return 0;
  const size_t i = std::min(sorted_us.size() - 1,
                            static_cast<size_t>(q * static_cast<double>(sorted_us.size())));
  return sorted_us[i] / 1000.0;
}

}  // namespace opgate::sim
