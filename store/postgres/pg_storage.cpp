#include "store/postgres/pg_storage.h"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/crypto.h"
#include "store/audit_chain.h"
#include "store/postgres/schema.h"

namespace opgate::store::pg {

namespace {

// The nodes alive now: those whose node lease ("node:" and the id) runs.
#define OPGATE_LIVE_NODES                                                          \
  "(SELECT substr(name, 6) FROM leases WHERE name LIKE 'node:%' AND expires_at > " \
  "clock_timestamp())"
// Another node's item this node may take: due, a handoff ($5 ms) after its
// node wrote it, and its node gone or it left due too long ($7 ms); not one
// of this node's lanes' ($6).
#define OPGATE_TAKEN_OVER                                                          \
  "not_before_ms <= $2 AND node_since_ms <= $2 - $5 AND (GREATEST(not_before_ms, " \
  "node_since_ms) <= $2 - $7 OR node NOT IN " OPGATE_LIVE_NODES ") AND id <> ALL($6::bigint[])"

// Items of queue $1 due at $2 for node $4 in due order, at most $3: its
// own, those of no node, and others' it may take over (the first or the
// last of them by due order, OTHERS "" or "DESC"); none of $6. AFTER
// narrows each part further.
#define OPGATE_DUE(AFTER, OTHERS)                                                              \
  "SELECT id, data FROM ("                                                                     \
  "(SELECT id, data, not_before_ms FROM outbox WHERE queue = $1::bigint AND node = $4 "        \
  "AND not_before_ms <= $2 AND id <> ALL($6::bigint[]) " AFTER                                 \
  "ORDER BY not_before_ms, id LIMIT $3) "                                                      \
  "UNION ALL "                                                                                 \
  "(SELECT id, data, not_before_ms FROM outbox WHERE queue = $1::bigint AND node = '' "        \
  "AND not_before_ms <= $2 AND id <> ALL($6::bigint[]) " AFTER                                 \
  "ORDER BY not_before_ms, id LIMIT $3) "                                                      \
  "UNION ALL "                                                                                 \
  "(SELECT id, data, not_before_ms FROM ("                                                     \
  "(SELECT id, data, not_before_ms FROM outbox WHERE queue = $1::bigint AND node > '' "        \
  "AND node < $4 AND " OPGATE_TAKEN_OVER " " AFTER                                             \
  ") UNION ALL "                                                                               \
  "(SELECT id, data, not_before_ms FROM outbox WHERE queue = $1::bigint AND node > $4 "        \
  "AND " OPGATE_TAKEN_OVER " " AFTER ")) others ORDER BY not_before_ms " OTHERS ", id " OTHERS \
  " LIMIT $3)"                                                                                 \
  ") due ORDER BY not_before_ms, id LIMIT $3"

// name -> SQL. Integer parameters are bigint; text keys compare in "C" order.
const std::vector<std::pair<const char*, const char*>> kStatements = {
    // Locks and the transaction's frame ("begin" is prepared per isolation).
    {"lock", "SELECT pg_advisory_xact_lock($1::bigint)"},
    // Several in one statement, in the array's order.
    {"locks",
     "SELECT pg_advisory_xact_lock(id) FROM unnest($1::bigint[]) WITH ORDINALITY AS t(id, n) "
     "ORDER BY n"},
    // The database's clock (store/postgres/database_clock.h).
    {"db_now", "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"},
    {"commit", "COMMIT"},
    // The audit head's early release (PgTransaction::finish): the commit that
    // holds the head does not wait for its flush (the statements that chain
    // records turn synchronous_commit off for their transaction); a
    // transaction of its own, writing WAL and committed synchronously,
    // started after it, waits for it (SharedFlush).
    {"durable", "SELECT pg_logical_emit_message(true, 'opgate', 'durable')"},
    // Inbox.
    {"ev_get", "SELECT data FROM inbox_events WHERE source = $1 AND webhook_id = $2"},
    {"ev_hash", "SELECT body_sha256 FROM inbox_events WHERE source = $1 AND webhook_id = $2"},
    // A batch of events in one statement, in the order given (the arrays'):
    // each is stored unless its id is, and queued if asked; per event, in
    // order, whether it was stored and the body hash its id held before.
    {"ev_append",
     "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::boolean[], "
     "$5::bigint[], $6::bytea[], $7::boolean[]) WITH ORDINALITY AS t(source, webhook_id, "
     "body_sha256, processed, processed_at_ms, data, queue, n)), "
     "ins AS (INSERT INTO inbox_events (source, webhook_id, body_sha256, processed, "
     "processed_at_ms, data) SELECT source, webhook_id, body_sha256, processed, processed_at_ms, "
     "data FROM input ORDER BY n ON CONFLICT DO NOTHING RETURNING source, webhook_id), "
     "q AS (INSERT INTO inbox_queue (source, webhook_id) "
     "SELECT i.source, i.webhook_id FROM input i JOIN ins "
     "ON ins.source = i.source AND ins.webhook_id = i.webhook_id WHERE i.queue "
     "ORDER BY i.n RETURNING id) "
     "SELECT (ins.source IS NOT NULL), (SELECT e.body_sha256 FROM inbox_events e "
     "WHERE e.source = i.source AND e.webhook_id = i.webhook_id) FROM input i "
     "LEFT JOIN ins ON ins.source = i.source AND ins.webhook_id = i.webhook_id ORDER BY i.n"},
    {"ev_put",
     "INSERT INTO inbox_events (source, webhook_id, body_sha256, processed, processed_at_ms, data) "
     "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (source, webhook_id) DO UPDATE SET "
     "body_sha256 = EXCLUDED.body_sha256, processed = EXCLUDED.processed, "
     "processed_at_ms = EXCLUDED.processed_at_ms, data = EXCLUDED.data"},
    {"q_page",
     "SELECT q.id, e.data FROM inbox_queue q LEFT JOIN inbox_events e "
     "ON e.source = q.source AND e.webhook_id = q.webhook_id "
     "WHERE q.id > $1 ORDER BY q.id LIMIT $2"},
    {"q_count", "SELECT count(*)::bigint FROM inbox_queue"},
    {"q_del", "DELETE FROM inbox_queue WHERE id = $1"},
    // Parks the entry if it is still queued (two nodes parking it park it once).
    {"w_park",
     "WITH d AS (DELETE FROM inbox_queue WHERE id = $1 RETURNING source, webhook_id) "
     "INSERT INTO inbox_waiting (session_id, source, webhook_id) "
     "SELECT $2::text, source, webhook_id FROM d"},
    {"w_release",
     "WITH moved AS (DELETE FROM inbox_waiting WHERE session_id = $1 "
     "RETURNING id, source, webhook_id) "
     "INSERT INTO inbox_queue (source, webhook_id) SELECT source, webhook_id FROM moved "
     "ORDER BY id RETURNING id"},
    // Sessions and calls.
    {"s_get", "SELECT data FROM sessions WHERE session_id = $1"},
    {"s_ids", "SELECT session_id FROM sessions WHERE session_id > $1 ORDER BY session_id LIMIT $2"},
    {"s_put",
     "INSERT INTO sessions (session_id, owner, data) VALUES ($1, $2, $3) "
     "ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, data = EXCLUDED.data"},
    {"c_get", "SELECT data FROM calls WHERE session_id = $1 AND turn_id = $2 AND call_id = $3"},
    {"c_of", "SELECT data FROM calls WHERE session_id = $1 ORDER BY turn_id, call_id"},
    {"c_turn",
     "SELECT data FROM calls WHERE session_id = $1 AND turn_id = $2 AND call_id > $3 "
     "ORDER BY call_id LIMIT $4"},
    {"c_put",
     "INSERT INTO calls (session_id, turn_id, call_id, data) VALUES ($1, $2, $3, $4) "
     "ON CONFLICT (session_id, turn_id, call_id) DO UPDATE SET data = EXCLUDED.data"},
    // Operations.
    {"o_get", "SELECT data FROM operations WHERE key = $1"},
    {"o_state", "SELECT state, outcome FROM operations WHERE key = $1"},
    {"o_page_all", "SELECT data FROM operations WHERE key > $1 ORDER BY key LIMIT $2"},
    {"o_page_state",
     "SELECT data FROM operations WHERE state = $1 AND key > $2 ORDER BY key LIMIT $3"},
    {"o_keys_of_order", "SELECT key FROM operations WHERE order_id = $1 ORDER BY key"},
    {"o_of_order", "SELECT data FROM operations WHERE order_id = $1 ORDER BY key"},
    {"o_expired",
     "SELECT key FROM operations WHERE state = 1 AND expires_at_ms <= $1 "
     "ORDER BY expires_at_ms, key LIMIT $2"},
    {"o_put",
     "INSERT INTO operations (key, state, expires_at_ms, order_id, session_id, owner, data, "
     "outcome) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (key) DO UPDATE SET "
     "state = EXCLUDED.state, outcome = EXCLUDED.outcome, expires_at_ms = EXCLUDED.expires_at_ms, "
     "order_id = EXCLUDED.order_id, session_id = EXCLUDED.session_id, owner = EXCLUDED.owner, "
     "data = EXCLUDED.data"},
    // A count is its row and the changes not folded into it yet.
    {"counts",
     "SELECT state, GREATEST(0, sum(n))::bigint FROM (SELECT state, n FROM state_counts "
     "UNION ALL SELECT value, delta FROM count_changes WHERE kind = 0) c "
     "GROUP BY state ORDER BY state"},
    {"outcomes",
     "SELECT outcome, GREATEST(0, sum(n))::bigint FROM (SELECT outcome, n FROM outcome_counts "
     "UNION ALL SELECT value, delta FROM count_changes WHERE kind = 1) c "
     "GROUP BY outcome ORDER BY outcome"},
    // A transaction's changes, one row each: inserts wait for nothing.
    {"counts_change",
     "INSERT INTO count_changes (kind, value, delta) "
     "SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])"},
    // Every change visible now into the counts; two folding at once each
    // fold what the other did not take.
    {"counts_fold",
     "WITH moved AS (DELETE FROM count_changes RETURNING kind, value, delta), "
     "sums AS (SELECT kind, value, sum(delta)::bigint AS d FROM moved GROUP BY kind, value), "
     "s AS (UPDATE state_counts c SET n = c.n + sums.d FROM sums "
     "WHERE sums.kind = 0 AND c.state = sums.value RETURNING 1), "
     "o AS (UPDATE outcome_counts c SET n = c.n + sums.d FROM sums "
     "WHERE sums.kind = 1 AND c.outcome = sums.value RETURNING 1) "
     "SELECT (SELECT count(*) FROM s) + (SELECT count(*) FROM o)"},
    // Orders and funds.
    {"r_get", "SELECT data FROM orders WHERE order_id = $1"},
    {"r_put",
     "INSERT INTO orders (order_id, data) VALUES ($1, $2) "
     "ON CONFLICT (order_id) DO UPDATE SET data = EXCLUDED.data"},
    {"f_get", "SELECT data FROM funds WHERE order_id = $1"},
    {"f_put",
     "INSERT INTO funds (order_id, data) VALUES ($1, $2) "
     "ON CONFLICT (order_id) DO UPDATE SET data = EXCLUDED.data"},
    // Ledger.
    {"l_get", "SELECT data FROM ledger WHERE operation_key = $1"},
    {"l_query",
     "SELECT data FROM ledger WHERE ($1 = '' OR session_id = $1) AND ($2 = '' OR owner = $2) "
     "AND ($3 = '' OR order_id = $3) AND operation_key > $4 ORDER BY operation_key LIMIT $5"},
    {"l_put",
     "INSERT INTO ledger (operation_key, session_id, owner, order_id, data) "
     "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (operation_key) DO UPDATE SET "
     "session_id = EXCLUDED.session_id, owner = EXCLUDED.owner, order_id = EXCLUDED.order_id, "
     "data = EXCLUDED.data"},
    // Audit chain.
    {"a_of", "SELECT data FROM audit WHERE operation_key = $1 ORDER BY seq"},
    // An operation (part 0) and its records (part 1), in one snapshot. Named
    // "o_" as it reads the operations table.
    {"o_history",
     "SELECT 0::bigint AS part, 0::bigint AS seq, data FROM operations WHERE key = $1 UNION ALL "
     "SELECT 1::bigint, seq, data FROM audit WHERE operation_key = $1 ORDER BY 1, 2"},
    {"a_page", "SELECT seq, data FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2"},
    {"a_head", "SELECT seq, hash FROM audit_head WHERE id = 1"},
    {"a_head_lock", "SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE"},
    // Records chained on the locked head ($3..$5: each one's seq, operation
    // and data), and the head after the last ($1, $2), in one statement;
    // the transaction's commit then releases the head early (finish()).
    {"a_chain",
     "WITH h AS (UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1) "
     "INSERT INTO audit (seq, operation_key, data) "
     "SELECT u.* FROM unnest($3::bigint[], $4::text[], $5::bytea[]) AS u, "
     "(SELECT set_config('synchronous_commit', 'off', true)) AS early"},
    // Likewise on a guessed head ($6, $7), which the update locks: if the
    // head is another, nothing is written and it fails (division by zero,
    // 22012).
    {"a_chain_guess",
     "WITH h AS (UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1 AND seq = $6 "
     "AND hash = $7 RETURNING 1), r AS (INSERT INTO audit (seq, operation_key, data) "
     "SELECT u.* FROM h, unnest($3::bigint[], $4::text[], $5::bytea[]) AS u RETURNING 1) "
     "SELECT 1 / count(*)::int, set_config('synchronous_commit', 'off', true) FROM h"},
    {"guess_savepoint", "SAVEPOINT head_guess"},
    // Waits until the commit sent before this one on its guess has ended
    // (HeadGuess): its ticket's lock is free then.
    {"chain_wait", "SELECT pg_advisory_xact_lock_shared($1::bigint)"},
    {"guess_rollback", "ROLLBACK TO SAVEPOINT head_guess"},
    // Outbox.
    // Due for this node ($4): its own items and those of no node at their
    // time, oldest first; then other nodes' items once due and a handoff
    // ($5 ms) after their node queued (or last wrote) them, newest first,
    // so as not to race their node for the oldest, if their node is gone
    // (its node lease has lapsed, or it never kept one) or has left them
    // due for longer ($7 ms, counted from when they were both its and
    // due). A claim's lease outlasts that: when it runs out, its holder is
    // gone and any node takes the item at once.
    // Items of $6 (the node's own, in its lanes) are left out.
    // The node's own and other nodes' due items by when they fell due, so
    // that a steady stream of its own never crowds out what it takes over.
    // Each part reads its own range of the index by node (its own items,
    // those of no node, and other nodes' either side of its own), so a
    // node never walks its own backlog for others' items, nor others' for
    // its own.
    {"ob_due", OPGATE_DUE("", "DESC")},
    // The same, from a position in due order on ($8 ms, $9 id), for a walk
    // through the whole queue: every part in due order, so that a page
    // ends before any item it left out.
    {"ob_due_after", OPGATE_DUE("AND (not_before_ms, id) > ($8::bigint, $9::bigint) ", "")},
    {"ob_next",
     "SELECT LEAST((SELECT min(not_before_ms) FROM outbox WHERE queue = $1::bigint "
     "AND node IN ($2, '')), (SELECT min(CASE WHEN node IN " OPGATE_LIVE_NODES " "
     "THEN GREATEST(not_before_ms, node_since_ms) + $4::bigint "
     "ELSE GREATEST(not_before_ms, node_since_ms + $3::bigint) END) "
     "FROM outbox WHERE queue = $1::bigint AND node NOT IN ($2, '')))::bigint"},
    {"ob_get", "SELECT data FROM outbox WHERE id = $1"},
    // A record of each kind by its primary key, in one statement
    // (PgTransaction::read_ahead): one row, a column for each kind, null for
    // a kind not asked for ($n null) or a record that is not there. Scalar
    // parameters, so that its plan is one for every call (an array's length
    // would make the planner plan each call anew).
    {"read_together",
     "SELECT (SELECT data FROM operations WHERE key = $1), "
     "(SELECT data FROM orders WHERE order_id = $2), "
     "(SELECT data FROM funds WHERE order_id = $3), "
     "(SELECT data FROM ledger WHERE operation_key = $4), "
     "(SELECT data FROM outbox WHERE id = $5), "
     "(SELECT data FROM calls WHERE session_id = $6 AND turn_id = $7 AND call_id = $8)"},
    {"ob_of", "SELECT id, data FROM outbox WHERE operation_key = $1 ORDER BY id"},
    // Several items by id: the array's position (from 1) and the item's
    // data, null for one that is gone.
    {"ob_get_many",
     "SELECT t.n, o.data FROM unnest($1::bigint[]) WITH ORDINALITY AS t(id, n) "
     "LEFT JOIN outbox o ON o.id = t.id ORDER BY t.n"},
    {"ob_ins",
     "INSERT INTO outbox (not_before_ms, data, queue, operation_key, node, node_since_ms) "
     "VALUES ($1, $2, $3::bigint, $4, $5, $6)"},
    {"ob_upd",
     "UPDATE outbox SET not_before_ms = $2, data = $3, node = $4, node_since_ms = $5 "
     "WHERE id = $1"},
    {"ob_del", "DELETE FROM outbox WHERE id = $1"},
    {"lease",
     "INSERT INTO leases AS l (name, holder, token, expires_at) "
     "VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 millisecond') "
     "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, "
     "token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > clock_timestamp() "
     "THEN l.token ELSE l.token + 1 END, expires_at = EXCLUDED.expires_at "
     "WHERE l.holder = EXCLUDED.holder OR l.expires_at <= clock_timestamp() "
     "RETURNING token"},
    // Notifications.
    {"ep_get", "SELECT data FROM endpoint_states WHERE name = $1"},
    {"ep_all", "SELECT data FROM endpoint_states ORDER BY name"},
    // Kept records.
    {"k_get", "SELECT data FROM kept_records WHERE kind = $1 AND key = $2"},
    {"k_all",
     "SELECT key, data FROM kept_records WHERE kind = $1 AND key > $2 ORDER BY key LIMIT $3"},
    {"k_put",
     "INSERT INTO kept_records (kind, key, data) VALUES ($1, $2, $3) "
     "ON CONFLICT (kind, key) DO UPDATE SET data = EXCLUDED.data"},
    {"k_del", "DELETE FROM kept_records WHERE kind = $1 AND key = $2"},
    {"ep_put",
     "INSERT INTO endpoint_states (name, data) VALUES ($1, $2) "
     "ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data"},
    {"n_keep",
     "INSERT INTO notifications (created_at_ms, event_id, data) VALUES ($1, $2, $3) "
     "ON CONFLICT (created_at_ms, event_id) DO UPDATE SET data = EXCLUDED.data"},
    {"n_since",
     "SELECT data FROM notifications WHERE created_at_ms >= $1 "
     "ORDER BY created_at_ms, event_id LIMIT $2"},
    // Wakes every listening process once the transaction commits; the
    // payload names the node that committed.
    {"notify", "SELECT pg_notify('opgate_work', $1)"},
    // Meta.
    {"probe",
     "INSERT INTO meta (key, value) VALUES ('ready_probe', $1) "
     "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"},
};
#undef OPGATE_TAKEN_OVER
#undef OPGATE_LIVE_NODES

// The SQL of one of kStatements.
const char* sql_of(std::string_view name) {
  for (const auto& [n, sql] : kStatements)
    if (name == n) return sql;
  return "";
}

Error corrupt(std::string_view what) {
  return make_error(errc::corrupt_record, fmt::format("a stored {} does not parse", what));
}

template <typename Message>
Result<std::optional<Message>> parsed(const std::optional<std::string>& data,
                                      std::string_view what) {
  if (!data) return std::optional<Message>();
  Message m;
  if (!m.ParseFromString(*data)) return corrupt(what);
  return std::optional<Message>(std::move(m));
}

template <typename Message>
Status parse_cell(const Rows& rows, int row, int col, std::string_view what, Message& m) {
  auto b = rows.bytes(row, col);
  if (!m.ParseFromArray(b.data(), static_cast<int>(b.size()))) return corrupt(what);
  return Status::Ok();
}

// Every row's message in column `col`, from row `first` on.
template <typename Message>
Result<std::vector<Message>> every(const Rows& rows, std::string_view what, int col = 0,
                                   int first = 0) {
  std::vector<Message> out;
  out.reserve(static_cast<size_t>(std::max(0, rows.size() - first)));
  for (int i = first; i < rows.size(); ++i)
    OPGATE_TRY(parse_cell(rows, i, col, what, out.emplace_back()));
  return out;
}

// Lock names: a kind and the record's key parts, unambiguous.
std::string lock_name(char kind, std::initializer_list<std::string_view> parts) {
  std::string s(1, kind);
  for (auto p : parts) {
    s += '\x1f';
    s += p;
  }
  return s;
}

int64_t limit_param(size_t limit) {
  return static_cast<int64_t>(std::min<size_t>(limit, static_cast<size_t>(INT64_MAX)));
}

// A read of one record: its lock and the statement.
struct RecordRead {
  std::string lock;
  Stmt stmt;
};

RecordRead operation_read(const std::string& key) {
  return {lock_name('o', {key}), {"o_get", {text(key)}}};
}
RecordRead order_read(const std::string& order_id) {
  return {lock_name('r', {order_id}), {"r_get", {text(order_id)}}};
}
RecordRead funds_read(const std::string& order_id) {
  return {lock_name('f', {order_id}), {"f_get", {text(order_id)}}};
}
RecordRead call_read(const pb::CallRef& ref) {
  return {lock_name('c', {ref.session_id(), ref.turn_id(), ref.call_id()}),
          {"c_get", {text(ref.session_id()), text(ref.turn_id()), text(ref.call_id())}}};
}
RecordRead ledger_read(const std::string& operation_key) {
  return {lock_name('l', {operation_key}), {"l_get", {text(operation_key)}}};
}
// None for an id no item can have.
std::optional<RecordRead> outbox_read(const std::string& id) {
  auto n = parse_fixed_id(id);
  if (!n) return std::nullopt;
  return RecordRead{lock_name('i', {id}), {"ob_get", {int8(*n)}}};
}

// The record's data: the first column of the first row, if there is one.
std::optional<std::string> record_data(const Rows& rows) {
  if (rows.empty() || rows.null(0, 0)) return std::nullopt;
  return rows.str(0, 0);
}

// Reads of records by key gathered into one "read_together" statement, up
// to one of each kind, and which read each of its columns answers.
class ReadTogether {
 public:
  static constexpr size_t kColumns = 6;
  // False for a read of a kind it does not gather, or of a kind it has.
  bool add(const RecordRead& read) {
    for (size_t kind = 0; kind < kKinds.size(); ++kind) {
      if (read.stmt.name != kKinds[kind]) continue;
      if (reads_[kind]) return false;
      reads_[kind] = &read;
      return true;
    }
    return false;
  }
  // How many reads it gathered.
  size_t size() const {
    size_t n = 0;
    for (const auto* r : reads_) n += r ? 1 : 0;
    return n;
  }
  Stmt statement() const {
    std::vector<Param> params;
    for (size_t kind = 0; kind < kKinds.size(); ++kind) {
      const size_t keys = kind == kCalls ? 3 : 1;  // a call: session, turn and call
      for (size_t k = 0; k < keys; ++k)
        params.push_back(reads_[kind] ? reads_[kind]->stmt.params.at(k) : null_param());
    }
    return {"read_together", std::move(params)};
  }
  // The read its column answers, if any.
  const RecordRead* read_at(size_t column) const {
    return column < reads_.size() ? reads_[column] : nullptr;
  }

