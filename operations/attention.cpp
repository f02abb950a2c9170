#include "operations/attention.h"

#include "operations/state_machine.h"

namespace opgate::operations {

bool needs_attention(const pb::Operation& op, int64_t now_ms, const AttentionPolicy& policy) {
  if (!is(op, State::outcome_unknown)) return false;
  return op.attempts() >= policy.after_attempts ||
         now_ms - op.unknown_since_ms() >= policy.after_ms;
}

}  // namespace opgate::operations
