#include "operations/keys.h"

#include <fmt/format.h>

#include "common/crypto.h"

namespace opgate::operations {

std::string operation_key(std::string_view owner, std::string_view order_id, std::string_view kind,
                          int version) {
  return fmt::format("{}:{}:{}:v{}", owner, order_id, kind, version);
}

int key_version(std::string_view key) {
  const auto colon = key.rfind(":v");
  if (colon == std::string_view::npos) return 0;
  int v = 0;
  for (char c : key.substr(colon + 2)) {
    if (c < '0' || c > '9' || v > 100000) return 0;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string_view key_order(std::string_view key) {
  if (key_version(key) == 0) return {};
  const auto first = key.find(':');
  const auto second = key.find(':', first + 1);
  const auto third = key.find(':', second + 1);
  if (first == 0 || second == std::string_view::npos || third == std::string_view::npos ||
      key.find(':', third + 1) != std::string_view::npos)
    return {};
  return key.substr(first + 1, second - first - 1);
}

std::string fingerprint(const pb::Proposal& p) {
  // One field per line, "name=value", values length-prefixed so no value can
  // forge a field boundary.
  std::string canonical;
  auto add = [&](std::string_view name, std::string_view value) {
    canonical += fmt::format("{}={}:{}\n", name, value.size(), value);
  };
  add("kind", p.kind());
  add("owner", p.owner());
  add("order_id", p.order_id());
  add("amount_minor", std::to_string(p.amount_minor()));
  add("currency", p.currency());
  add("payment_intent", p.payment_intent());
  add("customer", p.customer());
  add("payment_method", p.payment_method());
  add("reason", p.reason());
  add("tier", p.tier());
  // Declared operations only, so that every built-in fingerprint stays what
  // it always was: the exact arguments are part of what is approved.
  if (!p.arguments_json().empty()) {
    add("money", p.money());
    add("arguments", p.arguments_json());
  }
  // Only once lowered by an approver, so that every other fingerprint stays
  // what it always was.
  if (p.original_amount_minor() != 0) {
    add("original_amount_minor", std::to_string(p.original_amount_minor()));
    add("edited_by", p.edited_by());
    add("edit_reason", p.edit_reason());
  }
  return crypto::sha256_hex(canonical);
}

std::string provider_idempotency_key(std::string_view operation_key) {
  return "opgate-v1-" + crypto::sha256_hex(operation_key);
}

std::string cancel_idempotency_key(std::string_view operation_key) {
  return "opgate-cancel-v1-" + crypto::sha256_hex(operation_key);
}

}  // namespace opgate::operations
