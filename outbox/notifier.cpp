#include "outbox/notifier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <chrono>
#include <set>

#include "common/crypto.h"
#include "common/json_fields.h"
#include "common/logging.h"
#include "common/webhook_signature.h"
#include "operations/notifications.h"
#include "outbox/claim.h"

namespace opgate::outbox {

namespace json = boost::json;

namespace {

std::string money(const json::object& op) {
  const int64_t a = op.at("amount_minor").to_number<int64_t>();
  return fmt::format("{}.{:02} {}", a / 100, a % 100, op.at("currency").as_string().c_str());
}

std::string field(const json::value& v, std::string_view key) {
  return v.is_object() ? string_field(v.as_object(), key) : "";
}

std::string console_link(const std::string& base, const std::string& key) {
  if (base.empty()) return "";
  std::string encoded;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.')
      encoded += static_cast<char>(c);
    else
      encoded += fmt::format("%{:02X}", c);
  }
  return base + (base.ends_with('/') ? "" : "/") + "operations/" + encoded;
}

// What a person reads in chat: the exact proposal and where to decide. No
// buttons: approval happens where authentication and the fingerprint are.
// Every value is escaped; the console link is the only markup.
std::string slack_text(const pb::Notification& n, const json::object& op, const std::string& link) {
  const auto& p = op.at("proposal");
  std::string what = fmt::format("{} {} for order {} of {} ({}): {}", field(op, "kind"), money(op),
                                 field(op, "order_id"), field(op, "owner"),
                                 field(p, "payment_method"), field(p, "effect"));
  std::string status = field(op, "state");
  if (!field(op, "outcome").empty()) status += "/" + field(op, "outcome");
  std::string text = fmt::format("*{}*: {}\nTier {} · state {} · key {}", n.type(),
                                 slack_escape(what), slack_escape(field(p, "tier")),
                                 slack_escape(status), slack_escape(field(op, "key")));
  if (!link.empty())
    text += fmt::format("\n<{}|Open it in the approval console>", slack_escape(link));
  return text;
}

}  // namespace

std::string slack_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

std::string Notifier::webhook_id(const std::string& event_id, const std::string& endpoint) {
  return "msg_" + crypto::sha256_hex(event_id + "/" + endpoint).substr(0, 32);
}

http::ClientRequest delivery_request(const NotifyEndpoint& endpoint, const pb::Notification& n,
                                     const std::string& console_url, int64_t now_s) {
  json::error_code ec;
  json::value op = json::parse(n.operation_json(), ec);
  if (ec || !op.is_object()) op = json::object{};
  const std::string link = console_link(console_url, field(op, "key"));
  std::string body;
  if (endpoint.format == NotifyEndpoint::Format::slack) {
    body = json::serialize(json::object{{"text", slack_text(n, op.as_object(), link)}});
  } else {
    json::object data = op.as_object();
    if (!endpoint.include_evidence) {
      data.erase("evidence");
      data.erase("last_error");
    }
    data["console_url"] = link;
    data["audit_head"] =
        json::object{{"seq", n.audit_seq()}, {"hash", crypto::to_hex(n.audit_hash())}};
    body = json::serialize(json::object{{"type", n.type()},
                                        {"id", n.event_id()},
                                        {"created_at", n.created_at_ms() / 1000},
                                        {"data", std::move(data)}});
  }
  http::ClientRequest req;
  req.method = "POST";
  req.url = endpoint.url;
  req.timeout = std::chrono::milliseconds(endpoint.timeout_ms);
  // Only the status and Retry-After are read: a receiver's answer is
  // never held at the client's 64 MiB.
  req.max_body_bytes = 1 << 20;
  req.headers["Content-Type"] = "application/json";
  req.headers["User-Agent"] = "opgate-notifier";
  req.headers["webhook-id"] = n.webhook_id();
  req.headers["webhook-timestamp"] = std::to_string(now_s);
  if (!endpoint.raw_key.empty())
    req.headers["webhook-signature"] =
        webhooks::sign(endpoint.raw_key, n.webhook_id(), now_s, body);
  req.body = std::move(body);
  return req;
}

