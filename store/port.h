// The storage port: every record the daemon keeps (inbox events, sessions
// and their tool calls, operations, outbox items, the ledger, the audit
// chain, orders and what opgate moved for them) is reached through these
// interfaces, never through a backend's key layout or tables.
//
// A Transaction sees its own writes and everything committed before it, and
// is serialised with every other transaction that touches the same records;
// Storage::transact() commits its writes as one atomic, durable unit and
// returns Ok only once they are durable. Reader sees durable state only:
// nothing read through it can be taken back by a crash.
//
// The conformance suite (tests/conformance/) states these contracts as
// tests; every backend must pass it. Implementations are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "opgate.pb.h"

namespace opgate::store {

// An inbox event waiting for the worker, with the id of its queue entry.
struct QueuedEvent {
  std::string queue_id;
  pb::InboxEvent event;
  std::string event_key;  // the backend's own reference to the event, if it has one
};

// What append_events did with one event.
enum class Appended {
  stored,     // new: stored (and queued if asked)
  duplicate,  // the same webhook-id was stored before with the same body
  conflict,   // the same webhook-id was stored before with another body
};

struct NewEvent {
  pb::InboxEvent event;  // body_sha256 set
  bool queue = false;    // queue it for the worker
  // event serialized, made ahead by the caller (the inbox does it on the
  // thread that received the event, not on the one that commits); when
  // empty, the backend serializes event.
  std::string record;
};

using OutboxIds = std::set<std::string, std::less<>>;

struct OutboxEntry {
  std::string id;
  pb::OutboxItem item;
};

// Where an item stands in its queue's due order: after every item due
// earlier, and after those due at the same time with a lower id.
struct DuePosition {
  int64_t not_before_ms = INT64_MIN;  // the default: before every item
  std::string id;

  static DuePosition of(const OutboxEntry& e) { return {e.item.not_before_ms(), e.id}; }
};

// A page of a queue read from a position: its items, and where the read
// stopped (after the last item it met, also one gone before it was read):
// the next page starts there. No end: the read met nothing, the walk is over.
struct DuePage {
  std::vector<OutboxEntry> entries;
  std::optional<DuePosition> end;
};

// Outbox items wait in two queues, so that notifications (to endpoints that
// may be slow or down) never hold up executions and tool results.
enum class Queue { work, notifications };
inline Queue queue_of(pb::OutboxKind kind) {
  return kind == pb::OUTBOX_NOTIFY_EVENT || kind == pb::OUTBOX_NOTIFY_DELIVERY
             ? Queue::notifications
             : Queue::work;
}

struct OperationQuery {
  std::optional<pb::OperationState> state;  // none: every state
  std::string after;                        // operation key; "" from the start
  size_t limit = 100;
  // Only operations it accepts are returned (and count towards the limit).
  std::function<bool(const pb::Operation&)> accept;
};

struct OperationPage {
  std::vector<pb::Operation> operations;
  std::string next_after;  // "" when there are no more
};

// An operation and its audit records in chain order.
struct OperationHistory {
  pb::Operation operation;
  std::vector<pb::AuditRecord> records;
};

// An operation as its transaction's caller reads it once the transaction has
// committed, to answer with (Transaction::read_after_commit): its history
// and its outbox items, as they are just after the commit.
struct CommittedRead {
  std::string operation_key;
  bool read = false;                        // set once both are read
  std::optional<OperationHistory> history;  // none: no such operation
  std::vector<OutboxEntry> items;           // in id order
};

struct LedgerQuery {
  std::string session_id;  // "" matches any
  std::string owner;       // "" matches any
  std::string order_id;    // "" matches any
  // In operation-key order: the rows after this key, at most `limit` of
  // them (0: every one).
  std::string after;
  size_t limit = 0;
};

struct AuditHead {
  uint64_t seq = 0;  // 0: the chain is empty
  std::string hash;  // raw 32 bytes
};

struct AuditVerification {
  uint64_t records = 0;
  bool ok = true;
  uint64_t first_bad_seq = 0;
  std::string problem;
  AuditHead head;
};

struct BackupInfo {
  std::string dir;
  int64_t created_at_ms = 0;
  AuditHead audit_head;  // the chain's head in the copy
  int format_version = 0;
};

// Counts kept in step with the writes, so reading them costs nothing.
struct StateCounts {
  std::map<pb::OperationState, int64_t> operations;
  std::map<pb::Outcome, int64_t> settled;  // settled operations by outcome
};

// Records by key, for Transaction::read_ahead().
struct ReadAhead {
  std::vector<std::string> outbox_items;  // by id
  std::vector<std::string> operations;    // by key
  std::vector<std::string> orders;        // by order id
  std::vector<std::string> funds;         // by order id
  std::vector<pb::CallRef> calls;
  std::vector<std::string> ledger;  // entries by operation key
};

class Reader {
 public:
  virtual ~Reader() = default;

