// Step-up approvals with passkeys. Above a tier or an amount
// ([console.step_up]), an approval must carry a WebAuthn assertion from a
// passkey the approving principal registered, over a challenge the server
// issued for that operation key and the fingerprint the approver was shown
// (its bytes commit to both). A challenge is used once and lives five
// minutes; the signature counter must grow. Approvals without one (the API,
// the CLI) are refused with step_up_required. Registrations and removals
// are audited under "passkey:{principal}". Call the functions that take a
// Transaction inside Storage::transact.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "operations/policy.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// Where the console is: the relying party id (its host) and the origin its
// pages are served from.
struct PasskeySite {
  std::string rp_id;
  std::string origin;
};

bool step_up_required(const pb::Proposal& proposal, const StepUpPolicy& policy);

inline constexpr int64_t kPasskeyChallengeTtlMs = 5 * 60 * 1000;

// A fresh challenge for `principal` (raw bytes): to register a passkey, or
// to approve `operation_key` as shown with `fingerprint`.
Result<std::string> issue_passkey_challenge(store::Transaction& txn, const std::string& principal,
                                            std::string_view purpose,
                                            const std::string& operation_key = {},
                                            const std::string& fingerprint = {});

// A stolen approver's token must not be enough to enrol a passkey: each
// registration needs an administrator's allowance for that principal
// (audited), valid for a day and used up by the registration.
inline constexpr int64_t kPasskeyEnrolmentTtlMs = 24 * 3600 * 1000;
Status allow_passkey_enrolment(store::Transaction& txn, const std::string& principal,
                               const std::string& allowed_by);
// step_up_required unless an allowance for `principal` is open.
Status require_passkey_enrolment(store::Transaction& txn, const std::string& principal);

// Registers the passkey the browser created for the registration challenge
// (raw bytes in, as the browser returned them), using up the allowance.
Result<pb::Passkey> register_passkey(store::Transaction& txn, const std::string& principal,
                                     const std::string& label, const std::string& challenge,
                                     const std::string& client_data_json,
                                     const std::string& attestation_object,
                                     const PasskeySite& site);

// The principal's passkeys, oldest first.
Result<std::vector<pb::Passkey>> passkeys_of(store::Reader& reader, const std::string& principal);

// Removes one of the principal's passkeys (by its credential id, raw);
// not_found if it has none such.
Status remove_passkey(store::Transaction& txn, const std::string& principal,
                      const std::string& credential_id);

// What an approval carries for a step-up (raw bytes).
struct StepUpProof {
  std::string challenge;
  std::string credential_id;
  std::string client_data_json;
  std::string authenticator_data;
  std::string signature;
  PasskeySite site;
};

// Checks the proof for `principal` approving `operation_key` as shown with
// `fingerprint`, uses up its challenge and records the passkey's counter.
// step_up_failed on any mismatch.
Status check_step_up(store::Transaction& txn, const std::string& principal,
                     const std::string& operation_key, const std::string& fingerprint,
                     const StepUpProof& proof);

// {id (base64url), label, created_at_ms, last_used_at_ms}: never the key.
std::string passkey_id(const pb::Passkey& passkey);

}  // namespace opgate::operations
