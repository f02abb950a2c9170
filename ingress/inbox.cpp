#include "ingress/inbox.h"

#include <fmt/format.h>

#include "common/crypto.h"
#include "opgate.pb.h"

namespace opgate::ingress {

using store::Cf;

std::string Inbox::event_key(const std::string& source, const std::string& webhook_id) {
  return fmt::format("e/{}/{}", source, webhook_id);
}
std::string Inbox::queue_key(uint64_t seq) { return fmt::format("q/{:016x}", seq); }
std::string Inbox::waiting_key(const std::string& session_id, uint64_t seq) {
  return fmt::format("w/{}/{:016x}", session_id, seq);
}

Inbox::Inbox(store::Store& store, const Clock& clock) : store_(store), clock_(clock) {
  // Sequence numbers start above both the clock (in µs) and any queued entry,
  // so they stay monotonic across restarts and clock steps.
  uint64_t start = static_cast<uint64_t>(clock.now_ms()) * 1000;
  auto last = store_.last_key(Cf::inbox, "q/");
  if (last && last->has_value())
    start = std::max<uint64_t>(start, std::stoull((*last)->substr(2), nullptr, 16) + 1);
  seq_ = start;
}

uint64_t Inbox::next_seq() { return seq_++; }

Result<Accepted> Inbox::accept(const std::string& source, const std::string& webhook_id,
                               const std::string& body, const Envelope& envelope) {
  const std::string key = event_key(source, webhook_id);
  const std::string digest = crypto::sha256(body);
  std::lock_guard lock(stripes_[std::hash<std::string>{}(key) % stripes_.size()]);
  auto existing = store_.get_message<pb::InboxEvent>(Cf::inbox, key);
  if (!existing) return existing.error();
  if (existing->has_value()) {
    if ((*existing)->body_sha256() != digest)
      return make_error("conflict", "This webhook-id was already received with another body.");
    return Accepted{true};
  }
  pb::InboxEvent ev;
  ev.set_source(source);
  ev.set_webhook_id(webhook_id);
  ev.set_body(body);
  ev.set_body_sha256(digest);
  ev.set_received_at_ms(clock_.now_ms());
  ev.set_type(envelope.type);
  ev.set_session_id(envelope.session_id);
  store::Batch batch;
  batch.put(Cf::inbox, key, ev);
  batch.put(Cf::inbox, queue_key(next_seq()), key);
  if (Status s = store_.commit(batch); !s) return s.error();
  backlog_++;
  return Accepted{false};
}

}  // namespace opgate::ingress
