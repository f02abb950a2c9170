#include "store/rocksdb/rocks_storage.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "common/crypto.h"
#include "common/files.h"
#include "common/text.h"
#include "store/audit_chain.h"
#include "store/rocksdb/keys.h"
#include "store/rocksdb/upgrade.h"

namespace opgate::store::rocks {

namespace {

template <typename Message>
Result<std::optional<Message>> parse(const Result<std::optional<std::string>>& raw) {
  if (!raw) return raw.error();
  if (!raw->has_value()) return std::optional<Message>();
  Message m;
  if (!m.ParseFromString(**raw))
    return make_error(errc::corrupt_record, "a stored record does not parse");
  return std::optional<Message>(std::move(m));
}

template <typename Message>
Result<std::optional<Message>> load(const KvView& view, Cf cf, std::string_view key) {
  return parse<Message>(view.get(cf, key));
}

Error corrupt(std::string_view what) {
  return make_error(errc::corrupt_record, fmt::format("a stored {} does not parse", what));
}

// A stored count: absent is 0; anything but digits is corrupt.
Result<int64_t> count_of(const Result<std::optional<std::string>>& raw) {
  if (!raw) return raw.error();
  if (!raw->has_value()) return int64_t{0};
  auto n = whole_number(**raw);
  if (!n) return corrupt("count");
  return *n;
}

// Scans `cf` under `prefix` from `start`, parsing each value into one
// Message that is handed to `visit` with its key (false stops the scan; a
// visitor that keeps the record moves it out). A value that does not parse
// ends the scan as a corrupt `what`.
template <typename Message, typename Visit>
Status scan_parsed(const KvView& view, Cf cf, std::string_view prefix, std::string_view what,
                   Visit&& visit, std::string_view start = {}) {
  Message m;
  bool bad = false;
  OPGATE_TRY(view.scan(
      cf, prefix,
      [&](std::string_view k, std::string_view v) {
        if (!m.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
          bad = true;
          return false;
        }
        return visit(k, m);
      },
      start));
  if (bad) return corrupt(what);
  return Status::Ok();
}

using keys::parse_hex;

// Reads of every record kind over a key-value view.
class KvReader : public virtual Reader {
 public:
  // `floors`: where scans of the time-keyed indexes start; `raises`: whether
  // this reader's scans move them up (the durable reader's only: a
  // transaction's view holds deletions that may not commit).
  // `next_seq` peeks at the next inbox queue number (where an empty queue's
  // floor may go).
  KvReader(const KvView& view, ScanFloors& floors, bool raises,
           std::function<uint64_t()> next_seq = {})
      : view_(view), floors_(floors), raises_(raises), next_seq_(std::move(next_seq)) {}

  Result<std::optional<pb::InboxEvent>> event(const std::string& source,
                                              const std::string& webhook_id) override {
    OPGATE_TRY(inbox_readable());
    auto index = load<pb::InboxIndex>(view_, Cf::inbox, keys::event(source, webhook_id));
    if (!index) return index.error();
    // An event whose record retention dropped before its index entry is gone.
    if (!*index) return std::optional<pb::InboxEvent>();
    return load<pb::InboxEvent>(view_, Cf::events, keys::event_record((*index)->seq()));
  }

  Result<std::vector<QueuedEvent>> queued(const std::string& after, size_t limit) override {
    OPGATE_TRY(inbox_readable());
    std::vector<std::pair<std::string, std::string>> entries;  // queue id, event key
    const auto from = floors_.queue.start();
    const std::string after_key = after.empty() ? "" : keys::queue(std::string_view(after)) + '\0';
    const bool from_floor = after_key <= from.at;
    const uint64_t next_seq = next_seq_ ? next_seq_() : 0;
    Status s = view_.scan(
        Cf::inbox, keys::kQueuePrefix,
        [&](std::string_view k, std::string_view v) {
          entries.emplace_back(k.substr(keys::kQueuePrefix.size()), v);
          return entries.size() < limit;
        },
        from_floor ? from.at : after_key);
    if (!s) return s.error();
    if (raises_ && from_floor)
      floors_.queue.raise(from, entries.empty()
                                    ? keys::queue(next_seq)
                                    : keys::queue(std::string_view(entries.front().first)));
    std::vector<QueuedEvent> out;
    out.reserve(entries.size());
    for (auto& [id, event_key] : entries) {
      QueuedEvent q{std::move(id), {}, std::move(event_key)};
      auto ev = load<pb::InboxEvent>(view_, Cf::events, q.event_key);
      if (!ev) return ev.error();
      // An entry whose event is gone stays with an empty event: finishing it
      // removes the entry.
      if (ev->has_value()) q.event = std::move(**ev);
      out.push_back(std::move(q));
    }
    return out;
  }

  Result<size_t> queued_count() override {
    size_t n = 0;
    Status s = view_.scan(Cf::inbox, keys::kQueuePrefix, [&](std::string_view, std::string_view) {
      ++n;
      return true;
    });
    if (!s) return s.error();
    return n;
  }

  Result<std::optional<pb::Session>> session(const std::string& id) override {
    return load<pb::Session>(view_, Cf::sessions, id);
  }

  Result<std::vector<std::string>> session_ids(const std::string& after, size_t limit) override {
    std::vector<std::string> ids;
    Status s = view_.scan(
        Cf::sessions, "",
        [&](std::string_view k, std::string_view) {
          ids.emplace_back(k);
          return ids.size() < limit;
        },
        after.empty() ? "" : after + '\0');
    if (!s) return s.error();
    return ids;
  }

  Result<std::optional<pb::ToolCall>> call(const pb::CallRef& ref) override {
    return load<pb::ToolCall>(view_, Cf::calls, keys::call(ref));
  }

