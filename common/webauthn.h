// WebAuthn (passkeys) on the relying party's side: checking what a browser
// returns from navigator.credentials.create() (a registration) and .get()
// (an assertion) against what the server asked for. The CBOR is read with
// libcbor, the keys and signatures with OpenSSL; ES256 (ECDSA P-256 with
// SHA-256) is the one algorithm accepted. Attestation statements are not
// checked (the console asks for none): a passkey is trusted because a
// signed-in principal registered it. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace opgate::webauthn {

// What the server asked for and where: the raw challenge bytes it issued,
// the relying party id (the console's host) and the page's origin.
struct Expected {
  std::string challenge;
  std::string rp_id;
  std::string origin;
  bool user_verification = false;  // require the UV flag, not only presence
};

struct Registered {
  std::string credential_id;   // raw bytes
  std::string public_key_der;  // SubjectPublicKeyInfo, DER
  uint32_t sign_count = 0;
};

// A registration: clientDataJSON and attestationObject as the browser
// returned them (raw bytes, not base64).
Result<Registered> verify_registration(std::string_view client_data_json,
                                       std::string_view attestation_object,
                                       const Expected& expected);

// An assertion by a registered credential: its signature over the
// authenticator data and the hash of clientDataJSON. `stored_sign_count` is
// the last counter seen: a counter that did not grow (while either is
// non-zero) means a cloned authenticator and is refused. Returns the new
// counter.
Result<uint32_t> verify_assertion(std::string_view client_data_json,
                                  std::string_view authenticator_data,
                                  std::string_view signature_der, std::string_view public_key_der,
                                  uint32_t stored_sign_count, const Expected& expected);

}  // namespace opgate::webauthn
