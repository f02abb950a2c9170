#include "console/console.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <tuple>

#include "common/crypto.h"
#include "common/logging.h"
#include "console/assets.h"
#include "console/guard.h"
#include "operator_api/auth.h"

namespace opgate::console {

using http::error_response;
using http::Request;
using http::Response;
using operations::Principal;

namespace {

constexpr int64_t kLoginCookieMaxAgeS = 3600;
// A failed sign-in holds its connection's next request back this long.
constexpr std::chrono::milliseconds kFailedLoginCooldown{250};
constexpr size_t kMaxTokenLength = 4096;

void replace_all(std::string& text, std::string_view placeholder, std::string_view value) {
  for (size_t at = text.find(placeholder); at != std::string::npos;
       at = text.find(placeholder, at + value.size()))
    text.replace(at, placeholder.size(), value);
}

Response html(int status, std::string body) {
  Response r;
  r.status = status;
  r.headers["Content-Type"] = "text/html; charset=utf-8";
  r.body = std::move(body);
  return r;
}

Response see_other(std::string location) {
  Response r;
  r.status = 303;
  r.headers["Location"] = std::move(location);
  r.headers["Content-Type"] = "text/plain; charset=utf-8";
  r.body = "See " + r.headers["Location"] + "\n";
  return r;
}

}  // namespace

std::string_view content_type_of(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  return "application/octet-stream";
}

Console::Console(Options options, const Live<operator_api::Principals>& principals,
                 const Clock& clock)
    : options_(std::move(options)),
      principals_(principals),
      clock_(clock),
      sessions_(clock, options_.sessions) {}

bool Console::secure() const { return options_.tls || options_.origin.rfind("https://", 0) == 0; }

std::string Console::origin_of(const Request& request) const {
  return expected_origin(request, options_.origin, options_.tls);
}

operations::PasskeySite Console::passkey_site(const Request& request) const {
  const std::string origin = origin_of(request);
  return {host_of_origin(origin), origin};
}

std::optional<Console::Signed> Console::signed_in(const Request& request,
                                                  const operator_api::Principals& principals) {
  auto id = cookie_value(request, kSessionCookie);
  if (!id) return std::nullopt;
  auto session = sessions_.find(*id);
  if (!session) return std::nullopt;
  const Principal* found = nullptr;
  for (const auto& p : principals)
    if (p.name == session->principal &&
        crypto::equal_constant_time(p.token_sha256, session->token_sha256))
      found = &p;
  if (!found) {
    // The token was removed or replaced: its sessions end with it.
    sessions_.remove(*id);
    return std::nullopt;
  }
  return Signed{std::move(*id), std::move(*session), found};
}

operator_api::Authentication Console::authenticate(const Request& request,
                                                   const operator_api::Principals& principals) {
  auto s = signed_in(request, principals);
  if (!s) return {};
  if (changes_state(request.method)) {
    if (!from_same_origin(request, origin_of(request)))
      return {nullptr, error_response(errc::forbidden,
                                      "This request did not come from the console's own pages.")};
    if (!csrf_matches(request.header("X-CSRF-Token"), s->session.csrf_token))
      return {nullptr,
              error_response(errc::forbidden,
                             "This request lacks the session's CSRF token; reload the page.")};
  }
  sessions_.touch(s->id);
  return {s->principal, std::nullopt};
}

Response Console::login_page(const Request& request, int status, std::string_view message,
                             std::string_view next) {
  const Asset* a = find_asset("login.html");
  if (!a) return error_response(errc::internal, "The console's sign-in page is missing.");
  const std::string token = crypto::random_hex(32);
  std::string body(a->body);
  replace_all(body, "{{csrf}}", token);
  replace_all(body, "{{next}}", html_escape(safe_next(next)));
  replace_all(body, "{{message}}", html_escape(message));
  auto r = html(status, std::move(body));
  r.headers["Set-Cookie"] = set_cookie(kLoginCookie, token, kLoginCookieMaxAgeS, secure());
  return r;
}

namespace {

// The pages' navigation, the current one marked.
std::string nav_of(std::string_view page) {
  std::string out;
  for (const auto& [name, href, text] :
       {std::tuple<std::string_view, std::string_view, std::string_view>{"queue", "/console/",
                                                                         "Queue"},
        {"passkeys", "/console/passkeys", "Passkeys"},
        {"policy", "/console/policy", "Policy"},
        {"report", "/console/report", "Report"}})
    out += fmt::format("{}<a href=\"{}\"{}>{}</a>", out.empty() ? "" : " ", href,
                       name == page ? " aria-current=\"page\"" : "", text);
  return out;
}

}  // namespace

Response Console::page(const Request& request, std::string_view name, std::string_view title) {
  auto principals = principals_.get();
  auto s = signed_in(request, *principals);
  if (!s) {
    // A link followed from another site arrives without the SameSite=Strict
    // cookie: reloading from this page's own origin sends it.
    if (request.header("Sec-Fetch-Site") == std::optional<std::string>("cross-site"))
      return html(200,
                  "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" "
                  "content=\"0\"><title>opgate console</title>");
    return login_page(request, 200, "", request.path());
  }
  // Every page is the layout (head, navigation, sign-out) around its own
  // <main> (console/assets/{name}.html).
  const Asset* layout = find_asset("layout.html");
  const Asset* main = find_asset(std::string(name) + ".html");
  if (!layout || !main) return error_response(errc::internal, "The console's page is missing.");
  sessions_.touch(s->id);
  std::string body(layout->body);
  replace_all(body, "{{main}}", main->body);
  replace_all(body, "{{nav}}", nav_of(name));
  replace_all(body, "{{page}}", name);
  replace_all(body, "{{title}}", title);
  replace_all(body, "{{csrf}}", s->session.csrf_token);
  replace_all(body, "{{principal}}", html_escape(s->principal->name));
  return html(200, std::move(body));
}

Response Console::login(const Request& request) {
  auto form = parse_form(request.body);
  const std::string next = form && form->count("next") ? form->at("next") : "/console/";
  if (!form) return login_page(request, 400, "The sign-in form could not be read.", next);
  std::optional<std::string> presented;
  if (auto it = form->find("csrf"); it != form->end()) presented = it->second;
  const auto expected = cookie_value(request, kLoginCookie);
  if (!from_same_origin(request, origin_of(request)) ||
      !csrf_matches(presented, expected.value_or("")))
    return login_page(request, 403,
                      "The sign-in form expired or came from another site; please sign in again.",
                      next);
  const std::string address = client_address(request, options_.trusted_proxies);
  // Counted as failed before the token is checked, in the same step as the
  // check (taken back on success): sign-ins arriving together from one
  // address all count, however many threads take them.
  const int64_t attempted_at = clock_.monotonic_ms();
  if (auto wait = sign_in_failures_.attempt(address, attempted_at)) {
    auto r = login_page(request, 429,
                        "Too many failed sign-ins from this address; try again in a minute.", next);
    r.headers["Retry-After"] = std::to_string(std::max<int64_t>(1, (*wait + 999) / 1000));
    r.cooldown = kFailedLoginCooldown;
    log_event(spdlog::level::warn, "console.sign_in_limited",
              "console sign-in refused: too many failures from this address",
              {{"address", address}});
    return r;
  }
  const std::string token = form->count("token") ? form->at("token") : "";
  auto principals = principals_.get();
  const Principal* p = token.size() <= kMaxTokenLength
                           ? operator_api::authenticate_token(*principals, token)
                           : nullptr;
  if (!p) {
    const bool short_token = token.size() < operator_api::kMinTokenLength;
    log_event(spdlog::level::warn, "console.sign_in_failed",
              "console sign-in failed: the token is not valid",
              {{"address", address}, {"reason", short_token ? "too_short" : "unknown_token"}});
    auto r = login_page(request, 401,
                        short_token ? operator_api::kShortTokenMessage
                                    : std::string_view("That token is not valid."),
                        next);
    r.cooldown = kFailedLoginCooldown;
    return r;
  }
  sign_in_failures_.succeeded(address, attempted_at);
  auto created = sessions_.create(p->name, p->token_sha256);
  spdlog::info("console: {} signed in", p->name);
  auto r = see_other(safe_next(next));
  r.headers["Set-Cookie"] =
      set_cookie(kSessionCookie, created.id, options_.sessions.absolute_ms / 1000, secure());
  return r;
}

Response Console::logout(const Request& request) {
  auto principals = principals_.get();
  if (auto s = signed_in(request, *principals)) {
    auto form = parse_form(request.body);
    std::optional<std::string> presented;
    if (form)
      if (auto it = form->find("csrf"); it != form->end()) presented = it->second;
    if (!from_same_origin(request, origin_of(request)) ||
        !csrf_matches(presented, s->session.csrf_token))
      return error_response(errc::forbidden,
                            "This sign-out did not come from the console's own pages.");
    sessions_.remove(s->id);
    spdlog::info("console: {} signed out", s->principal->name);
  }
  auto r = see_other("/console/");
  r.headers["Set-Cookie"] = set_cookie(kSessionCookie, "", 0, secure());
  return r;
}

Response Console::asset(std::string_view name) const {
  const Asset* a = find_asset(name);
  // Pages are served only through their routes, filled in.
  if (!a || content_type_of(name).substr(0, 9) == "text/html")
    return error_response(errc::not_found, "No such file.");
  Response r;
  r.headers["Content-Type"] = std::string(content_type_of(name));
  r.headers["Cache-Control"] = "no-cache";
  r.body = std::string(a->body);
  return r;
}

void Console::add_routes(http::Router& router) {
  using P = http::PathParams;
  router.add("GET", "/console", [](const Request&, const P&) { return see_other("/console/"); });
  router.add("GET", "/console/",
             [this](const Request& r, const P&) { return page(r, "queue", "Queue"); });
  router.add("GET", "/console/login",
             [this](const Request& r, const P&) { return login_page(r, 200, "", "/console/"); });
  router.add("POST", "/console/login", [this](const Request& r, const P&) { return login(r); });
  router.add("POST", "/console/logout", [this](const Request& r, const P&) { return logout(r); });
  router.add("GET", "/console/operations/{key}",
             [this](const Request& r, const P&) { return page(r, "operation", "Operation"); });
  router.add("GET", "/console/sessions/{id}",
             [this](const Request& r, const P&) { return page(r, "session", "Session"); });
  router.add("GET", "/console/passkeys",
             [this](const Request& r, const P&) { return page(r, "passkeys", "Passkeys"); });
  router.add("GET", "/console/policy",
             [this](const Request& r, const P&) { return page(r, "policy", "Policy"); });
  router.add("GET", "/console/report",
             [this](const Request& r, const P&) { return page(r, "report", "Report"); });
  router.add("GET", "/console/assets/{name}",
             [this](const Request&, const P& p) { return asset(p.at("name")); });
}

void Console::finish(const Request& request, Response& response) {
  // By the decoded path, as the router matches it ("/%63onsole/" too).
  std::vector<std::string> segments;
  if (http::split_path(request.path(), segments) && !segments.empty() &&
      "/" + segments.front() == kCookiePath)
    add_security_headers(response);
}

}  // namespace opgate::console
