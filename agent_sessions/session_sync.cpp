#include "agent_sessions/session_sync.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <set>

#include "operations/keys.h"
#include "operations/notes.h"
#include "operations/orders.h"
#include "operations/proposals.h"
#include "operations/settlement.h"
#include "operations/tools.h"

namespace opgate::agent_sessions {

SessionSync::SessionSync(store::Storage& storage, ingress::Inbox& inbox,
                         operations::AgentPlatform& agents,
                         const Live<operations::PolicyConfig>& policy, Metrics& metrics,
                         const Clock& clock, Random random, operations::OrderService* orders)
    : storage_(storage),
      inbox_(inbox),
      agents_(agents),
      policy_(policy),
      metrics_(metrics),
      clock_(clock),
      orders_(orders),
      random_(std::move(random)) {}

bool SessionSync::backing_off(const std::string& session_id, int64_t now_ms) {
  MutexLock lock(mu_);
  auto it = retries_.find(session_id);
  return it != retries_.end() && it->second.at_ms > now_ms;
}

void SessionSync::back_off(const std::string& session_id, const Error& error, int64_t now_ms) {
  MutexLock lock(mu_);
  auto& retry = retries_[session_id];
  retry.at_ms =
      now_ms + std::max(backoff_ms(retry.attempts++, 250, 30'000, random_), error.retry_after_ms);
}

size_t SessionSync::dispatch(Lanes& lanes) {
  const int64_t now = clock_.now_ms();
  // Resume after what earlier passes handed over, so a pass does not step
  // over their deletion markers again; every second, start from the top.
  if (now - last_full_scan_ms_ >= 1000) {
    cursor_.clear();
    last_full_scan_ms_ = now;
    inbox_.recount();  // a shared store: other processes ingest and process too
  }
  // Page after page while each page is read through (every entry handed
  // over or backing off): events behind a full page of a session in backoff
  // are reached in the same pass. Bounded, so that a pass stays short.
  size_t sessions = 0;
  for (size_t page = 0; page < kPassPages; ++page) {
    bool read_through = false;
    sessions += dispatch_page(lanes, now, read_through);
    if (!read_through) break;
  }
  return sessions;
}

size_t SessionSync::dispatch_page(Lanes& lanes, int64_t now, bool& read_through) {
  const auto quiet = cursor_.empty() ? inbox_.quiet() : std::nullopt;
  auto entries = storage_.reader().queued(cursor_, kPassEntries);
  if (!entries) {
    spdlog::error("inbox scan failed: {}", entries.error().message);
    return 0;
  }
  if (quiet && entries->size() < kPassEntries) inbox_.counted(entries->size(), *quiet);
  if (entries->empty()) return 0;

  std::vector<std::string> ids;  // the entries' queue ids, in queue order
  ids.reserve(entries->size());
  std::vector<store::QueuedEvent> nothing_to_do;  // the ingress queues none; older data may
  std::map<std::string, std::vector<store::QueuedEvent>> by_session;
  std::vector<std::string> order;  // sessions by first entry
  for (auto& e : *entries) {
    ids.push_back(e.queue_id);
    if (!ingress::Inbox::needs_work(e.event.type(), e.event.session_id())) {
      nothing_to_do.push_back(std::move(e));
      continue;
    }
    auto& list = by_session[e.event.session_id()];
    if (list.empty()) order.push_back(e.event.session_id());
    list.push_back(std::move(e));
  }
  std::set<std::string> handed;  // queue ids handed over (or finished here)
  if (!nothing_to_do.empty()) {
    Status s = storage_.transact([&](store::Transaction& txn) {
      for (const auto& e : nothing_to_do) txn.finish_event(e);
      return Status::Ok();
    });
    if (s) {
      for (const auto& e : nothing_to_do) handed.insert(e.queue_id);
      inbox_.processed(nothing_to_do.size());
    }
  }
  size_t sessions = 0;
  std::set<std::string> passed;  // queue ids of sessions backing off: read again next second
  for (const auto& id : order) {
    auto& events = by_session[id];
    if (backing_off(id, now)) {
      for (const auto& e : events) passed.insert(e.queue_id);
      continue;
    }
    if (!lanes.try_post(lane(id), [this, id, events] { process(id, events); })) continue;
    for (const auto& e : events) handed.insert(e.queue_id);
    ++sessions;
  }
  // The next pass starts after the longest run of entries handed over or
  // backing off: a session waiting out a backoff (seconds, or an hour of
  // Retry-After) never holds the sessions queued behind it, however many of
  // its events fill a page; the next full scan reads them again. Only a busy
  // lane holds the cursor, for as long as it works.
  size_t moved = 0;
  for (const auto& id : ids) {
    if (!handed.count(id) && !passed.count(id)) break;
    cursor_ = id;
    ++moved;
  }
  read_through = ids.size() == kPassEntries && moved == ids.size();
  return sessions;
}

Result<std::vector<store::QueuedEvent>> SessionSync::unprocessed(
    const std::vector<store::QueuedEvent>& events) {
  std::vector<store::QueuedEvent> out, done;
  auto& reader = storage_.reader();
  for (const auto& e : events) {
    // An entry whose event is gone stays: settling it removes the entry.
    if (!e.event.source().empty()) {
      OPGATE_ASSIGN_OR_RETURN(auto now, reader.event(e.event.source(), e.event.webhook_id()));
      if (now && now->processed()) {
        done.push_back(e);
        continue;
      }
    }
    out.push_back(e);
  }
  if (!done.empty())
    OPGATE_TRY(storage_.transact([&](store::Transaction& txn) {
      for (const auto& e : done) txn.finish_event(e);
      return Status::Ok();
    }));
  return out;
}

void SessionSync::process(const std::string& session_id,
                          const std::vector<store::QueuedEvent>& handed) {
  auto still = unprocessed(handed);
  if (!still) {
    spdlog::error("cannot read the inbox for session {}: {}", session_id, still.error().message);
    return;
  }
  const auto& events = *still;
  if (events.empty()) return;
  auto session = storage_.reader().session(session_id);
  if (!session) {
    spdlog::error("cannot read session {}: {}", session_id, session.error().message);
    return;
  }
  if (!*session || (*session)->closed()) {
    // Unbound, or closed: the events wait until a binding or `recover`.
    // Checked again inside the transaction, which bind() also runs in: a
    // binding that landed since the read above finds them still queued.
    size_t parked = 0;
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      parked = 0;
      OPGATE_ASSIGN_OR_RETURN(auto again, txn.session(session_id));
      if (again && !again->closed()) return Status::Ok();
      for (const auto& e : events) txn.park_event(e);
      parked = events.size();
      return Status::Ok();
    });
    if (s && parked > 0) {
      inbox_.processed(parked);
      spdlog::info("session {} is {}; {} event(s) wait for {}", session_id,
                   *session ? "closed" : "not bound", parked, *session ? "recover" : "binding");
    }
    return;
  }
  auto view = agents_.get_session(session_id);
  if (!view && view.error().is(errc::session_not_found)) {
    // The platform says it has no such session: its events are set aside,
    // so they cannot clog the queue, until `recover` reopens it.
    metrics_.inc("opgate_session_sync_total", {{"result", "not_found"}});
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(auto current, txn.session(session_id));
      if (!current) return Status::Ok();
      current->set_closed(true);
      current->set_last_sync_error(
          "the agent platform says this session does not exist; `opgate sessions recover` "
          "reopens it");
      txn.put_session(*current);
      for (const auto& e : events) txn.park_event(e);
      return Status::Ok();
    });
    if (s) {
      inbox_.processed(events.size());
      spdlog::warn("session {} does not exist on the platform; {} event(s) set aside", session_id,
                   events.size());
    }
    return;
  }
  if (!view) {
    metrics_.inc("opgate_session_sync_total", {{"result", "error"}});
    back_off(session_id, view.error(), clock_.now_ms());
    spdlog::warn("cannot fetch session {}: {}", session_id, view.error().message);
    return;
  }
  {
    MutexLock lock(mu_);
    retries_.erase(session_id);
  }
  Status s = answer_all(**session, *view, events);
  metrics_.inc("opgate_session_sync_total", {{"result", s ? "ok" : "error"}});
  if (!s) {
    spdlog::error("cannot store answers for session {}: {}", session_id, s.error().message);
    return;
  }
  inbox_.processed(events.size());
}