 private:
  // In the order of read_together's columns.
  static constexpr std::array<std::string_view, kColumns> kKinds = {"o_get", "r_get",  "f_get",
                                                                    "l_get", "ob_get", "c_get"};
  static constexpr size_t kCalls = 5;
  std::array<const RecordRead*, kColumns> reads_{};
};

// Every read of the port over one query function: outside a transaction it
// runs on a pooled connection; inside one it first takes the locks named.
class PgReads : public virtual Reader {
 public:
  explicit PgReads(const Handoff& handoff) : handoff_(handoff) {}

  Result<std::optional<pb::InboxEvent>> event(const std::string& source,
                                              const std::string& webhook_id) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record({lock_name('e', {source, webhook_id}),
                                               {"ev_get", {text(source), text(webhook_id)}}}));
    return parsed<pb::InboxEvent>(data, "inbox event");
  }

  Result<std::vector<QueuedEvent>> queued(const std::string& after, size_t limit) override {
    int64_t from = 0;
    if (!after.empty()) {
      auto id = parse_fixed_id(after);
      if (!id) return make_error(errc::bad_request, "not a queue id: " + after);
      from = *id;
    }
    OPGATE_ASSIGN_OR_RETURN(auto rows,
                            query({}, {"q_page", {int8(from), int8(limit_param(limit))}}));
    std::vector<QueuedEvent> out;
    out.reserve(rows.size());
    for (int i = 0; i < rows.size(); ++i) {
      QueuedEvent q{fixed_id(rows.int8(i, 0)), {}, {}};
      // An entry whose event is gone stays with an empty event: finishing it
      // removes the entry.
      if (!rows.null(i, 1)) OPGATE_TRY(parse_cell(rows, i, 1, "inbox event", q.event));
      out.push_back(std::move(q));
    }
    return out;
  }

