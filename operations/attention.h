// When an operation whose outcome is unknown needs a person: after this
// many provider attempts, or this long in outcome_unknown; and telling
// people once when it does. needs_attention is pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

struct AttentionPolicy {
  int after_attempts = 10;
  int64_t after_ms = 3'600'000;
};

bool needs_attention(const pb::Operation& operation, int64_t now_ms, const AttentionPolicy& policy);

// If the operation has come to need a person and nobody was told yet, marks
// it told and raises operation.needs_attention (once per operation). Call
// inside Storage::transact; returns whether it raised the event.
Result<bool> raise_attention(store::Transaction& txn, const std::string& key,
                             const AttentionPolicy& policy);

// A settled operation a person must look at although nothing is unknown:
// its order cancelled but the refund refused, or the provider reporting a
// success after it settled otherwise. Audited (needs_attention, with the
// reason) and raised as operation.needs_attention. Call inside
// Storage::transact, after the operation's own change.
Status raise_settled_attention(store::Transaction& txn, pb::Operation& operation,
                               const std::string& reason);

}  // namespace opgate::operations
