#include "common/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace opgate::crypto {

namespace {

// OpenSSL 3 looks an algorithm up by name, under a lock, on every one-shot
// call (SHA256(), HMAC()); the lookups cost as much as hashing a webhook's
// body. Each thread fetches once and keeps its contexts: a digest context
// is started afresh per call; a MAC context keeps its key while the next
// call has the same one (keying costs six allocations in OpenSSL 3.0, a
// restart one).
struct ThreadContexts {
  EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* digest = EVP_MD_CTX_new();
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* hmac = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  bool hmac_digest_set = false;
  std::string hmac_key;  // the key hmac holds (when hmac_keyed)
  bool hmac_keyed = false;
  ThreadContexts() {
    if (!md || !digest || !mac || !hmac) throw std::runtime_error("OpenSSL: no SHA-256 or HMAC");
  }
  ~ThreadContexts() {
    OPENSSL_cleanse(hmac_key.data(), hmac_key.size());
    EVP_MAC_CTX_free(hmac);
    EVP_MAC_free(mac);
    EVP_MD_CTX_free(digest);
    EVP_MD_free(md);
  }
  ThreadContexts(const ThreadContexts&) = delete;
  ThreadContexts& operator=(const ThreadContexts&) = delete;
};

ThreadContexts& contexts() {
  thread_local ThreadContexts c;
  return c;
}

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

std::string sha256(std::string_view data) {
  auto& c = contexts();
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestInit_ex2(c.digest, c.md, nullptr) != 1 ||
      EVP_DigestUpdate(c.digest, data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(c.digest, out, &len) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 failed");
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

std::string hmac_sha256(std::string_view key, std::string_view data) {
  return hmac_sha256(key, {data});
}

std::string hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  auto& c = contexts();
  // The digest is named once per thread; later inits only set the key.
  char digest_name[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest_name, 0),
                         OSSL_PARAM_construct_end()};
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t len = 0;
  int ok = 0;
  if (c.hmac_keyed && key == c.hmac_key) {
    ok = EVP_MAC_init(c.hmac, nullptr, 0, nullptr);  // the same key: restart
  } else {
    // A zero-length key is a valid HMAC key; OpenSSL wants a non-null pointer.
    static const unsigned char kNoKey = 0;
    const unsigned char* k = key.empty() ? &kNoKey : bytes(key);
    c.hmac_keyed = false;
    ok = EVP_MAC_init(c.hmac, k, key.size(), c.hmac_digest_set ? nullptr : params);
    if (ok == 1) {
      c.hmac_digest_set = true;
      OPENSSL_cleanse(c.hmac_key.data(), c.hmac_key.size());
      c.hmac_key.assign(key);
      c.hmac_keyed = true;
    }
  }
  for (auto part : parts)
    if (ok == 1) ok = EVP_MAC_update(c.hmac, bytes(part), part.size());
  if (ok != 1 || EVP_MAC_final(c.hmac, out, &len, sizeof out) != 1) {
    c.hmac_keyed = false;
    throw std::runtime_error("OpenSSL: HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string to_hex(std::string_view raw) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 0xf]);
  }
  return out;
}

std::string base64_encode(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(raw.data()),
                          static_cast<int>(raw.size()));
  out.resize(n);
  return out;
}

namespace {
int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      char c = text[i + j];
      if (c == '=') {
        // Padding only in the last group, only in the last two places.
        if (i + 4 != text.size() || j < 2) return std::nullopt;
        v[j] = 0;
        ++pad;
      } else {
        if (pad > 0) return std::nullopt;
        v[j] = b64_value(c);
        if (v[j] < 0) return std::nullopt;
      }
    }
    uint32_t triple = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out.push_back(static_cast<char>((triple >> 16) & 0xff));
    if (pad < 2) out.push_back(static_cast<char>((triple >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(triple & 0xff));
  }
  return out;
}

bool equal_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_bytes(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1)
    throw std::runtime_error("RAND_bytes failed");
  return raw;
}

std::string random_hex(size_t bytes) { return to_hex(random_bytes(bytes)); }

std::string base64url_encode(std::string_view raw) {
  std::string out = base64_encode(raw);
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!out.empty() && out.back() == '=') out.pop_back();
  return out;
}

std::optional<std::string> base64url_decode(std::string_view text) {
  std::string standard(text);
  for (char& c : standard) {
    if (c == '+' || c == '/' || c == '=') return std::nullopt;
    c = c == '-' ? '+' : c == '_' ? '/' : c;
  }
  if (standard.size() % 4 == 1) return std::nullopt;
  while (standard.size() % 4) standard.push_back('=');
  return base64_decode(standard);
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

}  // namespace opgate::crypto