Notifier::Notifier(store::Storage& storage, Lanes& lanes, const Live<NotifyConfig>& config,
                   Metrics& metrics, const Clock& clock, Random random, HttpSend send)
    : storage_(storage),
      lanes_(lanes),
      config_(config),
      metrics_(metrics),
      clock_(clock),
      send_(std::move(send)),
      random_(std::move(random)) {}

size_t Notifier::dispatch() {
  const store::OutboxIds& in_lanes = held_.current(clock_.now_ms());
  store::OutboxIds except;
  if (!set_aside_.empty()) {
    const int64_t now = clock_.now_ms();
    std::erase_if(set_aside_, [&](const auto& aside) { return aside.second <= now; });
    except = in_lanes;
    for (const auto& [id, until] : set_aside_) except.insert(id);
  }
  auto due = storage_.reader().due(store::Queue::notifications, clock_.now_ms(),
                                   lanes_.batch_for(256), set_aside_.empty() ? in_lanes : except);
  if (!due) {
    spdlog::error("notification queue scan failed: {}", due.error().message);
    return 0;
  }
  auto config = config_.get();
  // No endpoint takes the threads every other endpoint needs one of: one
  // that hangs cannot hold them all, nor have the others' deliveries wait
  // in the pool's queue behind its own.
  const size_t others = config->endpoints.empty() ? 0 : config->endpoints.size() - 1;
  const int share =
      static_cast<int>(lanes_.threads() > others + 1 ? lanes_.threads() - others : size_t{1});
  size_t handed = 0;
  std::vector<store::OutboxEntry> events;
  // Due items are read oldest first: those left where they are would be
  // read first again, and an endpoint with a backlog it has no room for
  // would fill every read, starving the others.
  std::vector<store::OutboxEntry> busy, held;
  for (auto& entry : *due) {
    if (entry.item.kind() == pb::OUTBOX_NOTIFY_EVENT) {
      events.push_back(entry);
      continue;
    }
    const auto& name = entry.item.notification().endpoint();
    const NotifyEndpoint* endpoint = nullptr;
    for (const auto& e : config->endpoints)
      if (e.name == name) endpoint = &e;
    if (!endpoint) {
      // Not (or no longer, or not yet) in this node's configuration: held.
      held.push_back(entry);
      continue;
    }
    {
      MutexLock lock(mu_);
      if (in_flight_[name] >= std::min(endpoint->max_in_flight, share)) {
        busy.push_back(entry);
        continue;
      }
      ++in_flight_[name];
    }
    const std::string lane = "notify:" + name + ":" + entry.item.operation_key();
    if (lanes_.try_post(lane, [this, entry, e = *endpoint, config] {
          const HeldItems::Release release(held_, entry.id);
          deliver(entry, e);
          finish(e.name);
        })) {
      held_.hold(entry.id);
      ++handed;
    } else {
      finish(name);  // its lane is busy with an earlier one of its operation: soon free
    }
  }
  if (!held.empty()) hold(held);
  if (!busy.empty())
    if (auto moved = postpone(busy, kBusyRecheckMs); !moved)
      spdlog::error("cannot move {} deliveries waiting for room: {}", busy.size(),
                    moved.error().message);
  // One lane fans out events, in batches (a busy lane: the next pass).
  std::vector<std::string> event_ids;
  for (const auto& e : events) event_ids.push_back(e.id);
  if (!events.empty() &&
      lanes_.try_post("notify-expand", [this, events = std::move(events), ids = event_ids] {
        const HeldItems::Release release(held_, ids);
        expand(events);
      })) {
    for (auto& id : event_ids) held_.hold(std::move(id));
    ++handed;
  }
  return handed;
}

void Notifier::finish(const std::string& endpoint) {
  MutexLock lock(mu_);
  --in_flight_[endpoint];
}

void Notifier::drop(const store::OutboxEntry& entry) {
  const auto& name = entry.item.notification().endpoint();
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(bool ours, unchanged(txn, entry));
    if (!ours) return Status::Ok();  // another process has it
    OPGATE_ASSIGN_OR_RETURN(auto state, txn.endpoint_state(name));
    state.set_backlog(std::max<int64_t>(0, state.backlog() - 1));
    txn.put_endpoint_state(state);
    txn.remove_outbox(entry.id);
    return Status::Ok();
  });
  if (!s) spdlog::error("cannot drop a delivery to {}: {}", name, s.error().message);
}

