// The approval console's pure parts (the session store with a manual clock,
// cookies, CSRF and origin checks, forms), then the console and the operator
// API wired together as `opgate serve` wires them, over a real store, with
// requests dispatched straight to the router.
#include "console/console.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "api_stage.h"
#include "console/guard.h"
#include "console/sessions.h"

using namespace opgate;
namespace json = boost::json;
using console::SessionLimits;
using console::SessionStore;
using testing::request;

namespace {

constexpr int64_t kStart = 1'800'000'000'000;

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

TEST_CASE("sessions: one principal signing in again and again ends only its own") {
  ManualClock clock(kStart);
  SessionLimits limits{10'000, 100'000, 4};
  limits.max_per_principal = 2;
  SessionStore store(clock, limits);
  auto alice = store.create("alice", "h1");
  clock.advance_ms(10);
  auto carol = store.create("carol", "h3");
  std::vector<std::string> bobs;
  for (int i = 0; i < 50; ++i) {
    clock.advance_ms(10);
    bobs.push_back(store.create("bob", "h2").id);
  }
  // alice and carol were seen least recently, and are still signed in.
  CHECK(store.find(alice.id));
  CHECK(store.find(carol.id));
  CHECK(store.size() == 4);
  CHECK(store.find(bobs[49]));
  CHECK(store.find(bobs[48]));
  CHECK_FALSE(store.find(bobs[47]));
  // A store smaller than one principal's share: still its own go first.
  SessionStore small(clock, SessionLimits{10'000, 100'000, 3});
  auto dana = small.create("dana", "h4");
  for (int i = 0; i < 10; ++i) {
    clock.advance_ms(10);
    small.create("eve", "h5");
  }
  CHECK(small.find(dana.id));
  CHECK(small.size() == 3);
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
  // Up to the bound, however many '+' it holds, it is read; past it, not.
  const std::string spaces = "next=" + std::string(console::kMaxFormBytes - 5, '+');
  auto many = console::parse_form(spaces);
  REQUIRE(many);
  CHECK(many->at("next") == std::string(console::kMaxFormBytes - 5, ' '));
  CHECK_FALSE(console::parse_form(spaces + "+"));

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

namespace {

constexpr const char* kHost = "127.0.0.1:8081";
constexpr const char* kOrigin = "http://127.0.0.1:8081";
using testing::kRefund;

// The operator API and the console wired as the daemon wires them.
struct Stage : testing::ApiStage {
  console::Options options;
  std::unique_ptr<console::Console> console;

  explicit Stage(SessionLimits limits = {}, std::vector<std::string> trusted_proxies = {}) {
    options.sessions = limits;
    options.trusted_proxies = std::move(trusted_proxies);
    console = std::make_unique<console::Console>(options, people, clock);
    open_api([this](const http::Request& r, const operator_api::Principals& p) {
      return console->authenticate(r, p);
    });
    console->add_routes(router);
  }

  http::Response send(http::Request r) {
    r.headers.add("Host", kHost);
    auto res = router.dispatch(r);
    console::Console::finish(r, res);
    return res;
  }

  // A sign-in through the form from the peer `address` (with `extra`
  // headers), the sign-in page's token in its cookie and in the form.
  http::Response sign_in_from(const std::string& address, const std::string& token,
                              http::Headers extra = {}) {
    auto page = send(request("GET", "/console/"));
    auto login = console::cookie_value(page.headers.at("Set-Cookie"), console::kLoginCookie);
    REQUIRE(login);
    http::Headers h{{"Cookie", "opgate_console_login=" + *login},
                    {"Origin", kOrigin},
                    {"Content-Type", "application/x-www-form-urlencoded"}};
    for (auto& [k, v] : extra) h[k] = v;
    auto r = request("POST", "/console/login", std::move(h),
                     "token=" + token + "&csrf=" + *login + "&next=%2Fconsole%2F");
    r.remote_address = address;
    return send(std::move(r));
  }

  // Signs in through the form as a browser does: the sign-in page's token
  // in its cookie and in the form. The session cookie's value.
  std::string sign_in(const std::string& token) {
    auto page = send(request("GET", "/console/"));
    auto login = console::cookie_value(page.headers.at("Set-Cookie"), console::kLoginCookie);
    REQUIRE(login);
    auto res = send(request("POST", "/console/login",
                            {{"Cookie", "opgate_console_login=" + *login},
                             {"Origin", "null"},
                             {"Sec-Fetch-Site", "same-origin"},
                             {"Content-Type", "application/x-www-form-urlencoded"}},
                            "token=" + token + "&csrf=" + *login + "&next=%2Fconsole%2F"));
    REQUIRE_MESSAGE(res.status == 303, res.body);
    auto id = console::cookie_value(res.headers.at("Set-Cookie"), console::kSessionCookie);
    REQUIRE(id);
    return *id;
  }

  std::string csrf_of(const std::string& id) {
    auto s = console->sessions().find(id);
    REQUIRE(s);
    return s->csrf_token;
  }

  http::Response api(const std::string& method, const std::string& path, const std::string& id,
                     http::Headers extra = {}, std::string body = "") {
    extra.emplace("Cookie", "opgate_console=" + id);
    return send(request(method, "/console/api" + path, std::move(extra), std::move(body)));
  }
};

}  // namespace

TEST_CASE("console sign-in: a bad token is refused; a good one gets a flagged session cookie") {
  Stage s;
  auto page = s.send(request("GET", "/console/"));
  CHECK(page.status == 200);
  CHECK(page.body.find("data-test=\"login-token\"") != std::string::npos);
  auto login = console::cookie_value(page.headers.at("Set-Cookie"), console::kLoginCookie);
  REQUIRE(login);
  CHECK(page.body.find(*login) != std::string::npos);
  const http::Headers browser{{"Cookie", "opgate_console_login=" + *login},
                              {"Origin", kOrigin},
                              {"Content-Type", "application/x-www-form-urlencoded"}};

  auto bad =
      s.send(request("POST", "/console/login", browser,
                     "token=tok-mallory-only-for-tests&csrf=" + *login + "&next=%2Fconsole%2F"));
  CHECK(bad.status == 401);
  CHECK(bad.body.find("That token is not valid.") != std::string::npos);
  CHECK(bad.headers.at("Set-Cookie").find("opgate_console=") == std::string::npos);
  CHECK(bad.cooldown.count() > 0);
  CHECK(s.console->sessions().size() == 0);

  // The form's token must be the one in the sign-in cookie, from this origin.
  auto forged = s.send(request("POST", "/console/login", browser,
                               "token=tok-alice-only-for-tests&csrf=" + std::string(64, '0')));
  CHECK(forged.status == 403);
  auto no_cookie = s.send(request("POST", "/console/login", {{"Origin", kOrigin}},
                                  "token=tok-alice-only-for-tests&csrf=" + *login));
  CHECK(no_cookie.status == 403);
  auto foreign = s.send(
      request("POST", "/console/login",
              {{"Cookie", "opgate_console_login=" + *login}, {"Origin", "http://evil.example"}},
              "token=tok-alice-only-for-tests&csrf=" + *login));
  CHECK(foreign.status == 403);
  CHECK(s.console->sessions().size() == 0);

  auto good = s.send(request("POST", "/console/login", browser,
                             "token=tok-alice-only-for-tests&csrf=" + *login +
                                 "&next=%2Fconsole%2Foperations%2Fdemo-user%253AORDER-100"));
  CHECK(good.status == 303);
  CHECK(good.headers.at("Location") == "/console/operations/demo-user%3AORDER-100");
  const auto cookie = good.headers.at("Set-Cookie");
  CHECK(cookie.find("opgate_console=") == 0);
  CHECK(cookie.find("; HttpOnly") != std::string::npos);
  CHECK(cookie.find("; SameSite=Strict") != std::string::npos);
  CHECK(cookie.find("; Path=/console") != std::string::npos);
  CHECK(cookie.find("Secure") == std::string::npos);  // plain HTTP here
  CHECK(s.console->sessions().size() == 1);

  // An open redirect is not on offer.
  auto elsewhere = s.send(
      request("POST", "/console/login", browser,
              "token=tok-alice-only-for-tests&csrf=" + *login + "&next=https://evil.example/"));
  CHECK(elsewhere.headers.at("Location") == "/console/");
}

TEST_CASE("console sign-in: failures are limited per address, logged, and short tokens refused") {
  Stage s;
  auto attempt = [&](const std::string& address, const std::string& token) {
    return s.sign_in_from(address, token);
  };
  // Many connections from one address: ten guesses, then 429 for everyone
  // there (the good token too) until the oldest guess leaves the window.
  for (int i = 0; i < 10; ++i)
    CHECK(attempt("203.0.113.9", "guess-" + std::to_string(i) + "-0123456789abcdef").status == 401);
  auto limited = attempt("203.0.113.9", "tok-alice-only-for-tests");
  CHECK(limited.status == 429);
  REQUIRE(limited.headers.count("Retry-After"));
  CHECK(std::stoi(limited.headers.at("Retry-After")) == 60);
  CHECK(s.console->sessions().size() == 0);
  // Another address is not held up.
  CHECK(attempt("198.51.100.7", "tok-alice-only-for-tests").status == 303);
  s.clock.advance_ms(60'000);
  CHECK(attempt("203.0.113.9", "tok-alice-only-for-tests").status == 303);
  // A token too short to be a secret is refused, and says so.
  auto short_token = attempt("198.51.100.8", "tok-alice");
  CHECK(short_token.status == 401);
  CHECK(short_token.body.find("shorter than 20 characters") != std::string::npos);
}

TEST_CASE("console sign-in behind a trusted proxy: failures are limited per client it names") {
  Stage s({}, {"10.0.0.2"});
  auto attempt = [&](const std::string& peer, const std::string& forwarded,
                     const std::string& token) {
    return s.sign_in_from(peer, token, {{"X-Forwarded-For", forwarded}});
  };
  // One client's guesses through the proxy: it alone is held up.
  for (int i = 0; i < 10; ++i)
    CHECK(attempt("10.0.0.2", "203.0.113.9", "guess-" + std::to_string(i) + "-0123456789abcd")
              .status == 401);
  CHECK(attempt("10.0.0.2", "203.0.113.9", "tok-alice-only-for-tests").status == 429);
  // The proxy appends the client it saw: what came before it is the
  // client's own claim and does not count.
  CHECK(attempt("10.0.0.2", "198.51.100.1, 203.0.113.9", "tok-alice-only-for-tests").status == 429);
  CHECK(attempt("10.0.0.2", "198.51.100.7", "tok-alice-only-for-tests").status == 303);
  // From a peer that is no trusted proxy the header is ignored: the peer
  // is the client, however many addresses it names.
  for (int i = 0; i < 10; ++i)
    CHECK(attempt("192.0.2.5", "198.51.100." + std::to_string(i),
                  "guess-" + std::to_string(i) + "-0123456789abcd")
              .status == 401);
  CHECK(attempt("192.0.2.5", "198.51.100.99", "tok-alice-only-for-tests").status == 429);
}

TEST_CASE("console pages and files carry the security headers; pages need a session") {
  Stage s;
  const auto id = s.sign_in("tok-alice-only-for-tests");
  auto queue = s.send(request("GET", "/console/", {{"Cookie", "opgate_console=" + id}}));
  CHECK(queue.status == 200);
  CHECK(queue.body.find("data-page=\"queue\"") != std::string::npos);
  CHECK(queue.body.find(s.csrf_of(id)) != std::string::npos);
  CHECK(queue.headers.at("Content-Type") == "text/html; charset=utf-8");
  CHECK(queue.headers.at("Cache-Control") == "no-store");
  for (const char* path : {"/console/", "/console/assets/console.js", "/console/assets/nope",
                           "/console/operations/x", "/%63onsole/", "/console/api/v1/me"}) {
    auto r = s.send(request("GET", path, {{"Cookie", "opgate_console=" + id}}));
    CAPTURE(path);
    CHECK(r.headers.at("Content-Security-Policy") == std::string(console::kContentSecurityPolicy));
    CHECK(r.headers.at("X-Content-Type-Options") == "nosniff");
    CHECK(r.headers.at("Referrer-Policy") == "no-referrer");
  }
  auto js = s.send(request("GET", "/console/assets/console.js"));
  CHECK(js.status == 200);
  CHECK(js.headers.at("Content-Type") == "text/javascript; charset=utf-8");
  // Page templates are served only as pages.
  CHECK(s.send(request("GET", "/console/assets/queue.html")).status == 404);
  // The operator API outside /console keeps its own headers.
  auto api =
      s.send(request("GET", "/v1/me", {{"Authorization", "Bearer tok-alice-only-for-tests"}}));
  CHECK(api.status == 200);
  CHECK(api.headers.count("Content-Security-Policy") == 0);
  // Without a session, every page is the sign-in form.
  auto anonymous = s.send(request("GET", "/console/operations/x"));
  CHECK(anonymous.body.find("data-test=\"login-token\"") != std::string::npos);
  CHECK(anonymous.body.find("value=\"/console/operations/x\"") != std::string::npos);
}

TEST_CASE("console API: the cookie authenticates under /console/api only; changes need CSRF") {
  Stage s;
  const auto id = s.sign_in("tok-alice-only-for-tests");
  const auto csrf = s.csrf_of(id);
  auto me = s.api("GET", "/v1/me", id);
  REQUIRE(me.status == 200);
  CHECK(s.body_of(me).at("principal").as_string() == "alice");
  // The plain API takes bearer tokens only.
  CHECK(s.send(request("GET", "/v1/me", {{"Cookie", "opgate_console=" + id}})).status == 401);
  CHECK(s.api("GET", "/v1/me", std::string(64, '0')).status == 401);

  const std::string deny = "/v1/operations/" + std::string(kRefund) + "/deny";
  const std::string reason = R"({"reason":"not eligible"})";
  // No CSRF token, a wrong one, a foreign origin, no origin at all: 403, nothing changes.
  for (const auto& headers :
       std::vector<http::Headers>{{{"Origin", kOrigin}},
                                  {{"Origin", kOrigin}, {"X-CSRF-Token", std::string(64, '0')}},
                                  {{"Origin", "http://evil.example"}, {"X-CSRF-Token", csrf}},
                                  {{"Sec-Fetch-Site", "cross-site"}, {"X-CSRF-Token", csrf}},
                                  {{"X-CSRF-Token", csrf}}}) {
    auto r = s.api("POST", deny, id, headers, reason);
    CHECK(r.status == 403);
    CHECK(s.state(kRefund) == "pending");
  }
  // With both, the decision is made as the session's principal.
  auto r = s.api("POST", deny, id, {{"Origin", kOrigin}, {"X-CSRF-Token", csrf}}, reason);
  CHECK(r.status == 200);
  CHECK(s.state(kRefund) == "settled");
  CHECK(s.operation(kRefund).decided_by() == "alice");
  // A bearer token needs no CSRF token, under /console/api too.
  auto bearer = s.send(
      request("GET", "/console/api/v1/me", {{"Authorization", "Bearer tok-bob-only-for-tests"}}));
  CHECK(s.body_of(bearer).at("principal").as_string() == "bob");
}

TEST_CASE("console sessions end when idle, at their absolute lifetime, and at sign-out") {
  Stage s(SessionLimits{60'000, 180'000, 100});
  auto idle = s.sign_in("tok-alice-only-for-tests");
  auto busy = s.sign_in("tok-bob-only-for-tests");
  for (int i = 0; i < 3; ++i) {
    s.clock.advance_ms(50'000);
    CHECK(s.api("GET", "/v1/me", busy).status == 200);
  }
  CHECK(s.api("GET", "/v1/me", idle).status == 401);
  s.clock.advance_ms(29'999);  // 179,999 ms after sign-in
  CHECK(s.api("GET", "/v1/me", busy).status == 200);
  s.clock.advance_ms(1);
  CHECK(s.api("GET", "/v1/me", busy).status == 401);
  // An ended session's pages are the sign-in form.
  auto page = s.send(request("GET", "/console/", {{"Cookie", "opgate_console=" + busy}}));
  CHECK(page.body.find("data-test=\"login-token\"") != std::string::npos);

  auto id = s.sign_in("tok-alice-only-for-tests");
  const auto csrf = s.csrf_of(id);
  // A sign-out from elsewhere is refused and the session lives on.
  auto forged = s.send(request("POST", "/console/logout",
                               {{"Cookie", "opgate_console=" + id}, {"Origin", kOrigin}},
                               "csrf=" + std::string(64, '0')));
  CHECK(forged.status == 403);
  CHECK(s.api("GET", "/v1/me", id).status == 200);
  auto out =
      s.send(request("POST", "/console/logout",
                     {{"Cookie", "opgate_console=" + id}, {"Origin", kOrigin}}, "csrf=" + csrf));
  CHECK(out.status == 303);
  CHECK(out.headers.at("Set-Cookie").find("opgate_console=; ") == 0);
  CHECK(out.headers.at("Set-Cookie").find("Max-Age=0") != std::string::npos);
  CHECK(s.api("GET", "/v1/me", id).status == 401);
}

TEST_CASE("a removed or replaced token ends its console sessions at the next request") {
  Stage s;
  auto alice = s.sign_in("tok-alice-only-for-tests");
  auto bob = s.sign_in("tok-bob-only-for-tests");
  auto next = testing::ApiStage::principals();
  next.erase(next.begin());                                                // alice removed
  next.front().token_sha256 = crypto::sha256_hex("tok-2-only-for-tests");  // bob's token replaced
  s.people.set(next);
  CHECK(s.api("GET", "/v1/me", alice).status == 401);
  CHECK(s.api("GET", "/v1/me", bob).status == 401);
  CHECK(s.console->sessions().size() == 0);
  auto again = s.sign_in("tok-2-only-for-tests");
  CHECK(s.body_of(s.api("GET", "/v1/me", again)).at("principal").as_string() == "bob");
}
