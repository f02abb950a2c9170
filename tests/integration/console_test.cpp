// The approval console's security rules against the real daemon: sign-in
// with a bad token fails, the session cookie's flags, the CSP on console
// answers, decisions refused without the session's CSRF token or from another
// origin (and nothing changes), sign-out, sessions that idle out or reach
// their lifetime, owner patterns, and text from customers and the model
// handed to the page as data only.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cluster.h"
#include "console/guard.h"

using namespace opgate::testing;
using opgate::Result;
namespace http = opgate::http;

namespace {

const std::string kKey = "demo-user:ORDER-100:full-refund:v1";
const std::string kRefund = R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])";

// A browser, as far as the console can tell: it keeps the cookies the
// console sets and sends the headers a browser sends.
struct Browser {
  explicit Browser(Cluster& cluster) : c(cluster) {}
  Cluster& c;
  std::map<std::string, std::string> cookies;
  std::string csrf;  // from the last page's <meta name="csrf-token">

  std::string origin() const { return fmt::format("http://127.0.0.1:{}", c.operator_port()); }

  http::Response send(const std::string& method, const std::string& path, const std::string& body,
                      http::Headers headers = {}) {
    http::ClientRequest req;
    req.method = method;
    req.url = origin() + path;
    req.body = body;
    req.headers = std::move(headers);
    std::string jar;
    for (const auto& [name, value] : cookies) jar += (jar.empty() ? "" : "; ") + name + "=" + value;
    if (!jar.empty()) req.headers["Cookie"] = jar;
    auto res = http::send(req);
    REQUIRE_MESSAGE(res.ok(), res.error().message);
    if (auto set = res->headers.find("Set-Cookie"); set != res->headers.end()) {
      const auto& v = set->second;
      const auto eq = v.find('='), semi = v.find(';');
      const auto name = v.substr(0, eq), value = v.substr(eq + 1, semi - eq - 1);
      if (value.empty())
        cookies.erase(name);
      else
        cookies[name] = value;
    }
    const auto meta = res->body.find(R"(name="csrf-token" content=")");
    if (meta != std::string::npos) csrf = res->body.substr(meta + 27, 64);
    return *res;
  }

  // The sign-in form, filled in and sent as Chromium sends a form under
  // Referrer-Policy: no-referrer.
  http::Response sign_in(const std::string& token) {
    auto page = send("GET", "/console/", "");
    REQUIRE(page.status == 200);
    REQUIRE(cookies.count("opgate_console_login"));
    return send(
        "POST", "/console/login",
        "token=" + token + "&csrf=" + cookies["opgate_console_login"] + "&next=%2Fconsole%2F",
        {{"Content-Type", "application/x-www-form-urlencoded"},
         {"Origin", "null"},
         {"Sec-Fetch-Site", "same-origin"}});
  }

  // The page's script calling the API.
  http::Response api(const std::string& method, const std::string& path,
                     const std::string& body = "", http::Headers headers = {}) {
    if (method != "GET") headers.emplace("Content-Type", "application/json");
    return send(method, "/console/api" + path, body, std::move(headers));
  }
  http::Response change(const std::string& path, const std::string& body) {
    return api("POST", path, body, {{"Origin", origin()}, {"X-CSRF-Token", csrf}});
  }
  int64_t server_now() {
    auto r = api("GET", "/v1/operations?limit=1");
    REQUIRE(r.status == 200);
    return json::parse(r.body).at("now_ms").as_int64();
  }
};

json::object parse(const http::Response& r) { return json::parse(r.body).as_object(); }

}  // namespace

