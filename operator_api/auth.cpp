#include "operator_api/auth.h"

#include "common/crypto.h"

namespace opgate::operator_api {

const Principal* authenticate_token(const std::vector<Principal>& principals,
                                    std::string_view token) {
  if (token.size() < kMinTokenLength) return nullptr;
  const std::string digest = crypto::sha256_hex(token);
  const Principal* found = nullptr;
  for (const auto& p : principals)
    if (crypto::equal_constant_time(digest, p.token_sha256) && !found) found = &p;
  return found;
}

const Principal* authenticate(const std::vector<Principal>& principals,
                              std::optional<std::string_view> authorization) {
  if (!authorization) return nullptr;
  constexpr std::string_view prefix = "Bearer ";
  if (authorization->size() <= prefix.size() || !authorization->starts_with(prefix)) return nullptr;
  return authenticate_token(principals, authorization->substr(prefix.size()));
}

}  // namespace opgate::operator_api
