// Hashing, MACs and encodings over OpenSSL. Pure functions, thread-safe.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace opgate::crypto {

std::string sha256(std::string_view data);  // raw 32 bytes
std::string sha256_hex(std::string_view data);
std::string hmac_sha256(std::string_view key, std::string_view data);  // raw
// The MAC of the parts' concatenation, without building it.
std::string hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
std::string to_hex(std::string_view raw);
// The bytes of a hex string; nothing if it is not one (odd length, a non-hex
// digit).
std::optional<std::string> from_hex(std::string_view hex);
std::string base64_encode(std::string_view raw);
// Strict standard base64 (with padding); nullopt on any invalid input.
std::optional<std::string> base64_decode(std::string_view text);
// URL-safe base64 without padding (WebAuthn's encoding of bytes in JSON).
std::string base64url_encode(std::string_view raw);
std::optional<std::string> base64url_decode(std::string_view text);
// Constant-time equality; lengths are not secret.
bool equal_constant_time(std::string_view a, std::string_view b);
std::string random_hex(size_t bytes);
std::string random_bytes(size_t bytes);

}  // namespace opgate::crypto
