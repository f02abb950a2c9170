#include "worker/session_sync.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <set>

#include "operations/proposal.h"
#include "operations/repository.h"
#include "worker/tools.h"

namespace opgate::worker {

using store::Cf;
namespace json = boost::json;

SessionSync::SessionSync(store::Journal& journal, ingress::Inbox& inbox, outbox::Outbox& outbox,
                         adapters::AgentsClient& agents, PolicyConfig policy, Metrics& metrics,
                         Random random)
    : journal_(journal),
      inbox_(inbox),
      outbox_(outbox),
      agents_(agents),
      policy_(std::move(policy)),
      metrics_(metrics),
      random_(std::move(random)) {}

void SessionSync::mark_processed(store::Txn& txn, const Queued& entry) {
  txn.batch().del(Cf::inbox, entry.queue_key);
  if (!entry.event) return;  // an entry whose event is gone: only the entry goes
  // Processed events become eligible for removal by the retention filter.
  pb::InboxEvent event = *entry.event;
  event.set_processed(true);
  event.set_processed_at_ms(txn.now_ms());
  txn.batch().put(Cf::inbox, entry.event_key, event);
}

bool SessionSync::is_open(const std::string& session_id, int64_t now_ms, int64_t window_ms) {
  bool any_call = false, open = false;
  int64_t last_activity = 0;
  Status s =
      journal_.store().scan(Cf::calls, session_id + "/", [&](std::string_view, std::string_view v) {
        pb::ToolCall c;
        if (!c.ParseFromString(std::string(v))) return true;
        any_call = true;
        if (!c.result_saved() || c.delivery() == "pending") {
          open = true;  // waiting on a decision, or on delivery
          return false;
        }
        last_activity = std::max({last_activity, c.created_at_ms(), c.delivered_at_ms()});
        return true;
      });
  if (!s) return false;
  if (open) return true;
  if (!any_call) {
    auto session = journal_.store().get_message<pb::Session>(Cf::sessions, session_id);
    return session && session->has_value() && now_ms - (*session)->bound_at_ms() < window_ms;
  }
  // The session may have moved on to a new call whose webhook was lost.
  return now_ms - last_activity < window_ms;
}

size_t SessionSync::sweep(int64_t window_ms, size_t max_sessions) {
  const int64_t now = journal_.clock().now_ms();
  std::vector<std::string> ids;
  Status s = journal_.store().scan(Cf::sessions, "", [&](std::string_view k, std::string_view) {
    ids.emplace_back(k);
    return true;
  });
  if (!s) return 0;
  size_t synced = 0;
  for (const auto& id : ids) {
    if (synced >= max_sessions) break;
    if (!is_open(id, now, window_ms)) continue;
    if (auto it = retries_.find(id); it != retries_.end() && it->second.at_ms > now) continue;
    Status r = sync(id);
    ++synced;
    metrics_.inc("opgate_session_sweeps_total", {{"result", r ? "ok" : "error"}});
  }
  return synced;
}

size_t SessionSync::process_inbox() {
  // Only this thread removes queue entries and changes queued events, so
  // what the scan read stays true for the whole pass.
  std::vector<Queued> queued;
  auto& store = journal_.store();
  // Resume after the entries earlier passes removed, so a pass does not step
  // over their deletion markers again. The inbox writes queue entries in
  // sequence order; bind() may add a lower one late, so it asks for a full
  // scan, and every second one runs regardless.
  const int64_t scan_ms = journal_.clock().now_ms();
  if (rescan_.exchange(false) || scan_ms - last_full_scan_ms_ >= 1000) {
    queue_cursor_.clear();
    last_full_scan_ms_ = scan_ms;
  }
  // Entries of sessions waiting out a fetch backoff are stepped over, so they
  // cannot hold up the events queued behind them.
  std::string first_waiting;  // the first entry stepped over
  size_t examined = 0;
  Status scanned = store.scan(
      Cf::inbox, "q/",
      [&](std::string_view k, std::string_view v) {
        ++examined;
        Queued entry{std::string(k), std::string(v), std::nullopt};
        if (auto ev = store.get_message<pb::InboxEvent>(Cf::inbox, v); ev && ev->has_value())
          entry.event = std::move(**ev);
        const std::string session_id = entry.event ? entry.event->session_id() : "";
        auto retry = retries_.find(session_id);
        if (retry != retries_.end() && retry->second.at_ms > scan_ms) {
          if (first_waiting.empty()) first_waiting = entry.queue_key;
        } else {
          queued.push_back(std::move(entry));
        }
        return queued.size() < kPassEvents && examined < kPassExamined;
      },
      queue_cursor_);
  if (!scanned) {
    spdlog::error("inbox scan failed: {}", scanned.error().message);
    return 0;
  }
  if (queued.empty()) {
    if (!first_waiting.empty()) queue_cursor_ = first_waiting;
    return 0;
  }
  std::set<std::string> finished;  // queue keys handled in this pass
  using Entries = std::vector<const Queued*>;
  auto finish = [&](const Entries& entries) {
    for (const auto* e : entries) finished.insert(e->queue_key);
    return entries.size();
  };
  auto mark_all = [&](store::Txn& txn, const Entries& entries) {
    for (const auto* e : entries) mark_processed(txn, *e);
  };

  // Group by session: one fetch answers every queued webhook of a session.
  std::map<std::string, Entries> by_session;
  Entries done;  // nothing to do (the ingress queues none such; older data may)
  for (const auto& q : queued) {
    if (q.event && ingress::Inbox::needs_work(q.event->type(), q.event->session_id()))
      by_session[q.event->session_id()].push_back(&q);
    else
      done.push_back(&q);
  }
  size_t handled = 0;
  if (!done.empty()) {
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      mark_all(txn, done);
      return Status::Ok();
    });
    if (s) handled += finish(done);
  }
  const int64_t now = journal_.clock().now_ms();
  for (const auto& group : by_session) {
    // Named, not structured bindings: the lambdas below capture them.
    const std::string& session_id = group.first;
    const Entries& entries = group.second;
    auto session = store.get_message<pb::Session>(Cf::sessions, session_id);
    if (!session) continue;
    if (!session->has_value()) {
      // No bound owner yet: park the events until the session is bound.
      // Checked again under the journal lock, which bind() also takes: a
      // bind that landed since the read above finds them still queued.
      bool parked = false;
      Status s = journal_.run([&](store::Txn& txn) -> Status {
        auto again = store.get(Cf::sessions, session_id);
        if (!again) return again.error();
        if (again->has_value()) return Status::Ok();
        parked = true;
        for (const auto* e : entries) {
          txn.batch().del(Cf::inbox, e->queue_key);
          txn.batch().put(Cf::inbox, ingress::Inbox::waiting_key(session_id, inbox_.next_seq()),
                          e->event_key);
        }
        return Status::Ok();
      });
      if (s && parked) {
        handled += finish(entries);
        spdlog::info("session {} is not bound; {} event(s) wait for binding", session_id,
                     entries.size());
      }
      continue;
    }
    std::lock_guard lock(sync_mu_);
    auto view = agents_.get_session(session_id);
    if (!view && view.error().code == "session_not_found") {
      // Final: the platform has no such session. Its events are done with,
      // so they cannot clog the queue; the session keeps the reason.
      metrics_.inc("opgate_session_sync_total", {{"result", "not_found"}});
      spdlog::warn("session {} does not exist on the platform; {} event(s) closed", session_id,
                   entries.size());
      Status s = journal_.run([&](store::Txn& txn) -> Status {
        mark_all(txn, entries);
        pb::Session updated = **session;
        updated.set_last_sync_error("the agent platform has no such session");
        txn.batch().put(Cf::sessions, session_id, updated);
        return Status::Ok();
      });
      if (s) handled += finish(entries);
      continue;
    }
    if (!view) {
      metrics_.inc("opgate_session_sync_total", {{"result", "error"}});
      auto& retry = retries_[session_id];
      std::lock_guard random_lock(random_mu_);
      retry.at_ms = now + std::max(backoff_ms(retry.attempts++, 250, 30'000, random_),
                                   view.error().retry_after_ms);
      spdlog::warn("cannot fetch session {}: {}", session_id, view.error().message);
      continue;
    }
    retries_.erase(session_id);
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      for (const auto& action : view->required_actions)
        if (Status a = answer(txn, **session, action); !a) return a;
      mark_all(txn, entries);
      pb::Session updated = **session;
      updated.set_last_sync_ms(txn.now_ms());
      updated.clear_last_sync_error();
      txn.batch().put(Cf::sessions, session_id, updated);
      return Status::Ok();
    });
    metrics_.inc("opgate_session_sync_total", {{"result", s ? "ok" : "error"}});
    if (!s) {
      spdlog::error("cannot store answers for session {}: {}", session_id, s.error().message);
      continue;
    }
    handled += finish(entries);
  }
  // The next pass starts at the first entry still queued, or past them all.
  queue_cursor_ = queued.back().queue_key;
  for (const auto& q : queued)
    if (!finished.count(q.queue_key)) {
      queue_cursor_ = q.queue_key;
      break;
    }
  if (!first_waiting.empty() && first_waiting < queue_cursor_) queue_cursor_ = first_waiting;
  inbox_.processed(handled);
  return handled;
}

