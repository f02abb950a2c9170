#include "operations/step_up.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/crypto.h"
#include "common/webauthn.h"
#include "operations/transitions.h"

namespace opgate::operations {

namespace {

constexpr std::string_view kPasskeys = "passkey";
constexpr std::string_view kChallenges = "passkey_challenge";
constexpr std::string_view kEnrolments = "passkey_enrolment";
// Unused challenges a principal may hold at once; the oldest go first.
constexpr size_t kMaxOpenChallenges = 16;
constexpr size_t kMaxPasskeys = 10;

// Records of one principal are keyed "{principal}/{hash of the id}", so
// that they are listed together and a key stays short however long a
// credential id is; the record's own principal is checked on every read.
std::string record_key(const std::string& principal, std::string_view raw_id) {
  return principal + "/" + crypto::base64url_encode(crypto::sha256(raw_id));
}

// The approval challenge's bytes: 16 random, then the first 16 of
// SHA-256(key, fingerprint), so that what the passkey signs names the
// operation as shown.
std::string approval_challenge(const std::string& key, const std::string& fingerprint) {
  return crypto::random_bytes(16) +
         crypto::sha256(fmt::format("{}:{}\n{}", key.size(), key, fingerprint)).substr(0, 16);
}

template <typename Record>
Result<std::vector<std::pair<std::string, Record>>> records_of(store::Reader& reader,
                                                               std::string_view kind,
                                                               const std::string& principal) {
  const std::string prefix = principal + "/";
  std::vector<std::pair<std::string, Record>> out;
  std::string after = prefix;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, reader.kept_all(kind, after, 100));
    for (auto& [key, value] : page) {
      if (!key.starts_with(prefix)) return out;
      Record r;
      if (!r.ParseFromString(value))
        return make_error(errc::corrupt_record, fmt::format("a stored {} does not parse", kind));
      // "alice/ops" lists after "alice/": only alice's own records.
      if (r.principal() == principal) out.emplace_back(key, std::move(r));
    }
    if (page.size() < 100) return out;
    after = page.back().first;
  }
}

void audit(store::Transaction& txn, const std::string& principal, const std::string& action,
           const pb::Passkey& passkey) {
  pb::AuditRecord r;
  r.set_principal(principal);
  r.set_operation_key("passkey:" + principal);
  r.set_action(action);
  r.set_details_json(details({{"passkey", passkey_id(passkey)}, {"label", passkey.label()}}));
  txn.append_audit(std::move(r));
}

// Takes the challenge out of the store (it is used once, whatever follows).
Result<pb::PasskeyChallenge> use_challenge(store::Transaction& txn, const std::string& principal,
                                           const std::string& challenge) {
  const std::string key = record_key(principal, challenge);
  OPGATE_ASSIGN_OR_RETURN(auto raw, txn.kept(kChallenges, key));
  pb::PasskeyChallenge c;
  if (!raw || !c.ParseFromString(*raw) || c.principal() != principal ||
      c.expires_at_ms() <= txn.now_ms())
    return make_error(errc::step_up_failed,
                      "That passkey challenge was used already, has expired or is not yours; "
                      "ask for a new one.");
  txn.forget(kChallenges, key);
  return c;
}

// An administrator's allowance for the principal to register one passkey:
// used up by the registration.
Status use_enrolment(store::Transaction& txn, const std::string& principal) {
  OPGATE_TRY(require_passkey_enrolment(txn, principal));
  txn.forget(kEnrolments, principal);
  return Status::Ok();
}

}  // namespace

Status allow_passkey_enrolment(store::Transaction& txn, const std::string& principal,
                               const std::string& allowed_by) {
  pb::PasskeyChallenge allowed;
  allowed.set_principal(principal);
  allowed.set_purpose("enrol");
  allowed.set_expires_at_ms(txn.now_ms() + kPasskeyEnrolmentTtlMs);
  txn.keep(kEnrolments, principal, allowed.SerializeAsString());
  pb::AuditRecord r;
  r.set_principal(allowed_by);
  r.set_operation_key("passkey:" + principal);
  r.set_action("passkey_enrolment_allowed");
  r.set_details_json(details({{"expires_at_ms", std::to_string(allowed.expires_at_ms())}}));
  txn.append_audit(std::move(r));
  return Status::Ok();
}

Status require_passkey_enrolment(store::Transaction& txn, const std::string& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto raw, txn.kept(kEnrolments, principal));
  pb::PasskeyChallenge allowed;
  if (!raw || !allowed.ParseFromString(*raw) || allowed.principal() != principal ||
      allowed.expires_at_ms() <= txn.now_ms())
    return make_error(errc::step_up_required,
                      "Registering a passkey needs an administrator's allowance first: "
                      "opgate passkeys allow --principal " +
                          principal);
  return Status::Ok();
}

std::string passkey_id(const pb::Passkey& p) { return crypto::base64url_encode(p.credential_id()); }

bool step_up_required(const pb::Proposal& p, const StepUpPolicy& policy) {
  if (std::find(policy.tiers.begin(), policy.tiers.end(), p.tier()) != policy.tiers.end())
    return true;
  if (policy.above_minor.empty() || p.currency().empty()) return false;
  // A currency the policy names no line for needs the passkey at any
  // amount, as the two-person rule counts it: a line left out fails closed.
  auto above = policy.above_minor.find(p.currency());
  return above == policy.above_minor.end() || p.amount_minor() > above->second;
}

