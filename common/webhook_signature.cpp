#include "common/webhook_signature.h"

#include <charconv>

#include "common/crypto.h"

namespace opgate::webhooks {

Result<std::string> decode_secret(std::string_view secret) {
  constexpr std::string_view prefix = "whsec_";
  if (secret.substr(0, prefix.size()) != prefix)
    return make_error(errc::bad_secret, "webhook secrets must start with whsec_");
  auto raw = crypto::base64_decode(secret.substr(prefix.size()));
  if (!raw || raw->empty())
    return make_error(errc::bad_secret, "webhook secret is not valid base64 after whsec_");
  return *raw;
}

namespace {
// The MAC of the signed content, "{id}.{timestamp}.{body}".
std::string mac(std::string_view raw_key, std::string_view id, std::string_view ts,
                std::string_view body) {
  return crypto::hmac_sha256(raw_key, {id, ".", ts, ".", body});
}
}  // namespace

std::string sign(std::string_view raw_key, std::string_view webhook_id, int64_t timestamp,
                 std::string_view body) {
  return "v1," + crypto::base64_encode(mac(raw_key, webhook_id, std::to_string(timestamp), body));
}

Status verify(const SignedMessage& m, const std::vector<std::string>& raw_keys, int64_t now_s,
              int64_t tolerance_s) {
  int64_t ts = 0;
  auto [ptr, ec] = std::from_chars(m.timestamp.data(), m.timestamp.data() + m.timestamp.size(), ts);
  if (ec != std::errc() || ptr != m.timestamp.data() + m.timestamp.size() || m.timestamp.empty())
    return make_error(errc::bad_timestamp, "webhook-timestamp must be decimal Unix seconds");
  if (ts < now_s - tolerance_s || ts > now_s + tolerance_s)
    return make_error(errc::timestamp_out_of_tolerance,
                      "webhook-timestamp is outside the tolerance");

  std::vector<std::string> expected;
  expected.reserve(raw_keys.size());
  for (const auto& key : raw_keys) expected.push_back(mac(key, m.webhook_id, m.timestamp, m.body));

  bool matched = false;
  std::string_view rest = m.signature;
  while (!rest.empty()) {
    auto space = rest.find(' ');
    auto token = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    // Fields of a repeated header arrive joined by ", " (RFC 9110); base64
    // has no comma, so one ending a token is that separator's.
    if (token.ends_with(',')) token.remove_suffix(1);
    if (token.substr(0, 3) != "v1,") continue;
    auto raw = crypto::base64_decode(token.substr(3));
    if (!raw) continue;
    // Check every key and signature: the work done does not depend on
    // which one matched.
    for (const auto& e : expected) matched |= crypto::equal_constant_time(*raw, e);
  }
  if (!matched) return make_error(errc::bad_signature, "no webhook signature matches");
  return Status::Ok();
}

}  // namespace opgate::webhooks