Status SessionSync::sync(const std::string& session_id) {
  auto session = journal_.store().get_message<pb::Session>(Cf::sessions, session_id);
  if (!session) return session.error();
  if (!session->has_value())
    return make_error("not_bound", "The session is not bound to an owner; bind it first.");
  std::lock_guard lock(sync_mu_);
  auto view = agents_.get_session(session_id);
  if (!view)
    return make_error("agents_unavailable", "Cannot fetch the session: " + view.error().message);
  return journal_.run([&](store::Txn& txn) -> Status {
    for (const auto& action : view->required_actions)
      if (Status a = answer(txn, **session, action); !a) return a;
    pb::Session updated = **session;
    updated.set_last_sync_ms(txn.now_ms());
    updated.clear_last_sync_error();
    txn.batch().put(Cf::sessions, session_id, updated);
    return Status::Ok();
  });
}

Status SessionSync::answer(store::Txn& txn, const pb::Session& session,
                           const adapters::RequiredAction& action) {
  auto& store = txn.store();
  if (!operations::valid_identifier(action.call_id) ||
      !operations::valid_identifier(action.turn_id)) {
    spdlog::warn("session {} has a required action with an invalid id; skipped",
                 session.session_id());
    return Status::Ok();
  }
  const std::string key = outbox::call_key(session.session_id(), action.turn_id, action.call_id);
  auto existing = store.get_message<pb::ToolCall>(Cf::calls, key);
  if (!existing) return existing.error();
  if (existing->has_value()) {
    auto& call = **existing;
    // Still required although delivered: the platform did not keep it.
    // Resending the same result under the same key is safe.
    if (call.result_saved() && call.delivery() == "delivered") {
      call.set_delivery("pending");
      outbox_.stage_result(txn, call, call.result());
    }
    return Status::Ok();
  }

  pb::ToolCall call;
  call.set_session_id(session.session_id());
  call.set_turn_id(action.turn_id);
  call.set_call_id(action.call_id);
  call.set_name(action.name.substr(0, 128));
  call.set_arguments_json(action.arguments_json.substr(0, 16384));
  call.set_created_at_ms(txn.now_ms());
  call.set_delivery("none");

  // A refund already proposed under this key answers from the operation,
  // before the policy is asked again: once refunded, the order would fail
  // the policy, but the session must hear the recorded outcome.
  if (action.name == "request_refund") {
    if (auto op = existing_refund(store, session.owner(), action.arguments_json)) {
      link_call(txn, *op, call);
      return Status::Ok();
    }
  }

  OrderLookup lookup = [&](const std::string& order_id) -> std::optional<pb::Order> {
    auto order = store.get_message<pb::Order>(Cf::orders, order_id);
    if (!order || !order->has_value()) return std::nullopt;
    return **order;
  };
  auto outcome = dispatch_tool(action.name, action.arguments_json, session.owner(), lookup, policy_,
                               txn.now_ms() / 1000);
  metrics_.inc(
      "opgate_tool_calls_total",
      {{"tool", action.name == "lookup_order" || action.name == "request_refund" ||
                        action.name == "issue_account_credit"
                    ? action.name
                    : "unknown"},
       {"result", outcome.result ? (outcome.result->success() ? "ok" : "refused") : "proposal"}});
  if (outcome.result) {
    outbox_.stage_result(txn, call, *outcome.result);
    return Status::Ok();
  }

  pb::Proposal& proposal = *outcome.proposal;
  const std::string op_key =
      operations::operation_key(proposal.owner(), proposal.order_id(), proposal.kind());
  const std::string fp = operations::fingerprint(proposal);
  call.set_operation_key(op_key);
  const pb::CallRef ref = outbox::call_ref(call);

  auto loaded = operations::load(store, op_key);
  if (!loaded) return loaded.error();
  if (!loaded->has_value()) {
    pb::Operation op;
    op.set_key(op_key);
    *op.mutable_proposal() = proposal;
    op.set_fingerprint(fp);
    op.set_session_id(call.session_id());
    op.set_call_id(call.call_id());
    *op.add_calls() = ref;
    op.set_idempotency_key(operations::provider_idempotency_key(op_key));
    op.set_expires_at_ms(txn.now_ms() + policy_.approval_ttl_s * 1000);
    operations::create(txn, op, "system",
                       json::serialize(json::object{{"session_id", call.session_id()},
                                                    {"call_id", call.call_id()},
                                                    {"tool", call.name()}}));
    txn.batch().put(Cf::calls, key, call);
    return Status::Ok();
  }

  pb::Operation op = **loaded;
  if (op.fingerprint() != fp && op.state() != "settled") {
    outbox_.stage_result(
        txn, call,
        failure_result(fmt::format("A different proposal for this order ({}) is already "
                                   "awaiting a decision; it must settle first.",
                                   op_key)));
    return Status::Ok();
  }
  link_call(txn, op, call);
  return Status::Ok();
}