Result<size_t> Notifier::postpone(const std::vector<store::OutboxEntry>& entries, int64_t by_ms) {
  size_t moved = 0;
  OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
    moved = 0;
    OPGATE_ASSIGN_OR_RETURN(const auto ours, unchanged(txn, entries));
    for (size_t i = 0; i < entries.size(); ++i) {
      if (!ours[i]) continue;  // another process has it
      store::OutboxEntry later = entries[i];
      later.item.set_not_before_ms(txn.now_ms() + by_ms);
      txn.update_outbox(later);
      ++moved;
    }
    return Status::Ok();
  }));
  return moved;
}

void Notifier::hold(const std::vector<store::OutboxEntry>& entries) {
  // Set aside in memory on a shared store while there is room; else moved
  // on in the store, all of a pass's in one transaction.
  std::vector<store::OutboxEntry> postponed;
  std::vector<std::string> names;
  for (const auto& entry : entries) {
    if (shared_store_ && set_aside_.size() < kMaxSetAside) {
      set_aside_[entry.id] = clock_.now_ms() + kHeldRecheckMs;
      names.push_back(entry.item.notification().endpoint());
    } else {
      postponed.push_back(entry);
    }
  }
  if (!postponed.empty()) {
    auto moved = postpone(postponed, kHeldRecheckMs);
    if (!moved)
      spdlog::error("cannot hold {} deliveries: {}", postponed.size(), moved.error().message);
    else if (*moved > 0)  // (those another process has are its own to hold)
      for (const auto& entry : postponed) names.push_back(entry.item.notification().endpoint());
  }
  for (const auto& name : names) {
    metrics_.inc("opgate_notifications_held_total", {{"endpoint", name}});
    bool first = false;
    {
      MutexLock lock(mu_);
      first = held_logged_.insert(name).second;
    }
    if (first)
      log_event(spdlog::level::warn, "notify.delivery_held",
                fmt::format("deliveries to endpoint {} are held: this node's configuration does "
                            "not name it; they are sent once it does, or replayed elsewhere or "
                            "discarded with `opgate notify held`",
                            name),
                {{"endpoint", name}});
  }
}

void Notifier::expand(const std::vector<store::OutboxEntry>& events) {
  auto config = config_.get();
  // Every event the pass found, fanned out in one transaction (an event is
  // a few per operation; a transaction each was a third of the journal's).
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    // Fanned out once, whichever process gets to it first.
    OPGATE_ASSIGN_OR_RETURN(const std::vector<bool> ours, unchanged(txn, events));
    for (size_t i = 0; i < events.size(); ++i) {
      if (!ours[i]) continue;
      const auto& entry = events[i];
      const auto& event = entry.item.notification();
      for (const auto& endpoint : config->endpoints) {
        if (!endpoint.wants(event.type())) continue;
        OPGATE_ASSIGN_OR_RETURN(auto state, txn.endpoint_state(endpoint.name));
        if (state.disabled()) {
          // Disabled by a 410 (logged then): counted, and kept for replay.
          txn.after_commit([this, name = endpoint.name] {
            metrics_.inc("opgate_notifications_dropped_total", {{"endpoint", name}});
          });
          continue;
        }
        pb::OutboxItem delivery;
        delivery.set_kind(pb::OUTBOX_NOTIFY_DELIVERY);
        delivery.set_operation_key(entry.item.operation_key());
        *delivery.mutable_notification() = event;
        delivery.mutable_notification()->set_endpoint(endpoint.name);
        delivery.mutable_notification()->set_webhook_id(
            webhook_id(event.event_id(), endpoint.name));
        txn.enqueue(std::move(delivery));
        state.set_backlog(state.backlog() + 1);
        txn.put_endpoint_state(state);
      }
      txn.remove_outbox(entry.id);
    }
    return Status::Ok();
  });
  if (!s) spdlog::error("cannot fan out {} notification(s): {}", events.size(), s.error().message);
}