  Result<std::vector<pb::ToolCall>> calls_of(const std::string& session_id) override {
    return calls_from(session_id + "/", "", SIZE_MAX);
  }

  Result<std::vector<pb::ToolCall>> calls_of_turn(const std::string& session_id,
                                                  const std::string& turn_id,
                                                  const std::string& after, size_t limit) override {
    return calls_from(keys::call(session_id, turn_id, ""), after, limit);
  }

  // The calls under `prefix` after the key prefix + `after`, at most `limit`.
  Result<std::vector<pb::ToolCall>> calls_from(const std::string& prefix, const std::string& after,
                                               size_t limit) {
    std::vector<pb::ToolCall> out;
    if (limit == 0) return out;
    const std::string from = prefix + after;
    OPGATE_TRY(scan_parsed<pb::ToolCall>(
        view_, Cf::calls, prefix, "tool call",
        [&](std::string_view k, pb::ToolCall& c) {
          if (!after.empty() && k == from) return true;  // the cursor itself
          out.push_back(std::move(c));
          return out.size() < limit;
        },
        from));
    return out;
  }

  Result<std::optional<pb::Operation>> operation(const std::string& key) override {
    return load<pb::Operation>(view_, Cf::operations, keys::operation(key));
  }

  Status visit_operations(const std::function<bool(const pb::Operation&)>& visit) override {
    // One message parsed into again and again: its strings and repeated
    // fields keep their storage, so a million operations cost no million
    // allocations.
    return scan_parsed<pb::Operation>(
        view_, Cf::operations, "o/", "operation",
        [&](std::string_view, const pb::Operation& op) { return visit(op); });
  }

  Result<OperationPage> operations(const OperationQuery& q) override {
    OperationPage page;
    std::optional<Error> failed;
    bool more = false;
    auto take = [&](pb::Operation op) {
      if (q.accept && !q.accept(op)) return true;
      if (page.operations.size() == q.limit) {
        more = true;
        return false;
      }
      page.operations.push_back(std::move(op));
      return true;
    };
    Status s;
    if (q.state) {
      const std::string prefix = keys::state_prefix(*q.state);
      s = view_.scan(
          Cf::operations, prefix,
          [&](std::string_view k, std::string_view) {
            auto op = operation(std::string(k.substr(prefix.size())));
            if (!op) {
              failed = op.error();
              return false;
            }
            // The index is read as of its scan's start and each operation
            // after: one that left the state in between is left out.
            if (!op->has_value() || (*op)->state() != *q.state) return true;
            return take(std::move(**op));
          },
          q.after.empty() ? "" : prefix + q.after + '\0');
    } else {
      s = scan_parsed<pb::Operation>(
          view_, Cf::operations, "o/", "operation",
          [&](std::string_view, pb::Operation& op) { return take(std::move(op)); },
          q.after.empty() ? "" : keys::operation(q.after) + '\0');
    }
    if (!s) return s.error();
    if (failed) return *failed;
    if (more && !page.operations.empty()) page.next_after = page.operations.back().key();
    return page;
  }

  Result<std::vector<pb::Operation>> operations_of_order(const std::string& order_id) override {
    std::vector<std::string> op_keys;
    const std::string prefix = keys::order_prefix(order_id);
    Status s = view_.scan(Cf::operations, prefix, [&](std::string_view k, std::string_view) {
      op_keys.emplace_back(k.substr(prefix.size()));
      return true;
    });
    if (!s) return s.error();
    std::vector<pb::Operation> out;
    for (const auto& k : op_keys) {
      auto op = operation(k);
      if (!op) return op.error();
      if (op->has_value()) out.push_back(std::move(**op));
    }
    return out;
  }

  Result<std::vector<std::string>> expired_by(int64_t now_ms, size_t limit) override {
    std::vector<std::string> out;
    std::optional<Error> failed;
    const auto from = floors_.expiry.start();
    std::optional<std::string> first;
    Status s = view_.scan(
        Cf::operations, keys::kExpiryPrefix,
        [&](std::string_view k, std::string_view) {
          // "x/" + 16 hex digits + "/" + key
          auto at = k.size() > 19 ? parse_hex(k.substr(2, 16)) : std::nullopt;
          if (!at) {
            failed = corrupt("expiry index entry");
            return false;
          }
          if (!first) first = std::string(k);
          if (*at > keys::time_part(now_ms)) return false;
          out.emplace_back(k.substr(19));
          return out.size() < limit;
        },
        from.at);
    if (!s) return s.error();
    if (failed) return *failed;
    if (raises_)
      floors_.expiry.raise(from, first.value_or(std::string(keys::kExpiryPrefix) +
                                                keys::hex16(keys::time_part(now_ms))));
    return out;
  }

  Result<StateCounts> counts() override {
    StateCounts c;
    for (int i = pb::STATE_PENDING; i <= pb::STATE_SETTLED; ++i) {
      auto st = static_cast<pb::OperationState>(i);
      OPGATE_ASSIGN_OR_RETURN(c.operations[st],
                              count_of(view_.get(Cf::meta, keys::state_count(st))));
    }
    for (int i = pb::OUTCOME_SUCCEEDED; i <= pb::OUTCOME_CANCELLED; ++i) {
      auto o = static_cast<pb::Outcome>(i);
      OPGATE_ASSIGN_OR_RETURN(c.settled[o], count_of(view_.get(Cf::meta, keys::outcome_count(o))));
    }
    return c;
  }

  Result<std::optional<pb::Order>> order(const std::string& order_id) override {
    return load<pb::Order>(view_, Cf::orders, keys::order(order_id));
  }

  Result<pb::OrderFunds> funds(const std::string& order_id) override {
    auto f = load<pb::OrderFunds>(view_, Cf::orders, keys::funds(order_id));
    if (!f) return f.error();
    if (f->has_value()) return std::move(**f);
    pb::OrderFunds empty;
    empty.set_order_id(order_id);
    return empty;
  }

