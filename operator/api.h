// The operator and on-call API (DESIGN.md §3.5, §3.8) plus /healthz,
// /readyz and /metrics, as a Router of pure-ish handlers over the journal.
// Thread-safe: handlers run on the operator listener's threads; every write
// goes through Journal::run.
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "adapters/agents/agents_client.h"
#include "common/metrics.h"
#include "http/router.h"
#include "operator/auth.h"
#include "outbox/drainer.h"
#include "outbox/outbox.h"
#include "store/journal.h"
#include "worker/session_sync.h"

namespace opgate::operator_api {

struct ApiDeps {
  store::Journal& journal;
  outbox::Outbox& outbox;
  worker::SessionSync& sessions;
  outbox::Drainer& drainer;
  adapters::AgentsClient& agents;
  Metrics& metrics;
  std::vector<Principal> principals;
  std::function<void()> wake_worker;
  std::atomic<bool>& ready;
  outbox::AttentionPolicy attention;
};

http::Router make_router(ApiDeps& deps);

}  // namespace opgate::operator_api