TEST_CASE("console: a bad token is refused; sign-in sets a flagged cookie; CSP everywhere") {
  Cluster c;
  Browser b(c);
  auto bad = b.sign_in("tok-nobody-only-for-tests");
  CHECK(bad.status == 401);
  CHECK(bad.body.find("That token is not valid.") != std::string::npos);
  CHECK(b.cookies.count("opgate_console") == 0);
  CHECK(b.api("GET", "/v1/me").status == 401);

  auto good = b.sign_in(kAliceToken);
  CHECK(good.status == 303);
  CHECK(good.headers.at("Location") == "/console/");
  const auto cookie = good.headers.at("Set-Cookie");
  CHECK(cookie.rfind("opgate_console=", 0) == 0);
  for (const char* flag : {"; HttpOnly", "; SameSite=Strict", "; Path=/console"})
    CHECK_MESSAGE(cookie.find(flag) != std::string::npos, flag);
  REQUIRE(b.cookies.count("opgate_console"));
  CHECK(b.cookies["opgate_console"].size() == 64);
  CHECK(parse(b.api("GET", "/v1/me")).at("principal").as_string() == "alice");
  // The cookie is no credential for the API outside /console.
  CHECK(b.send("GET", "/v1/me", "").status == 401);

  for (const char* path : {"/console/", "/console/operations/x", "/console/assets/console.js",
                           "/console/assets/console.css", "/console/api/v1/me", "/console/nope"}) {
    auto r = b.send("GET", path, "");
    CAPTURE(path);
    CHECK(r.headers["Content-Security-Policy"] ==
          std::string(opgate::console::kContentSecurityPolicy));
    CHECK(r.headers["X-Content-Type-Options"] == "nosniff");
    CHECK(r.headers["Referrer-Policy"] == "no-referrer");
  }
  auto page = b.send("GET", "/console/", "");
  CHECK(page.headers["Cache-Control"] == "no-store");
  // No inline script or style: every script is a file of the console's own.
  CHECK(page.body.find("<script>") == std::string::npos);
  CHECK(page.body.find("style=") == std::string::npos);
  CHECK(page.body.find(R"(<script src="/console/assets/console.js" defer></script>)") !=
        std::string::npos);
}

TEST_CASE("console: without the CSRF token or from another origin a decision changes nothing") {
  Cluster c;
  c.create_session(kRefund);
  auto op = c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  Browser b(c);
  REQUIRE(b.sign_in(kAliceToken).status == 303);
  REQUIRE(b.send("GET", "/console/", "").status == 200);
  REQUIRE(b.csrf.size() == 64);
  const std::string approve = "/v1/operations/" + kKey + "/approve";
  const std::string body = json::serialize(json::object{{"amount_minor", op.at("amount_minor")},
                                                        {"currency", op.at("currency")},
                                                        {"fingerprint", op.at("fingerprint")}});
  const auto origin = b.origin();
  for (const auto& headers : std::vector<http::Headers>{
           {{"Origin", origin}},                                          // no CSRF token
           {{"Origin", origin}, {"X-CSRF-Token", std::string(64, 'f')}},  // another one
           {{"Origin", "http://evil.example"}, {"X-CSRF-Token", b.csrf}},
           {{"Origin", "null"}, {"Sec-Fetch-Site", "cross-site"}, {"X-CSRF-Token", b.csrf}},
           {{"X-CSRF-Token", b.csrf}}}) {
    auto r = b.api("POST", approve, body, headers);
    CHECK(r.status == 403);
    auto deny = b.api("POST", "/v1/operations/" + kKey + "/deny", R"({"reason":"x"})", headers);
    CHECK(deny.status == 403);
  }
  CHECK(str(c.operation(kKey), "state") == "pending");
  CHECK(c.operation(kKey).at("approvals").as_array().empty());
  CHECK(c.payments_admin("GET", "/_sim/stats").body.at("post_requests").as_int64() == 0);

  auto ok = b.change(approve, body);
  CHECK(ok.status == 200);
  auto settled = c.wait_operation(kKey, [](auto& x) { return str(x, "outcome") == "succeeded"; });
  CHECK(str(settled.at("approvals").as_array().at(0), "principal") == "alice");
}

TEST_CASE("console: sign-out ends the session; a forged sign-out does not") {
  Cluster c;
  Browser b(c);
  REQUIRE(b.sign_in(kBobToken).status == 303);
  REQUIRE(b.send("GET", "/console/", "").status == 200);
  auto forged =
      b.send("POST", "/console/logout", "csrf=" + std::string(64, '0'),
             {{"Content-Type", "application/x-www-form-urlencoded"}, {"Origin", b.origin()}});
  CHECK(forged.status == 403);
  CHECK(b.api("GET", "/v1/me").status == 200);
  const auto session = b.cookies["opgate_console"];
  auto out = b.send("POST", "/console/logout", "csrf=" + b.csrf,
                    {{"Content-Type", "application/x-www-form-urlencoded"},
                     {"Origin", "null"},
                     {"Sec-Fetch-Site", "same-origin"}});
  CHECK(out.status == 303);
  CHECK(out.headers.at("Set-Cookie").find("Max-Age=0") != std::string::npos);
  CHECK(b.cookies.count("opgate_console") == 0);
  // The old cookie, kept by someone, is refused.
  b.cookies["opgate_console"] = session;
  CHECK(b.api("GET", "/v1/me").status == 401);
  CHECK(b.send("GET", "/console/", "").body.find("data-test=\"login-token\"") != std::string::npos);
}