  Result<std::optional<pb::LedgerEntry>> ledger_entry(const std::string& key) override {
    return load<pb::LedgerEntry>(view_, Cf::ledger, key);
  }

  Result<std::vector<pb::LedgerEntry>> ledger(const LedgerQuery& q) override {
    std::vector<pb::LedgerEntry> rows;
    OPGATE_TRY(scan_parsed<pb::LedgerEntry>(
        view_, Cf::ledger, "", "ledger row",
        [&](std::string_view k, pb::LedgerEntry& l) {
          if (k == q.after) return true;  // a page starts after its cursor
          if ((q.session_id.empty() || l.session_id() == q.session_id) &&
              (q.owner.empty() || l.owner() == q.owner) &&
              (q.order_id.empty() || l.order_id() == q.order_id))
            rows.push_back(std::move(l));
          return q.limit == 0 || rows.size() < q.limit;
        },
        q.after));
    return rows;
  }

  Result<std::vector<pb::AuditRecord>> audit_of(const std::string& operation_key) override {
    std::vector<std::string> seqs;
    const std::string prefix = keys::audit_index_prefix(operation_key);
    Status s = view_.scan(Cf::operations, prefix, [&](std::string_view k, std::string_view) {
      seqs.emplace_back(k.substr(prefix.size()));
      return true;
    });
    if (!s) return s.error();
    std::vector<pb::AuditRecord> out;
    for (const auto& seq : seqs) {
      auto r = load<pb::AuditRecord>(view_, Cf::audit, seq);
      if (!r) return r.error();
      if (r->has_value()) out.push_back(std::move(**r));
    }
    return out;
  }

  Result<std::vector<pb::AuditRecord>> audit(uint64_t after_seq, size_t limit) override {
    std::vector<pb::AuditRecord> out;
    OPGATE_TRY(scan_parsed<pb::AuditRecord>(
        view_, Cf::audit, "", "audit record",
        [&](std::string_view, pb::AuditRecord& r) {
          out.push_back(std::move(r));
          return out.size() < limit;
        },
        keys::audit(after_seq + 1)));
    return out;
  }

  Result<AuditHead> audit_head() override {
    // The durable head: the last record in key order.
    AuditHead head;
    std::optional<pb::AuditRecord> last;
    // Audit keys are fixed-width sequence numbers; the reader's view has no
    // reverse scan, so the durable reader overrides this with a seek.
    OPGATE_TRY(scan_parsed<pb::AuditRecord>(view_, Cf::audit, "", "audit record",
                                            [&](std::string_view, pb::AuditRecord& r) {
                                              last = std::move(r);
                                              return true;
                                            }));
    if (last) head = {last->seq(), last->hash()};
    return head;
  }

  Result<std::vector<OutboxEntry>> due(Queue queue, int64_t now_ms, size_t limit,
                                       const OutboxIds& except) override {
    if (limit == 0) return std::vector<OutboxEntry>();  // the scan below takes one before it counts
    std::vector<std::string> ids;
    std::optional<Error> failed;
    const bool notifications = queue == Queue::notifications;
    const std::string prefix = keys::due_prefix(notifications);
    ScanFloor& floor = floor_of(queue);
    const auto from = floor.start();
    std::optional<std::string> first;
    Status s = view_.scan(
        Cf::outbox, prefix,
        [&](std::string_view k, std::string_view) {
          auto due = keys::due_parts(k, notifications);
          if (!due) {
            failed = corrupt("outbox index entry");
            return false;
          }
          if (!first) first = std::string(k);
          if (due->at > keys::time_part(now_ms)) return false;
          if (except.find(due->id) != except.end()) return true;
          ids.emplace_back(due->id);
          return ids.size() < limit;
        },
        from.at);
    if (!s) return s.error();
    if (failed) return *failed;
    if (raises_) floor.raise(from, first.value_or(prefix + keys::hex16(keys::time_part(now_ms))));
    return items(ids, now_ms);
  }

  Result<DuePage> due_after(Queue queue, int64_t now_ms, const DuePosition& after,
                            size_t limit) override {
    DuePage page;
    if (limit == 0) return page;
    std::vector<std::string> ids;
    std::optional<Error> failed;
    const bool notifications = queue == Queue::notifications;
    const std::string prefix = keys::due_prefix(notifications);
    const std::string from = keys::outbox_due(notifications, after.not_before_ms, after.id);
    Status s = view_.scan(
        Cf::outbox, prefix,
        [&](std::string_view k, std::string_view) {
          if (k == from) return true;  // the position itself
          auto due = keys::due_parts(k, notifications);
          if (!due) {
            failed = corrupt("outbox index entry");
            return false;
          }
          if (due->at > keys::time_part(now_ms)) return false;
          ids.emplace_back(due->id);
          // The position as the index has it: the item, read next, may
          // have moved or gone meanwhile.
          page.end = DuePosition{static_cast<int64_t>(due->at), ids.back()};
          return ids.size() < limit;
        },
        from);
    if (!s) return s.error();
    if (failed) return *failed;
    OPGATE_ASSIGN_OR_RETURN(page.entries, items(ids, now_ms));
    return page;
  }

  Result<std::optional<pb::OutboxItem>> outbox_item(const std::string& id) override {
    return load<pb::OutboxItem>(view_, Cf::outbox, keys::outbox_item(id));
  }

