// Fresh random identifiers in the providers' styles ("re_<hex>", "call_<hex>").
// Thread-safe: draws from the OpenSSL random generator.
#pragma once

#include <string>
#include <string_view>

#include "common/crypto.h"

namespace opgate::sim {

inline std::string new_id(std::string_view prefix) {
  return std::string(prefix) + crypto::random_hex(12);
}

}  // namespace opgate::sim