TEST_CASE("console: a session unused for its idle time, or past its lifetime, is refused") {
  ClusterOptions options;
  options.extra_config = "[console]\nidle_timeout_s = 1\nabsolute_timeout_s = 3\n";
  Cluster c(options);
  Browser idle(c), busy(c);
  REQUIRE(idle.sign_in(kAliceToken).status == 303);
  REQUIRE(busy.sign_in(kBobToken).status == 303);
  const int64_t signed_in = busy.server_now();
  // Waits by the daemon's own clock, asking through the busy session only.
  CHECK(eventually([&] { return busy.server_now() > signed_in + 1200; }));
  CHECK(idle.api("GET", "/v1/me").status == 401);
  CHECK(busy.api("GET", "/v1/me").status == 200);
  // The busy one is refused once its absolute lifetime has passed.
  int64_t last_ok = 0;
  CHECK(eventually([&] {
    auto r = busy.api("GET", "/v1/operations?limit=1");
    if (r.status == 200) last_ok = json::parse(r.body).at("now_ms").as_int64();
    return r.status == 401;
  }));
  CHECK(last_ok > signed_in + 1200);
  CHECK(busy.api("GET", "/v1/me").status == 401);
  // Signing in again starts a new one.
  REQUIRE(busy.sign_in(kBobToken).status == 303);
  CHECK(busy.api("GET", "/v1/me").status == 200);
}

TEST_CASE("console: outside its owner patterns a principal's queue is empty") {
  Cluster c;
  c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  Browser b(c);
  REQUIRE(b.sign_in(kOutsiderToken).status == 303);
  auto queue = b.api("GET", "/v1/operations?state=pending&sort=created_at");
  REQUIRE(queue.status == 200);
  CHECK(parse(queue).at("operations").as_array().empty());
  CHECK(b.api("GET", "/v1/operations/" + kKey).status == 404);
  CHECK(b.api("GET", "/v1/operations/" + kKey + "/context").status == 404);
  REQUIRE(b.send("GET", "/console/", "").status == 200);
  CHECK(b.change("/v1/operations/" + kKey + "/deny", R"({"reason":"x"})").status == 404);
  CHECK(str(c.operation(kKey), "state") == "pending");
  // Alice, whose patterns match, sees it first in her queue.
  Browser alice(c);
  REQUIRE(alice.sign_in(kAliceToken).status == 303);
  auto hers = parse(alice.api("GET", "/v1/operations?state=pending&sort=created_at"));
  REQUIRE(hers.at("operations").as_array().size() == 1);
  CHECK(str(hers.at("operations").as_array().at(0), "key") == kKey);
}

TEST_CASE("console: markup in an order note or the model's reason reaches the page as data") {
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const std::string note = R"(<script>alert("note")</script><img src=x onerror=alert(1)>)";
  const std::string reason = R"(</textarea><script>alert("reason")</script>)";
  ClusterOptions options;
  options.orders = {json::serialize(json::object{{"order_id", "ORDER-100"},
                                                 {"owner", "demo-user"},
                                                 {"amount_minor", 2500},
                                                 {"currency", "USD"},
                                                 {"payment_intent", "pi_ORDER-100"},
                                                 {"customer", "cus_demo-user"},
                                                 {"payment_method", "visa ending 4242"},
                                                 {"status", "paid"},
                                                 {"placed_at", now_s - 3600},
                                                 {"note", note}})};
  Cluster c(options);
  c.create_session(json::serialize(json::array{
      json::object{{"name", "request_refund"},
                   {"arguments", json::object{{"order_id", "ORDER-100"}, {"reason", reason}}}}}));
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  Browser b(c);
  REQUIRE(b.sign_in(kAliceToken).status == 303);
  // The page itself holds no record: its script fetches them as JSON, which
  // a browser never reads as HTML (nosniff), and puts them in as text.
  auto page = b.send("GET", "/console/operations/" + kKey, "");
  CHECK(page.status == 200);
  CHECK(page.body.find("alert(") == std::string::npos);
  auto ctx = b.api("GET", "/v1/operations/" + kKey + "/context");
  CHECK(ctx.headers["Content-Type"] == "application/json");
  CHECK(ctx.headers["X-Content-Type-Options"] == "nosniff");
  auto body = parse(ctx);
  CHECK(str(body.at("order"), "note") == note);
  CHECK(str(body.at("operation").at("proposal"), "reason") == reason);
  // A path that carries markup is never echoed into the sign-in page as markup.
  Browser stranger(c);
  auto login = stranger.send("GET", "/console/operations/%3Cscript%3Ealert(1)%3C%2Fscript%3E", "");
  CHECK(login.body.find("<script>alert(1)") == std::string::npos);
}