  Result<std::optional<int64_t>> next_due_ms(Queue queue) override {
    std::optional<int64_t> at;
    std::optional<Error> failed;
    const bool notifications = queue == Queue::notifications;
    const auto from = floor_of(queue).start();
    Status s = view_.scan(
        Cf::outbox, keys::due_prefix(notifications),
        [&](std::string_view k, std::string_view) {
          if (auto due = keys::due_parts(k, notifications))
            at = static_cast<int64_t>(due->at);
          else
            failed = corrupt("outbox index entry");
          return false;
        },
        from.at);
    if (!s) return s.error();
    if (failed) return *failed;
    return at;
  }

  Result<std::vector<OutboxEntry>> outbox_of(const std::string& operation_key) override {
    std::vector<std::string> ids;
    const std::string prefix = keys::outbox_of_prefix(operation_key);
    Status s = view_.scan(Cf::outbox, prefix, [&](std::string_view k, std::string_view) {
      ids.emplace_back(k.substr(prefix.size()));
      return true;
    });
    if (!s) return s.error();
    return items(ids);
  }

  Result<pb::EndpointState> endpoint_state(const std::string& name) override {
    auto state = load<pb::EndpointState>(view_, Cf::meta, keys::endpoint_state(name));
    if (!state) return state.error();
    if (state->has_value()) return std::move(**state);
    pb::EndpointState fresh;
    fresh.set_name(name);
    return fresh;
  }

  Result<std::vector<pb::EndpointState>> endpoint_states() override {
    std::vector<pb::EndpointState> out;
    OPGATE_TRY(scan_parsed<pb::EndpointState>(view_, Cf::meta, keys::endpoint_state(""),
                                              "endpoint state",
                                              [&](std::string_view, pb::EndpointState& state) {
                                                out.push_back(std::move(state));
                                                return true;
                                              }));
    return out;
  }

  Result<std::optional<std::string>> kept(std::string_view kind, std::string_view key) override {
    return view_.get(Cf::meta, keys::kept(kind, key));
  }

  Result<std::vector<std::pair<std::string, std::string>>> kept_all(std::string_view kind,
                                                                    const std::string& after,
                                                                    size_t limit) override {
    std::vector<std::pair<std::string, std::string>> out;
    const std::string prefix = keys::kept_prefix(kind);
    if (limit == 0) return out;
    Status s = view_.scan(
        Cf::meta, prefix,
        [&](std::string_view k, std::string_view v) {
          out.emplace_back(std::string(k.substr(prefix.size())), std::string(v));
          return out.size() < limit;
        },
        after.empty() ? "" : prefix + after + '\0');
    if (!s) return s.error();
    return out;
  }

  Result<std::vector<pb::Notification>> notifications_since(int64_t since_ms,
                                                            size_t limit) override {
    std::vector<pb::Notification> out;
    OPGATE_TRY(scan_parsed<pb::Notification>(
        view_, Cf::outbox, "l/", "notification",
        [&](std::string_view, pb::Notification& n) {
          out.push_back(std::move(n));
          return out.size() < limit;
        },
        "l/" + keys::hex16(keys::time_part(since_ms))));
    return out;
  }

 private:
  // The items the index named, as they are now. A due index is read as of
  // its scan's start and each item after, so one postponed in between (due
  // later than `due_by` now) is left out.
  Result<std::vector<OutboxEntry>> items(std::vector<std::string>& ids,
                                         std::optional<int64_t> due_by = std::nullopt) {
    std::vector<OutboxEntry> out;
    for (auto& id : ids) {
      auto item = load<pb::OutboxItem>(view_, Cf::outbox, keys::outbox_item(id));
      if (!item) return item.error();
      if (!item->has_value()) continue;
      if (due_by && keys::time_part((*item)->not_before_ms()) > keys::time_part(*due_by)) continue;
      out.push_back({std::move(id), std::move(**item)});
    }
    return out;
  }

 protected:
  ScanFloor& floor_of(Queue queue) {
    return queue == Queue::notifications ? floors_.notifications : floors_.work;
  }
  // A format-1 directory opened read-only (a restored backup's copy, an
  // offline audit) keeps its inbox in the older layout: its audit and
  // operations read as usual, its inbox is read after the upgrade.
  Status inbox_readable() const {
    if (format_version_ >= kFormatVersion) return Status::Ok();
    return make_error(errc::data_format,
                      "this data directory's inbox is in data format 1; it is read after opgate "
                      "has opened the directory for writing once, which upgrades it");
  }

  const KvView& view_;
  ScanFloors& floors_;
  const bool raises_;
  std::function<uint64_t()> next_seq_;
  int format_version_ = kFormatVersion;
};

// The durable reader: the database alone; the audit head by one seek.
class DurableReader final : public KvReader {
 public:
  DurableReader(const KvView& view, const Db& db, ScanFloors& floors,
                std::function<uint64_t()> next_seq)
      : KvReader(view, floors, true, std::move(next_seq)), db_(db) {
    format_version_ = db.format_version();
  }
  Result<AuditHead> audit_head() override {
    AuditHead head;
    auto last = db_.last_key(Cf::audit, "");
    if (!last) return last.error();
    if (!last->has_value()) return head;
    auto r = load<pb::AuditRecord>(view_, Cf::audit, **last);
    if (!r) return r.error();
    if (r->has_value()) head = {(*r)->seq(), (*r)->hash()};
    return head;
  }

 private:
  const Db& db_;
};

class RocksTransaction final : public Transaction, public KvReader {
 public:
  // `pins`: the index times this transaction stages, unpinned by the
  // caller once its commit is done.
  RocksTransaction(Journal::Txn& txn, RocksStorage& storage,
                   std::vector<std::pair<ScanFloor*, std::string>>& pins)
      : KvReader(txn.view, storage.floors(), false), txn_(txn), storage_(storage), pins_(pins) {}

  int64_t now_ms() const override { return txn_.now_ms; }
  Result<AuditHead> audit_head() override { return txn_.head; }