  Result<size_t> queued_count() override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"q_count", {}}));
    return static_cast<size_t>(rows.int8(0, 0));
  }

  Result<std::optional<pb::Session>> session(const std::string& id) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record({lock_name('s', {id}), {"s_get", {text(id)}}}));
    return parsed<pb::Session>(data, "session");
  }

  Result<std::vector<std::string>> session_ids(const std::string& after, size_t limit) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows,
                            query({}, {"s_ids", {text(after), int8(limit_param(limit))}}));
    std::vector<std::string> out;
    for (int i = 0; i < rows.size(); ++i) out.push_back(rows.str(i, 0));
    return out;
  }

  Result<std::optional<pb::ToolCall>> call(const pb::CallRef& ref) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record(call_read(ref)));
    return parsed<pb::ToolCall>(data, "tool call");
  }

  Result<std::vector<pb::ToolCall>> calls_of(const std::string& session_id) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"c_of", {text(session_id)}}));
    return every<pb::ToolCall>(rows, "tool call");
  }

  Result<std::vector<pb::ToolCall>> calls_of_turn(const std::string& session_id,
                                                  const std::string& turn_id,
                                                  const std::string& after, size_t limit) override {
    if (limit == 0) return std::vector<pb::ToolCall>();
    OPGATE_ASSIGN_OR_RETURN(
        auto rows,
        query({}, {"c_turn",
                   {text(session_id), text(turn_id), text(after), int8(limit_param(limit))}}));
    return every<pb::ToolCall>(rows, "tool call");
  }

  Result<std::optional<pb::Operation>> operation(const std::string& key) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record(operation_read(key)));
    return parsed<pb::Operation>(data, "operation");
  }

  Result<OperationPage> operations(const OperationQuery& q) override {
    OperationPage page;
    std::string after = q.after;
    const int64_t chunk = static_cast<int64_t>(std::clamp<size_t>(q.limit + 1, 64, 1000));
    bool more = false;
    for (;;) {
      Result<Rows> rows =
          q.state ? query({}, {"o_page_state",
                               {int8(static_cast<int64_t>(*q.state)), text(after), int8(chunk)}})
                  : query({}, {"o_page_all", {text(after), int8(chunk)}});
      if (!rows) return rows.error();
      OPGATE_ASSIGN_OR_RETURN(auto ops, every<pb::Operation>(*rows, "operation"));
      for (auto& op : ops) {
        after = op.key();
        if (q.accept && !q.accept(op)) continue;
        if (page.operations.size() == q.limit) {
          more = true;
          break;
        }
        page.operations.push_back(std::move(op));
      }
      if (more || rows->size() < chunk) break;
    }
    if (more && !page.operations.empty()) page.next_after = page.operations.back().key();
    return page;
  }

  Result<std::vector<pb::Operation>> operations_of_order(const std::string& order_id) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"o_of_order", {text(order_id)}}));
    return every<pb::Operation>(rows, "operation");
  }

  Result<std::vector<std::string>> expired_by(int64_t now_ms, size_t limit) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows,
                            query({}, {"o_expired", {int8(now_ms), int8(limit_param(limit))}}));
    std::vector<std::string> out;
    for (int i = 0; i < rows.size(); ++i) out.push_back(rows.str(i, 0));
    return out;
  }

  Result<StateCounts> counts() override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"counts", {}}));
    StateCounts c;
    for (int i = pb::STATE_PENDING; i <= pb::STATE_SETTLED; ++i)
      c.operations[static_cast<pb::OperationState>(i)] = 0;
    for (int i = 0; i < rows.size(); ++i)
      c.operations[static_cast<pb::OperationState>(rows.int8(i, 0))] = rows.int8(i, 1);
    OPGATE_ASSIGN_OR_RETURN(auto outcomes, query({}, {"outcomes", {}}));
    for (int i = pb::OUTCOME_SUCCEEDED; i <= pb::OUTCOME_CANCELLED; ++i)
      c.settled[static_cast<pb::Outcome>(i)] = 0;
    for (int i = 0; i < outcomes.size(); ++i)
      c.settled[static_cast<pb::Outcome>(outcomes.int8(i, 0))] = outcomes.int8(i, 1);
    return c;
  }

  Result<std::optional<pb::Order>> order(const std::string& order_id) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record(order_read(order_id)));
    return parsed<pb::Order>(data, "order");
  }

  Result<pb::OrderFunds> funds(const std::string& order_id) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record(funds_read(order_id)));
    OPGATE_ASSIGN_OR_RETURN(auto f, parsed<pb::OrderFunds>(data, "order's funds"));
    if (f) return std::move(*f);
    pb::OrderFunds empty;
    empty.set_order_id(order_id);
    return empty;
  }

  Result<std::optional<pb::LedgerEntry>> ledger_entry(const std::string& key) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record(ledger_read(key)));
    return parsed<pb::LedgerEntry>(data, "ledger row");
  }

  Result<std::vector<pb::LedgerEntry>> ledger(const LedgerQuery& q) override {
    OPGATE_ASSIGN_OR_RETURN(
        auto rows, query({}, {"l_query",
                              {text(q.session_id), text(q.owner), text(q.order_id), text(q.after),
                               int8(limit_param(q.limit == 0 ? SIZE_MAX : q.limit))}}));
    return every<pb::LedgerEntry>(rows, "ledger row");
  }

  Result<std::vector<pb::AuditRecord>> audit_of(const std::string& operation_key) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"a_of", {text(operation_key)}}));
    return every<pb::AuditRecord>(rows, "audit record");
  }

  Result<std::optional<OperationHistory>> operation_history(const std::string& key) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"o_history", {text(key)}}));
    return history_of(rows);
  }

  Result<std::vector<pb::AuditRecord>> audit(uint64_t after_seq, size_t limit) override {
    OPGATE_ASSIGN_OR_RETURN(
        auto rows,
        query({}, {"a_page", {int8(static_cast<int64_t>(after_seq)), int8(limit_param(limit))}}));
    return every<pb::AuditRecord>(rows, "audit record", 1);
  }

  Result<AuditHead> audit_head() override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"a_head", {}}));
    AuditHead head;
    if (!rows.empty()) head = {static_cast<uint64_t>(rows.int8(0, 0)), rows.str(0, 1)};
    return head;
  }

  Result<std::vector<OutboxEntry>> due(Queue queue, int64_t now_ms, size_t limit,
                                       const OutboxIds& except) override {
    // Left out by the query, which returns `limit` rows at most.
    std::vector<Param> left_out;
    for (const auto& id : except)
      if (auto n = parse_fixed_id(id)) left_out.push_back(int8(*n));
    OPGATE_ASSIGN_OR_RETURN(
        auto rows, query({}, {"ob_due",
                              {int8(queue_number(queue)), int8(now_ms), int8(limit_param(limit)),
                               text(handoff_.node), int8(handoff_.after_ms),
                               array(Oid::int8, left_out), int8(handoff_.busy_after_ms)}}));
    OPGATE_ASSIGN_OR_RETURN(auto all, entries(rows));
    if (all.size() > limit) all.resize(limit);
    return all;
  }

  Result<DuePage> due_after(Queue queue, int64_t now_ms, const DuePosition& after,
                            size_t limit) override {
    DuePage page;
    if (limit == 0) return page;
    // An id this store did not make sorts before every one it did.
    const int64_t after_id = parse_fixed_id(after.id).value_or(-1);
    OPGATE_ASSIGN_OR_RETURN(
        auto rows,
        query({}, {"ob_due_after",
                   {int8(queue_number(queue)), int8(now_ms), int8(limit_param(limit)),
                    text(handoff_.node), int8(handoff_.after_ms), array(Oid::int8, {}),
                    int8(handoff_.busy_after_ms), int8(after.not_before_ms), int8(after_id)}}));
    // Items and positions read together, in one statement.
    OPGATE_ASSIGN_OR_RETURN(page.entries, entries(rows));
    if (page.entries.size() > limit) page.entries.resize(limit);
    if (!page.entries.empty()) page.end = DuePosition::of(page.entries.back());
    return page;
  }

  Result<std::vector<OutboxEntry>> outbox_of(const std::string& operation_key) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"ob_of", {text(operation_key)}}));
    return entries(rows);
  }

  Result<pb::EndpointState> endpoint_state(const std::string& name) override {
    OPGATE_ASSIGN_OR_RETURN(auto data, record({lock_name('p', {name}), {"ep_get", {text(name)}}}));
    OPGATE_ASSIGN_OR_RETURN(auto state, parsed<pb::EndpointState>(data, "endpoint state"));
    if (state) return std::move(*state);
    pb::EndpointState fresh;
    fresh.set_name(name);
    return fresh;
  }

  Result<std::vector<pb::EndpointState>> endpoint_states() override {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({}, {"ep_all", {}}));
    return every<pb::EndpointState>(rows, "endpoint state");
  }

  Result<std::vector<pb::Notification>> notifications_since(int64_t since_ms,
                                                            size_t limit) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows,
                            query({}, {"n_since", {int8(since_ms), int8(limit_param(limit))}}));
    return every<pb::Notification>(rows, "notification");
  }

  Result<std::optional<std::string>> kept(std::string_view kind, std::string_view key) override {
    return record({lock_name('k', {kind, key}), {"k_get", {text(kind), text(key)}}});
  }

  Result<std::vector<std::pair<std::string, std::string>>> kept_all(std::string_view kind,
                                                                    const std::string& after,
                                                                    size_t limit) override {
    std::vector<std::pair<std::string, std::string>> out;
    if (limit == 0) return out;
    OPGATE_ASSIGN_OR_RETURN(
        auto rows, query({}, {"k_all", {text(kind), text(after), int8(limit_param(limit))}}));
    for (int i = 0; i < rows.size(); ++i) out.emplace_back(rows.str(i, 0), rows.str(i, 1));
    return out;
  }

  static int64_t queue_number(Queue queue) { return queue == Queue::notifications ? 1 : 0; }

 protected:
  // What "o_history" read.
  static Result<std::optional<OperationHistory>> history_of(const Rows& rows) {
    if (rows.empty() || rows.int8(0, 0) != 0) return std::optional<OperationHistory>();
    OperationHistory h;
    OPGATE_TRY(parse_cell(rows, 0, 2, "operation", h.operation));
    OPGATE_ASSIGN_OR_RETURN(h.records, every<pb::AuditRecord>(rows, "audit record", 2, 1));
    return std::optional<OperationHistory>(std::move(h));
  }

  // What "ob_due" or "ob_of" read.
  static Result<std::vector<OutboxEntry>> entries(const Rows& rows) {
    std::vector<OutboxEntry> out;
    for (int i = 0; i < rows.size(); ++i) {
      OutboxEntry e{fixed_id(rows.int8(i, 0)), {}};
      OPGATE_TRY(parse_cell(rows, i, 1, "outbox item", e.item));
      out.push_back(std::move(e));
    }
    return out;
  }

 public:
  Result<std::optional<pb::OutboxItem>> outbox_item(const std::string& id) override {
    auto read = outbox_read(id);
    if (!read) return std::optional<pb::OutboxItem>();
    OPGATE_ASSIGN_OR_RETURN(auto data, record(std::move(*read)));
    return parsed<pb::OutboxItem>(data, "outbox item");
  }

  Result<std::vector<std::optional<pb::OutboxItem>>> outbox_items(
      const std::vector<std::string>& ids) override {
    std::vector<std::optional<pb::OutboxItem>> out(ids.size());
    std::vector<std::string> locks;
    std::vector<Param> numbers;
    for (const auto& id : ids)
      if (auto n = parse_fixed_id(id)) {
        locks.push_back(lock_name('i', {id}));
        numbers.push_back(int8(*n));
      } else {
        numbers.push_back(int8(0));  // no item has id 0
      }
    if (ids.empty()) return out;
    OPGATE_ASSIGN_OR_RETURN(auto rows,
                            query(std::move(locks), {"ob_get_many", {array(Oid::int8, numbers)}}));
    for (int i = 0; i < rows.size(); ++i) {
      const auto at = static_cast<size_t>(rows.int8(i, 0) - 1);
      if (at >= out.size() || rows.null(i, 1)) continue;
      pb::OutboxItem item;
      OPGATE_TRY(parse_cell(rows, i, 1, "outbox item", item));
      out[at] = std::move(item);
    }
    return out;
  }

  Result<std::optional<int64_t>> next_due_ms(Queue queue) override {
    OPGATE_ASSIGN_OR_RETURN(auto rows,
                            query({}, {"ob_next",
                                       {int8(queue_number(queue)), text(handoff_.node),
                                        int8(handoff_.after_ms), int8(handoff_.busy_after_ms)}}));
    if (rows.empty() || rows.null(0, 0)) return std::optional<int64_t>();
    return std::optional<int64_t>(rows.int8(0, 0));
  }

 protected:
  // Runs one read; inside a transaction after locking `locks`.
  virtual Result<Rows> query(std::vector<std::string> locks, Stmt stmt) = 0;
  // One record's data, read under the record's own lock.
  virtual Result<std::optional<std::string>> record(RecordRead read) {
    OPGATE_ASSIGN_OR_RETURN(auto rows, query({std::move(read.lock)}, std::move(read.stmt)));
    return record_data(rows);
  }

  const Handoff& handoff_;
};

