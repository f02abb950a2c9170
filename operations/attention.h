// When an operation whose outcome is unknown needs a person: after this
// many provider attempts, or this long in outcome_unknown. Pure;
// thread-safe.
#pragma once

#include <cstdint>

#include "opgate.pb.h"

namespace opgate::operations {

struct AttentionPolicy {
  int after_attempts = 10;
  int64_t after_ms = 3'600'000;
};

bool needs_attention(const pb::Operation& operation, int64_t now_ms, const AttentionPolicy& policy);

}  // namespace opgate::operations
