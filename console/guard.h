// The console's rules for browsers, as pure functions of a request: which
// cookie it carries, whether a state-changing request comes from the
// console's own origin and carries the session's CSRF token, the cookies
// and headers every console answer gets, form bodies, and the escaping of
// text put into a page. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/text.h"
#include "http/message.h"

namespace opgate::console {

inline constexpr std::string_view kSessionCookie = "opgate_console";
// The sign-in form's own CSRF token, submitted twice: in this cookie and in
// the form (the form exists before any session does).
inline constexpr std::string_view kLoginCookie = "opgate_console_login";
inline constexpr std::string_view kCookiePath = "/console";

inline constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

// The value of the first cookie with this name in a Cookie header.
std::optional<std::string> cookie_value(std::string_view cookie_header, std::string_view name);
std::optional<std::string> cookie_value(const http::Request& request, std::string_view name);

// A Set-Cookie value: HttpOnly, SameSite=Strict, Path=/console, Max-Age,
// and Secure if asked. A Max-Age of 0 removes the cookie.
std::string set_cookie(std::string_view name, std::string_view value, int64_t max_age_s,
                       bool secure);

// Everything but GET, HEAD and OPTIONS may change state.
bool changes_state(std::string_view method);

// The origin the console is served from: the configured one, else the
// scheme (https under TLS) and the request's Host. Empty without a Host.
std::string expected_origin(const http::Request& request, std::string_view configured, bool tls);

// Whether a browser sent this request from the console's own pages: an
// Origin equal to `expected`, or, where the browser withholds the origin
// (absent, or "null" as Referrer-Policy: no-referrer makes it for a form),
// Sec-Fetch-Site: same-origin. Pages cannot set either header.
bool from_same_origin(const http::Request& request, std::string_view expected);

// Who sent the request: its peer ("unknown" if none), or, from one of the
// `trusted_proxies`, the last client in X-Forwarded-For that is not one of
// them (what the proxy appended). From any other peer the header is ignored.
std::string client_address(const http::Request& request,
                           const std::vector<std::string>& trusted_proxies);

// The host of an origin ("https://ops.example.com:8443" -> "ops.example.com"):
// the WebAuthn relying party id of the console.
std::string host_of_origin(std::string_view origin);

// Whether the presented CSRF token is the expected one (constant time);
// never for an empty one.
bool csrf_matches(std::optional<std::string_view> presented, std::string_view expected);

// The largest form body read.
inline constexpr size_t kMaxFormBytes = 16 * 1024;

// An application/x-www-form-urlencoded body; nothing if it is malformed or
// over kMaxFormBytes. A name given twice keeps its first value.
std::optional<std::map<std::string, std::string>> parse_form(std::string_view body);

// Where to go after signing in: the path asked for if it is a console page
// on this site ("/console/..." without "//", "\" or control characters),
// else the queue.
std::string safe_next(std::string_view path);

// &, <, >, " and ' as character references (common/text.h).
using opgate::html_escape;

// Adds the headers every console answer carries: the Content-Security-
// Policy, nosniff, no referrer, no framing, and Cache-Control: no-store
// unless the answer set its own.
void add_security_headers(http::Response& response);

}  // namespace opgate::console