Status SessionSync::answer_all(const pb::Session& session, const operations::SessionView& view,
                               const std::vector<store::QueuedEvent>& events) {
  auto policy = policy_.get();
  std::vector<std::string> arguments;
  for (const auto& action : view.required_actions) arguments.push_back(action.arguments_json);
  const operations::FetchedOrders fetched = operations::fetch_orders(orders_, arguments, metrics_);
  return storage_.transact([&](store::Transaction& txn) -> Status {
    for (const auto& action : view.required_actions)
      OPGATE_TRY(answer(txn, session, action, *policy, orders_ ? &fetched : nullptr));
    for (const auto& e : events) txn.finish_event(e);
    OPGATE_ASSIGN_OR_RETURN(auto current, txn.session(session.session_id()));
    pb::Session updated = current ? *current : session;
    updated.set_last_sync_ms(txn.now_ms());
    if (!events.empty()) updated.set_last_event_ms(txn.now_ms());
    updated.clear_last_sync_error();
    txn.put_session(updated);
    return Status::Ok();
  });
}

Status SessionSync::sync(const std::string& session_id) {
  OPGATE_ASSIGN_OR_RETURN(auto session, storage_.reader().session(session_id));
  if (!session)
    return make_error(errc::not_bound, "The session is not bound to an owner; bind it first.");
  auto view = agents_.get_session(session_id);
  if (!view)
    return make_error(errc::agents_unavailable,
                      "Cannot fetch the session: " + view.error().message);
  return answer_all(*session, *view, {});
}