int64_t Notifier::retry_delay_ms(size_t attempt, int64_t retry_after_ms) {
  auto config = config_.get();
  const auto& schedule = config->retry_schedule_s;
  const int64_t base = schedule.at(std::min(attempt, schedule.size() - 1)) * 1000;
  MutexLock lock(mu_);
  // Up to 10% later, so that retries of many deliveries spread out.
  const int64_t jitter = static_cast<int64_t>(random_() * 0.1 * static_cast<double>(base));
  return std::max(base + jitter, retry_after_ms);
}

std::optional<store::OutboxEntry> Notifier::lease_attempt(const store::OutboxEntry& dispatched,
                                                          const NotifyEndpoint& endpoint) {
  if (!shared_store_) return dispatched;
  // Another process may see the delivery due too: it is held for one
  // attempt (its timeout and a margin) and what this process records is
  // fenced by the lease's token. A holder that stalls past the lease leaves
  // the delivery to another process, which sends it again under the same
  // webhook-id.
  std::optional<store::OutboxEntry> entry;
  const std::string token = crypto::random_hex(8);
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    entry.reset();
    OPGATE_ASSIGN_OR_RETURN(bool ours, unchanged(txn, dispatched));
    if (!ours) return Status::Ok();
    entry = leased(dispatched, txn.now_ms() + endpoint.timeout_ms + kLeaseMarginMs, token);
    txn.update_outbox(*entry);
    return Status::Ok();
  });
  if (!s) {
    spdlog::error("cannot claim a delivery to {}: {}", endpoint.name, s.error().message);
    return std::nullopt;
  }
  return entry;
}

bool Notifier::waits_for_earlier(const store::OutboxEntry& entry) {
  // Events of one operation reach an endpoint in order: an earlier delivery
  // still queued goes first, and so does an earlier event not yet fanned out
  // (it may become a delivery here).
  const auto& n = entry.item.notification();
  auto queued = storage_.reader().outbox_of(entry.item.operation_key());
  if (!queued) {
    spdlog::error("cannot read the queue of {}: {}", entry.item.operation_key(),
                  queued.error().message);
    held_.rest(entry.id, clock_.now_ms() + kOrderRecheckMs);
    return true;
  }
  for (const auto& other : *queued) {
    const auto& o = other.item.notification();
    if (other.id == entry.id) continue;
    const bool earlier_event =
        other.item.kind() == pb::OUTBOX_NOTIFY_EVENT && operations::notified_before(o, n);
    const bool earlier_delivery = other.item.kind() == pb::OUTBOX_NOTIFY_DELIVERY &&
                                  o.endpoint() == n.endpoint() &&
                                  (operations::notified_before(o, n) ||
                                   (!operations::notified_before(n, o) && other.id < entry.id));
    if (!earlier_event && !earlier_delivery) continue;
    Status s = storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(bool ours, unchanged(txn, entry));
      if (!ours) return Status::Ok();
      // After the earlier one falls due. One due already, or leased (being
      // sent, or its holder gone), may be done any moment, not only when
      // its lease runs out: looked at again shortly (not at once, which
      // would keep this one due and crowd out other work).
      const int64_t now = txn.now_ms();
      const int64_t earlier_at = other.item.not_before_ms();
      int64_t at = earlier_at + 1;
      if (!other.item.lease_token().empty()) at = std::min(at, now + kOrderRecheckMs);
      at = std::max(at, earlier_at <= now ? now + kOrderRecheckMs : now + 1);
      store::OutboxEntry later = entry;
      later.item.set_not_before_ms(at);
      later.item.clear_lease_token();  // not being sent: it waits
      txn.update_outbox(later);
      return Status::Ok();
    });
    if (!s) {
      spdlog::error("cannot reorder a delivery to {}: {}", n.endpoint(), s.error().message);
      held_.rest(entry.id, clock_.now_ms() + kOrderRecheckMs);
    }
    return true;
  }
  return false;
}

