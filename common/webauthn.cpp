#include "common/webauthn.h"

#include <cbor.h>
#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/x509.h>

#include <boost/json.hpp>
#include <memory>

#include "common/crypto.h"
#include "common/json_fields.h"

namespace opgate::webauthn {

namespace {

namespace json = boost::json;

Error refused(std::string message) { return make_error(errc::step_up_failed, std::move(message)); }

struct CborFree {
  void operator()(cbor_item_t* item) const { cbor_decref(&item); }
};
using Cbor = std::unique_ptr<cbor_item_t, CborFree>;

// The whole of `data` as one CBOR item (trailing bytes allowed only where
// the caller says so: `read` tells how many were used).
Cbor load(std::string_view data, size_t* read = nullptr) {
  cbor_load_result result;
  cbor_item_t* item = cbor_load(reinterpret_cast<cbor_data>(data.data()), data.size(), &result);
  if (!item || result.error.code != CBOR_ERR_NONE) {
    if (item) cbor_decref(&item);
    return nullptr;
  }
  if (read)
    *read = result.read;
  else if (result.read != data.size()) {
    cbor_decref(&item);
    return nullptr;
  }
  return Cbor(item);
}

std::optional<std::string> bytes_of(const cbor_item_t* item) {
  if (!item || !cbor_isa_bytestring(item) || !cbor_bytestring_is_definite(item))
    return std::nullopt;
  return std::string(reinterpret_cast<const char*>(cbor_bytestring_handle(item)),
                     cbor_bytestring_length(item));
}

std::optional<std::string> text_of(const cbor_item_t* item) {
  if (!item || !cbor_isa_string(item) || !cbor_string_is_definite(item)) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(cbor_string_handle(item)),
                     cbor_string_length(item));
}

std::optional<int64_t> int_of(const cbor_item_t* item) {
  if (!item) return std::nullopt;
  if (cbor_isa_uint(item)) return static_cast<int64_t>(cbor_get_int(item));
  if (cbor_isa_negint(item)) return -1 - static_cast<int64_t>(cbor_get_int(item));
  return std::nullopt;
}

// The value under a text key ("fmt") or an integer key (COSE's 1, -2).
const cbor_item_t* lookup(const cbor_item_t* map, std::string_view text_key) {
  if (!cbor_isa_map(map) || !cbor_map_is_definite(map)) return nullptr;
  const cbor_pair* pairs = cbor_map_handle(map);
  for (size_t i = 0; i < cbor_map_size(map); ++i)
    if (text_of(pairs[i].key) == text_key) return pairs[i].value;
  return nullptr;
}
const cbor_item_t* lookup(const cbor_item_t* map, int64_t int_key) {
  if (!cbor_isa_map(map) || !cbor_map_is_definite(map)) return nullptr;
  const cbor_pair* pairs = cbor_map_handle(map);
  for (size_t i = 0; i < cbor_map_size(map); ++i)
    if (int_of(pairs[i].key) == int_key) return pairs[i].value;
  return nullptr;
}

// clientDataJSON: the ceremony's type, the challenge and the origin.
Status check_client_data(std::string_view client_data_json, std::string_view type,
                         const Expected& expected) {
  json::error_code ec;
  json::value v = json::parse(client_data_json, ec);
  if (ec || !v.is_object()) return refused("clientDataJSON is not a JSON object.");
  const auto& o = v.as_object();
  auto field = [&](std::string_view name) { return string_field(o, name); };
  if (field("type") != type) return refused(fmt::format("clientDataJSON.type is not {}.", type));
  auto challenge = crypto::base64url_decode(field("challenge"));
  if (!challenge || !crypto::equal_constant_time(*challenge, expected.challenge))
    return refused("The passkey signed another challenge than the one issued.");
  if (field("origin") != expected.origin)
    return refused(
        fmt::format("The passkey was used from another origin than {}.", expected.origin));
  if (const auto* cross = o.if_contains("crossOrigin");
      cross && cross->is_bool() && cross->as_bool())
    return refused("The passkey was used from a cross-origin frame.");
  return Status::Ok();
}

struct AuthData {
  uint8_t flags = 0;
  uint32_t sign_count = 0;
  std::string_view rest;  // attested credential data and extensions
};

constexpr uint8_t kUserPresent = 0x01;
constexpr uint8_t kUserVerified = 0x04;
constexpr uint8_t kAttestedCredential = 0x40;

Result<AuthData> parse_auth_data(std::string_view data, const Expected& expected) {
  if (data.size() < 37) return refused("The authenticator data is too short.");
  if (!crypto::equal_constant_time(data.substr(0, 32), crypto::sha256(expected.rp_id)))
    return refused(fmt::format("The passkey belongs to another site than {}.", expected.rp_id));
  AuthData out;
  out.flags = static_cast<uint8_t>(data[32]);
  for (int i = 0; i < 4; ++i)
    out.sign_count = (out.sign_count << 8) | static_cast<uint8_t>(data[33 + i]);
  out.rest = data.substr(37);
  if (!(out.flags & kUserPresent)) return refused("The authenticator did not see a person.");
  if (expected.user_verification && !(out.flags & kUserVerified))
    return refused("The authenticator did not verify the person (PIN or biometrics).");
  return out;
}

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

// A COSE EC2 key (ES256, P-256) as SubjectPublicKeyInfo DER.
Result<std::string> es256_der(const cbor_item_t* cose) {
  if (int_of(lookup(cose, 1)) != 2 || int_of(lookup(cose, 3)) != -7 ||
      int_of(lookup(cose, -1)) != 1)
    return refused("Only ES256 passkeys (ECDSA on P-256) are accepted.");
  auto x = bytes_of(lookup(cose, -2));
  auto y = bytes_of(lookup(cose, -3));
  if (!x || !y || x->size() != 32 || y->size() != 32)
    return refused("The passkey's public key is malformed.");
  const std::string point = "\x04" + *x + *y;
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0);
  OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size());
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(bld);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr);
  EVP_PKEY* raw = nullptr;
  const bool made = ctx && params && EVP_PKEY_fromdata_init(ctx) == 1 &&
                    EVP_PKEY_fromdata(ctx, &raw, EVP_PKEY_PUBLIC_KEY, params) == 1;
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  std::unique_ptr<EVP_PKEY, PkeyFree> key(raw);
  if (!made) return refused("The passkey's public key is not a point on P-256.");
  unsigned char* der = nullptr;
  const int n = i2d_PUBKEY(key.get(), &der);
  if (n <= 0) return refused("The passkey's public key cannot be encoded.");
  std::string out(reinterpret_cast<const char*>(der), n);
  OPENSSL_free(der);
  return out;
}

}  // namespace

