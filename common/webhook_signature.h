// Standard Webhooks 1.0 signatures (HMAC-SHA256 over "{id}.{timestamp}.{body}",
// secrets "whsec_" + base64, header "v1,<base64> v1,<base64> ..."). Pure
// functions: the current time is a parameter. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace opgate::webhooks {

// Decodes "whsec_<base64>" to the raw key; error if malformed.
Result<std::string> decode_secret(std::string_view secret);

// "v1,<base64 signature>" for the given raw key.
std::string sign(std::string_view raw_key, std::string_view webhook_id, int64_t timestamp,
                 std::string_view body);

struct SignedMessage {
  std::string_view webhook_id;
  std::string_view timestamp;  // header text, decimal seconds
  std::string_view signature;  // header text
  std::string_view body;
};

// Ok if the timestamp is within tolerance of now and any v1 signature in the
// header matches any of the raw keys (compared in constant time).
// Errors: "bad_timestamp" (malformed), "timestamp_out_of_tolerance",
// "bad_signature".
Status verify(const SignedMessage& message, const std::vector<std::string>& raw_keys, int64_t now_s,
              int64_t tolerance_s);

}  // namespace opgate::webhooks
