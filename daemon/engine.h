// The dispatcher: one thread that expires pending operations whose approval
// time ran out and hands work to the lanes (queued inbox events per
// session, due outbox items per operation or tool call), then sleeps until
// woken (a webhook queued work, a lane finished, an operator acted) or the
// tick passes. It never waits on the network itself: a slow session or
// provider call holds only its own lane.
// Thread-safe: wake() and stop() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include "agent_sessions/session_sync.h"
#include "common/clock.h"
#include "common/lanes.h"
#include "common/live.h"
#include "common/mutex.h"
#include "operations/attention.h"
#include "operations/policy.h"
#include "outbox/drainer.h"
#include "outbox/notifier.h"
#include "store/port.h"

namespace opgate::daemon {

class Engine {
 public:
  struct Options {
    std::chrono::milliseconds tick{200};
    std::chrono::seconds sweep_interval{30};  // 0: no sweep
    std::chrono::seconds sweep_window{3600};
    // Whether this process performs the duties one process does for all
    // that share the store (expiry, sweeps); empty: always.
    std::function<bool()> leads;
  };
  Engine(store::Storage& storage, agent_sessions::SessionSync& sessions, outbox::Drainer& drainer,
         Lanes& lanes, const Clock& clock, Options options);
  ~Engine();
  void start();
  void wake() EXCLUDES(mu_);
  // Finishes the pass in progress, then returns.
  void stop() EXCLUDES(mu_);

  // One pass (tests drive the engine by hand): returns the work handed out.
  size_t pass();
  // True if a pass finished within `within` (the dispatcher is not stuck),
  // on the clock's monotonic time.
  bool alive(std::chrono::milliseconds within) const;
  // Pending operations past their approval time become settled/expired.
  size_t expire_pending();
  // Notifications: delivered by `notifier`; operations that come to need a
  // person raise operation.needs_attention. Call before start().
  void notify_with(outbox::Notifier& notifier, operations::AttentionPolicy attention);
  // outcome_unknown operations that need a person and were not flagged yet
  // raise operation.needs_attention; returns how many.
  size_t raise_attention();
  // Pending operations nobody decided are reminded about and escalated by
  // `policy`'s [policy.escalation] (operations/escalation.h), looked at once
  // a second by the node that leads. Call before start().
  void escalate_with(const Live<operations::PolicyConfig>& policy);
  // Raises the reminders and escalations due now, at most
  // kEscalationsPerPass of them; returns how many operations changed.
  size_t remind_and_escalate();
  static constexpr size_t kEscalationsPerPass = 256;

 private:
  void loop() EXCLUDES(mu_);
  store::Storage& storage_;
  agent_sessions::SessionSync& sessions_;
  outbox::Drainer& drainer_;
  Lanes& lanes_;
  const Clock& clock_;
  Options options_;
  Mutex mu_;
  CondVar cv_;
  bool woken_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  // Monotonic milliseconds (clock_.monotonic_ms()).
  int64_t last_sweep_ms_;
  outbox::Notifier* notifier_ = nullptr;
  operations::AttentionPolicy attention_;
  std::optional<int64_t> last_attention_scan_ms_;
  const Live<operations::PolicyConfig>* policy_ = nullptr;
  std::optional<int64_t> last_escalation_scan_ms_;
  std::atomic<int64_t> last_pass_ms_;
  std::thread thread_;
};

}  // namespace opgate::daemon
