// The outbox drainer: claims approved operations (durably `executing` before
// any provider call), executes them under their fixed idempotency key,
// settles or marks them `outcome_unknown`, reconciles unknown ones against
// the provider's listing, and delivers saved tool results to sessions.
// Thread-safety: run_once() is called from the worker thread only; it runs
// the due items on an internal bounded pool and returns when all are done.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <mutex>
#include <string>

#include "adapters/agents/agents_client.h"
#include "adapters/payments/provider.h"
#include "common/backoff.h"
#include "common/metrics.h"
#include "outbox/outbox.h"
#include "store/journal.h"

namespace opgate::outbox {

struct DrainerOptions {
  size_t batch = 256;
  // Provider calls and deliveries in flight at once.
  int max_in_flight = 32;
  int64_t retry_base_ms = 500;
  int64_t retry_cap_ms = 60'000;
};

class Drainer {
 public:
  Drainer(store::Journal& journal, Outbox& outbox, adapters::PaymentProvider& provider,
          adapters::AgentsClient& agents, Metrics& metrics, Random random,
          DrainerOptions options = {});
  ~Drainer();

  // On start-up: every `executing` operation becomes `outcome_unknown`
  // (with a reconcile item), because its provider call may have happened.
  Status recover_after_restart();
  // One pass over due items; returns how many were handled.
  size_t run_once();
  // Reconciles one operation now (operator request).
  Status reconcile_now(const std::string& operation_key);

 private:
  void execute(const Outbox::Entry& entry);
  void reconcile(const Outbox::Entry& entry);
  void deliver(const Outbox::Entry& entry);
  // Records the provider's answer for an executing operation.
  // Calls the provider for a claimed operation (timed, counted) and records
  // what it answered.
  void call_provider(const pb::Operation& claimed, const std::string& item_key,
                     const std::string& principal);
  Status record_result(const std::string& key, const std::string& item_key,
                       const adapters::PaymentResult& result, const std::string& principal);
  // Reschedules with jittered backoff, and no sooner than the peer asked.
  void retry_later(const Outbox::Entry& entry, const std::string& error, int64_t at_least_ms = 0);
  adapters::PaymentRequest request_for(const pb::Operation& op) const;
  int64_t backoff(int attempt);

  store::Journal& journal_;
  Outbox& outbox_;
  adapters::PaymentProvider& provider_;
  adapters::AgentsClient& agents_;
  Metrics& metrics_;
  std::mutex random_mu_;
  Random random_;
  DrainerOptions options_;
  boost::asio::thread_pool pool_;
};

}  // namespace opgate::outbox
