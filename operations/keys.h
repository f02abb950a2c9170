// Naming and binding of proposals: identifier rules, the operation key, the
// proposal fingerprint an approval must carry, and the provider idempotency
// key. Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/identifiers.h"
#include "opgate.pb.h"

namespace opgate::operations {

inline constexpr std::string_view kFullRefund = "full-refund";
inline constexpr std::string_view kAccountCredit = "account-credit";
// Cancels the order at the order source and refunds what remains.
inline constexpr std::string_view kCancelOrder = "cancel-order";

using opgate::valid_identifier;  // common/identifiers.h

// "{owner}:{order_id}:{kind}:v{version}"
std::string operation_key(std::string_view owner, std::string_view order_id, std::string_view kind,
                          int version = 1);
// The version of an operation key (0 if it has none).
int key_version(std::string_view operation_key);
// The order an operation key names ("" if it is not a key operation_key()
// makes): a hint for what to read ahead, never a check.
std::string_view key_order(std::string_view operation_key);

// SHA-256 (hex) over the canonical fields an approval binds.
std::string fingerprint(const pb::Proposal& proposal);

// Stable across every retry and reconciliation of the operation.
std::string provider_idempotency_key(std::string_view operation_key);
// The order source's key for a cancel-order operation's cancellation:
// stable, and distinct from the provider's.
std::string cancel_idempotency_key(std::string_view operation_key);

}  // namespace opgate::operations