  void finish_event(const QueuedEvent& q) override {
    txn_.writes.del(Cf::inbox, keys::queue(std::string_view(q.queue_id)));
    if (q.event.source().empty()) return;  // its event is gone: only the entry goes
    const auto seq = parse_hex(q.event_key);
    // Never taken: q.event was read from `events`, whose keys are all
    // numbers; an entry whose event is gone returned above.
    if (!seq) return;
    pb::InboxEvent event = q.event;
    event.set_processed(true);
    event.set_processed_at_ms(txn_.now_ms);
    txn_.writes.put(Cf::events, q.event_key, event.SerializeAsString());
    txn_.writes.put(Cf::inbox, keys::event(event.source(), event.webhook_id()),
                    keys::event_index(event, *seq).SerializeAsString());
  }

  // Parks the entry if it is still queued, as PostgreSQL's does: an entry
  // handed over twice is parked once. An entry that cannot be read is
  // parked all the same: a second waiting entry is processed as done.
  void park_event(const QueuedEvent& q) override {
    const std::string entry = keys::queue(std::string_view(q.queue_id));
    auto queued = txn_.view.get(Cf::inbox, entry);
    if (queued && !queued->has_value()) return;
    txn_.writes.del(Cf::inbox, entry);
    txn_.writes.put(Cf::inbox, keys::waiting(q.event.session_id(), storage_.next_queue_seq()),
                    q.event_key);
  }

  Result<size_t> release_parked(const std::string& session_id) override {
    std::vector<std::pair<std::string, std::string>> parked;
    Status s = txn_.view.scan(Cf::inbox, keys::waiting_prefix(session_id),
                              [&](std::string_view k, std::string_view v) {
                                parked.emplace_back(k, v);
                                return true;
                              });
    if (!s) return s.error();
    for (auto& [k, v] : parked) {
      txn_.writes.del(Cf::inbox, k);
      const std::string entry = keys::queue(storage_.next_queue_seq());
      pin(storage_.floors().queue, entry);
      txn_.writes.put(Cf::inbox, entry, v);
    }
    return parked.size();
  }

  void put_session(const pb::Session& s) override {
    txn_.writes.put(Cf::sessions, s.session_id(), s.SerializeAsString());
  }

  void put_call(const pb::ToolCall& c) override {
    txn_.writes.put(Cf::calls, keys::call(c.session_id(), c.turn_id(), c.call_id()),
                    c.SerializeAsString());
  }

  Status put_operation(const pb::Operation& op) override {
    if (op.key().empty() || op.state() == pb::STATE_UNSPECIFIED)
      return make_error(errc::internal, "an operation needs a key and a state");
    auto old = operation(op.key());
    if (!old) return old.error();
    const auto& key = op.key();
    auto& w = txn_.writes;
    const bool was = old->has_value();
    const auto old_state = was ? (*old)->state() : pb::STATE_UNSPECIFIED;
    if (old_state != op.state()) {
      if (was) {
        w.del(Cf::operations, keys::by_state(old_state, key));
        if (Status s = add_count(old_state, -1); !s) return s;
      }
      w.put(Cf::operations, keys::by_state(op.state(), key), "");
      if (Status s = add_count(op.state(), +1); !s) return s;
    }
    const auto old_outcome =
        was && old_state == pb::STATE_SETTLED ? (*old)->outcome() : pb::OUTCOME_NONE;
    const auto new_outcome = op.state() == pb::STATE_SETTLED ? op.outcome() : pb::OUTCOME_NONE;
    if (old_outcome != new_outcome) {
      if (old_outcome != pb::OUTCOME_NONE)
        if (Status s = add(keys::outcome_count(old_outcome), -1); !s) return s;
      if (new_outcome != pb::OUTCOME_NONE)
        if (Status s = add(keys::outcome_count(new_outcome), +1); !s) return s;
    }
    if (!was) w.put(Cf::operations, keys::by_order(op.proposal().order_id(), key), "");
    const bool was_pending = old_state == pb::STATE_PENDING;
    const bool is_pending = op.state() == pb::STATE_PENDING;
    const bool moved = was && (*old)->expires_at_ms() != op.expires_at_ms();
    if (was_pending && (!is_pending || moved))
      w.del(Cf::operations, keys::by_expiry((*old)->expires_at_ms(), key));
    if (is_pending && (!was_pending || moved)) {
      pin(storage_.floors().expiry, keys::by_expiry(op.expires_at_ms(), key));
      w.put(Cf::operations, keys::by_expiry(op.expires_at_ms(), key), "");
    }
    w.put(Cf::operations, keys::operation(key), op.SerializeAsString());
    return Status::Ok();
  }

  void put_order(const pb::Order& o) override {
    txn_.writes.put(Cf::orders, keys::order(o.order_id()), o.SerializeAsString());
  }

  void put_funds(const pb::OrderFunds& f) override {
    txn_.writes.put(Cf::orders, keys::funds(f.order_id()), f.SerializeAsString());
  }

  void put_ledger(const pb::LedgerEntry& l) override {
    txn_.writes.put(Cf::ledger, l.operation_key(), l.SerializeAsString());
  }

  void append_audit(pb::AuditRecord record) override {
    chain_audit(record, txn_.now_ms, txn_.head);
    if (!record.operation_key().empty())
      txn_.writes.put(Cf::operations, keys::audit_index(record.operation_key(), record.seq()), "");
    txn_.writes.put(Cf::audit, keys::audit(record.seq()), record.SerializeAsString());
  }

  void enqueue(pb::OutboxItem item) override {
    const std::string id = keys::hex16(storage_.next_outbox_seq());
    item.set_created_at_ms(txn_.now_ms);
    const std::string due = due_key(item, id);
    pin(floor_of(queue_of(item.kind())), due);
    txn_.writes.put(Cf::outbox, due, "");
    if (!item.operation_key().empty())
      txn_.writes.put(Cf::outbox, keys::outbox_of(item.operation_key(), id), "");
    txn_.writes.put(Cf::outbox, keys::outbox_item(id), item.SerializeAsString());
  }