  // --- Inbox
  // The stored event with that source and webhook-id; none if never stored.
  virtual Result<std::optional<pb::InboxEvent>> event(const std::string& source,
                                                      const std::string& webhook_id) = 0;
  // Queued events in queue order, starting after `after` (a queue id; "" from
  // the first), at most `limit`.
  virtual Result<std::vector<QueuedEvent>> queued(const std::string& after, size_t limit) = 0;
  // How many events are queued.
  virtual Result<size_t> queued_count() = 0;

  // --- Sessions and tool calls
  virtual Result<std::optional<pb::Session>> session(const std::string& session_id) = 0;
  // Session ids in id order after `after`, at most `limit`.
  virtual Result<std::vector<std::string>> session_ids(const std::string& after, size_t limit) = 0;
  virtual Result<std::optional<pb::ToolCall>> call(const pb::CallRef& ref) = 0;
  // Every call of a session, in (turn, call) order.
  virtual Result<std::vector<pb::ToolCall>> calls_of(const std::string& session_id) = 0;
  // The calls of one turn of a session in call id order, those after
  // `after`, at most `limit`.
  virtual Result<std::vector<pb::ToolCall>> calls_of_turn(const std::string& session_id,
                                                          const std::string& turn_id,
                                                          const std::string& after,
                                                          size_t limit) = 0;

  // --- Operations
  virtual Result<std::optional<pb::Operation>> operation(const std::string& key) = 0;
  // Operations in key order (filtered by state and `accept`), paged.
  virtual Result<OperationPage> operations(const OperationQuery& query) = 0;
  // Every operation on an order (any owner, kind and version).
  virtual Result<std::vector<pb::Operation>> operations_of_order(const std::string& order_id) = 0;
  // Every operation in key order to `visit`, until it returns false: for
  // reading a long history in one pass (a report). The message is valid only
  // during the call; a backend may reuse it. By default, page by page.
  virtual Status visit_operations(const std::function<bool(const pb::Operation&)>& visit) {
    OperationQuery q;
    q.limit = 1000;
    for (;;) {
      OPGATE_ASSIGN_OR_RETURN(auto page, operations(q));
      for (const auto& op : page.operations)
        if (!visit(op)) return Status::Ok();
      if (page.next_after.empty()) return Status::Ok();
      q.after = page.next_after;
    }
  }
  // Keys of pending operations whose expiry is at or before now_ms, oldest
  // expiry first, at most `limit`.
  virtual Result<std::vector<std::string>> expired_by(int64_t now_ms, size_t limit) = 0;
  virtual Result<StateCounts> counts() = 0;

  // --- Orders
  virtual Result<std::optional<pb::Order>> order(const std::string& order_id) = 0;
  // What opgate moved for the order; all zero if nothing yet.
  virtual Result<pb::OrderFunds> funds(const std::string& order_id) = 0;

  // --- Ledger
  virtual Result<std::optional<pb::LedgerEntry>> ledger_entry(const std::string& operation_key) = 0;
  // Rows matching every non-empty field of the query, in operation key order.
  virtual Result<std::vector<pb::LedgerEntry>> ledger(const LedgerQuery& query) = 0;

  // --- Audit chain
  // An operation's records in chain order.
  virtual Result<std::vector<pb::AuditRecord>> audit_of(const std::string& operation_key) = 0;
  // The operation with that key and its records; none if there is no such
  // operation. A backend may read both at one moment, in one round trip; by
  // default, two reads.
  virtual Result<std::optional<OperationHistory>> operation_history(const std::string& key) {
    OPGATE_ASSIGN_OR_RETURN(auto op, operation(key));
    if (!op) return std::optional<OperationHistory>();
    OPGATE_ASSIGN_OR_RETURN(auto records, audit_of(key));
    return std::optional<OperationHistory>(OperationHistory{std::move(*op), std::move(records)});
  }
  // Records with seq > after_seq in chain order, at most `limit`.
  virtual Result<std::vector<pb::AuditRecord>> audit(uint64_t after_seq, size_t limit) = 0;
  virtual Result<AuditHead> audit_head() = 0;