Notifier::Attempt Notifier::send_attempt(const store::OutboxEntry& entry,
                                         const NotifyEndpoint& endpoint) {
  auto config = config_.get();
  auto response = send_(delivery_request(endpoint, entry.item.notification(), config->console_url,
                                         clock_.now_ms() / 1000));
  Attempt a;
  const int status = response ? response->status : 0;
  a.ok = status >= 200 && status < 300;
  a.gone = status == 410;
  int64_t retry_after_ms = 0;
  if (response)
    if (auto it = response->headers.find("Retry-After"); it != response->headers.end()) try {
        retry_after_ms = std::clamp<int64_t>(std::stoll(it->second), 0, 86400) * 1000;
      } catch (...) {
      }
  a.error = a.ok ? "" : (response ? fmt::format("HTTP {}", status) : response.error().message);
  a.attempts = static_cast<size_t>(entry.item.attempts()) + 1;
  a.give_up = !a.ok && !a.gone && a.attempts > config->retry_schedule_s.size();
  a.wait_ms = a.ok || a.gone || a.give_up ? 0 : retry_delay_ms(a.attempts - 1, retry_after_ms);
  return a;
}

Result<bool> Notifier::record_attempt(const store::OutboxEntry& entry, const Attempt& a) {
  const std::string& name = entry.item.notification().endpoint();
  bool fenced = false;
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    // The lease ran out and another process took the delivery over: it
    // records its own attempt.
    OPGATE_ASSIGN_OR_RETURN(bool ours, unchanged(txn, entry));
    fenced = !ours;
    if (fenced) return Status::Ok();
    OPGATE_ASSIGN_OR_RETURN(auto st, txn.endpoint_state(name));
    st.set_last_attempt_ms(txn.now_ms());
    if (a.ok || a.gone || a.give_up) {
      txn.remove_outbox(entry.id);
      st.set_backlog(std::max<int64_t>(0, st.backlog() - 1));
    }
    if (a.ok) {
      st.set_last_success_ms(txn.now_ms());
      st.set_failing(false);
      st.clear_failing_since_ms();
    } else {
      st.set_last_error(a.error);
    }
    if (a.gone) {
      st.set_disabled(true);
      st.set_disabled_at_ms(txn.now_ms());
    }
    if (a.give_up && !st.failing()) {
      st.set_failing(true);
      st.set_failing_since_ms(txn.now_ms());
    }
    if (!a.ok && !a.gone && !a.give_up) {
      store::OutboxEntry next = entry;
      next.item.set_attempts(static_cast<int32_t>(a.attempts));
      next.item.set_last_error(a.error);
      next.item.set_not_before_ms(txn.now_ms() + a.wait_ms);
      next.item.clear_lease_token();  // nobody holds it until its retry
      txn.update_outbox(next);
    }
    txn.put_endpoint_state(st);
    return Status::Ok();
  });
  if (!s) return s.error();
  return !fenced;
}

void Notifier::report_attempt(const store::OutboxEntry& entry, const Attempt& a) {
  const auto& n = entry.item.notification();
  const std::string& name = n.endpoint();
  const std::map<std::string, std::string> labels{{"endpoint", name}};
  if (a.ok) {
    metrics_.inc("opgate_notifications_sent_total", labels);
    metrics_
        .histogram("opgate_notification_delivery_seconds", labels,
                   {0.05, 0.1, 0.5, 1, 5, 30, 300, 3600, 86400})
        .observe(std::max<double>(0, (clock_.now_ms() - n.created_at_ms()) / 1000.0));
  } else if (a.gone) {
    metrics_.inc("opgate_notification_endpoints_disabled_total", labels);
    log_event(spdlog::level::warn, "notify.endpoint_disabled",
              fmt::format("endpoint {} answered 410 Gone: disabled", name),
              {{"endpoint", name}, {"operation_key", entry.item.operation_key()}});
  } else if (a.give_up) {
    metrics_.inc("opgate_notifications_failed_total", labels);
    log_event(
        spdlog::level::err, "notify.delivery_failed",
        fmt::format("delivery {} to {} gave up after {} attempts", n.webhook_id(), name,
                    a.attempts),
        {{"endpoint", name}, {"operation_key", entry.item.operation_key()}, {"reason", a.error}});
  } else {
    metrics_.inc("opgate_notifications_retried_total", labels);
  }
}