void SessionSync::link_call(store::Txn& txn, pb::Operation& op, pb::ToolCall& call) {
  // The same operation, asked for again: link this call to it.
  call.set_operation_key(op.key());
  *op.add_calls() = outbox::call_ref(call);
  operations::save_with_audit(txn, op, "link_call", "system",
                              json::serialize(json::object{{"session_id", call.session_id()},
                                                           {"call_id", call.call_id()}}));
  if (op.state() == "settled") {
    // Already decided: answer with the recorded outcome, never ask again.
    outbox_.stage_result(txn, call, settled_result(op));
  } else {
    txn.batch().put(Cf::calls, outbox::call_key(call), call);
  }
}

std::optional<pb::Operation> SessionSync::existing_refund(const store::Store& store,
                                                          const std::string& owner,
                                                          const std::string& arguments_json) {
  // Only well-formed requests link; anything else gets the tool's refusal.
  auto order_id = refund_order_id(arguments_json);
  if (!order_id) return std::nullopt;
  auto op =
      operations::load(store, operations::operation_key(owner, *order_id, operations::kFullRefund));
  if (!op || !op->has_value()) return std::nullopt;
  return **op;
}

Status SessionSync::bind(const std::string& session_id, const std::string& owner,
                         const std::string& principal) {
  if (!operations::valid_identifier(session_id) || !operations::valid_identifier(owner))
    return make_error("bad_request",
                      "Session id and owner must be 1-64 characters from A-Z, a-z, 0-9, '.', "
                      "'_' and '-'.");
  bool released = false;
  Status s = journal_.run([&](store::Txn& txn) -> Status {
    auto& store = txn.store();
    auto existing = store.get_message<pb::Session>(Cf::sessions, session_id);
    if (!existing) return existing.error();
    if (existing->has_value()) {
      if ((*existing)->owner() != owner)
        return make_error("conflict", "The session is already bound to another owner.");
      return Status::Ok();
    }
    pb::Session session;
    session.set_session_id(session_id);
    session.set_owner(owner);
    session.set_bound_by(principal);
    session.set_bound_at_ms(txn.now_ms());
    txn.batch().put(Cf::sessions, session_id, session);
    const std::string prefix = ingress::Inbox::waiting_prefix(session_id);
    Status scan = store.scan(Cf::inbox, prefix, [&](std::string_view k, std::string_view v) {
      txn.batch().del(Cf::inbox, k);
      txn.batch().put(Cf::inbox, ingress::Inbox::queue_key(inbox_.next_seq()), v);
      released = true;
      return true;
    });
    return scan;
  });
  if (s && released) rescan_ = true;
  return s;
}

size_t SessionSync::expire_pending() {
  const int64_t now = journal_.clock().now_ms();
  auto keys = operations::keys_expired_by(journal_.store(), now, 4096);
  if (!keys) return 0;
  size_t expired = 0;
  for (const auto& key : *keys) {
    Status s = journal_.run([&](store::Txn& txn) -> Status {
      auto op = operations::load(txn.store(), key);
      if (!op) return op.error();
      if (!op->has_value() || (*op)->state() != "pending" || (*op)->expires_at_ms() > now)
        return Status::Ok();
      auto& o = **op;
      o.set_decision_reason("No decision was made before the approval time limit.");
      if (Status st = outbox_.settle(txn, o, operations::Event::expire, "system",
                                     R"({"reason":"approval TTL passed"})");
          !st)
        return st;
      ++expired;
      return Status::Ok();
    });
    if (!s) spdlog::error("cannot expire {}: {}", key, s.error().message);
  }
  return expired;
}

}  // namespace opgate::worker