// Durable state: each read on a pooled connection, outside any transaction.
class DurableReader final : public PgReads {
 public:
  DurableReader(Pool& pool, const Handoff& handoff) : PgReads(handoff), pool_(pool) {}

 protected:
  // A read on a connection found closed (the server restarted since it was
  // last used) is made once more, on another.
  Result<Rows> query(std::vector<std::string>, Stmt stmt) override {
    for (int attempt = 1;; ++attempt) {
      OPGATE_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
      auto rows = conn->run(stmt.name, stmt.params);
      if (rows || !conn->broken() || attempt == 2) return rows;
    }
  }

 private:
  Pool& pool_;
};

class PgTransaction final : public Transaction, public PgReads {
  // Provisional heads count up from here: far above any real sequence.
  static constexpr uint64_t kProvisional = uint64_t{1} << 62;

 public:
  PgTransaction(Conn& conn, Isolation isolation, int64_t now_ms, const Handoff& handoff,
                HeadGuess& guess)
      : PgReads(handoff),
        guess_(guess),
        conn_(conn),
        locking_(isolation == Isolation::read_committed),
        now_ms_(now_ms) {
    batch_.push_back({"begin", {}});
  }

  int64_t now_ms() const override { return now_ms_; }
  bool failed() const { return failed_.has_value(); }
  const Error& error() const { return *failed_; }
  bool retryable() const { return retryable_; }
  // Whether a COMMIT went out: if the connection was lost after, whether it
  // committed is unknown.
  bool commit_sent() const { return commit_sent_; }

  // --- Reads that remember or extend what they lock.
  Result<std::optional<pb::Operation>> operation(const std::string& key) override {
    auto op = PgReads::operation(key);
    if (op) known_[key] = op->has_value() ? Known{(*op)->state(), (*op)->outcome()} : Known{};
    return op;
  }

  Result<std::vector<pb::Operation>> operations_of_order(const std::string& order_id) override {
    // The order's set first (an operation is added to it only under this
    // lock), then each member, then their latest versions.
    OPGATE_ASSIGN_OR_RETURN(
        auto keys, query({lock_name('R', {order_id})}, {"o_keys_of_order", {text(order_id)}}));
    std::vector<std::string> locks;
    for (int i = 0; i < keys.size(); ++i) locks.push_back(lock_name('o', {keys.bytes(i, 0)}));
    OPGATE_ASSIGN_OR_RETURN(auto rows, query(locks, {"o_of_order", {text(order_id)}}));
    OPGATE_ASSIGN_OR_RETURN(auto ops, every<pb::Operation>(rows, "operation"));
    for (const auto& op : ops) known_[op.key()] = {op.state(), op.outcome()};
    return ops;
  }

  // Before the head row is locked, what records the head learns a
  // provisional one (the record's place among this transaction's appends):
  // the row is locked only as the transaction commits, so that audited
  // transactions, which all take it, hold it for no more than their commit.
  // What recorded the provisional head (the operation, its notification
  // events) is written then with the real one.
  Result<AuditHead> head_to_record() override {
    if (head_) return *head_;
    if (!unchained_.empty()) return AuditHead{kProvisional + unchained_.size(), std::string()};
    OPGATE_TRY(lock_head());
    return *head_;
  }
  Result<AuditHead> audit_head() override {
    OPGATE_TRY(lock_head());
    return *head_;
  }
  Result<std::vector<pb::AuditRecord>> audit_of(const std::string& key) override {
    if (!unchained_.empty()) OPGATE_TRY(lock_head());
    return PgReads::audit_of(key);
  }
  // Read as a transaction reads each record, with its lock.
  Result<std::optional<OperationHistory>> operation_history(const std::string& key) override {
    return Reader::operation_history(key);
  }
  Result<std::vector<pb::AuditRecord>> audit(uint64_t after_seq, size_t limit) override {
    if (!unchained_.empty()) OPGATE_TRY(lock_head());
    return PgReads::audit(after_seq, limit);
  }

  // --- Writes: staged, sent with the next read or the commit.
  void finish_event(const QueuedEvent& q) override {
    auto id = parse_fixed_id(q.queue_id);
    if (id) write({lock_name('q', {q.queue_id})}, {"q_del", {int8(*id)}});
    if (q.event.source().empty()) return;  // its event is gone: only the entry goes
    pb::InboxEvent event = q.event;
    event.set_processed(true);
    event.set_processed_at_ms(now_ms_);
    put_event(event);
  }

  void park_event(const QueuedEvent& q) override {
    auto id = parse_fixed_id(q.queue_id);
    if (!id) return;
    write({lock_name('q', {q.queue_id}), lock_name('w', {q.event.session_id()})},
          {"w_park", {int8(*id), text(q.event.session_id())}});
  }

  Result<size_t> release_parked(const std::string& session_id) override {
    OPGATE_ASSIGN_OR_RETURN(
        auto rows, query({lock_name('w', {session_id})}, {"w_release", {text(session_id)}}));
    if (rows.size() > 0) notify_ = true;
    return static_cast<size_t>(rows.size());
  }

  void put_session(const pb::Session& s) override {
    write({lock_name('s', {s.session_id()})},
          {"s_put", {text(s.session_id()), text(s.owner()), bytea(s.SerializeAsString())}});
  }

  void put_call(const pb::ToolCall& c) override {
    write({lock_name('c', {c.session_id(), c.turn_id(), c.call_id()})},
          {"c_put",
           {text(c.session_id()), text(c.turn_id()), text(c.call_id()),
            bytea(c.SerializeAsString())}});
  }

  Status put_operation(const pb::Operation& op) override {
    if (op.key().empty() || op.state() == pb::STATE_UNSPECIFIED)
      return make_error(errc::internal, "an operation needs a key and a state");
    if (failed_) return *failed_;
    const std::string& key = op.key();
    auto known = known_.find(key);
    Known was;
    if (known != known_.end()) {
      was = known->second;
    } else {
      OPGATE_ASSIGN_OR_RETURN(auto rows, query({lock_name('o', {key})}, {"o_state", {text(key)}}));
      if (!rows.empty())
        was = {static_cast<pb::OperationState>(rows.int8(0, 0)),
               static_cast<pb::Outcome>(rows.int8(0, 1))};
    }
    const pb::OperationState old = was.state;
    std::vector<std::string> locks = {lock_name('o', {key})};
    read_.erase(locks.front());
    // A new member of the order's set: under the set's lock.
    if (old == pb::STATE_UNSPECIFIED) locks.push_back(lock_name('R', {op.proposal().order_id()}));
    if (op.audit_seq() >= kProvisional) {
      // Written at commit with the real head; before then only if a read
      // follows (it might see the operation).
      add_locks(std::move(locks));
      repatch_[key] = op;
      unwritten_.insert(key);
    } else {
      write(std::move(locks), put_statement(op));
      repatch_.erase(key);
      unwritten_.erase(key);
    }
    if (old != op.state()) {
      if (old != pb::STATE_UNSPECIFIED) counts_[old] -= 1;
      counts_[op.state()] += 1;
    }
    // Settled operations by outcome.
    const auto old_outcome = old == pb::STATE_SETTLED ? was.outcome : pb::OUTCOME_NONE;
    const auto new_outcome = op.state() == pb::STATE_SETTLED ? op.outcome() : pb::OUTCOME_NONE;
    if (old_outcome != new_outcome) {
      if (old_outcome != pb::OUTCOME_NONE) outcome_counts_[old_outcome] -= 1;
      if (new_outcome != pb::OUTCOME_NONE) outcome_counts_[new_outcome] += 1;
    }
    known_[key] = {op.state(), op.outcome()};
    return failed_ ? Status(*failed_) : Status::Ok();
  }