Result<std::string> issue_passkey_challenge(store::Transaction& txn, const std::string& principal,
                                            std::string_view purpose,
                                            const std::string& operation_key,
                                            const std::string& fingerprint) {
  // Expired challenges go, and the oldest past the bound.
  OPGATE_ASSIGN_OR_RETURN(auto open, records_of<pb::PasskeyChallenge>(txn, kChallenges, principal));
  std::sort(open.begin(), open.end(), [](const auto& a, const auto& b) {
    return a.second.expires_at_ms() < b.second.expires_at_ms();
  });
  size_t left = open.size();
  for (const auto& [key, c] : open)
    if (c.expires_at_ms() <= txn.now_ms() || left >= kMaxOpenChallenges) {
      txn.forget(kChallenges, key);
      --left;
    }
  const std::string challenge = purpose == "approve"
                                    ? approval_challenge(operation_key, fingerprint)
                                    : crypto::random_bytes(32);
  pb::PasskeyChallenge c;
  c.set_principal(principal);
  c.set_purpose(std::string(purpose));
  c.set_operation_key(operation_key);
  c.set_fingerprint(fingerprint);
  c.set_expires_at_ms(txn.now_ms() + kPasskeyChallengeTtlMs);
  txn.keep(kChallenges, record_key(principal, challenge), c.SerializeAsString());
  return challenge;
}

Result<pb::Passkey> register_passkey(store::Transaction& txn, const std::string& principal,
                                     const std::string& label, const std::string& challenge,
                                     const std::string& client_data_json,
                                     const std::string& attestation_object,
                                     const PasskeySite& site) {
  OPGATE_ASSIGN_OR_RETURN(auto issued, use_challenge(txn, principal, challenge));
  if (issued.purpose() != "register")
    return make_error(errc::step_up_failed, "That challenge was issued for an approval.");
  OPGATE_TRY(use_enrolment(txn, principal));
  OPGATE_ASSIGN_OR_RETURN(
      auto registered, webauthn::verify_registration(client_data_json, attestation_object,
                                                     {challenge, site.rp_id, site.origin, false}));
  OPGATE_ASSIGN_OR_RETURN(auto existing, records_of<pb::Passkey>(txn, kPasskeys, principal));
  if (existing.size() >= kMaxPasskeys)
    return make_error(
        errc::conflict,
        fmt::format("A principal holds at most {} passkeys; remove one first.", kMaxPasskeys));
  const std::string key = record_key(principal, registered.credential_id);
  OPGATE_ASSIGN_OR_RETURN(auto taken, txn.kept(kPasskeys, key));
  if (taken) return make_error(errc::conflict, "That passkey is registered already.");
  pb::Passkey p;
  p.set_principal(principal);
  p.set_credential_id(registered.credential_id);
  p.set_public_key_der(registered.public_key_der);
  p.set_sign_count(registered.sign_count);
  p.set_label(label);
  p.set_created_at_ms(txn.now_ms());
  txn.keep(kPasskeys, key, p.SerializeAsString());
  audit(txn, principal, "passkey_registered", p);
  return p;
}

Result<std::vector<pb::Passkey>> passkeys_of(store::Reader& reader, const std::string& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto records, records_of<pb::Passkey>(reader, kPasskeys, principal));
  std::vector<pb::Passkey> out;
  for (auto& [key, p] : records) out.push_back(std::move(p));
  std::sort(out.begin(), out.end(), [](const pb::Passkey& a, const pb::Passkey& b) {
    return a.created_at_ms() < b.created_at_ms();
  });
  return out;
}

Status remove_passkey(store::Transaction& txn, const std::string& principal,
                      const std::string& credential_id) {
  const std::string key = record_key(principal, credential_id);
  OPGATE_ASSIGN_OR_RETURN(auto raw, txn.kept(kPasskeys, key));
  pb::Passkey p;
  if (!raw || !p.ParseFromString(*raw) || p.principal() != principal)
    return make_error(errc::not_found, "You have no passkey with that id.");
  txn.forget(kPasskeys, key);
  audit(txn, principal, "passkey_removed", p);
  return Status::Ok();
}

Status check_step_up(store::Transaction& txn, const std::string& principal,
                     const std::string& operation_key, const std::string& fingerprint,
                     const StepUpProof& proof) {
  OPGATE_ASSIGN_OR_RETURN(auto issued, use_challenge(txn, principal, proof.challenge));
  if (issued.purpose() != "approve" || issued.operation_key() != operation_key ||
      !crypto::equal_constant_time(issued.fingerprint(), fingerprint))
    return make_error(errc::step_up_failed,
                      "The passkey signed a challenge for another operation, or for this one "
                      "as it was before it changed; fetch it again.");
  const std::string key = record_key(principal, proof.credential_id);
  OPGATE_ASSIGN_OR_RETURN(auto raw, txn.kept(kPasskeys, key));
  pb::Passkey p;
  if (!raw || !p.ParseFromString(*raw) || p.principal() != principal)
    return make_error(errc::step_up_failed, "That passkey is not registered to you.");
  OPGATE_ASSIGN_OR_RETURN(
      const uint32_t counter,
      webauthn::verify_assertion(proof.client_data_json, proof.authenticator_data, proof.signature,
                                 p.public_key_der(), p.sign_count(),
                                 {proof.challenge, proof.site.rp_id, proof.site.origin, false}));
  p.set_sign_count(counter);
  p.set_last_used_at_ms(txn.now_ms());
  txn.keep(kPasskeys, key, p.SerializeAsString());
  return Status::Ok();
}

}  // namespace opgate::operations