  // --- Outbox
  // Items of the queue whose not_before_ms is at or before now_ms, earliest
  // first, at most `limit`, leaving out those with an id in `except` (work
  // the caller holds already): they are not read and do not count. A store
  // several processes share may leave an item to the process that queued
  // or last wrote it for a while (PostgreSQL's handoff): the others see it
  // due later.
  virtual Result<std::vector<OutboxEntry>> due(Queue queue, int64_t now_ms, size_t limit,
                                               const OutboxIds& except) = 0;
  // due() from a position in due order (due time, then id) onward, with
  // nothing left out: a caller that walks the whole queue reads it a page
  // at a time, each page after the last item of the one before.
  virtual Result<DuePage> due_after(Queue queue, int64_t now_ms, const DuePosition& after,
                                    size_t limit) = 0;
  // The earliest time an item of the queue is due for this process, if
  // there is one.
  virtual Result<std::optional<int64_t>> next_due_ms(Queue queue) = 0;
  // The item with that id as stored now; none if it is gone. A transaction
  // that reads it and then updates or removes it does so before any other
  // transaction can: the claim of a piece of work (is it still as I saw it?
  // then it is mine, with my lease token) is exclusive across processes.
  virtual Result<std::optional<pb::OutboxItem>> outbox_item(const std::string& id) = 0;
  // outbox_item() for each id, in the order given, read together: what a
  // backend that reads over a network does in one round trip.
  virtual Result<std::vector<std::optional<pb::OutboxItem>>> outbox_items(
      const std::vector<std::string>& ids) {
    std::vector<std::optional<pb::OutboxItem>> out;
    out.reserve(ids.size());
    for (const auto& id : ids) {
      OPGATE_ASSIGN_OR_RETURN(auto item, outbox_item(id));
      out.push_back(std::move(item));
    }
    return out;
  }
  // Every item for the operation, in id order.
  virtual Result<std::vector<OutboxEntry>> outbox_of(const std::string& operation_key) = 0;

  // --- Notifications
  // The endpoint's standing; a fresh state (name set) if none was kept.
  virtual Result<pb::EndpointState> endpoint_state(const std::string& name) = 0;
  // Every endpoint standing kept, by name: also those of endpoints no
  // longer configured here, whose deliveries wait (held) for a node that
  // knows them.
  virtual Result<std::vector<pb::EndpointState>> endpoint_states() = 0;
  // Notification events created at or after since_ms, oldest first, at most
  // `limit` (kept for replay).
  virtual Result<std::vector<pb::Notification>> notifications_since(int64_t since_ms,
                                                                    size_t limit) = 0;

  // --- Kept records: small records a feature keeps by kind and key (agent
  // tokens, for one), its own protobuf serialized; kinds are the domain's
  // names and keys 1-200 characters.
  virtual Result<std::optional<std::string>> kept(std::string_view kind, std::string_view key) = 0;
  // The kind's records with a key after `after` ("" from the first), in key
  // order, at most `limit`: {key, value} each.
  virtual Result<std::vector<std::pair<std::string, std::string>>> kept_all(
      std::string_view kind, const std::string& after, size_t limit) = 0;
};

// The read after the commit, for any backend: two reads. Leaves `read`
// unset if either fails.
inline void read_committed(Reader& reader, CommittedRead& r) {
  auto history = reader.operation_history(r.operation_key);
  if (!history) return;
  auto items = reader.outbox_of(r.operation_key);
  if (!items) return;
  r.history = std::move(*history);
  r.items = std::move(*items);
  r.read = true;
}

class Transaction : public virtual Reader {
 public:
  // The transaction's time: every record it writes carries it.
  virtual int64_t now_ms() const = 0;

  // Runs `fn` once the transaction is durable, and never if it fails: log
  // lines and wake-ups about what it did.
  void after_commit(std::function<void()> fn) { after_commit_.push_back(std::move(fn)); }
  // For backends: what to run after the commit.
  std::vector<std::function<void()>> take_after_commit() { return std::move(after_commit_); }

  // Reads `*into` once the transaction has committed, before transact()
  // returns (left unread if the commit or the read fails): what the caller
  // answers with. A backend that reads over a network reads it in the
  // commit's round trip. `into` must outlive transact().
  void read_after_commit(CommittedRead* into) { read_after_commit_ = into; }
  // For backends: what to read after the commit, if anything.
  CommittedRead* committed_read() const { return read_after_commit_; }

  // Names records the transaction is about to read, so that a backend that
  // reads over a network reads them together, in one round trip, each under
  // its lock, the locks taken in the order of ReadAhead's fields and of
  // each list (the order in which the transaction would read them one by
  // one). Reading them afterwards costs nothing; what they read is the same
  // with or without it. Extra names cost a read and a lock, nothing more.
  virtual Status read_ahead(const ReadAhead& records) { return Status::Ok(); }