void Notifier::deliver(const store::OutboxEntry& dispatched, const NotifyEndpoint& endpoint) {
  // The store failed it (logged): it rests, or the next pass has it again.
  auto rest = [&] { held_.rest(dispatched.id, clock_.now_ms() + kBusyRecheckMs); };
  auto entry = lease_attempt(dispatched, endpoint);
  if (!entry) return rest();
  if (waits_for_earlier(*entry)) return;
  const std::string& name = endpoint.name;
  auto state = storage_.reader().endpoint_state(name);
  if (!state) {
    spdlog::error("cannot read the state of endpoint {}: {}", name, state.error().message);
    return rest();
  }
  if (state->disabled()) {
    // Disabled by a 410 since it was queued (logged then): dropped, counted,
    // and kept for replay once it is enabled again.
    metrics_.inc("opgate_notifications_dropped_total", {{"endpoint", name}});
    return drop(*entry);
  }
  const Attempt attempt = send_attempt(*entry, endpoint);
  auto recorded = record_attempt(*entry, attempt);
  if (!recorded) {
    // Sent (or tried): not again before its next attempt would be, and a
    // minute after one that got through (the receiver deduplicates by
    // webhook-id all the same).
    spdlog::error("cannot record a delivery to {}: {}", name, recorded.error().message);
    const int64_t wait = attempt.ok ? kHeldRecheckMs : std::max(kBusyRecheckMs, attempt.wait_ms);
    held_.rest(dispatched.id, clock_.now_ms() + wait);
    return;
  }
  if (!*recorded) {
    spdlog::warn("delivery {} to {} was taken over by another process before it was recorded",
                 entry->item.notification().webhook_id(), name);
    return;
  }
  report_attempt(*entry, attempt);
}

Result<size_t> Notifier::replay(const std::string& name, int64_t since_ms,
                                const std::string& principal) {
  auto config = config_.get();
  const NotifyEndpoint* endpoint = nullptr;
  for (const auto& e : config->endpoints)
    if (e.name == name) endpoint = &e;
  if (!endpoint) return make_error(errc::not_found, "No notification endpoint by that name.");
  size_t queued = 0;
  // Pages by time: the next starts at the last one's millisecond, whose
  // events another page may share (a deny and its settlement are written
  // together), skipping those queued already; a page of nothing new (one
  // millisecond fuller than a page) is read again, larger.
  int64_t from = since_ms;
  size_t limit = 500;
  std::set<std::string> queued_at_from;  // event ids of millisecond `from`
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, storage_.reader().notifications_since(from, limit));
    std::vector<pb::Notification> events;
    for (auto& event : page)
      if (event.created_at_ms() != from || !queued_at_from.count(event.event_id()))
        events.push_back(event);
    OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(auto state, txn.endpoint_state(name));
      for (const auto& event : events) {
        if (!endpoint->wants(event.type())) continue;
        pb::OutboxItem delivery;
        delivery.set_kind(pb::OUTBOX_NOTIFY_DELIVERY);
        json::error_code ec;
        auto op = json::parse(event.operation_json(), ec);
        delivery.set_operation_key(ec ? "" : field(op, "key"));
        *delivery.mutable_notification() = event;
        delivery.mutable_notification()->set_endpoint(name);
        delivery.mutable_notification()->set_webhook_id(webhook_id(event.event_id(), name));
        if (queued >= kReplayAtOnce)
          delivery.set_not_before_ms(txn.now_ms() +
                                     static_cast<int64_t>(queued - kReplayAtOnce) * kReplayPaceMs);
        txn.enqueue(std::move(delivery));
        state.set_backlog(state.backlog() + 1);
        ++queued;
      }
      txn.put_endpoint_state(state);
      return Status::Ok();
    }));
    if (page.size() < limit) {
      spdlog::info("{} replayed {} kept event(s) since {} to {}", principal, queued, since_ms,
                   name);
      return queued;
    }
    if (events.empty()) {
      limit *= 2;
      continue;
    }
    if (page.back().created_at_ms() != from) queued_at_from.clear();
    from = page.back().created_at_ms();
    for (const auto& event : page)
      if (event.created_at_ms() == from) queued_at_from.insert(event.event_id());
  }
}

