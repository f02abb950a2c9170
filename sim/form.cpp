#include "sim/form.h"

#include <charconv>

#include "common/crypto.h"
#include "sim/sim_errors.h"

namespace opgate::sim {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decoding with '+' as space; nullopt on a broken escape. Brackets
// and other characters outside RFC 3986 are taken as they are, because
// clients send "metadata[key]" unescaped and Stripe accepts it.
std::optional<std::string> form_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int hi = hex_value(text[i + 1]);
      int lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

Result<FormParams> parse_form(std::string_view body) {
  FormParams out;
  while (!body.empty()) {
    auto amp = body.find('&');
    std::string_view pair = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view() : body.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    auto key = form_decode(pair.substr(0, eq));
    auto value =
        form_decode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (!key || !value)
      return make_error(sim_errc::malformed_form, "The request body is not valid form encoding.");
    if (key->empty()) continue;
    out[std::move(*key)] = std::move(*value);
  }
  return out;
}

std::optional<int64_t> parse_int(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t digits_at = text.front() == '-' ? 1 : 0;
  if (digits_at == text.size()) return std::nullopt;
  for (size_t i = digits_at; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string request_fingerprint(std::string_view method, std::string_view path,
                                const FormParams& params) {
  // Length-prefixed fields, so no choice of values can make two different
  // requests collide; std::map already orders the names.
  std::string text;
  auto add = [&text](std::string_view s) {
    text += std::to_string(s.size());
    text += ':';
    text += s;
  };
  add(method);
  add(path);
  for (const auto& [k, v] : params) {
    add(k);
    add(v);
  }
  return crypto::sha256_hex(text);
}

}  // namespace opgate::sim