  void put_order(const pb::Order& o) override {
    write({lock_name('r', {o.order_id()})},
          {"r_put", {text(o.order_id()), bytea(o.SerializeAsString())}});
  }

  void put_funds(const pb::OrderFunds& f) override {
    write({lock_name('f', {f.order_id()})},
          {"f_put", {text(f.order_id()), bytea(f.SerializeAsString())}});
  }

  void put_ledger(const pb::LedgerEntry& l) override {
    write({lock_name('l', {l.operation_key()})},
          {"l_put",
           {text(l.operation_key()), text(l.session_id()), text(l.owner()), text(l.order_id()),
            bytea(l.SerializeAsString())}});
  }

  void append_audit(pb::AuditRecord record) override {
    if (head_)
      chain(std::move(record));
    else
      unchained_.push_back(std::move(record));
  }

  void enqueue(pb::OutboxItem item) override {
    item.set_created_at_ms(now_ms_);
    // Only work due now wakes the dispatchers: an item leased to its
    // process at once, or due later, is found by the pass when it falls due.
    if (item.not_before_ms() <= now_ms_) notify_ = true;
    if (item.kind() == pb::OUTBOX_NOTIFY_EVENT && item.notification().audit_seq() >= kProvisional) {
      unresolved_items_.push_back(std::move(item));  // written at commit
      return;
    }
    write({}, enqueue_statement(item));
  }

  void update_outbox(const OutboxEntry& e) override {
    auto id = parse_fixed_id(e.id);
    if (!id) return;  // no such item
    write({lock_name('i', {e.id})},
          {"ob_upd",
           {int8(*id), int8(e.item.not_before_ms()), bytea(e.item.SerializeAsString()),
            text(handoff_.node), int8(now_ms_)}});
  }

  void remove_outbox(const std::string& id) override {
    auto n = parse_fixed_id(id);
    if (!n) return;
    write({lock_name('i', {id})}, {"ob_del", {int8(*n)}});
  }

  void put_endpoint_state(const pb::EndpointState& state) override {
    write({lock_name('p', {state.name()})},
          {"ep_put", {text(state.name()), bytea(state.SerializeAsString())}});
  }

  void keep_notification(const pb::Notification& event) override {
    if (event.audit_seq() >= kProvisional) {
      unresolved_notifications_.push_back(event);  // written at commit
      return;
    }
    write({}, keep_statement(event));
  }

  void keep(std::string_view kind, std::string_view key, std::string value) override {
    write({lock_name('k', {kind, key})}, {"k_put", {text(kind), text(key), bytea(value)}});
  }

  void forget(std::string_view kind, std::string_view key) override {
    write({lock_name('k', {kind, key})}, {"k_del", {text(kind), text(key)}});
  }

  void probe() { write({}, {"probe", {text(std::to_string(now_ms_))}}); }

  // Commits in the node's turn (commit_in_turn), then, out of it, reads
  // what was read after the commit. An audited commit is released early
  // (finish()): the caller waits for its flush (early_released()).
  Status commit() {
    Status s = commit_in_turn();
    if (!s || !early_released_) return s;
    if (!std::exchange(committed_read_unread_, false)) return Status::Ok();
    // Committed: a failed read after it leaves the read to
    // PgStorage::transact, and fails nothing.
    auto rows = conn_.read_rest();
    if (rows && rows->size() == 2) {
      auto history = history_of((*rows)[0]);
      auto items = entries((*rows)[1]);
      if (CommittedRead* r = committed_read(); r && history && items) {
        r->history = std::move(*history);
        r->items = std::move(*items);
        r->read = true;
      }
    }
    return Status::Ok();
  }

  // Whether this one changed any count.
  bool counted() const { return counted_; }
  // Whether its commit went without waiting for the flush (finish()), to be
  // waited for (SharedFlush) before the commit is reported.
  bool early_released() const { return early_released_; }

  void rollback() {
    if (conn_.broken()) return;
    if (begun_ || conn_.in_transaction()) (void)conn_.exec("ROLLBACK");
  }

 protected:
  Result<Rows> query(std::vector<std::string> locks, Stmt stmt) override {
    if (failed_) return *failed_;
    if (reads_operations(stmt)) write_unwritten();
    return query_head(std::move(locks), std::move(stmt));
  }

 private:
  // Chains the audit records, writes the counts, and commits.
  // What does not depend on the chain's head (the counts, the wake-up) goes
  // ahead of the head's lock, so that the serial section holds only the
  // records, what carries the head, and the commit.
  //
  // This node's audited commits are sent one at a time, each on the head
  // the one before left (HeadGuess): a wait for that one's ticket, the
  // head's lock, the check that it is the one guessed, the records and the
  // COMMIT go in one batch, and the next commit is sent without waiting
  // for its answer. A wrong guess (another node committed since, or the
  // commit before failed) rolls back to before the records and takes the
  // head's lock as usual, sending nothing else meanwhile; after a wrong
  // guess the next few commits do not guess (more after each miss), so
  // that nodes committing side by side do not pay for guesses that keep
  // missing.
  Status commit_in_turn() {
    if (failed_) return *failed_;
    write_count_changes();
    if (notify_) write({}, {"notify", {text(handoff_.node)}});
    if (unchained_.empty() || head_) return finish();
    // What does not need the head goes first, so that the node's serial
    // section below holds the head's statements and the commit alone. It
    // goes without waiting for its results (the commit reads them) when it
    // takes no lock the transaction does not hold yet: then it waits for no
    // other transaction, and none of this node's can wait on it under the
    // serial section. A transaction without its ticket takes it now and
    // waits: the commits sent after this one wait for it.
    if (!ticket_held_) {
      const int64_t ticket = take_ticket();
      if (locking_)
        unsent_locks_.push_back(ticket);
      else
        batch_.push_back({"lock", {int8(ticket)}});
      if (auto sent = send(); !sent) return sent.error();
      ticket_held_ = true;
    } else if (staged()) {
      if (locking_ && unsent_locks_.empty()) {
        OPGATE_TRY(send_ahead());
      } else if (auto sent = send(); !sent) {
        return sent.error();
      }
    }
    {
      MutexLock lock(guess_.mu);
      if (!guess_.head || guess_.skip > 0) {
        if (guess_.skip > 0) --guess_.skip;
        return commit_on_locked_head();
      }
      if (guess_.in_flight) guess_.sent_behind++;
      const bool savepoint = guess_.held < HeadGuess::kSureAfter;
      if (Status sent = send_on(*guess_.head, guess_.in_flight, savepoint); !sent) {
        guess_.head.reset();
        guess_.in_flight.reset();
        return sent;
      }
      guess_.head = head_;
      guess_.in_flight = ticket_;
    }
    auto right = landed();
    MutexLock lock(guess_.mu);
    const bool last_sent = guess_.in_flight == ticket_;
    if (right && *right == Landing::held) {
      if (last_sent) guess_.in_flight.reset();  // committed: nothing to wait for
      guess_.misses = 0;
      guess_.held = std::min(guess_.held + 1, HeadGuess::kSureAfter);
      return Status::Ok();
    }
    // What was sent on top of this commit fails its guess too.
    if (last_sent) {
      guess_.head.reset();
      guess_.in_flight.reset();
    }
    if (!right) return right.error();
    guess_.missed++;
    guess_.misses = std::min(guess_.misses + 1, 6);
    guess_.skip = 1 << guess_.misses;
    guess_.held = 0;
    if (*right == Landing::lost) {
      guess_.lost++;
      return *failed_;  // transact() runs it again, on the locked head (skip)
    }
    return commit_on_locked_head();
  }

  // The commit on the head as it is, its lock taken and waited for: under
  // the node's turn (guess_.mu, held by the caller).
  Status commit_on_locked_head() REQUIRES(guess_.mu) {
    Status s = lock_head();
    if (s) s = finish();
    if (s)
      guess_.head = head_;
    else
      guess_.head.reset();
    guess_.in_flight.reset();  // this commit has ended every one sent before it
    return s;
  }

  // This transaction's ticket (HeadGuess), taken by the next statement sent.
  int64_t take_ticket() {
    ticket_ = static_cast<int64_t>(guess_.next_ticket.fetch_add(1));
    return *ticket_;
  }

 protected:
  // A record read before in this transaction, and not written since, is not
  // read again: its lock has been held since, so no other transaction has
  // changed it (and at SERIALIZABLE the snapshot has not moved).
  Result<std::optional<std::string>> record(RecordRead read) override {
    if (failed_) return *failed_;
    if (const auto* known = already_read(read)) return *known;
    std::string lock = read.lock, name = read.stmt.name;
    OPGATE_ASSIGN_OR_RETURN(auto data, PgReads::record(std::move(read)));
    read_[lock].emplace_back(std::move(name), data);
    return data;
  }

  // The records in one round trip: their locks in the order given (as the
  // transaction would take them reading one by one, so that no two
  // transactions wait on each other where they did not before), then each
  // read; any writes staged go first, as with any read.
  Status read_ahead(const ReadAhead& r) override {
    if (failed_) return *failed_;
    std::vector<RecordRead> reads;
    auto add = [&](RecordRead read) {
      if (already_read(read)) return;
      for (const auto& other : reads)
        if (other.lock == read.lock && other.stmt.name == read.stmt.name) return;
      reads.push_back(std::move(read));
    };
    for (const auto& id : r.outbox_items)
      if (auto read = outbox_read(id)) add(std::move(*read));
    for (const auto& key : r.operations) add(operation_read(key));
    for (const auto& id : r.orders) add(order_read(id));
    for (const auto& id : r.funds) add(funds_read(id));
    for (const auto& ref : r.calls) add(call_read(ref));
    for (const auto& key : r.ledger) add(ledger_read(key));
    if (reads.empty()) return Status::Ok();
    if (!r.operations.empty()) write_unwritten();
    write_links();
    std::vector<Param> ids;
    for (const auto& read : reads)
      if (const int64_t id = lock_id(read.lock); locking_ && locked_.insert(id).second)
        ids.push_back(int8(id));
    // The ticket rides along with the locks: taken without a statement of
    // its own, it spares the commit a round trip to take it.
    const bool ticketed = !ids.empty() && !ticket_;
    if (ticketed) ids.push_back(int8(take_ticket()));
    if (!ids.empty()) batch_.push_back(locks_statement(std::move(ids)));
    // Reads of the kinds read_together knows go in it, the rest one by one.
    ReadTogether together;
    std::vector<const RecordRead*> alone;
    for (const auto& read : reads)
      if (!together.add(read)) alone.push_back(&read);
    if (together.size() == 1) {  // a statement of its own is simpler to plan and run
      for (size_t column = 0; column < ReadTogether::kColumns; ++column)
        if (const auto* read = together.read_at(column)) alone.insert(alone.begin(), read);
      together = ReadTogether();
    }
    if (together.size() > 0) batch_.push_back(together.statement());
    for (const auto* read : alone) batch_.push_back(read->stmt);
    OPGATE_ASSIGN_OR_RETURN(auto results, send());
    if (ticketed) ticket_held_ = true;
    const size_t first = results.size() - alone.size();
    for (size_t i = 0; i < alone.size(); ++i)
      read_[alone[i]->lock].emplace_back(alone[i]->stmt.name, record_data(results[first + i]));
    if (together.size() > 0) {
      const Rows& row = results[first - 1];
      if (row.size() != 1)
        return make_error(errc::corrupt_record,
                          "a read of several records came back without its row");
      for (size_t column = 0; column < ReadTogether::kColumns; ++column) {
        const RecordRead* read = together.read_at(column);
        if (!read) continue;
        std::optional<std::string> data;
        if (!row.null(0, static_cast<int>(column))) data = row.str(0, static_cast<int>(column));
        read_[read->lock].emplace_back(read->stmt.name, std::move(data));
      }
    }
    return Status::Ok();
  }