Status SessionSync::answer(store::Transaction& txn, const pb::Session& session,
                           const operations::RequiredAction& action,
                           const operations::PolicyConfig& policy,
                           const operations::FetchedOrders* fetched) {
  if (!operations::valid_identifier(action.call_id) ||
      !operations::valid_identifier(action.turn_id)) {
    spdlog::warn("session {} has a required action with an invalid id; skipped",
                 session.session_id());
    return Status::Ok();
  }
  pb::CallRef ref;
  ref.set_session_id(session.session_id());
  ref.set_turn_id(action.turn_id);
  ref.set_call_id(action.call_id);
  OPGATE_ASSIGN_OR_RETURN(auto existing, txn.call(ref));
  if (existing) {
    // Still required although delivered (the platform did not keep it),
    // or recorded stale (it said the session or the call was gone, and now
    // lists it): resending the same result under the same key is safe.
    if (existing->result_saved() && (existing->delivery() == pb::DELIVERY_DELIVERED ||
                                     existing->delivery() == pb::DELIVERY_STALE))
      operations::stage_result(txn, *existing, existing->result());
    return Status::Ok();
  }

  OPGATE_ASSIGN_OR_RETURN(
      auto answered,
      operations::answer_call(txn, {ref, action.name, action.arguments_json, session.owner()},
                              policy, fetched));
  metrics_.inc("opgate_tool_calls_total",
               {{"tool", policy.offers(action.name) ? action.name : "unknown"},
                {"result", answered.outcome}});
  return Status::Ok();
}

Status SessionSync::bind(const std::string& session_id, const std::string& owner,
                         const std::string& principal) {
  if (!operations::valid_identifier(session_id) || !operations::valid_identifier(owner))
    return make_error(errc::bad_request,
                      "Session id and owner must be 1-64 characters from A-Z, a-z, 0-9, '.', "
                      "'_' and '-'.");
  size_t released = 0;
  OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
    released = 0;
    OPGATE_ASSIGN_OR_RETURN(auto existing, txn.session(session_id));
    if (existing) {
      if (existing->owner() != owner)
        return make_error(errc::conflict, "The session is already bound to another owner.");
      return Status::Ok();
    }
    pb::Session session;
    session.set_session_id(session_id);
    session.set_owner(owner);
    session.set_bound_by(principal);
    session.set_bound_at_ms(txn.now_ms());
    txn.put_session(session);
    OPGATE_ASSIGN_OR_RETURN(released, txn.release_parked(session_id));
    return Status::Ok();
  }));
  inbox_.requeued(released);
  return Status::Ok();
}

Result<Status> SessionSync::recover(const std::string& session_id) {
  size_t released = 0;
  OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
    released = 0;
    OPGATE_ASSIGN_OR_RETURN(auto session, txn.session(session_id));
    if (!session)
      return make_error(errc::not_bound, "The session is not bound to an owner; bind it first.");
    if (!session->closed()) return Status::Ok();
    session->set_closed(false);
    session->clear_last_sync_error();
    txn.put_session(*session);
    OPGATE_ASSIGN_OR_RETURN(released, txn.release_parked(session_id));
    return Status::Ok();
  }));
  inbox_.requeued(released);
  {
    MutexLock lock(mu_);
    retries_.erase(session_id);
  }
  return Result<Status>(sync(session_id));
}

bool SessionSync::is_open(const std::string& session_id, int64_t now_ms, int64_t window_ms) {
  auto session = storage_.reader().session(session_id);
  if (!session || !*session || (*session)->closed()) return false;
  // A webhook came lately: what it announced may have been listed only
  // after its fetch (the platform's reads lag its webhooks).
  if (now_ms - (*session)->last_event_ms() < window_ms) return true;
  auto calls = storage_.reader().calls_of(session_id);
  if (!calls) return false;
  int64_t last_activity = 0;
  for (const auto& c : *calls) {
    if (!c.result_saved() || c.delivery() == pb::DELIVERY_PENDING)
      return true;  // waiting on a decision, or on delivery
    last_activity = std::max({last_activity, c.created_at_ms(), c.delivered_at_ms()});
  }
  if (calls->empty()) return now_ms - (*session)->bound_at_ms() < window_ms;
  // The session may have moved on to a new call whose webhook was lost.
  return now_ms - last_activity < window_ms;
}

size_t SessionSync::sweep(Lanes& lanes, int64_t window_ms, size_t max_sessions, size_t scan) {
  const int64_t now = clock_.now_ms();
  size_t handed = 0;
  size_t looked = 0;
  while (looked < scan) {
    const size_t page = std::min<size_t>(1000, scan - looked);
    auto ids = storage_.reader().session_ids(sweep_cursor_, page);
    if (!ids) {
      spdlog::error("cannot list sessions for the sweep: {}", ids.error().message);
      return handed;
    }
    for (const auto& id : *ids) {
      sweep_cursor_ = id;
      ++looked;
      if (handed >= max_sessions || backing_off(id, now) || !is_open(id, now, window_ms)) continue;
      if (lanes.try_post(lane(id), [this, id] {
            Status r = sync(id);
            metrics_.inc("opgate_session_sweeps_total", {{"result", r ? "ok" : "error"}});
          }))
        ++handed;
    }
    if (ids->size() < page) {
      sweep_cursor_.clear();  // the cycle looked at every session
      break;
    }
  }
  return handed;
}

}  // namespace opgate::agent_sessions
