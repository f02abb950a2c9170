#include "daemon/engine.h"

#include <spdlog/spdlog.h>

#include <limits>

#include "common/thread_name.h"
#include "operations/decisions.h"
#include "operations/escalation.h"

namespace opgate::daemon {

Engine::Engine(store::Storage& storage, agent_sessions::SessionSync& sessions,
               outbox::Drainer& drainer, Lanes& lanes, const Clock& clock, Options options)
    : storage_(storage),
      sessions_(sessions),
      drainer_(drainer),
      lanes_(lanes),
      clock_(clock),
      options_(options),
      last_sweep_ms_(clock.monotonic_ms()),
      last_pass_ms_(std::numeric_limits<int64_t>::min() / 2) {}  // no pass yet: not alive

Engine::~Engine() { stop(); }

void Engine::start() {
  thread_ = std::thread([this] {
    name_this_thread("dispatcher");
    loop();
  });
}

void Engine::wake() {
  {
    MutexLock lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void Engine::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

size_t Engine::expire_pending() {
  auto keys = storage_.reader().expired_by(clock_.now_ms(), 1024);
  if (!keys) {
    spdlog::error("cannot list expired operations: {}", keys.error().message);
    return 0;
  }
  size_t expired = 0;
  for (const auto& key : *keys) {
    bool done = false;
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(done, operations::expire(txn, key));
      return Status::Ok();
    });
    if (!s)
      spdlog::error("cannot expire {}: {}", key, s.error().message);
    else if (done)
      ++expired;
  }
  return expired;
}

bool Engine::alive(std::chrono::milliseconds within) const {
  return clock_.monotonic_ms() - last_pass_ms_.load() <= within.count();
}

void Engine::notify_with(outbox::Notifier& notifier, operations::AttentionPolicy attention) {
  notifier_ = &notifier;
  attention_ = attention;
}

size_t Engine::raise_attention() {
  store::OperationQuery q;
  q.state = pb::STATE_OUTCOME_UNKNOWN;
  q.limit = 1000;
  const int64_t now = clock_.now_ms();
  q.accept = [&](const pb::Operation& op) {
    return !op.attention_notified() && operations::needs_attention(op, now, attention_);
  };
  auto page = storage_.reader().operations(q);
  if (!page) {
    spdlog::error("cannot list outcome_unknown operations: {}", page.error().message);
    return 0;
  }
  size_t raised = 0;
  for (const auto& op : page->operations) {
    bool done = false;
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(done, operations::raise_attention(txn, op.key(), attention_));
      return Status::Ok();
    });
    if (!s)
      spdlog::error("cannot flag {} for attention: {}", op.key(), s.error().message);
    else if (done)
      ++raised;
  }
  return raised;
}

void Engine::escalate_with(const Live<operations::PolicyConfig>& policy) { policy_ = &policy; }

size_t Engine::remind_and_escalate() {
  if (!policy_) return 0;
  const auto policy = policy_->get();
  const auto& escalation = policy->escalation;
  if (escalation.remind_after_s <= 0 && escalation.escalate_after_s <= 0) return 0;
  const int64_t now = clock_.now_ms();
  // At most a page a pass (a reload that makes thousands due at once must
  // not hold the dispatcher up); those done are due no more, so the next
  // pass takes the next ones.
  store::OperationQuery q;
  q.state = pb::STATE_PENDING;
  q.limit = kEscalationsPerPass;
  q.accept = [&](const pb::Operation& op) {
    return static_cast<bool>(operations::escalation_due(op, now, escalation));
  };
  auto page = storage_.reader().operations(q);
  if (!page) {
    spdlog::error("cannot list pending operations: {}", page.error().message);
    return 0;
  }
  size_t changed = 0;
  for (const auto& op : page->operations) {
    operations::EscalationDue raised;
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(raised, operations::remind_or_escalate(txn, op.key(), *policy));
      return Status::Ok();
    });
    if (!s)
      spdlog::error("cannot remind about or escalate {}: {}", op.key(), s.error().message);
    else if (raised)
      ++changed;
  }
  return changed;
}

size_t Engine::pass() {
  const bool leads = !options_.leads || options_.leads();
  size_t work = leads ? expire_pending() : 0;
  work += sessions_.dispatch(lanes_);
  work += drainer_.dispatch();
  const int64_t now = clock_.monotonic_ms();
  if (notifier_) {
    work += notifier_->dispatch();
    // outcome_unknown operations are few; looked at once a second, by the
    // node that leads (any node would do: the flag is set in a transaction).
    if (leads && (!last_attention_scan_ms_ || now - *last_attention_scan_ms_ >= 1000)) {
      last_attention_scan_ms_ = now;
      work += raise_attention();
    }
  }
  // Reminders and escalations are due by the second; looked at once a
  // second, by the node that leads.
  if (leads && policy_ && (!last_escalation_scan_ms_ || now - *last_escalation_scan_ms_ >= 1000)) {
    last_escalation_scan_ms_ = now;
    work += remind_and_escalate();
  }
  // A sweep cycle starts every interval and goes on over the next passes
  // until it has looked at every session, a bounded slice each pass.
  if (leads && options_.sweep_interval.count() > 0 &&
      (sessions_.sweeping() ||
       now - last_sweep_ms_ >=
           std::chrono::duration_cast<std::chrono::milliseconds>(options_.sweep_interval)
               .count())) {
    if (!sessions_.sweeping()) last_sweep_ms_ = now;
    sessions_.sweep(
        lanes_,
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.sweep_window).count());
  }
  return work;
}

void Engine::loop() {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      woken_ = false;
    }
    size_t work = 0;
    try {
      work = pass();
    } catch (const std::exception& e) {
      spdlog::error("dispatcher pass failed: {}", e.what());
    }
    last_pass_ms_ = clock_.monotonic_ms();
    MutexLock lock(mu_);
    if (stopping_) return;
    // More may be waiting: go again at once; otherwise sleep until woken or
    // the tick passes.
    if (work == 0 && !woken_) cv_.wait_for(mu_, options_.tick);
  }
}

}  // namespace opgate::daemon
