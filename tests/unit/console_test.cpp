// The approval console's pure parts: the session store with a manual clock,
// cookies, CSRF and origin checks, forms.
#include <doctest/doctest.h>

#include "common/clock.h"
#include "console/guard.h"
#include "console/sessions.h"

using namespace opgate;
using console::SessionLimits;
using console::SessionStore;

namespace {

constexpr int64_t kStart = 1'800'000'000'000;

http::Request request(std::string method, std::string target, http::Headers headers = {},
                      std::string body = "") {
  http::Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.headers = std::move(headers);
  r.body = std::move(body);
  return r;
}

}  // namespace

TEST_CASE("sessions: random 256-bit ids, found only while live, idle and absolute lifetimes") {
  ManualClock clock(kStart);
  SessionStore store(clock, SessionLimits{1000, 5000, 100});
  auto a = store.create("alice", std::string(64, 'a'));
  auto b = store.create("alice", std::string(64, 'a'));
  CHECK(console::valid_session_id(a.id));
  CHECK(a.id != b.id);
  CHECK(a.session.csrf_token.size() == 64);
  CHECK(a.session.csrf_token != b.session.csrf_token);
  CHECK(a.session.csrf_token != a.id);
  REQUIRE(store.find(a.id));
  CHECK(store.find(a.id)->principal == "alice");

  // Idle: unseen for the idle lifetime ends it; being seen keeps it.
  clock.advance_ms(999);
  store.touch(a.id);
  CHECK(store.find(a.id));
  CHECK(store.find(b.id));  // found, not refreshed
  clock.advance_ms(1);
  CHECK_FALSE(store.find(b.id));  // b was last seen 1000 ms ago
  CHECK(store.find(a.id));
  // Absolute: even a session in use ends 5000 ms after sign-in.
  for (int i = 0; i < 4; ++i) {
    clock.advance_ms(900);
    REQUIRE(store.find(a.id));
    store.touch(a.id);
  }
  clock.advance_ms(399);  // 4999 ms after sign-in
  CHECK(store.find(a.id));
  clock.advance_ms(1);
  CHECK_FALSE(store.find(a.id));
  CHECK(store.size() == 0);
}

TEST_CASE("sessions: unknown, malformed and forged ids find nothing; sign-out ends one") {
  ManualClock clock(kStart);
  SessionStore store(clock, SessionLimits{});
  auto s = store.create("alice", std::string(64, 'a'));
  std::string upper = s.id;
  for (auto& c : upper) c = static_cast<char>(std::toupper(c));
  std::string flipped = s.id;
  flipped[10] = flipped[10] == '0' ? '1' : '0';
  for (const std::string& forged :
       {std::string(), std::string(64, '0'), s.id.substr(0, 63), s.id + "0", upper, flipped,
        s.id.substr(0, 63) + ";", s.session.csrf_token})
    CHECK_FALSE(store.find(forged));
  CHECK(store.find(s.id));
  CHECK(store.remove(s.id));
  CHECK_FALSE(store.remove(s.id));
  CHECK_FALSE(store.find(s.id));
}