Result<Registered> verify_registration(std::string_view client_data_json,
                                       std::string_view attestation_object,
                                       const Expected& expected) {
  OPGATE_TRY(check_client_data(client_data_json, "webauthn.create", expected));
  Cbor attestation = load(attestation_object);
  if (!attestation || !cbor_isa_map(attestation.get()))
    return refused("The attestation object is not a CBOR map.");
  if (!text_of(lookup(attestation.get(), "fmt")))
    return refused("The attestation object names no format.");
  auto auth_bytes = bytes_of(lookup(attestation.get(), "authData"));
  if (!auth_bytes) return refused("The attestation object holds no authenticator data.");
  OPGATE_ASSIGN_OR_RETURN(auto auth, parse_auth_data(*auth_bytes, expected));
  if (!(auth.flags & kAttestedCredential) || auth.rest.size() < 18)
    return refused("The authenticator data holds no credential.");
  const std::string_view rest = auth.rest;
  const size_t id_length = (static_cast<uint8_t>(rest[16]) << 8) | static_cast<uint8_t>(rest[17]);
  if (id_length == 0 || id_length > 1023 || rest.size() < 18 + id_length)
    return refused("The credential id is malformed.");
  Registered out;
  out.credential_id = std::string(rest.substr(18, id_length));
  size_t read = 0;
  Cbor cose = load(rest.substr(18 + id_length), &read);
  if (!cose) return refused("The credential's public key is not CBOR.");
  OPGATE_ASSIGN_OR_RETURN(out.public_key_der, es256_der(cose.get()));
  out.sign_count = auth.sign_count;
  return out;
}

Result<uint32_t> verify_assertion(std::string_view client_data_json,
                                  std::string_view authenticator_data,
                                  std::string_view signature_der, std::string_view public_key_der,
                                  uint32_t stored_sign_count, const Expected& expected) {
  OPGATE_TRY(check_client_data(client_data_json, "webauthn.get", expected));
  OPGATE_ASSIGN_OR_RETURN(auto auth, parse_auth_data(authenticator_data, expected));
  const auto* der = reinterpret_cast<const unsigned char*>(public_key_der.data());
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      d2i_PUBKEY(nullptr, &der, static_cast<long>(public_key_der.size())));
  if (!key) return refused("The registered public key cannot be read.");
  const std::string signed_data =
      std::string(authenticator_data) + crypto::sha256(client_data_json);
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  const bool valid =
      md && EVP_DigestVerifyInit(md, nullptr, EVP_sha256(), nullptr, key.get()) == 1 &&
      EVP_DigestVerify(
          md, reinterpret_cast<const unsigned char*>(signature_der.data()), signature_der.size(),
          reinterpret_cast<const unsigned char*>(signed_data.data()), signed_data.size()) == 1;
  EVP_MD_CTX_free(md);
  if (!valid) return refused("The passkey's signature does not verify.");
  if ((auth.sign_count != 0 || stored_sign_count != 0) && auth.sign_count <= stored_sign_count)
    return refused(
        "The passkey's signature counter did not increase: the authenticator may have been "
        "cloned. Remove this passkey and register it again.");
  return auth.sign_count;
}

}  // namespace opgate::webauthn
