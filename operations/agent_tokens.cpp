#include "operations/agent_tokens.h"

#include <boost/json.hpp>

#include "common/crypto.h"
#include "common/identifiers.h"
#include "operations/transitions.h"

namespace opgate::operations {

namespace json = boost::json;

namespace {

constexpr std::string_view kByHash = "agent_token";
constexpr std::string_view kById = "agent_token_id";
constexpr std::string_view kSessionPrefix = "mcp:";

std::string audit_key(const pb::AgentToken& t) { return "agent-token:" + t.id(); }

void audit(store::Transaction& txn, const pb::AgentToken& t, const std::string& action,
           const std::string& principal) {
  pb::AuditRecord r;
  r.set_principal(principal);
  r.set_operation_key(audit_key(t));
  r.set_action(action);
  r.set_details_json(details({{"owner", t.owner()},
                              {"label", t.label()},
                              {"expires_at_ms", std::to_string(t.expires_at_ms())}}));
  txn.append_audit(std::move(r));
}

Result<std::optional<pb::AgentToken>> by_hash(store::Reader& reader, const std::string& sha256) {
  OPGATE_ASSIGN_OR_RETURN(auto raw, reader.kept(kByHash, sha256));
  if (!raw) return std::optional<pb::AgentToken>();
  pb::AgentToken t;
  if (!t.ParseFromString(*raw))
    return make_error(errc::corrupt_record, "a stored agent token does not parse");
  return std::optional<pb::AgentToken>(std::move(t));
}

// The token with this id, if one was minted.
Result<std::optional<pb::AgentToken>> by_id(store::Reader& reader, const std::string& id) {
  OPGATE_ASSIGN_OR_RETURN(auto sha, reader.kept(kById, id));
  if (!sha) return std::optional<pb::AgentToken>();
  return by_hash(reader, *sha);
}

// Neither revoked nor expired at `now_ms`.
bool live(const pb::AgentToken& t, int64_t now_ms) {
  return t.revoked_at_ms() == 0 && (t.expires_at_ms() == 0 || now_ms < t.expires_at_ms());
}

}  // namespace

Result<MintedToken> mint_agent_token(store::Transaction& txn, const std::string& owner,
                                     const std::string& label, int64_t ttl_s,
                                     const std::string& principal) {
  if (!valid_identifier(owner))
    return make_error(errc::bad_request,
                      "owner must be 1-64 characters from A-Z, a-z, 0-9, '.', '_' and '-'.");
  if (label.size() > 200) return make_error(errc::bad_request, "label is at most 200 characters.");
  if (ttl_s < 0) return make_error(errc::bad_request, "ttl_s must not be negative.");
  MintedToken out;
  out.token = std::string(kAgentTokenPrefix) + crypto::random_hex(32);
  auto& t = out.record;
  t.set_id("at_" + crypto::random_hex(8));
  t.set_owner(owner);
  t.set_label(label);
  t.set_token_sha256(crypto::sha256_hex(out.token));
  t.set_created_by(principal);
  t.set_created_at_ms(txn.now_ms());
  if (ttl_s > 0) t.set_expires_at_ms(txn.now_ms() + ttl_s * 1000);
  txn.keep(kByHash, t.token_sha256(), t.SerializeAsString());
  txn.keep(kById, t.id(), t.token_sha256());
  audit(txn, t, "agent_token_minted", principal);
  return out;
}

Result<std::optional<pb::AgentToken>> authenticate_agent(store::Reader& reader,
                                                         std::string_view token, int64_t now_ms) {
  using None = std::optional<pb::AgentToken>;
  if (!token.starts_with(kAgentTokenPrefix) || token.size() != kAgentTokenPrefix.size() + 64)
    return None();
  OPGATE_ASSIGN_OR_RETURN(auto t, by_hash(reader, crypto::sha256_hex(token)));
  if (!t || !live(*t, now_ms)) return None();
  return t;
}

Status require_live_agent_token(store::Reader& reader, const std::string& token_sha256,
                                int64_t now_ms) {
  OPGATE_ASSIGN_OR_RETURN(auto t, by_hash(reader, token_sha256));
  if (!t || !live(*t, now_ms))
    return make_error(errc::unauthorized,
                      "The agent token was revoked or has expired; the call was not made.");
  return Status::Ok();
}

Result<AgentTokenPage> agent_tokens(store::Reader& reader, const std::string& after, size_t limit,
                                    const std::function<bool(const pb::AgentToken&)>& accept) {
  AgentTokenPage out;
  std::string cursor = after;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, reader.kept_all(kById, cursor, 500));
    for (const auto& [id, sha] : page) {
      OPGATE_ASSIGN_OR_RETURN(auto t, by_hash(reader, sha));
      if (!t || !accept(*t)) continue;
      out.tokens.push_back(std::move(*t));
      if (out.tokens.size() >= limit) {
        out.next_after = id;
        return out;
      }
    }
    if (page.size() < 500) return out;
    cursor = page.back().first;
  }
}

Result<pb::AgentToken> revoke_agent_token(
    store::Transaction& txn, const std::string& id, const std::string& principal,
    const std::function<bool(const pb::AgentToken&)>& visible) {
  OPGATE_ASSIGN_OR_RETURN(auto t, by_id(txn, id));
  if (!t || (visible && !visible(*t)))
    return make_error(errc::not_found, "No agent token with that id.");
  if (t->revoked_at_ms() != 0) return std::move(*t);
  t->set_revoked_at_ms(txn.now_ms());
  t->set_revoked_by(principal);
  txn.keep(kByHash, t->token_sha256(), t->SerializeAsString());
  audit(txn, *t, "agent_token_revoked", principal);
  return std::move(*t);
}

std::string agent_principal(const pb::AgentToken& token) { return "agent:" + token.id(); }

std::string agent_session(const pb::AgentToken& token) {
  return std::string(kSessionPrefix) + token.id();
}

Result<std::optional<pb::AgentToken>> agent_token_of_session(store::Reader& reader,
                                                             std::string_view session_id) {
  if (!session_id.starts_with(kSessionPrefix)) return std::optional<pb::AgentToken>();
  return by_id(reader, std::string(session_id.substr(kSessionPrefix.size())));
}

json::object agent_token_json(const pb::AgentToken& t, int64_t now_ms) {
  const char* state = t.revoked_at_ms() != 0 ? "revoked" : live(t, now_ms) ? "active" : "expired";
  return json::object{{"id", t.id()},
                      {"owner", t.owner()},
                      {"label", t.label()},
                      {"created_by", t.created_by()},
                      {"created_at_ms", t.created_at_ms()},
                      {"expires_at_ms", t.expires_at_ms()},
                      {"revoked_at_ms", t.revoked_at_ms()},
                      {"revoked_by", t.revoked_by()},
                      {"state", state}};
}

}  // namespace opgate::operations