TEST_CASE("sessions: the store is bounded; expired sessions go first, then the least recent") {
  ManualClock clock(kStart);
  SessionStore store(clock, SessionLimits{10'000, 100'000, 3});
  auto a = store.create("a", "h");
  clock.advance_ms(10);
  auto b = store.create("b", "h");
  clock.advance_ms(10);
  auto c = store.create("c", "h");
  clock.advance_ms(10);
  store.touch(a.id);  // a is now the most recently seen; b the least
  auto d = store.create("d", "h");
  CHECK(store.size() == 3);
  CHECK(store.find(a.id));
  CHECK_FALSE(store.find(b.id));
  CHECK(store.find(c.id));
  CHECK(store.find(d.id));
  // Once every one has idled out, a new one pushes out the expired, not a live one.
  clock.advance_ms(10'000);
  auto e = store.create("e", "h");
  CHECK(store.size() == 1);
  CHECK(store.find(e.id));
}

TEST_CASE("sessions: ids come from the random source given, 32 bytes each") {
  ManualClock clock(kStart);
  std::vector<size_t> asked;
  int n = 0;
  SessionStore store(clock, SessionLimits{}, [&](size_t bytes) {
    asked.push_back(bytes);
    return std::string(64, static_cast<char>('a' + n++));
  });
  auto s = store.create("alice", "h");
  CHECK(asked == std::vector<size_t>{32, 32});
  CHECK(s.id == std::string(64, 'a'));
  CHECK(s.session.csrf_token == std::string(64, 'b'));
}

TEST_CASE("cookies: the named value among several; flags on every cookie set") {
  using console::cookie_value;
  CHECK(cookie_value("opgate_console=abc", "opgate_console") == "abc");
  CHECK(cookie_value("a=1; opgate_console=abc;b=2", "opgate_console") == "abc");
  CHECK(cookie_value("  opgate_console = \"abc\" ", "opgate_console") == "abc");
  CHECK(cookie_value("xopgate_console=abc; opgate_console_login=x", "opgate_console") ==
        std::nullopt);
  CHECK(cookie_value("opgate_console=first; opgate_console=second", "opgate_console") == "first");
  CHECK(cookie_value("", "opgate_console") == std::nullopt);
  CHECK(cookie_value("opgate_console", "opgate_console") == std::nullopt);

  CHECK(console::set_cookie("opgate_console", "v", 60, false) ==
        "opgate_console=v; Path=/console; Max-Age=60; HttpOnly; SameSite=Strict");
  CHECK(console::set_cookie("opgate_console", "", 0, true) ==
        "opgate_console=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict; Secure");
}

TEST_CASE("origin: a state-changing request must come from the console's own origin") {
  using console::from_same_origin;
  const std::string origin = "http://127.0.0.1:8081";
  CHECK(console::expected_origin(request("POST", "/", {{"Host", "127.0.0.1:8081"}}), "", false) ==
        origin);
  CHECK(console::expected_origin(request("POST", "/", {{"Host", "ops.example"}}), "", true) ==
        "https://ops.example");
  CHECK(console::expected_origin(request("POST", "/", {{"Host", "127.0.0.1:8081"}}),
                                 "https://ops.example", false) == "https://ops.example");
  CHECK(console::expected_origin(request("POST", "/"), "", false).empty());

  CHECK(from_same_origin(request("POST", "/", {{"Origin", origin}}), origin));
  CHECK_FALSE(from_same_origin(request("POST", "/", {{"Origin", "http://evil.example"}}), origin));
  CHECK_FALSE(
      from_same_origin(request("POST", "/", {{"Origin", "http://127.0.0.1:8082"}}), origin));
  // A foreign Origin is refused whatever Sec-Fetch-Site says.
  CHECK_FALSE(from_same_origin(
      request("POST", "/", {{"Origin", "http://evil.example"}, {"Sec-Fetch-Site", "same-origin"}}),
      origin));
  // A form under Referrer-Policy: no-referrer sends Origin: null.
  CHECK(from_same_origin(
      request("POST", "/", {{"Origin", "null"}, {"Sec-Fetch-Site", "same-origin"}}), origin));
  CHECK(from_same_origin(request("POST", "/", {{"Sec-Fetch-Site", "same-origin"}}), origin));
  CHECK_FALSE(from_same_origin(
      request("POST", "/", {{"Origin", "null"}, {"Sec-Fetch-Site", "cross-site"}}), origin));
  CHECK_FALSE(from_same_origin(request("POST", "/", {{"Sec-Fetch-Site", "same-site"}}), origin));
  CHECK_FALSE(from_same_origin(request("POST", "/", {{"Origin", "null"}}), origin));
  CHECK_FALSE(from_same_origin(request("POST", "/"), origin));
  CHECK_FALSE(from_same_origin(request("POST", "/", {{"Origin", origin}}), ""));

  CHECK(console::changes_state("POST"));
  CHECK(console::changes_state("PUT"));
  CHECK(console::changes_state("DELETE"));
  CHECK(console::changes_state("PATCH"));
  CHECK_FALSE(console::changes_state("GET"));
  CHECK_FALSE(console::changes_state("HEAD"));
}

TEST_CASE("csrf: only the session's own token matches") {
  const std::string token(64, 'c');
  CHECK(console::csrf_matches(token, token));
  CHECK_FALSE(console::csrf_matches(std::nullopt, token));
  CHECK_FALSE(console::csrf_matches(std::string(), token));
  CHECK_FALSE(console::csrf_matches(std::string(), ""));
  CHECK_FALSE(console::csrf_matches(std::string(64, 'd'), token));
  CHECK_FALSE(console::csrf_matches(token.substr(1), token));
}

TEST_CASE("forms, redirects after sign-in and escaping") {
  auto form = console::parse_form("token=a+b%2Bc&next=%2Fconsole%2Fx&token=second&empty=");
  REQUIRE(form);
  CHECK(form->at("token") == "a b+c");
  CHECK(form->at("next") == "/console/x");
  CHECK(form->at("empty").empty());
  CHECK(console::parse_form("")->empty());
  CHECK_FALSE(console::parse_form("token=%zz"));

  CHECK(console::safe_next("/console/operations/a%3Ab") == "/console/operations/a%3Ab");
  CHECK(console::safe_next("/console/") == "/console/");
  for (const char* bad : {"", "https://evil.example/", "//evil.example/console/", "/console",
                          "/consolex/", "/console//evil.example", "/console/\\evil",
                          "/console/\r\nSet-Cookie: x", "/v1/operations"})
    CHECK(console::safe_next(bad) == "/console/");

  CHECK(console::html_escape(R"(<script>alert("x")</script> & 'y')") ==
        "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;");

  http::Response r;
  console::add_security_headers(r);
  CHECK(r.headers.at("Content-Security-Policy") == std::string(console::kContentSecurityPolicy));
  CHECK(r.headers.at("X-Content-Type-Options") == "nosniff");
  CHECK(r.headers.at("Referrer-Policy") == "no-referrer");
  CHECK(r.headers.at("Cache-Control") == "no-store");
  http::Response cached;
  cached.headers["Cache-Control"] = "no-cache";
  console::add_security_headers(cached);
  CHECK(cached.headers.at("Cache-Control") == "no-cache");
}
