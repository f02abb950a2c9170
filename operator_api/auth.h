// Operator authentication: bearer tokens matched by SHA-256 (only hashes are
// configured), compared in constant time. A token shorter than
// kMinTokenLength never authenticates, whatever hash is configured: it is
// too short to be a secret (`openssl rand -hex 32` makes a good one).
// Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "operations/authority.h"

namespace opgate::operator_api {

using operations::Principal;

inline constexpr size_t kMinTokenLength = 20;
inline constexpr std::string_view kShortTokenMessage =
    "Tokens shorter than 20 characters are refused: they can be guessed. Configure the "
    "SHA-256 of a longer one (openssl rand -hex 32 makes one).";

// The principal whose token hash matches the "Authorization: Bearer" value;
// every configured hash is compared, in constant time.
const Principal* authenticate(const std::vector<Principal>& principals,
                              std::optional<std::string_view> authorization);
// The principal whose token (not its hash) this is.
const Principal* authenticate_token(const std::vector<Principal>& principals,
                                    std::string_view token);

}  // namespace opgate::operator_api