  // query() without writing the operations that wait for the real head:
  // for the head's own lock, after which they are written with it.
  Result<Rows> query_head(std::vector<std::string> locks, Stmt stmt) {
    if (failed_) return *failed_;
    write_links();
    add_locks(std::move(locks));
    batch_.push_back(std::move(stmt));
    OPGATE_ASSIGN_OR_RETURN(auto results, send());
    return std::move(results.back());
  }

 private:
  void write(std::vector<std::string> locks, Stmt stmt) {
    if (failed_) return;
    for (const auto& lock : locks) read_.erase(lock);
    add_locks(std::move(locks));
    batch_.push_back(std::move(stmt));
  }

  // Locks this transaction does not hold yet: taken when the statements
  // they guard are sent, ahead of them.
  void add_locks(std::vector<std::string> names) {
    if (!locking_) return;
    for (const auto& n : names) {
      const int64_t id = lock_id(n);
      if (locked_.insert(id).second) unsent_locks_.push_back(id);
    }
  }

  // The locks of the statements about to be sent, in one statement ahead of
  // them (after BEGIN), sorted so that two transactions take them in one
  // order.
  void lock_ahead() {
    if (unsent_locks_.empty()) return;
    std::sort(unsent_locks_.begin(), unsent_locks_.end());
    std::vector<Param> ids;
    for (int64_t id : unsent_locks_) ids.push_back(int8(id));
    unsent_locks_.clear();
    batch_.insert(batch_.begin() + (opens() ? 1 : 0), locks_statement(std::move(ids)));
  }

  // One statement taking the locks (ids), in the order given.
  static Stmt locks_statement(std::vector<Param> ids) {
    return ids.size() == 1 ? Stmt{"lock", {std::move(ids.front())}}
                           : Stmt{"locks", {array(Oid::int8, ids)}};
  }

  // Whether the statements waiting to be sent open the transaction.
  bool opens() const { return !batch_.empty() && batch_.front().name == "begin"; }

  // Whether statements wait to be sent beyond the transaction's BEGIN.
  bool staged() const { return batch_.size() > (opens() ? 1u : 0u); }

  void write_count_changes() {
    std::vector<Param> kinds, values, deltas;
    auto add = [&](int64_t kind, const std::map<int64_t, int64_t>& changes) {
      for (const auto& [value, delta] : changes) {
        if (delta == 0) continue;
        kinds.push_back(int8(kind));
        values.push_back(int8(value));
        deltas.push_back(int8(delta));
      }
    };
    add(0, counts_);
    add(1, outcome_counts_);
    if (kinds.empty()) return;
    counted_ = true;
    write({}, {"counts_change",
               {array(Oid::int8, kinds), array(Oid::int8, values), array(Oid::int8, deltas)}});
  }

  // The statements staged, sent without waiting (Conn::send_ahead).
  Status send_ahead() {
    if (opens()) begun_ = true;
    Status s = conn_.send_ahead(std::exchange(batch_, {}));
    if (!s) return fail(s.error());
    return s;
  }

  Result<std::vector<Rows>> send() {
    lock_ahead();
    if (opens()) begun_ = true;
    auto r = conn_.pipeline(std::exchange(batch_, {}));
    if (!r) return fail(r.error());
    return r;
  }

  // The transaction's failure, kept: what is asked of it after fails alike.
  Error fail(Error e) {
    failed_ = e;
    retryable_ = conn_.last_failure_retryable();
    return e;
  }

  Stmt put_statement(const pb::Operation& op) const {
    return {"o_put",
            {text(op.key()), int8(op.state()), int8(op.expires_at_ms()),
             text(op.proposal().order_id()), text(op.session_id()), text(op.proposal().owner()),
             bytea(op.SerializeAsString()), int8(op.outcome())}};
  }

  Stmt keep_statement(const pb::Notification& n) const {
    return {"n_keep", {int8(n.created_at_ms()), text(n.event_id()), bytea(n.SerializeAsString())}};
  }

  Stmt enqueue_statement(const pb::OutboxItem& item) const {
    return {"ob_ins",
            {int8(item.not_before_ms()), bytea(item.SerializeAsString()),
             int8(queue_number(queue_of(item.kind()))), text(item.operation_key()),
             text(handoff_.node), int8(now_ms_)}};
  }

  // The real head for a provisional one, once the records are chained.
  Result<AuditHead> real_head(uint64_t provisional) const {
    const uint64_t index = provisional - kProvisional;
    if (index == 0 || index > chained_.size())
      return make_error(errc::internal, "a provisional audit head has no record");
    return chained_[index - 1];
  }

  Status resolve_notification(pb::Notification& n) const {
    OPGATE_ASSIGN_OR_RETURN(const AuditHead real, real_head(n.audit_seq()));
    // The event id names the change by its sequence number ("evt_{seq}_...").
    const std::string was = "evt_" + std::to_string(n.audit_seq()) + "_";
    if (n.event_id().starts_with(was))
      n.set_event_id("evt_" + std::to_string(real.seq) + "_" + n.event_id().substr(was.size()));
    n.set_audit_seq(real.seq);
    n.set_audit_hash(real.hash);
    return Status::Ok();
  }

  Status resolve_provisional() {
    OPGATE_TRY(resolve_operations());
    return resolve_notifications();
  }

  // The operations that name their records, on the real head.
  Status resolve_operations() {
    for (auto& [key, op] : repatch_) {
      OPGATE_ASSIGN_OR_RETURN(const AuditHead real, real_head(op.audit_seq()));
      op.set_audit_seq(real.seq);
      op.set_audit_hash(real.hash);
      write({}, put_statement(op));  // its locks are held since its first write
    }
    repatch_.clear();
    unwritten_.clear();
    return Status::Ok();
  }

  // The notifications that name their records, on the real head: their
  // event ids carry its sequence number.
  Status resolve_notifications() {
    for (auto& n : unresolved_notifications_) {
      OPGATE_TRY(resolve_notification(n));
      write({}, keep_statement(n));
    }
    unresolved_notifications_.clear();
    for (auto& item : unresolved_items_) {
      OPGATE_TRY(resolve_notification(*item.mutable_notification()));
      write({}, enqueue_statement(item));
    }
    unresolved_items_.clear();
    return Status::Ok();
  }

  // The head chained, what carries it resolved, and the COMMIT.
  //
  // A transaction that holds the audit head would hold it through its
  // commit's flush to disk, and every audited transaction on every node waits
  // for that lock: their flushes would go one at a time. So the head's holder
  // releases it early (as Aether and DeWitt et al. describe): it commits
  // without waiting for the flush, and once its connection is back in the
  // pool, a transaction that writes a WAL record and commits synchronously,
  // started after that commit and shared by every commit waiting at the
  // time (SharedFlush), returns. The log is flushed in order, so then the
  // commit is on disk too, and only then is it reported. For the moment
  // of the flush another transaction may see the
  // change before it is on disk; anything it writes comes later in the log,
  // so a crash loses it with the change. The provider is called only after
  // a synchronous commit of opgate's own (docs/postgres.md says what a read
  // may see in that moment).
  //
  // Without `wait` the commit is sent and not read: landed() reads it.
  Status finish(bool wait = true) {
    OPGATE_TRY(resolve_provisional());
    write_links();
    if (!begun_ && !staged()) return Status::Ok();  // nothing was ever sent
    commit_sent_ = true;
    if (chained_.empty()) {
      batch_.push_back({"commit", {}});
      auto r = send();
      if (!r) return r.error();
      return Status::Ok();
    }
    batch_.push_back({"commit", {}});
    lock_ahead();
    if (opens()) begun_ = true;
    Status s = conn_.send_ahead(std::exchange(batch_, {}));
    if (s) s = send_committed_read();
    if (s && wait) s = read_commit();
    early_released_ = true;
    if (!s) return fail(s.error());
    return Status::Ok();
  }

  // Reads the answer to finish()'s COMMIT; the read after the commit, if
  // one was sent, is left to commit().
  Status read_commit() {
    if (committed_read_unread_) return conn_.read_all_but_last();
    auto r = conn_.pipeline({});  // all of it, and out of pipeline mode
    return r ? Status::Ok() : Status(r.error());
  }

  // The caller's read after the commit (Transaction::read_after_commit),
  // sent behind the COMMIT in a batch of its own, so that its failure is
  // not the commit's: commit() reads it.
  Status send_committed_read() {
    const CommittedRead* r = committed_read();
    if (!r) return Status::Ok();
    OPGATE_TRY(conn_.send_ahead(
        {{"o_history", {text(r->operation_key)}}, {"ob_of", {text(r->operation_key)}}}));
    committed_read_unread_ = true;
    return Status::Ok();
  }

  // Sends the commit on the guessed head, after a wait for the commit sent
  // before it (the ticket `after`) if that one may not have ended: landed()
  // reads the answer. With a savepoint ahead of the guess, a wrong one rolls
  // back to it; without, the whole transaction.
  //
  // The operations that carry the guessed head are written ahead of the
  // wait: only this transaction writes those rows (it holds their locks),
  // so they wait for nothing, and the commits in turn at the head do not
  // hold it for them. The notifications that carry it go behind the
  // check that the guess is the head: their event ids name the head's
  // sequence number, which another node's transaction may be guessing too,
  // and a row written on a guess that is not the head yet would make that
  // one wait for this one, whose turn may in turn wait on a client's
  // (a wait no deadlock detector sees). A wrong guess rolls back what was
  // written with the records.
  Status send_on(const AuditHead& guess, std::optional<int64_t> after, bool savepoint) {
    if (savepoint) {
      before_guess_ =
          BeforeGuess{unchained_, repatch_, unresolved_notifications_, unresolved_items_};
      write({}, {"guess_savepoint", {}});
    }
    head_ = guess;
    auto pending = std::move(unchained_);
    unchained_.clear();
    for (auto& r : pending) chain(std::move(r));
    OPGATE_TRY(resolve_operations());
    if (after) write({}, {"chain_wait", {int8(*after)}});
    write_links(&guess);
    OPGATE_TRY(resolve_notifications());
    return finish(/*wait=*/false);
  }

  // The answer to send_on(): held if the guess was the head; missed if not,
  // with the transaction as it was before the guess; lost if not and there
  // was no savepoint: the transaction has failed, to be run again.
  enum class Landing { held, missed, lost };
  Result<Landing> landed() {
    Status s = read_commit();
    if (s) return Landing::held;
    if (conn_.broken() || conn_.last_sqlstate() != "22012") return fail(s.error());
    early_released_ = false;
    if (std::exchange(committed_read_unread_, false))
      (void)conn_.pipeline({});  // refused: the transaction is aborted until the rollback below
    if (!before_guess_) {
      failed_ = make_error(errc::storage_unavailable,
                           "the audit chain's head moved under the commit's guess of it");
      retryable_ = true;
      return Landing::lost;
    }
    batch_.push_back({"guess_rollback", {}});
    if (auto back = send(); !back) return back.error();
    head_.reset();
    chained_.clear();
    unchained_ = std::move(before_guess_->records);
    repatch_ = std::move(before_guess_->repatch);
    unresolved_notifications_ = std::move(before_guess_->notifications);
    unresolved_items_ = std::move(before_guess_->items);
    before_guess_.reset();
    return Landing::missed;
  }

  Status lock_head() {
    if (head_) return Status::Ok();
    OPGATE_ASSIGN_OR_RETURN(auto rows, query_head({}, {"a_head_lock", {}}));
    if (rows.empty()) {
      failed_ = make_error(errc::corrupt_record, "the audit chain's head row is missing");
      return *failed_;
    }
    head_ = AuditHead{static_cast<uint64_t>(rows.int8(0, 0)), rows.str(0, 1)};
    auto pending = std::move(unchained_);
    unchained_.clear();
    for (auto& r : pending) chain(std::move(r));
    return Status::Ok();
  }

