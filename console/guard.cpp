#include "console/guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/url/parse_query.hpp>

#include "common/crypto.h"

namespace opgate::console {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<std::string> cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view pair = trim(header.substr(0, semi));
    header = semi == std::string_view::npos ? std::string_view{} : header.substr(semi + 1);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) continue;
    if (trim(pair.substr(0, eq)) != name) continue;
    std::string_view value = trim(pair.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    return std::string(value);
  }
  return std::nullopt;
}

std::string client_address(const http::Request& request,
                           const std::vector<std::string>& trusted_proxies) {
  const std::string& peer = request.remote_address;
  auto trusted = [&](std::string_view a) {
    return std::find(trusted_proxies.begin(), trusted_proxies.end(), a) != trusted_proxies.end();
  };
  if (!peer.empty() && trusted(peer)) {
    // Right to left: the last entry a trusted proxy did not add.
    std::string_view chain = request.header("X-Forwarded-For").value_or("");
    while (!chain.empty()) {
      const size_t comma = chain.rfind(',');
      const std::string_view hop =
          trim(comma == std::string_view::npos ? chain : chain.substr(comma + 1));
      chain = comma == std::string_view::npos ? std::string_view() : chain.substr(0, comma);
      if (!hop.empty() && !trusted(hop)) return std::string(hop.substr(0, 64));
    }
  }
  return peer.empty() ? std::string("unknown") : peer;
}

std::optional<std::string> cookie_value(const http::Request& request, std::string_view name) {
  auto header = request.header("Cookie");
  if (!header) return std::nullopt;
  return cookie_value(*header, name);
}

std::string set_cookie(std::string_view name, std::string_view value, int64_t max_age_s,
                       bool secure) {
  return fmt::format("{}={}; Path={}; Max-Age={}; HttpOnly; SameSite=Strict{}", name, value,
                     kCookiePath, max_age_s, secure ? "; Secure" : "");
}

bool changes_state(std::string_view method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

std::string expected_origin(const http::Request& request, std::string_view configured, bool tls) {
  if (!configured.empty()) return std::string(configured);
  auto host = request.header("Host");
  if (!host || host->empty()) return "";
  return fmt::format("{}://{}", tls ? "https" : "http", *host);
}

bool from_same_origin(const http::Request& request, std::string_view expected) {
  if (expected.empty()) return false;
  auto origin = request.header("Origin");
  if (origin && *origin != "null") return *origin == expected;
  return request.header("Sec-Fetch-Site") == std::optional<std::string>("same-origin");
}

std::string host_of_origin(std::string_view origin) {
  const auto scheme = origin.find("://");
  std::string_view host = scheme == std::string_view::npos ? origin : origin.substr(scheme + 3);
  if (host.starts_with("[")) return std::string(host.substr(0, host.find(']') + 1));
  return std::string(host.substr(0, host.find(':')));
}

bool csrf_matches(std::optional<std::string_view> presented, std::string_view expected) {
  if (!presented || presented->empty() || expected.empty()) return false;
  return crypto::equal_constant_time(*presented, expected);
}

std::optional<std::map<std::string, std::string>> parse_form(std::string_view body) {
  std::map<std::string, std::string> out;
  if (body.empty()) return out;
  // The console's forms (sign-in, sign-out) are a few hundred bytes; a
  // larger body is not one of them, and is not read before anyone signed in.
  if (body.size() > kMaxFormBytes) return std::nullopt;
  // A form encodes a space as '+' (and a '+' as %2B): written anew in one
  // pass (replacing in place moved the rest of the body for each '+').
  std::string text;
  text.reserve(body.size());
  for (char c : body) {
    if (c == '+')
      text += "%20";
    else
      text += c;
  }
  auto parsed = boost::urls::parse_query(text);
  if (!parsed) return std::nullopt;
  auto decoded = [](boost::urls::pct_string_view s) {
    std::string out;
    for (char c : s.decode()) out.push_back(c);
    return out;
  };
  for (auto param : *parsed) out.emplace(decoded(param.key), decoded(param.value));
  return out;
}

std::string safe_next(std::string_view path) {
  constexpr std::string_view fallback = "/console/";
  if (path.substr(0, fallback.size()) != fallback) return std::string(fallback);
  if (path.find("//") != std::string_view::npos || path.find('\\') != std::string_view::npos)
    return std::string(fallback);
  for (char c : path)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return std::string(fallback);
  return std::string(path);
}

void add_security_headers(http::Response& response) {
  response.headers["Content-Security-Policy"] = std::string(kContentSecurityPolicy);
  response.headers["X-Content-Type-Options"] = "nosniff";
  response.headers["Referrer-Policy"] = "no-referrer";
  response.headers["X-Frame-Options"] = "DENY";
  if (!response.headers.count("Cache-Control")) response.headers["Cache-Control"] = "no-store";
}

}  // namespace opgate::console