  // --- Inbox
  // Removes the event's queue entry and marks it processed.
  virtual void finish_event(const QueuedEvent& queued) = 0;
  // Moves the event from the queue to its session's waiting list.
  virtual void park_event(const QueuedEvent& queued) = 0;
  // Moves every event waiting for the session back to the queue; returns
  // how many.
  virtual Result<size_t> release_parked(const std::string& session_id) = 0;

  // --- Sessions and tool calls (insert or replace)
  virtual void put_session(const pb::Session& session) = 0;
  virtual void put_call(const pb::ToolCall& call) = 0;

  // --- Operations (insert or replace; every index kept in step)
  virtual Status put_operation(const pb::Operation& operation) = 0;

  // --- Orders
  virtual void put_order(const pb::Order& order) = 0;
  virtual void put_funds(const pb::OrderFunds& funds) = 0;

  // --- Ledger
  virtual void put_ledger(const pb::LedgerEntry& entry) = 0;

  // --- Audit chain: seq, at_ms, prev_hash and hash are assigned here, in
  // the order of the calls, chained to the head this transaction sees.
  virtual void append_audit(pb::AuditRecord record) = 0;
  // The head the appends so far reach, as an operation and its notification
  // events are to record it (put_operation, keep_notification, enqueue).
  // A backend may answer with a provisional head and put the real one into
  // what recorded it as the transaction commits, so that the chain is
  // locked for the commit alone; by default it is audit_head().
  virtual Result<AuditHead> head_to_record() { return audit_head(); }

  // --- Outbox
  virtual void enqueue(pb::OutboxItem item) = 0;
  // Replaces an item (attempts, not_before_ms, last_error).
  virtual void update_outbox(const OutboxEntry& entry) = 0;
  // It is not an error if the item is gone.
  virtual void remove_outbox(const std::string& id) = 0;

  // --- Notifications
  virtual void put_endpoint_state(const pb::EndpointState& state) = 0;
  // Keeps an event for replay (`opgate notify replay`).
  virtual void keep_notification(const pb::Notification& event) = 0;

  // --- Kept records (Reader::kept): insert or replace, and remove (it is
  // not an error if the record is gone).
  virtual void keep(std::string_view kind, std::string_view key, std::string value) = 0;
  virtual void forget(std::string_view kind, std::string_view key) = 0;
  // Whether events are also queued for the notifier to fan out: false while
  // no endpoint is configured (they are kept for replay either way).
  bool fans_out_notifications() const { return fans_out_; }
  // For backends: the storage's setting when the transaction began.
  void set_fans_out_notifications(bool on) { fans_out_ = on; }

 private:
  std::vector<std::function<void()>> after_commit_;
  CommittedRead* read_after_commit_ = nullptr;
  bool fans_out_ = true;
};

struct StorageStats {
  uint64_t synced_writes = 0;  // durable commits requested
  uint64_t wal_syncs = 0;      // fsyncs (or commits) the backend performed
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Runs fn in a transaction. If fn returns Ok, its writes are committed
  // atomically and durably before transact returns Ok, and then what fn
  // passed to after_commit() runs; if fn fails, nothing is written and its
  // error is returned. A commit that fails leaves nothing of the transaction
  // visible. fn may run again (a backend may retry a serialisation failure),
  // so it must not act outside the transaction.
  virtual Status transact(const std::function<Status(Transaction&)>& fn) = 0;

  // Durable state only.
  virtual Reader& reader() = 0;

  // Stores each event unless its webhook-id is already stored, atomically
  // and durably, and says what happened to each. Events with the same
  // webhook-id within one call are stored once.
  virtual Result<std::vector<Appended>> append_events(std::vector<NewEvent>& events) = 0;

  // Checks the whole audit chain.
  virtual Result<AuditVerification> verify_audit() = 0;

  // Ok when a durable write succeeds now (for /readyz).
  virtual Status check_writable() = 0;

  // Writes a consistent copy of everything committed so far into `dir`
  // (absolute; it must not exist) while the daemon serves. A backend whose
  // copies are made by its own tools says so.
  virtual Result<BackupInfo> backup_to(const std::string& dir) {
    return make_error(errc::bad_request,
                      "This storage backend is backed up with its own tools, not by opgate.");
  }

  virtual StorageStats stats() const = 0;

  // Whether transactions queue notification events for fan-out (see
  // Transaction::fans_out_notifications); the daemon sets it from its
  // configuration, at start and on every reload.
  void fan_out_notifications(bool on) { fan_out_.store(on, std::memory_order_relaxed); }
  bool fans_out_notifications() const { return fan_out_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> fan_out_{true};
};

}  // namespace opgate::store