Result<size_t> Notifier::release_held(const std::string& from, const std::string& to,
                                      const std::string& principal) {
  auto config = config_.get();
  auto configured = [&](const std::string& name) -> const NotifyEndpoint* {
    for (const auto& e : config->endpoints)
      if (e.name == name) return &e;
    return nullptr;
  };
  if (configured(from))
    return make_error(errc::conflict,
                      "That endpoint is configured: its deliveries are sent, not held.");
  const NotifyEndpoint* target = to.empty() ? nullptr : configured(to);
  if (!to.empty() && !target)
    return make_error(errc::not_found, "No notification endpoint by that name to replay to.");
  // Deliveries are held only for an endpoint the store has a state for: a
  // name it has none for (a typo) is refused, and nothing is written for it.
  OPGATE_ASSIGN_OR_RETURN(auto states, storage_.reader().endpoint_states());
  if (std::none_of(states.begin(), states.end(), [&](const auto& s) { return s.name() == from; }))
    return make_error(errc::not_found,
                      "No deliveries were ever queued for an endpoint by that name.");
  size_t moved = 0;
  // A page at a time, each after the last: the queue may be long, and the
  // deliveries of other endpoints stay where they are.
  store::DuePosition after;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(
        auto page, storage_.reader().due_after(store::Queue::notifications, INT64_MAX, after, 500));
    if (!page.end) break;
    const auto& batch = page.entries;
    size_t in_batch = 0;
    OPGATE_TRY(storage_.transact([&](store::Transaction& txn) -> Status {
      in_batch = 0;
      OPGATE_ASSIGN_OR_RETURN(auto held_state, txn.endpoint_state(from));
      std::optional<pb::EndpointState> target_state;
      if (target) {
        OPGATE_ASSIGN_OR_RETURN(target_state, txn.endpoint_state(to));
      }
      for (const auto& entry : batch) {
        if (entry.item.kind() != pb::OUTBOX_NOTIFY_DELIVERY ||
            entry.item.notification().endpoint() != from)
          continue;
        // An event the endpoint does not subscribe to stays held.
        if (target && !target->wants(entry.item.notification().type())) continue;
        OPGATE_ASSIGN_OR_RETURN(bool ours, unchanged(txn, entry));
        if (!ours) continue;
        txn.remove_outbox(entry.id);
        held_state.set_backlog(std::max<int64_t>(0, held_state.backlog() - 1));
        if (target) {
          pb::OutboxItem delivery = entry.item;
          delivery.clear_lease_token();
          delivery.set_attempts(0);
          delivery.clear_last_error();
          delivery.set_not_before_ms(txn.now_ms());
          delivery.mutable_notification()->set_endpoint(to);
          delivery.mutable_notification()->set_webhook_id(
              webhook_id(entry.item.notification().event_id(), to));
          txn.enqueue(std::move(delivery));
          target_state->set_backlog(target_state->backlog() + 1);
        }
        ++in_batch;
      }
      if (in_batch == 0) return Status::Ok();
      txn.put_endpoint_state(held_state);
      if (target_state) txn.put_endpoint_state(*target_state);
      return Status::Ok();
    }));
    moved += in_batch;
    after = *page.end;
  }
  if (to.empty()) {
    if (moved > 0)
      metrics_.inc("opgate_notifications_dropped_total", {{"endpoint", from}},
                   static_cast<double>(moved));
    log_event(
        spdlog::level::warn, "notify.held_discarded",
        fmt::format("{} held delivery(ies) to endpoint {} discarded by {}", moved, from, principal),
        {{"endpoint", from}, {"principal", principal}});
  } else {
    log_event(spdlog::level::info, "notify.held_replayed",
              fmt::format("{} held delivery(ies) to endpoint {} replayed to {} by {}", moved, from,
                          to, principal),
              {{"endpoint", from}, {"principal", principal}});
  }
  return moved;
}

Status Notifier::enable(const std::string& name) {
  return storage_.transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(auto state, txn.endpoint_state(name));
    state.set_disabled(false);
    state.clear_disabled_at_ms();
    txn.put_endpoint_state(state);
    return Status::Ok();
  });
}

}  // namespace opgate::outbox
