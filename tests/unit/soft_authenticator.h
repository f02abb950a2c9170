// A passkey authenticator in software for tests: an ES256 key made with
// OpenSSL, its registration (a "none" attestation object, CBOR by libcbor)
// and assertions with a counter, as a browser returns them.
#pragma once

#include <cbor.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>

#include <boost/json.hpp>
#include <stdexcept>
#include <string>

#include "common/crypto.h"

namespace opgate::testing {

class SoftAuthenticator {
 public:
  explicit SoftAuthenticator(std::string rp_id) : rp_id_(std::move(rp_id)) {
    key_ = EVP_EC_gen("P-256");
    if (!key_) throw std::runtime_error("EVP_EC_gen failed");
    credential_id_ = crypto::random_bytes(16);
  }
  ~SoftAuthenticator() { EVP_PKEY_free(key_); }
  SoftAuthenticator(const SoftAuthenticator&) = delete;
  SoftAuthenticator& operator=(const SoftAuthenticator&) = delete;

  const std::string& credential_id() const { return credential_id_; }
  uint32_t counter = 0;  // the next assertion carries counter + 1

  static std::string client_data(std::string_view type, std::string_view challenge,
                                 std::string_view origin) {
    return boost::json::serialize(
        boost::json::object{{"type", type},
                            {"challenge", crypto::base64url_encode(challenge)},
                            {"origin", origin},
                            {"crossOrigin", false}});
  }

  // navigator.credentials.create(): the attestation object.
  std::string attestation_object(uint8_t flags = 0x45) const {
    std::string auth = rp_hash() + std::string(1, static_cast<char>(flags)) + be32(0) +
                       std::string(16, '\0') + be16(credential_id_.size()) + credential_id_ +
                       cose_key();
    cbor_item_t* map = cbor_new_definite_map(3);
    add(map, cbor_build_string("fmt"), cbor_build_string("none"));
    add(map, cbor_build_string("attStmt"), cbor_new_definite_map(0));
    add(map, cbor_build_string("authData"), bytes(auth));
    return serialize(map);
  }

  struct Assertion {
    std::string authenticator_data, signature;
  };
  // navigator.credentials.get(): signs the client data with the counter
  // moved on.
  Assertion assert_for(std::string_view client_data_json, uint8_t flags = 0x05) {
    ++counter;
    Assertion a;
    a.authenticator_data = rp_hash() + std::string(1, static_cast<char>(flags)) + be32(counter);
    const std::string signed_data = a.authenticator_data + crypto::sha256(client_data_json);
    EVP_MD_CTX* md = EVP_MD_CTX_new();
    size_t length = 0;
    EVP_DigestSignInit(md, nullptr, EVP_sha256(), nullptr, key_);
    EVP_DigestSign(md, nullptr, &length, reinterpret_cast<const unsigned char*>(signed_data.data()),
                   signed_data.size());
    a.signature.resize(length);
    EVP_DigestSign(md, reinterpret_cast<unsigned char*>(a.signature.data()), &length,
                   reinterpret_cast<const unsigned char*>(signed_data.data()), signed_data.size());
    a.signature.resize(length);
    EVP_MD_CTX_free(md);
    return a;
  }

 private:
  std::string rp_hash() const { return crypto::sha256(rp_id_); }
  static std::string be32(uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
  }
  static std::string be16(size_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
  static cbor_item_t* bytes(const std::string& b) {
    return cbor_build_bytestring(reinterpret_cast<cbor_data>(b.data()), b.size());
  }
  static void add(cbor_item_t* map, cbor_item_t* key, cbor_item_t* value) {
    cbor_map_add(map, cbor_pair{cbor_move(key), cbor_move(value)});
  }
  static std::string serialize(cbor_item_t* item) {
    unsigned char* buffer = nullptr;
    size_t size = 0;
    const size_t length = cbor_serialize_alloc(item, &buffer, &size);
    std::string out(reinterpret_cast<const char*>(buffer), length);
    free(buffer);
    cbor_decref(&item);
    return out;
  }
  std::string cose_key() const {
    unsigned char point[65];
    size_t length = 0;
    EVP_PKEY_get_octet_string_param(key_, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point, &length);
    const std::string x(reinterpret_cast<const char*>(point) + 1, 32);
    const std::string y(reinterpret_cast<const char*>(point) + 33, 32);
    cbor_item_t* map = cbor_new_definite_map(5);
    add(map, cbor_build_uint8(1), cbor_build_uint8(2));    // kty: EC2
    add(map, cbor_build_uint8(3), cbor_build_negint8(6));  // alg: -7 (ES256)
    add(map, cbor_build_negint8(0), cbor_build_uint8(1));  // crv: P-256
    add(map, cbor_build_negint8(1), bytes(x));             // -2: x
    add(map, cbor_build_negint8(2), bytes(y));             // -3: y
    return serialize(map);
  }

  std::string rp_id_;
  EVP_PKEY* key_ = nullptr;
  std::string credential_id_;
};

}  // namespace opgate::testing