  void update_outbox(const OutboxEntry& e) override {
    auto old = load<pb::OutboxItem>(txn_.view, Cf::outbox, keys::outbox_item(e.id));
    if (!old || !old->has_value()) return;  // gone (or unreadable): nothing to update
    txn_.writes.del(Cf::outbox, due_key(**old, e.id));
    pb::OutboxItem item = e.item;
    item.set_kind((*old)->kind());  // an item never changes queue or operation
    item.set_operation_key((*old)->operation_key());
    const std::string due = due_key(item, e.id);
    pin(floor_of(queue_of(item.kind())), due);
    txn_.writes.put(Cf::outbox, due, "");
    txn_.writes.put(Cf::outbox, keys::outbox_item(e.id), item.SerializeAsString());
  }

  void remove_outbox(const std::string& id) override {
    auto old = load<pb::OutboxItem>(txn_.view, Cf::outbox, keys::outbox_item(id));
    if (old && old->has_value()) {
      txn_.writes.del(Cf::outbox, due_key(**old, id));
      if (!(*old)->operation_key().empty())
        txn_.writes.del(Cf::outbox, keys::outbox_of((*old)->operation_key(), id));
    }
    txn_.writes.del(Cf::outbox, keys::outbox_item(id));
  }

  void keep(std::string_view kind, std::string_view key, std::string value) override {
    txn_.writes.put(Cf::meta, keys::kept(kind, key), std::move(value));
  }

  void forget(std::string_view kind, std::string_view key) override {
    txn_.writes.del(Cf::meta, keys::kept(kind, key));
  }

  void put_endpoint_state(const pb::EndpointState& state) override {
    txn_.writes.put(Cf::meta, keys::endpoint_state(state.name()), state.SerializeAsString());
  }

  void keep_notification(const pb::Notification& event) override {
    txn_.writes.put(Cf::outbox, keys::kept_notification(event.created_at_ms(), event.event_id()),
                    event.SerializeAsString());
  }

 private:
  static std::string due_key(const pb::OutboxItem& item, std::string_view id) {
    return keys::outbox_due(queue_of(item.kind()) == Queue::notifications, item.not_before_ms(),
                            id);
  }

  void pin(ScanFloor& floor, const std::string& key) {
    floor.pin(key);
    pins_.emplace_back(&floor, key);
  }

  Status add_count(pb::OperationState state, int64_t delta) {
    return add(keys::state_count(state), delta);
  }
  Status add(const std::string& counter, int64_t delta) {
    OPGATE_ASSIGN_OR_RETURN(const int64_t n, count_of(txn_.view.get(Cf::meta, counter)));
    txn_.writes.put(Cf::meta, counter, std::to_string(std::max<int64_t>(0, n + delta)));
    return Status::Ok();
  }

