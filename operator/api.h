// The operator and on-call API (DESIGN §3.5, §3.8) plus /healthz, /readyz
// and /metrics: HTTP mapping only. Each route authenticates, checks the
// scope, parses its input and calls the domain (operations/), the session
// sync or the drainer; what a principal may read or act on is limited to
// the owners its patterns match, on every route (a single object outside
// them is 404, a listing leaves it out). Thread-safe: handlers run on the
// operator listener's threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "adapters/agents/agents_client.h"
#include "common/live.h"
#include "common/metrics.h"
#include "http/router.h"
#include "operations/attention.h"
#include "operations/authority.h"
#include "operations/policy.h"
#include "outbox/drainer.h"
#include "outbox/notifier.h"
#include "store/port.h"
#include "worker/session_sync.h"

namespace opgate::operator_api {

using Principals = std::vector<operations::Principal>;

struct ApiDeps {
  store::Storage& storage;
  worker::SessionSync& sessions;
  outbox::Drainer& drainer;
  adapters::AgentsClient& agents;
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
};

http::Router make_router(ApiDeps& deps);

// The response for an error from the catalogue: its status, and for a
// storage failure 503 with Retry-After.
http::Response from_error(const Error& e);

}  // namespace opgate::operator_api
