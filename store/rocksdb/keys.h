// Where each record lives in the RocksDB backend: the one place that spells
// key layouts. Fixed-width hex numbers keep numeric order in byte order.
//
//   inbox       e/{source}/{webhook_id}      InboxIndex: the event's seq, body hash, processed
//               q/{seq}                      queue entry -> event key
//               w/{session}/{seq}            parked until the session is bound -> event key
//   events      {seq}                        InboxEvent, in arrival order (the event key)
//   sessions    {session_id}                 Session
//   calls       {session}/{turn}/{call}      ToolCall
//   operations  o/{key}                      Operation
//               s/{state}/{key}              by state
//               x/{expires_at}/{key}         pending, by expiry
//               r/{order_id}/{key}           by order
//               h/{key}/{audit seq}          the operation's audit records
//   outbox      i/{id}                       OutboxItem
//               t/{queue}/{not_before}/{id}  by queue and due time
//               k/{operation_key}/{id}       by operation
//               l/{created_at}/{event_id}    notification events kept for replay
//   ledger      {operation_key}              LedgerEntry
//   audit       {seq}                        AuditRecord
//   orders      o/{order_id}                 Order
//               f/{order_id}                 OrderFunds
//   meta        format_version, n/{state},   data format; operations per state
//               n/o/{outcome}                settled operations per outcome
//               e/{endpoint}                 EndpointState
// Pure; thread-safe.
#pragma once

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "opgate.pb.h"

namespace opgate::store::rocks::keys {

inline std::string hex16(uint64_t v) { return fmt::format("{:016x}", v); }
// A hex number (as hex16 writes it), if `s` is one and nothing else.
inline std::optional<uint64_t> parse_hex(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}
inline uint64_t time_part(int64_t ms) { return ms < 0 ? 0 : static_cast<uint64_t>(ms); }

inline std::string event(std::string_view source, std::string_view webhook_id) {
  return fmt::format("e/{}/{}", source, webhook_id);
}
// An event's key in the events column family: its sequence number, so
// events are written in key order.
inline std::string event_record(uint64_t seq) { return hex16(seq); }
// The index entry, under event(), that finds the event stored under `seq`.
inline pb::InboxIndex event_index(const pb::InboxEvent& event, uint64_t seq) {
  pb::InboxIndex index;
  index.set_seq(seq);
  index.set_body_sha256(event.body_sha256());
  index.set_processed(event.processed());
  index.set_processed_at_ms(event.processed_at_ms());
  return index;
}
inline constexpr std::string_view kQueuePrefix = "q/";
inline std::string queue(uint64_t seq) { return "q/" + hex16(seq); }
inline std::string queue(std::string_view id) { return fmt::format("q/{}", id); }
inline std::string waiting_prefix(std::string_view session) {
  return fmt::format("w/{}/", session);
}
inline std::string waiting(std::string_view session, uint64_t seq) {
  return waiting_prefix(session) + hex16(seq);
}

inline std::string call(std::string_view session, std::string_view turn, std::string_view call) {
  return fmt::format("{}/{}/{}", session, turn, call);
}
inline std::string call(const pb::CallRef& c) {
  return call(c.session_id(), c.turn_id(), c.call_id());
}

inline std::string operation(std::string_view key) { return fmt::format("o/{}", key); }
inline std::string state_prefix(pb::OperationState s) {
  return fmt::format("s/{:02}/", static_cast<int>(s));
}
inline std::string by_state(pb::OperationState s, std::string_view key) {
  return state_prefix(s) + std::string(key);
}
inline constexpr std::string_view kExpiryPrefix = "x/";
inline std::string by_expiry(int64_t expires_at_ms, std::string_view key) {
  return fmt::format("x/{}/{}", hex16(time_part(expires_at_ms)), key);
}
inline std::string order_prefix(std::string_view order_id) {
  return fmt::format("r/{}/", order_id);
}
inline std::string by_order(std::string_view order_id, std::string_view key) {
  return order_prefix(order_id) + std::string(key);
}
inline std::string audit_index_prefix(std::string_view operation_key) {
  return fmt::format("h/{}/", operation_key);
}
inline std::string audit_index(std::string_view operation_key, uint64_t seq) {
  return fmt::format("h/{}/{:020}", operation_key, seq);
}

inline std::string outbox_item(std::string_view id) { return fmt::format("i/{}", id); }
inline std::string due_prefix(bool notifications) { return notifications ? "t/n/" : "t/w/"; }
inline std::string outbox_due(bool notifications, int64_t not_before_ms, std::string_view id) {
  return due_prefix(notifications) + hex16(time_part(not_before_ms)) + "/" + std::string(id);
}
// What outbox_due() put in a key of the queue's due index: the due time
// and the item's id (a view into `key`); none if the key is not one.
struct DueParts {
  uint64_t at = 0;
  std::string_view id;
};
inline std::optional<DueParts> due_parts(std::string_view key, bool notifications) {
  const size_t prefix = due_prefix(notifications).size();  // then 16 hex digits, "/", the id
  if (key.size() <= prefix + 17) return std::nullopt;
  auto at = parse_hex(key.substr(prefix, 16));
  if (!at) return std::nullopt;
  return DueParts{*at, key.substr(prefix + 17)};
}
inline std::string outbox_of_prefix(std::string_view operation_key) {
  return fmt::format("k/{}/", operation_key);
}
inline std::string outbox_of(std::string_view operation_key, std::string_view id) {
  return outbox_of_prefix(operation_key) + std::string(id);
}
inline std::string kept_notification(int64_t created_at_ms, std::string_view event_id) {
  return fmt::format("l/{}/{}", hex16(time_part(created_at_ms)), event_id);
}
inline std::string endpoint_state(std::string_view name) { return fmt::format("e/{}", name); }
// A kept record: "k/{kind}/{key}" (kinds hold no '/').
inline std::string kept_prefix(std::string_view kind) { return fmt::format("k/{}/", kind); }
inline std::string kept(std::string_view kind, std::string_view key) {
  return fmt::format("k/{}/{}", kind, key);
}

inline std::string audit(uint64_t seq) { return fmt::format("{:020}", seq); }

inline std::string order(std::string_view order_id) { return fmt::format("o/{}", order_id); }
inline std::string funds(std::string_view order_id) { return fmt::format("f/{}", order_id); }

inline std::string state_count(pb::OperationState s) {
  return fmt::format("n/{:02}", static_cast<int>(s));
}
inline std::string outcome_count(pb::Outcome o) {
  return fmt::format("n/o/{:02}", static_cast<int>(o));
}

}  // namespace opgate::store::rocks::keys
