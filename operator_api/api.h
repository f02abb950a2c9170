// The operator and on-call API plus /healthz, /readyz
// and /metrics: HTTP mapping only. Each route authenticates, checks the
// scope, parses its input and calls the domain (operations/), the session
// sync or the drainer; what a principal may read or act on is limited to
// the owners its patterns match, on every route (a single object outside
// them is 404, a listing leaves it out). Thread-safe: handlers run on the
// operator listener's threads.
//
// The same routes are also served under /console/api (e.g.
// /console/api/v1/operations) for the approval console's pages, where the
// browser's session cookie is sent: there a request without a bearer token
// is authenticated by ApiDeps::console_auth.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "agent_sessions/session_sync.h"
#include "common/live.h"
#include "common/metrics.h"
#include "http/router.h"
#include "operations/agent_platform.h"
#include "operations/attention.h"
#include "operations/authority.h"
#include "operations/order_service.h"
#include "operations/policy.h"
#include "outbox/drainer.h"
#include "outbox/notifier.h"
#include "store/port.h"

namespace opgate::operator_api {

using Principals = std::vector<operations::Principal>;

// Where the routes are served a second time for the console.
inline constexpr std::string_view kConsoleApiPrefix = "/console/api";

// A request authenticated by something other than a bearer token.
struct Authentication {
  // One of the principals passed in; none: unauthenticated (401).
  const operations::Principal* principal = nullptr;
  // Set when the credential is valid but the request must be refused (a
  // state-changing request without its CSRF token, from another origin).
  std::optional<http::Response> refusal;
};
using Authenticator =
    std::function<Authentication(const http::Request&, const Principals& principals)>;

struct ApiDeps {
  store::Storage& storage;
  agent_sessions::SessionSync& sessions;
  outbox::Drainer& drainer;
  operations::AgentPlatform& agents;
  Metrics& metrics;
  const Clock& clock;
  // Replaced as a whole on reload.
  const Live<Principals>& principals;
  const Live<operations::PolicyConfig>& policy;
  std::function<void()> wake_worker;
  std::atomic<bool>& ready;
  operations::AttentionPolicy attention;
  outbox::Notifier* notifier = nullptr;
  const Live<outbox::NotifyConfig>* notify = nullptr;
  // If set, the routes are served under kConsoleApiPrefix too, and a
  // request there without a bearer token is authenticated by it.
  Authenticator console_auth = {};
  // The business's order service (orders.source = "http"): an approval
  // re-checks the order as it reads there now; nullptr for embedded orders.
  operations::OrderService* orders = nullptr;
  // The MCP front door's URL ("http://127.0.0.1:8082"), for the capability
  // URLs agent tokens come with; empty when there is none.
  std::function<std::string()> mcp_url = {};
  // Where the console is, for a request (its origin and relying party id):
  // passkeys are registered and step-up approvals signed there. Unset: no
  // console, so no passkeys.
  std::function<operations::PasskeySite(const http::Request&)> passkey_site = {};
};

http::Router make_router(ApiDeps& deps);

// The response for an error from the catalogue: its status, and for a
// storage failure 503 with Retry-After.
http::Response from_error(const Error& e);

}  // namespace opgate::operator_api
