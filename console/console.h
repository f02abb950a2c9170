// The approval console: web pages on the operator listener under /console/
// for the people who approve refunds and credits and settle operations in
// outcome_unknown. An operator signs in once with a bearer token, which is
// exchanged for a session cookie; the pages' script then calls the operator
// API under /console/api/ (operator/api.h) with that cookie. This class
// holds the sessions, the sign-in and sign-out routes, the pages and their
// files, and authenticates the API's console requests:
//
//   GET  /console/                  the queue (the sign-in form without a session)
//   GET  /console/operations/{key}  one operation: proposal, context, decision
//   GET  /console/sessions/{id}     one agent session: calls, ledger, audit
//   GET  /console/passkeys          the principal's passkeys: register, remove
//   GET  /console/policy            who may approve what: every tool, tier, limits
//   GET  /console/report            how approvals are going, with charts (SVG)
//   POST /console/login             form: token, csrf, next → 303 with the cookie
//                                   (failures logged and limited per address)
//   POST /console/logout            form: csrf → 303, the session ended
//   GET  /console/assets/{name}     script, style sheet, images
//
// A session's principal is looked up by name at every request, with the
// hash of the token it signed in with, so a token removed or replaced by a
// reload ends its console sessions. Thread-safe.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/failure_limiter.h"
#include "common/live.h"
#include "console/options.h"
#include "console/sessions.h"
#include "http/router.h"
#include "operator_api/api.h"

namespace opgate::console {

class Console {
 public:
  Console(Options options, const Live<operator_api::Principals>& principals, const Clock& clock);

  // For ApiDeps::console_auth: the principal of the request's live session,
  // or a 403 refusal for a state-changing request that lacks the session's
  // CSRF token (X-CSRF-Token) or does not come from the console's origin.
  operator_api::Authentication authenticate(const http::Request& request,
                                            const operator_api::Principals& principals);

  void add_routes(http::Router& router);

  // Adds the console's security headers to an answer for a path under
  // /console (every page, file, API answer and error there).
  static void finish(const http::Request& request, http::Response& response);

  // Where passkeys are registered and used for this request: the console's
  // origin and its host as the relying party id.
  operations::PasskeySite passkey_site(const http::Request& request) const;

  SessionStore& sessions() { return sessions_; }
  const Options& options() const { return options_; }

 private:
  struct Signed {
    std::string id;
    Session session;
    const operations::Principal* principal;
  };
  // The request's live session and its principal, if both still exist.
  std::optional<Signed> signed_in(const http::Request& request,
                                  const operator_api::Principals& principals);
  // The page `name` (its <main> in console/assets/{name}.html) in the layout.
  http::Response page(const http::Request& request, std::string_view name, std::string_view title);
  http::Response login_page(const http::Request& request, int status, std::string_view message,
                            std::string_view next);
  http::Response login(const http::Request& request);
  http::Response logout(const http::Request& request);
  http::Response asset(std::string_view name) const;
  bool secure() const;
  std::string origin_of(const http::Request& request) const;

  Options options_;
  const Live<operator_api::Principals>& principals_;
  const Clock& clock_;
  SessionStore sessions_;
  // Failed sign-ins per client address: past the limit, 429 until the
  // oldest leaves the window (a per-connection cooldown alone let parallel
  // connections guess freely).
  FailureLimiter sign_in_failures_;
};

}  // namespace opgate::console