  void chain(pb::AuditRecord record) {
    chain_audit(record, now_ms_, *head_);
    chained_.push_back(*head_);
    links_.seqs.push_back(int8(static_cast<int64_t>(record.seq())));
    links_.keys.push_back(text(record.operation_key()));
    links_.data.push_back(bytea(record.SerializeAsString()));
  }

  // The records chained since the last call and the head they leave, in one
  // statement (on the guessed head if one is given): ahead of any read, which
  // could be of them, and of the COMMIT.
  void write_links(const AuditHead* guess = nullptr) {
    if (links_.seqs.empty()) return;
    std::vector<Param> params = {int8(static_cast<int64_t>(head_->seq)), bytea(head_->hash),
                                 array(Oid::int8, links_.seqs), array(Oid::text, links_.keys),
                                 array(Oid::bytea, links_.data)};
    if (guess) {
      params.push_back(int8(static_cast<int64_t>(guess->seq)));
      params.push_back(bytea(guess->hash));
    }
    links_ = {};
    write({}, {guess ? "a_chain_guess" : "a_chain", std::move(params)});
  }

  void put_event(const pb::InboxEvent& e) {
    write({lock_name('e', {e.source(), e.webhook_id()})},
          {"ev_put",
           {text(e.source()), text(e.webhook_id()), bytea(e.body_sha256()), boolean(e.processed()),
            int8(e.processed_at_ms()), bytea(e.SerializeAsString())}});
  }

  // The operations that wait for the real head, written with the
  // provisional one ahead of a read that could see them: only a read of the
  // operations table can; any other read leaves them to the commit.
  void write_unwritten() {
    for (const auto& key : unwritten_) batch_.push_back(put_statement(repatch_.at(key)));
    unwritten_.clear();
  }

  // What this transaction read of the record, if it did and has not
  // written it since.
  const std::optional<std::string>* already_read(const RecordRead& read) const {
    auto found = read_.find(read.lock);
    if (found == read_.end()) return nullptr;
    for (const auto& [name, data] : found->second)
      if (name == read.stmt.name) return &data;
    return nullptr;
  }

  // Statements on the operations table, and only those, are named "o_...".
  static bool reads_operations(const Stmt& stmt) { return stmt.name.starts_with("o_"); }

  HeadGuess& guess_;
  // This transaction's ticket, once taken, and whether a round trip that
  // took it has been answered.
  std::optional<int64_t> ticket_;
  bool ticket_held_ = false;
  // What a commit on a wrong guess puts back (send_on, landed).
  struct BeforeGuess {
    std::vector<pb::AuditRecord> records;
    std::map<std::string, pb::Operation> repatch;
    std::vector<pb::Notification> notifications;
    std::vector<pb::OutboxItem> items;
  };
  std::optional<BeforeGuess> before_guess_;
  Conn& conn_;
  bool early_released_ = false;         // finish() sent a COMMIT released early
  bool commit_sent_ = false;            // finish() sent a COMMIT
  bool committed_read_unread_ = false;  // and the read after the commit behind it
  const bool locking_;
  const int64_t now_ms_;
  std::vector<Stmt> batch_;
  bool begun_ = false;
  std::set<int64_t> locked_;
  std::vector<int64_t> unsent_locks_;  // in locked_, not sent yet
  std::optional<Error> failed_;
  bool retryable_ = false;
  // Operation states (and outcomes) this transaction read or wrote
  // (STATE_UNSPECIFIED: absent), so that put_operation knows what it
  // replaces.
  struct Known {
    pb::OperationState state = pb::STATE_UNSPECIFIED;
    pb::Outcome outcome = pb::OUTCOME_NONE;
  };
  std::unordered_map<std::string, Known> known_;
  // Records read (by lock name: each statement that read it, and what it
  // found), forgotten when the transaction writes the record.
  std::unordered_map<std::string, std::vector<std::pair<std::string, std::optional<std::string>>>>
      read_;
  std::map<int64_t, int64_t> counts_;          // state -> change, written at commit
  std::map<int64_t, int64_t> outcome_counts_;  // settled outcome -> change, likewise
  std::optional<AuditHead> head_;              // locked and advanced by this transaction
  std::vector<AuditHead> chained_;             // the head after each record this one chained
  // What recorded a provisional head, written at commit with the real one
  // (resolve_provisional()). An operation is not written with the
  // provisional one unless a read of operations comes after it
  // (unwritten_: not yet).
  std::map<std::string, pb::Operation> repatch_;
  std::set<std::string> unwritten_;
  std::vector<pb::Notification> unresolved_notifications_;
  std::vector<pb::OutboxItem> unresolved_items_;
  // Records chained on the locked head, not written yet (write_links()).
  struct Links {
    std::vector<Param> seqs, keys, data;
  } links_;
  bool notify_ = false;   // work for the dispatchers: wake every process at commit
  bool counted_ = false;  // count changes written
  std::vector<pb::AuditRecord> unchained_;  // appended before the head was locked
};

void pause_before_retry(int attempt) {
  thread_local std::mt19937 rng{std::random_device{}()};
  const int cap_us = std::min(50'000, 500 * (1 << std::min(attempt, 6)));
  std::this_thread::sleep_for(
      std::chrono::microseconds(std::uniform_int_distribution<int>(0, cap_us)(rng)));
}

}  // namespace

Status prepare_statements(Conn& conn, Isolation isolation) {
  OPGATE_TRY(conn.prepare("begin", isolation == Isolation::serializable
                                       ? "BEGIN ISOLATION LEVEL SERIALIZABLE"
                                       : "BEGIN ISOLATION LEVEL READ COMMITTED"));
  for (const auto& [name, sql] : kStatements) OPGATE_TRY(conn.prepare(name, sql));
  return Status::Ok();
}

Result<std::unique_ptr<PgStorage>> PgStorage::open(const PgOptions& options, const Clock& clock) {
  if (options.migrate) {
    auto report = migrate(options.conn);
    if (!report) return report.error();
    for (const auto& m : report->applied) spdlog::info("database schema: applied migration {}", m);
  }
  std::unique_ptr<PgStorage> s(new PgStorage());
  s->options_ = options;
  s->clock_ = &clock;
  if (options.database_clock) {
    s->db_clock_ = std::make_unique<DatabaseClock>(clock);
    s->clock_ = s->db_clock_.get();
  }
  const Isolation isolation = options.isolation;
  s->pool_ = std::make_unique<Pool>(options.conn, options.pool_size, [isolation](Conn& c) {
    return prepare_statements(c, isolation);
  });
  s->handoff_ = {crypto::random_hex(8), options.handoff_ms, 30 * options.handoff_ms};
  s->head_guess_.next_ticket = static_cast<uint64_t>(lock_id("ticket:" + s->handoff_.node));
  s->reader_ = std::make_unique<DurableReader>(*s->pool_, s->handoff_);
  // One connection now: a wrong URL or a missing schema fails the start.
  auto first = s->pool_->acquire();
  if (!first) return first.error();
  auto version = (*first)->run("a_head", {});
  if (!version) return version.error();
  if (auto durable = (*first)->run("durable", {}); !durable)
    return make_error(errc::storage_unavailable,
                      fmt::format("the database role cannot write the WAL record with which an "
                                  "audited commit waits for its flush (GRANT EXECUTE ON FUNCTION "
                                  "pg_logical_emit_message(boolean, text, text) to it): {}",
                                  durable.error().message));
  if (s->db_clock_) {
    OPGATE_TRY(s->db_clock_->sync(**first));
    if (std::abs(s->db_clock_->offset_ms()) > 1000)
      spdlog::warn(
          "this node's clock is {} ms off the database's; opgate keeps time by the "
          "database's",
          -s->db_clock_->offset_ms());
  }
  return s;
}

PgStorage::~PgStorage() {
  stop_listening();
  reader_.reset();
  pool_.reset();
}

Status SharedFlush::wait_past(Pool& pool) {
  mu_.lock();
  const uint64_t need = started_ + 1;  // the first to start after this call
  while (ended_ < need && failed_ < need) {
    if (running_) {
      ended_cv_.wait(mu_);
      continue;
    }
    running_ = true;
    const uint64_t flush = ++started_;
    mu_.unlock();
    Status s;
    if (auto conn = pool.acquire(); !conn)
      s = conn.error();
    else if (auto r = (*conn)->run("durable", {}); !r)
      s = r.error();
    flushes_++;
    mu_.lock();
    running_ = false;
    if (s) {
      ended_ = flush;
    } else {
      failed_ = flush;
      failure_ = s.error();
    }
    ended_cv_.notify_all();
  }
  // A flush that started after the call and failed: the commit is in the
  // log, and may or may not reach the disk.
  Status result = ended_ >= need ? Status::Ok() : Status(*failure_);
  mu_.unlock();
  return result;
}

Status PgStorage::transact(const std::function<Status(Transaction&)>& fn) {
  std::vector<std::function<void()>> after;
  CommittedRead* read_after = nullptr;  // what the caller asked to read after the commit
  bool early_released = false;          // its flush is waited for below
  // The connection goes back to the pool before what runs after the commit.
  auto attempt_once = [&](int attempt, bool& retry) -> Status {
    retry = false;
    OPGATE_ASSIGN_OR_RETURN(auto conn, pool_->acquire());
    PgTransaction txn(*conn, options_.isolation, clock_->now_ms(), handoff_, head_guess_);
    txn.set_fans_out_notifications(fans_out_notifications());
    Status s = fn(txn);
    if (s && !txn.failed()) {
      Status c = txn.commit();
      // A commit that failed without marking the transaction failed (an
      // audit head it could not resolve) reports its own error, never fn's Ok.
      if (!c && !txn.failed()) s = c;
      if (c) {
        read_after = txn.committed_read();
        early_released = txn.early_released();
        commits_++;
        if (txn.counted() && ++count_changes_ % kFoldEvery == 0)
          if (Status f = fold_counts(*conn); !f)
            spdlog::warn("cannot fold count changes into the counts (the next fold will): {}",
                         f.error().message);
        after = txn.take_after_commit();
        return Status::Ok();
      }
    }
    // Conflicts are retried, and so is a connection lost before the COMMIT
    // went out (nothing committed): one the server closed while it was idle.
    retry = txn.failed() && (txn.retryable() || (conn->broken() && !txn.commit_sent())) &&
            attempt < options_.max_attempts;
    txn.rollback();
    return txn.failed() ? Status(txn.error()) : s;
  };
  for (int attempt = 1;; ++attempt) {
    bool retry = false;
    Status s = attempt_once(attempt, retry);
    if (s) break;
    if (!retry) return s;
    retries_++;
    pause_before_retry(attempt);
  }
  if (early_released) {
    early_releases_++;
    // Committed and seen: a failure here is one of confirming it on disk,
    // and says so (the caller cannot take it for "nothing happened").
    if (Status flushed = flush_.wait_past(*pool_); !flushed)
      return make_error(errc::storage_unavailable,
                        "the change was committed, but its flush to disk could not be "
                        "confirmed (a crash now may lose it): " +
                            flushed.error().message);
  }
  if (read_after && !read_after->read) {
    reads_after_commit_alone_++;
    read_committed(reader(), *read_after);
  }
  for (auto& f : after) f();
  return Status::Ok();
}

