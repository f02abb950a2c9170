// Passkeys on the relying party's side, against a software authenticator:
// a registration yields the credential and its key; an assertion verifies
// only for the challenge, site and origin asked, with the key registered,
// a signature over exactly what was signed, and a counter that grew.
#include "common/webauthn.h"

#include <doctest/doctest.h>

#include "soft_authenticator.h"

using namespace opgate;

namespace {

const webauthn::Expected kExpected{std::string(32, 'c'), "localhost", "http://localhost:8081"};

struct Registered {
  testing::SoftAuthenticator authenticator{"localhost"};
  webauthn::Registered passkey;
  Registered() {
    auto r =
        webauthn::verify_registration(testing::SoftAuthenticator::client_data(
                                          "webauthn.create", kExpected.challenge, kExpected.origin),
                                      authenticator.attestation_object(), kExpected);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    passkey = *r;
  }
  Result<uint32_t> assert_with(webauthn::Expected expected, std::string_view type = "webauthn.get",
                               std::string_view challenge = kExpected.challenge,
                               std::string_view origin = kExpected.origin) {
    const auto data = testing::SoftAuthenticator::client_data(type, challenge, origin);
    auto a = authenticator.assert_for(data);
    return webauthn::verify_assertion(data, a.authenticator_data, a.signature,
                                      passkey.public_key_der, passkey.sign_count, expected);
  }
};

}  // namespace

TEST_CASE("a registration yields the credential id and an ES256 key that verifies assertions") {
  Registered r;
  CHECK(r.passkey.credential_id == r.authenticator.credential_id());
  CHECK_FALSE(r.passkey.public_key_der.empty());
  auto counter = r.assert_with(kExpected);
  REQUIRE_MESSAGE(counter.ok(), counter.error().message);
  CHECK(*counter == 1);
}

TEST_CASE("a registration for another challenge, origin, site or ceremony is refused") {
  testing::SoftAuthenticator a("localhost");
  auto with = [&](std::string_view type, std::string_view challenge, std::string_view origin,
                  const webauthn::Expected& expected) {
    return webauthn::verify_registration(
        testing::SoftAuthenticator::client_data(type, challenge, origin), a.attestation_object(),
        expected);
  };
  CHECK(with("webauthn.create", std::string(32, 'x'), kExpected.origin, kExpected)
            .error()
            .is(errc::step_up_failed));
  CHECK_FALSE(with("webauthn.create", kExpected.challenge, "http://evil.example", kExpected).ok());
  CHECK_FALSE(with("webauthn.get", kExpected.challenge, kExpected.origin, kExpected).ok());
  auto other_site = kExpected;
  other_site.rp_id = "opgate.example";
  other_site.origin = kExpected.origin;
  CHECK_FALSE(with("webauthn.create", kExpected.challenge, kExpected.origin, other_site).ok());
  // Not CBOR, or CBOR of the wrong shape.
  const auto data = testing::SoftAuthenticator::client_data("webauthn.create", kExpected.challenge,
                                                            kExpected.origin);
  CHECK_FALSE(webauthn::verify_registration(data, "not cbor", kExpected).ok());
  CHECK_FALSE(webauthn::verify_registration(data, std::string("\xa0", 1), kExpected).ok());
  // No person present.
  CHECK_FALSE(webauthn::verify_registration(data, a.attestation_object(0x40), kExpected).ok());
}

TEST_CASE("an assertion verifies only as asked: challenge, origin, ceremony, key, bytes, counter") {
  Registered r;
  CHECK(r.assert_with(kExpected, "webauthn.get", std::string(32, 'x'))
            .error()
            .is(errc::step_up_failed));
  CHECK_FALSE(r.assert_with(kExpected, "webauthn.get", kExpected.challenge, "http://evil").ok());
  CHECK_FALSE(r.assert_with(kExpected, "webauthn.create").ok());
  auto uv = kExpected;
  uv.user_verification = true;
  CHECK(r.assert_with(uv).ok());  // the soft authenticator sets UV (0x05)

  const auto data = testing::SoftAuthenticator::client_data("webauthn.get", kExpected.challenge,
                                                            kExpected.origin);
  auto good = r.authenticator.assert_for(data);
  // Another authenticator's key does not verify this signature.
  Registered other;
  CHECK_FALSE(webauthn::verify_assertion(data, good.authenticator_data, good.signature,
                                         other.passkey.public_key_der, 0, kExpected)
                  .ok());
  // One flipped bit in the signed bytes or the signature.
  auto flipped = good.authenticator_data;
  flipped[33] ^= 0x01;
  CHECK_FALSE(webauthn::verify_assertion(data, flipped, good.signature, r.passkey.public_key_der, 0,
                                         kExpected)
                  .ok());
  auto bad_signature = good.signature;
  bad_signature[bad_signature.size() - 1] ^= 0x01;
  CHECK_FALSE(webauthn::verify_assertion(data, good.authenticator_data, bad_signature,
                                         r.passkey.public_key_der, 0, kExpected)
                  .ok());
  // The counter must grow: the same assertion against the counter it set is
  // refused (a replay, or a cloned authenticator).
  auto counter = webauthn::verify_assertion(data, good.authenticator_data, good.signature,
                                            r.passkey.public_key_der, 0, kExpected);
  REQUIRE(counter.ok());
  auto again = webauthn::verify_assertion(data, good.authenticator_data, good.signature,
                                          r.passkey.public_key_der, *counter, kExpected);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message.find("counter") != std::string::npos);
}