  Journal::Txn& txn_;
  RocksStorage& storage_;
  std::vector<std::pair<ScanFloor*, std::string>>& pins_;
};

}  // namespace

Result<std::unique_ptr<RocksStorage>> RocksStorage::open(const std::string& dir,
                                                         const OpenOptions& options,
                                                         const Clock& clock) {
  auto db = Db::open(dir, options);
  if (!db) return db.error();
  if (!options.read_only) OPGATE_TRY(upgrade_inbox(**db, options.on_upgrade_progress));
  std::unique_ptr<RocksStorage> s(new RocksStorage());
  s->db_ = std::move(*db);
  s->clock_ = &clock;
  s->durable_ = std::make_unique<DbView>(*s->db_);
  s->reader_ = std::make_unique<DurableReader>(*s->durable_, *s->db_, s->floors_,
                                               [raw = s.get()] { return raw->peek_queue_seq(); });
  // Queue sequence numbers start above both the clock (in µs) and any entry
  // stored, so they stay monotonic across restarts and clock steps.
  // Events take numbers from the same sequence.
  uint64_t queue_start = static_cast<uint64_t>(std::max<int64_t>(0, clock.now_ms())) * 1000;
  for (auto [cf, prefix] : {std::pair{Cf::inbox, keys::kQueuePrefix}, {Cf::events, ""}}) {
    auto last = s->db_->last_key(cf, prefix);
    if (!last) return last.error();
    if (last->has_value())
      if (auto seq = parse_hex(std::string_view(**last).substr(prefix.size())))
        queue_start = std::max(queue_start, *seq + 1);
  }
  s->queue_seq_ = queue_start;
  auto last_item = s->db_->last_key(Cf::outbox, "i/");
  if (!last_item) return last_item.error();
  if (last_item->has_value())
    if (auto seq = parse_hex(std::string_view(**last_item).substr(2))) s->outbox_seq_ = *seq + 1;
  if (!options.read_only) {
    auto journal = Journal::open(*s->db_, clock);
    if (!journal) return journal.error();
    s->journal_ = std::move(*journal);
  }
  return s;
}

RocksStorage::~RocksStorage() {
  journal_.reset();  // commits what is staged while the database is open
  reader_.reset();
  durable_.reset();
  db_.reset();
}

Status RocksStorage::transact(const std::function<Status(Transaction&)>& fn) {
  if (!journal_) return make_error(errc::storage_unavailable, "The store is open read-only.");
  std::vector<std::function<void()>> after;
  CommittedRead* read_after = nullptr;
  std::vector<std::pair<ScanFloor*, std::string>> pins;
  Status s = journal_->run([&](Journal::Txn& txn) {
    RocksTransaction t(txn, *this, pins);
    t.set_fans_out_notifications(fans_out_notifications());
    Status s = fn(t);
    if (s) {
      after = t.take_after_commit();
      read_after = t.committed_read();
    }
    return s;
  });
  // Committed (visible to every scan from now on) or refused: either way
  // the entries it staged no longer hold the floors down.
  for (auto& [floor, t] : pins) floor->unpin(t);
  OPGATE_TRY(s);
  if (read_after) read_committed(reader(), *read_after);
  for (auto& f : after) f();
  return Status::Ok();
}

Result<std::vector<Appended>> RocksStorage::append_events(std::vector<NewEvent>& events) {
  std::vector<Appended> out(events.size(), Appended::stored);
  // Each event key once, in the order first seen; a repeat within the batch
  // is answered against what its first occurrence found.
  std::vector<std::string> unique_keys;
  std::vector<size_t> slot(events.size());  // event -> its key's place in unique_keys
  std::vector<size_t> first;                // unique key -> index of its first event
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& ev = events[i].event;
    std::string key = keys::event(ev.source(), ev.webhook_id());
    auto [it, fresh] = seen.emplace(key, unique_keys.size());
    if (fresh) {
      unique_keys.push_back(std::move(key));
      first.push_back(i);
    }
    slot[i] = it->second;
  }
  // The duplicate check reads every key in one call: most are not there,
  // and a batched read answers those from each table file's filter at once.
  // It reads the small index, never the events.
  auto stored = db_->multi_get(Cf::inbox, unique_keys);
  if (!stored) return stored.error();
  // The body hash each key holds: the stored index entry's, else the first
  // occurrence's, which this batch stores.
  std::vector<std::string> held(unique_keys.size());
  for (size_t k = 0; k < unique_keys.size(); ++k) {
    if (!(*stored)[k]) continue;
    auto existing = parse<pb::InboxIndex>((*stored)[k]);
    if (!existing) return existing.error();
    held[k] = (*existing)->body_sha256();
  }
  std::vector<std::string> queue_pins;
  WriteSet w;
  for (size_t i = 0; i < events.size(); ++i) {
    auto& ev = events[i].event;
    const size_t k = slot[i];
    if ((*stored)[k] || first[k] != i) {
      const auto& hash = (*stored)[k] ? held[k] : events[first[k]].event.body_sha256();
      out[i] = hash == ev.body_sha256() ? Appended::duplicate : Appended::conflict;
      continue;
    }
    // The event goes under the next sequence number, so events arrive in
    // key order; its queue entry, if it has one, takes the same number.
    const uint64_t seq = next_queue_seq();
    std::string record_key = keys::event_record(seq);
    w.put(Cf::inbox, unique_keys[k], keys::event_index(ev, seq).SerializeAsString());
    if (events[i].queue) {
      std::string entry = keys::queue(seq);
      floors_.queue.pin(entry);
      w.put(Cf::inbox, entry, record_key);
      queue_pins.push_back(std::move(entry));
    }
    w.put(Cf::events, std::move(record_key),
          events[i].record.empty() ? ev.SerializeAsString() : std::move(events[i].record));
  }
  Status written = w.empty() ? Status::Ok() : db_->write(w, true);
  for (const auto& entry : queue_pins) floors_.queue.unpin(entry);
  if (!written) return written.error();
  return out;
}

Result<AuditVerification> RocksStorage::verify_audit() {
  ChainVerifier verifier;
  uint64_t position = 0;
  Status s = db_->scan(Cf::audit, "", [&](std::string_view k, std::string_view v) {
    ++position;
    pb::AuditRecord r;
    if (!r.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
      verifier.unreadable(position);
      return false;
    }
    uint64_t key_seq = 0;
    std::from_chars(k.data(), k.data() + k.size(), key_seq);
    return verifier.add(r, key_seq);
  });
  if (!s) return s.error();
  return verifier.result();
}

Status RocksStorage::check_writable() {
  if (!journal_) return make_error(errc::storage_unavailable, "The store is open read-only.");
  if (journal_->failing())
    return make_error(errc::storage_unavailable, "The last synced write failed.");
  return journal_->run([&](Journal::Txn& txn) {
    txn.writes.put(Cf::meta, "ready_probe", std::to_string(txn.now_ms));
    return Status::Ok();
  });
}

StorageStats RocksStorage::stats() const { return {db_->synced_writes(), db_->wal_syncs()}; }

namespace {
constexpr std::string_view kManifest = "opgate-backup.json";

std::string manifest_json(const BackupInfo& b) {
  return fmt::format(
      R"({{"format_version":{},"created_at_ms":{},"audit_head":{{"seq":{},"hash":"{}"}}}})",
      b.format_version, b.created_at_ms, b.audit_head.seq, crypto::to_hex(b.audit_head.hash));
}

// The manifest a backup was written with; an error names what is wrong.
Result<BackupInfo> read_manifest(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto bad = [&](std::string_view what) {
    return make_error(errc::data_format,
                      fmt::format("The backup's manifest {} {}; it is not restored.", path, what));
  };
  if (!in) return bad("cannot be read");
  boost::json::error_code ec;
  auto v = boost::json::parse(text.str(), ec);
  if (ec || !v.is_object()) return bad("is not JSON");
  const auto& o = v.as_object();
  const auto* format = o.if_contains("format_version");
  const auto* created = o.if_contains("created_at_ms");
  const auto* head = o.if_contains("audit_head");
  if (!format || !format->is_int64() || !created || !created->is_int64() || !head ||
      !head->is_object())
    return bad("lacks format_version, created_at_ms or audit_head");
  const auto* seq = head->as_object().if_contains("seq");
  const auto* hash = head->as_object().if_contains("hash");
  if (!seq || !(seq->is_uint64() || (seq->is_int64() && seq->as_int64() >= 0)) || !hash ||
      !hash->is_string())
    return bad("has no audit_head seq (a count, 0 or more) and hash");
  BackupInfo info;
  info.format_version = static_cast<int>(format->as_int64());
  info.created_at_ms = created->as_int64();
  info.audit_head.seq = seq->to_number<uint64_t>();
  auto raw = crypto::from_hex(hash->as_string());
  if (!raw) return bad("has an audit_head hash that is not hex");
  info.audit_head.hash = std::move(*raw);
  return info;
}
}  // namespace

