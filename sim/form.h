// Decoding of application/x-www-form-urlencoded bodies as Stripe reads them
// ("metadata[key]=v", '+' as space), strict integer parsing, and a canonical
// fingerprint of the parameters for idempotency checks. Pure, thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace opgate::sim {

// Decoded parameters; a repeated name keeps its last value.
using FormParams = std::map<std::string, std::string>;

// Error "malformed_form" if the body is not a valid form encoding.
Result<FormParams> parse_form(std::string_view body);

// Strict decimal integer: optional '-', digits only, fits in int64.
std::optional<int64_t> parse_int(std::string_view text);

// Canonical text of method, path and parameters: equal for equal requests
// whatever the parameter order.
std::string request_fingerprint(std::string_view method, std::string_view path,
                                const FormParams& params);

}  // namespace opgate::sim