Result<std::vector<Appended>> PgStorage::append_events(std::vector<NewEvent>& events) {
  std::vector<Appended> out(events.size(), Appended::stored);
  // The first copy of each id; inserted in key order, so that two nodes
  // storing overlapping batches wait for each other in one order. A repeat
  // within the batch is answered, once the firsts are, against the body its
  // id holds: the stored one, else the first copy's.
  std::map<std::pair<std::string, std::string>, size_t> first;
  std::vector<size_t> first_of(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& ev = events[i].event;
    first_of[i] = first.emplace(std::pair{ev.source(), ev.webhook_id()}, i).first->second;
  }
  if (first.empty()) return out;
  std::vector<std::string> held(events.size());  // by first index: the body hash the id holds
  std::vector<size_t> order;
  std::array<std::vector<Param>, 7> columns;
  for (const auto& [key, i] : first) {
    const auto& ev = events[i].event;
    order.push_back(i);
    columns[0].push_back(text(ev.source()));
    columns[1].push_back(text(ev.webhook_id()));
    columns[2].push_back(bytea(ev.body_sha256()));
    columns[3].push_back(boolean(ev.processed()));
    columns[4].push_back(int8(ev.processed_at_ms()));
    columns[5].push_back(events[i].record.empty() ? bytea(ev.SerializeAsString())
                                                  : bytea(events[i].record));
    columns[6].push_back(boolean(events[i].queue));
  }
  std::vector<Stmt> stmts;
  stmts.push_back({"begin", {}});
  stmts.push_back(
      {"ev_append",
       {array(Oid::text, columns[0]), array(Oid::text, columns[1]), array(Oid::bytea, columns[2]),
        array(Oid::boolean, columns[3]), array(Oid::int8, columns[4]),
        array(Oid::bytea, columns[5]), array(Oid::boolean, columns[6])}});
  if (std::any_of(events.begin(), events.end(), [](const NewEvent& e) { return e.queue; }))
    stmts.push_back({"notify", {text(handoff_.node)}});
  stmts.push_back({"commit", {}});
  std::vector<size_t> unknown;  // stored by someone else, whose hash was not visible yet
  for (int attempt = 1;; ++attempt) {
    OPGATE_ASSIGN_OR_RETURN(auto conn, pool_->acquire());
    auto r = conn->pipeline(stmts);
    if (!r) {
      const bool retry = conn->last_failure_retryable() && attempt < options_.max_attempts;
      if (!conn->broken() && conn->in_transaction()) (void)conn->exec("ROLLBACK");
      if (!retry) return r.error();
      retries_++;
      pause_before_retry(attempt);
      continue;
    }
    commits_++;
    const Rows& rows = (*r)[1];
    if (static_cast<size_t>(rows.size()) != order.size())
      return make_error(errc::internal, "the inbox batch answered for another number of events");
    for (size_t k = 0; k < order.size(); ++k) {
      const int row = static_cast<int>(k);
      const size_t i = order[k];
      if (rows.boolean(row, 0)) {  // stored
        held[i] = events[i].event.body_sha256();
        continue;
      }
      if (rows.null(row, 1)) {
        unknown.push_back(i);
        continue;
      }
      held[i] = std::string(rows.bytes(row, 1));
      out[i] = held[i] == events[i].event.body_sha256() ? Appended::duplicate : Appended::conflict;
    }
    break;
  }
  for (size_t i : unknown) {
    const auto& ev = events[i].event;
    OPGATE_ASSIGN_OR_RETURN(auto conn, pool_->acquire());
    OPGATE_ASSIGN_OR_RETURN(auto rows,
                            conn->run("ev_hash", {text(ev.source()), text(ev.webhook_id())}));
    held[i] = rows.empty() ? ev.body_sha256() : std::string(rows.bytes(0, 0));
    out[i] = held[i] == ev.body_sha256() ? Appended::duplicate : Appended::conflict;
  }
  for (size_t i = 0; i < events.size(); ++i)
    if (first_of[i] != i)
      out[i] = held[first_of[i]] == events[i].event.body_sha256() ? Appended::duplicate
                                                                  : Appended::conflict;
  return out;
}

Result<BackupInfo> PgStorage::backup_to(const std::string&) {
  return make_error(errc::bad_request,
                    "A PostgreSQL store is backed up by PostgreSQL: a base backup with WAL "
                    "archiving (pg_basebackup) for point-in-time recovery, or pg_dump for a "
                    "logical copy; opgate audit verify checks the chain of a restored copy.");
}

Result<AuditVerification> PgStorage::verify_audit() {
  ChainVerifier verifier;
  int64_t after = 0;
  uint64_t position = 0;
  OPGATE_ASSIGN_OR_RETURN(auto conn, pool_->acquire());
  // The head row, which every append moves in the statement that writes
  // its records, read first: the chain must reach it with the same hash,
  // or records were cut from its end (records appended meanwhile lie past
  // it).
  OPGATE_ASSIGN_OR_RETURN(auto head_rows, conn->run("a_head", {}));
  AuditHead recorded;
  if (head_rows.size() > 0)
    recorded = {static_cast<uint64_t>(head_rows.int8(0, 0)), head_rows.str(0, 1)};
  auto cut = [&](AuditVerification v, std::string problem) {
    v.ok = false;
    v.first_bad_seq = recorded.seq;
    v.problem = std::move(problem);
    return v;
  };
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto rows, conn->run("a_page", {int8(after), int8(1000)}));
    for (int i = 0; i < rows.size(); ++i) {
      ++position;
      const int64_t seq = rows.int8(i, 0);
      pb::AuditRecord r;
      auto b = rows.bytes(i, 1);
      if (!r.ParseFromArray(b.data(), static_cast<int>(b.size()))) {
        verifier.unreadable(position);
        return verifier.result();
      }
      if (!verifier.add(r, static_cast<uint64_t>(seq))) return verifier.result();
      if (static_cast<uint64_t>(seq) == recorded.seq && r.hash() != recorded.hash)
        return cut(verifier.result(),
                   fmt::format("record {} is not the one the chain's head names", seq));
      after = seq;
    }
    if (rows.size() < 1000) break;
  }
  if (verifier.result().ok && verifier.result().head.seq < recorded.seq)
    return cut(verifier.result(),
               fmt::format("the chain ends at record {}, but its head names record {}: records "
                           "were removed from its end",
                           verifier.result().head.seq, recorded.seq));
  return verifier.result();
}

Status PgStorage::check_writable() {
  return transact([](Transaction& t) {
    static_cast<PgTransaction&>(t).probe();
    return Status::Ok();
  });
}

Result<std::optional<int64_t>> PgStorage::hold_lease(const std::string& name,
                                                     const std::string& holder, int64_t ttl_ms) {
  OPGATE_ASSIGN_OR_RETURN(auto conn, pool_->acquire());
  OPGATE_ASSIGN_OR_RETURN(auto rows, conn->run("lease", {text(name), text(holder), int8(ttl_ms)}));
  if (rows.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(rows.int8(0, 0));
}

void PgStorage::listen(std::function<void()> wake) {
  stop_listening();
  listening_ = true;
  listener_ = std::thread([this, wake = std::move(wake)] {
    int failures = 0;
    // Another node's work may be due here a handoff after it was queued:
    // the node is woken then, once for all that came in the meantime, and
    // again a handoff after the last of it. On the monotonic clock; 0: no
    // such work is waiting.
    auto now_ms = [this] { return clock_->monotonic_ms(); };
    int64_t foreign_due_ms = 0, foreign_last_ms = 0;
    auto foreign_work = [&] {
      if (handoff_.after_ms <= 0) return;
      foreign_last_ms = now_ms();
      if (foreign_due_ms == 0) foreign_due_ms = foreign_last_ms + handoff_.after_ms;
    };
    while (listening_) {
      auto conn = Conn::connect(options_.conn);
      if (!conn || !(*conn)->exec("LISTEN opgate_work")) {
        if (failures++ % 30 == 0)
          spdlog::warn("cannot listen for work from other nodes; polling until it can");
        for (int i = 0; i < 10 && listening_; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      failures = 0;
      int64_t alive_at_ms = 0;  // when the node lease was last renewed
      const bool renews = (*conn)->prepare("lease", sql_of("lease")).ok();
      Conn* clock_conn = (*conn)->prepare("db_now", sql_of("db_now")).ok() ? conn->get() : nullptr;
      // Whatever was committed while not listening: the node's own now,
      // other nodes' a handoff later.
      wake();
      foreign_work();
      PGconn* c = (*conn)->raw();
      while (listening_ && !(*conn)->broken()) {
        const int timeout_ms =
            foreign_due_ms == 0
                ? 200
                : static_cast<int>(std::clamp<int64_t>(foreign_due_ms - now_ms(), 0, 200));
        pollfd fd{PQsocket(c), POLLIN, 0};
        if (::poll(&fd, 1, timeout_ms) < 0) continue;
        if (!PQconsumeInput(c)) break;
        bool mine = false;
        while (PGnotify* n = PQnotifies(c)) {
          // Work another node queued is its own for a handoff: no node else
          // needs to look before then.
          if (handoff_.node == n->extra || handoff_.after_ms <= 0)
            mine = true;
          else
            foreign_work();
          PQfreemem(n);
        }
        const bool foreign = foreign_due_ms != 0 && now_ms() >= foreign_due_ms;
        if (foreign) {
          const int64_t last_due_ms = foreign_last_ms + handoff_.after_ms;
          foreign_due_ms = last_due_ms > now_ms() ? last_due_ms : 0;
        }
        if (mine || foreign) wake();
        // The lease first, and the clock on this connection: neither waits
        // for a pooled connection, which a busy node may not have for
        // longer than the lease lasts.
        if (renews && now_ms() - alive_at_ms >= kNodeLeaseMs / 3) {
          if ((*conn)->run("lease", {text(node_lease()), text(handoff_.node), int8(kNodeLeaseMs)}))
            alive_at_ms = now_ms();
        }
        resync_clock(clock_conn);
      }
    }
  });
}

void PgStorage::resync_clock(Conn* own) {
  if (!db_clock_ || db_clock_->monotonic_ms() - db_clock_->synced_at_ms() < kClockSyncMs) return;
  Status s = Status::Ok();
  if (own) {
    s = db_clock_->sync(*own);
  } else if (auto conn = pool_->acquire(); conn) {
    s = db_clock_->sync(**conn);
  }
  if (!s) spdlog::warn("cannot read the database's clock: {}", s.error().message);
}

void PgStorage::stop_listening() {
  const bool was = listening_.exchange(false);
  if (listener_.joinable()) listener_.join();
  // Gone: other nodes take its work over at once, not once the lease lapses.
  if (was) (void)stay_alive(0);
}

std::string PgStorage::node_lease() const { return "node:" + handoff_.node; }

Status PgStorage::stay_alive(int64_t ttl_ms) {
  OPGATE_ASSIGN_OR_RETURN(auto held, hold_lease(node_lease(), handoff_.node, ttl_ms));
  if (!held) return make_error(errc::internal, "another process holds this node's lease");
  return Status::Ok();
}

Status PgStorage::fold_counts(Conn& conn) {
  auto r = conn.pipeline({{"begin", {}}, {"counts_fold", {}}, {"commit", {}}});
  if (r) return Status::Ok();
  if (!conn.broken() && conn.in_transaction()) (void)conn.exec("ROLLBACK");
  return r.error();
}

Status PgStorage::fold_counts() {
  OPGATE_ASSIGN_OR_RETURN(auto conn, pool_->acquire());
  return fold_counts(*conn);
}

// Each commit waits for a flush of its own, but those released early,
// which share theirs (SharedFlush).
StorageStats PgStorage::stats() const {
  const uint64_t commits = commits_.load();
  return {commits, commits - early_releases_.load() + flush_.flushes()};
}

}  // namespace opgate::store::pg
