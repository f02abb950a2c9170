#include "common/crypto.h"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

using namespace opgate;

TEST_CASE("SHA-256 and HMAC-SHA256 give the published answers, on every thread, call after call") {
  auto check = [] {
    for (int i = 0; i < 3; ++i) {  // kept contexts are started afresh each call
      CHECK(crypto::sha256_hex("abc") ==
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
      CHECK(crypto::sha256_hex("") ==
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
      // RFC 4231, test case 2; then a key change on the same context.
      CHECK(crypto::to_hex(crypto::hmac_sha256("Jefe", "what do ya want for nothing?")) ==
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
      CHECK(crypto::to_hex(crypto::hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
      // An empty key is a key (RFC 2104: padded with zeros).
      CHECK(crypto::to_hex(crypto::hmac_sha256("", "")) ==
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
      // The same key twice running restarts the keyed context: each answer
      // covers only its own data, and parts MAC as their concatenation.
      for (int j = 0; j < 2; ++j) {
        CHECK(crypto::to_hex(crypto::hmac_sha256("Jefe", "what do ya want for nothing?")) ==
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        CHECK(
            crypto::to_hex(crypto::hmac_sha256("Jefe", {"what do ya ", "", "want for nothing?"})) ==
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
      }
      // A key that is a prefix of the one held is another key.
      CHECK(crypto::hmac_sha256("Jef", "what do ya want for nothing?") !=
            crypto::hmac_sha256("Jefe", "what do ya want for nothing?"));
    }
  };
  check();
  std::thread other(check);
  other.join();
}
