// libFuzzer target over the webhook request path: raw header fields and body
// → Standard Webhooks verification → envelope parse → route split. The input
// is "id\ntimestamp\nsignature\nbody"; a valid signature for the fuzzed body
// is also tried, so the envelope parser sees every body, not only forged ones.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/webhook_signature.h"
#include "http/router.h"
#include "ingress/envelope.h"

namespace {
std::string_view next_line(std::string_view& rest) {
  auto nl = rest.find('\n');
  auto line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  return line;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> keys = {
      *opgate::webhooks::decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")};
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  auto id = next_line(rest);
  auto ts = next_line(rest);
  auto sig = next_line(rest);
  auto body = rest;
  (void)opgate::webhooks::verify({id, ts, sig, body}, keys, 1614265330, 300);
  const std::string good = opgate::webhooks::sign(keys[0], id, 1614265330, body);
  if (opgate::webhooks::verify({id, "1614265330", good, body}, keys, 1614265330, 300).ok())
    (void)opgate::ingress::parse_envelope(body);
  std::vector<std::string> segments;
  (void)opgate::http::split_path(std::string(id), segments);
  (void)opgate::webhooks::decode_secret(sig);
  return 0;
}