Result<BackupInfo> RocksStorage::backup_to(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::path(dir).is_absolute())
    return make_error(errc::bad_request, "The backup directory must be an absolute path.");
  if (fs::exists(dir, ec))
    return make_error(errc::conflict, "The backup directory already exists: " + dir);
  fs::create_directories(dir, ec);
  if (ec) return make_error(errc::bad_request, "Cannot create " + dir + ": " + ec.message());
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  // The checkpoint flushes the memtables first: it holds every write that
  // was durable when it began.
  OPGATE_TRY(db_->checkpoint((fs::path(dir) / "data").string()));
  fs::permissions(fs::path(dir) / "data", fs::perms::owner_all, fs::perm_options::replace, ec);
  BackupInfo info;
  info.dir = dir;
  info.created_at_ms = clock_->now_ms();
  info.format_version = kFormatVersion;
  // The copy's own head: verified from the copy, not from the live store.
  {
    OpenOptions read_only;
    read_only.read_only = true;
    auto copy = RocksStorage::open((fs::path(dir) / "data").string(), read_only, *clock_);
    if (!copy) return copy.error();
    OPGATE_ASSIGN_OR_RETURN(auto v, (*copy)->verify_audit());
    if (!v.ok)
      return make_error(errc::corrupt_record,
                        "The copy's audit chain does not verify: " + v.problem);
    info.audit_head = v.head;
  }
  OPGATE_TRY(write_file_atomically((fs::path(dir) / kManifest).string(), manifest_json(info)));
  return info;
}

Result<BackupInfo> RocksStorage::restore(const std::string& backup_dir, const std::string& data_dir,
                                         const Clock& clock) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path from = fs::path(backup_dir) / "data";
  if (!fs::exists(fs::path(backup_dir) / kManifest, ec) || !fs::is_directory(from, ec))
    return make_error(errc::bad_request, backup_dir + " is not an opgate backup (no " +
                                             std::string(kManifest) + " and data/)");
  if (fs::exists(data_dir, ec))
    return make_error(errc::conflict, "The data directory already exists: " + data_dir +
                                          "; restore into a new one");
  OPGATE_ASSIGN_OR_RETURN(const BackupInfo manifest,
                          read_manifest((fs::path(backup_dir) / kManifest).string()));
  BackupInfo info;
  {
    // Opening checks the format version; the chain must verify.
    OpenOptions read_only;
    read_only.check_permissions = false;
    read_only.read_only = true;
    auto copy = RocksStorage::open(from.string(), read_only, clock);
    if (!copy) return copy.error();
    OPGATE_ASSIGN_OR_RETURN(auto v, (*copy)->verify_audit());
    if (!v.ok)
      return make_error(errc::corrupt_record,
                        "The backup's audit chain does not verify: " + v.problem);
    info.audit_head = v.head;
    info.format_version = (*copy)->db_->format_version();
  }
  // The copy must be the one its manifest describes: another format, or a
  // chain that ends elsewhere (records cut off, or another store's data
  // under this manifest), is refused.
  if (manifest.format_version != info.format_version)
    return make_error(errc::data_format,
                      fmt::format("The backup's manifest says data format {}, but its data holds "
                                  "format {}; it is not restored.",
                                  manifest.format_version, info.format_version));
  if (manifest.audit_head.seq != info.audit_head.seq ||
      manifest.audit_head.hash != info.audit_head.hash)
    return make_error(
        errc::corrupt_record,
        fmt::format("The backup's manifest says its audit chain ends at record #{} "
                    "({}), but its data ends at #{} ({}); it is not restored.",
                    manifest.audit_head.seq, crypto::to_hex(manifest.audit_head.hash).substr(0, 16),
                    info.audit_head.seq, crypto::to_hex(info.audit_head.hash).substr(0, 16)));
  // Copied beside it, synced, then renamed into place: a copy cut short
  // (a full disk) leaves no data directory that a start would take for a
  // new, empty one.
  const fs::path target(data_dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path staging = fs::path(data_dir + ".restoring");
  fs::create_directories(parent, ec);
  fs::remove_all(staging, ec);  // left by a restore cut short
  fs::copy(from, staging, fs::copy_options::recursive, ec);
  Status placed = ec ? Status(make_error(errc::data_dir, "Cannot copy into " + staging.string() +
                                                             ": " + ec.message()))
                     : Status::Ok();
  if (placed) {
    fs::permissions(staging, fs::perms::owner_all, fs::perm_options::replace, ec);
    for (auto& entry : fs::directory_iterator(staging, ec))
      fs::permissions(entry.path(), fs::perms::owner_read | fs::perms::owner_write,
                      fs::perm_options::replace, ec);
    placed = sync_directory(staging.string(), /*files=*/true);
  }
  if (placed) {
    fs::rename(staging, target, ec);
    if (ec)
      placed =
          make_error(errc::data_dir, "Cannot move the copy to " + data_dir + ": " + ec.message());
  }
  if (placed) placed = sync_directory(parent.string());
  if (!placed) {
    fs::remove_all(staging, ec);
    return placed.error();
  }
  info.dir = data_dir;
  info.created_at_ms = manifest.created_at_ms;
  return info;
}

}  // namespace opgate::store::rocks
