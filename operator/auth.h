// Operator authentication: bearer tokens matched by SHA-256 (only hashes are
// configured), compared in constant time. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "operations/authority.h"

namespace opgate::operator_api {

using operations::Principal;

// The principal whose token hash matches the "Authorization: Bearer" value;
// every configured hash is compared, in constant time.
const Principal* authenticate(const std::vector<Principal>& principals,
                              const std::optional<std::string>& authorization);
// The principal whose token (not its hash) this is.
const Principal* authenticate_token(const std::vector<Principal>& principals,
                                    const std::string& token);

}  // namespace opgate::operator_api
