// Agent tokens: the credential an agent runtime presents at the MCP front
// door, bound to one owner (the token is the binding: no argument names an
// owner). Minted by an operator (shown once; only its SHA-256 is kept),
// revocable at once, optionally expiring. Each is a kept record ("agent_token"
// by its hash, "agent_token_id" from its id to the hash); minting and
// revoking are audited under "agent-token:{id}", and what the token does
// under the principal "agent:{id}". Call inside Storage::transact where a
// Transaction is taken; thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// Tokens begin so (and are 64 hex digits after it): recognisable in a leak
// scanner, never mistaken for an operator token.
inline constexpr std::string_view kAgentTokenPrefix = "ogat_";

struct MintedToken {
  pb::AgentToken record;
  std::string token;  // shown once
};

// Mints a token for `owner` by `principal`; `ttl_s` 0 never expires.
Result<MintedToken> mint_agent_token(store::Transaction& txn, const std::string& owner,
                                     const std::string& label, int64_t ttl_s,
                                     const std::string& principal);

// The token's record when it authenticates now: known, not revoked, not
// expired. Nothing otherwise (no reason is told: an unknown and a revoked
// token look the same).
Result<std::optional<pb::AgentToken>> authenticate_agent(store::Reader& reader,
                                                         std::string_view token, int64_t now_ms);

// Unauthorized unless the token with this SHA-256 (hex) still
// authenticates now: read in the transaction that acts for it, so that what
// a call does cannot commit after the token's revocation.
Status require_live_agent_token(store::Reader& reader, const std::string& token_sha256,
                                int64_t now_ms);

struct AgentTokenPage {
  std::vector<pb::AgentToken> tokens;
  std::string next_after;  // "" when there are no more
};

// Tokens minted, by id, after the id `after` ("" from the start): at most
// `limit` that `accept` takes; the cursor is always one it took.
Result<AgentTokenPage> agent_tokens(store::Reader& reader, const std::string& after, size_t limit,
                                    const std::function<bool(const pb::AgentToken&)>& accept);

// Revokes the token with this id (again: no change); not_found if none,
// or if `visible` (when given) does not take it.
Result<pb::AgentToken> revoke_agent_token(
    store::Transaction& txn, const std::string& id, const std::string& principal,
    const std::function<bool(const pb::AgentToken&)>& visible = {});

// "agent:{id}": who acts, in the audit, when the token does.
std::string agent_principal(const pb::AgentToken& token);

// "mcp:{id}": the session its calls are made in.
std::string agent_session(const pb::AgentToken& token);

// The agent token whose calls make up `session_id`, if that is such a
// session (revoked or expired as well): who minted it is who stands behind
// what it proposed.
Result<std::optional<pb::AgentToken>> agent_token_of_session(store::Reader& reader,
                                                             std::string_view session_id);

// {"id","owner","label","created_by","created_at_ms","expires_at_ms",
// "revoked_at_ms","revoked_by","state"}: never the hash.
boost::json::object agent_token_json(const pb::AgentToken& token, int64_t now_ms);

}  // namespace opgate::operations
