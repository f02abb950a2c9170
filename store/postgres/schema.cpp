#include "store/postgres/schema.h"

#include <fmt/format.h>

#include <functional>

#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::store::pg {

namespace {

// Records are protobuf bytes (`data`) beside the columns that are indexed
// or filtered on. Text keys use the "C" collation: byte order, as the port's
// callers page by them, whatever the database's locale.
constexpr const char* kV1 = R"SQL(
CREATE TABLE inbox_events (
  source text COLLATE "C" NOT NULL,
  webhook_id text COLLATE "C" NOT NULL,
  body_sha256 bytea NOT NULL,
  processed boolean NOT NULL,
  processed_at_ms bigint NOT NULL,
  data bytea NOT NULL,
  PRIMARY KEY (source, webhook_id)
);
CREATE INDEX inbox_events_processed ON inbox_events (processed_at_ms) WHERE processed;
-- Events waiting for the worker, in queue order.
CREATE TABLE inbox_queue (
  id bigserial PRIMARY KEY,
  source text COLLATE "C" NOT NULL,
  webhook_id text COLLATE "C" NOT NULL
);
-- Events parked until their session is bound or recovered.
CREATE TABLE inbox_waiting (
  id bigserial PRIMARY KEY,
  session_id text COLLATE "C" NOT NULL,
  source text COLLATE "C" NOT NULL,
  webhook_id text COLLATE "C" NOT NULL
);
CREATE INDEX inbox_waiting_session ON inbox_waiting (session_id, id);

CREATE TABLE sessions (
  session_id text COLLATE "C" PRIMARY KEY,
  owner text COLLATE "C" NOT NULL,
  data bytea NOT NULL
);
CREATE TABLE calls (
  session_id text COLLATE "C" NOT NULL,
  turn_id text COLLATE "C" NOT NULL,
  call_id text COLLATE "C" NOT NULL,
  data bytea NOT NULL,
  PRIMARY KEY (session_id, turn_id, call_id)
);

CREATE TABLE operations (
  key text COLLATE "C" PRIMARY KEY,
  state bigint NOT NULL,
  expires_at_ms bigint NOT NULL,
  order_id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  owner text COLLATE "C" NOT NULL,
  data bytea NOT NULL
);
CREATE INDEX operations_state ON operations (state, key);
CREATE INDEX operations_expiry ON operations (expires_at_ms, key) WHERE state = 1;
CREATE INDEX operations_order ON operations (order_id, key);
-- Operations per state, kept in step by the transactions that change them.
CREATE TABLE state_counts (
  state bigint PRIMARY KEY,
  n bigint NOT NULL
);
INSERT INTO state_counts SELECT s, 0 FROM generate_series(1, 5) AS s;

CREATE TABLE orders (
  order_id text COLLATE "C" PRIMARY KEY,
  data bytea NOT NULL
);
CREATE TABLE funds (
  order_id text COLLATE "C" PRIMARY KEY,
  data bytea NOT NULL
);

CREATE TABLE ledger (
  operation_key text COLLATE "C" PRIMARY KEY,
  session_id text COLLATE "C" NOT NULL,
  owner text COLLATE "C" NOT NULL,
  order_id text COLLATE "C" NOT NULL,
  data bytea NOT NULL
);
CREATE INDEX ledger_session ON ledger (session_id);
CREATE INDEX ledger_owner ON ledger (owner);
CREATE INDEX ledger_order ON ledger (order_id);

-- The audit chain: one chain for every node. Appending locks audit_head's
-- one row, so records are chained in commit order.
CREATE TABLE audit (
  seq bigint PRIMARY KEY,
  operation_key text COLLATE "C" NOT NULL,
  data bytea NOT NULL
);
CREATE INDEX audit_operation ON audit (operation_key, seq);
CREATE TABLE audit_head (
  id smallint PRIMARY KEY CHECK (id = 1),
  seq bigint NOT NULL,
  hash bytea NOT NULL
);
INSERT INTO audit_head VALUES (1, 0, '');

CREATE TABLE outbox (
  id bigserial PRIMARY KEY,
  not_before_ms bigint NOT NULL,
  data bytea NOT NULL
);
CREATE INDEX outbox_due ON outbox (not_before_ms, id);

CREATE TABLE meta (
  key text COLLATE "C" PRIMARY KEY,
  value text NOT NULL
);
)SQL";

// Leases on duties that one node performs for all (expiry, sweeps): the
// holder, until when (the database's clock), and the fencing token that
// grows each time the lease changes hands.
constexpr const char* kV2 = R"SQL(
CREATE TABLE leases (
  name text COLLATE "C" PRIMARY KEY,
  holder text NOT NULL,
  token bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
)SQL";

// Notifications: outbox items wait in two queues and are
// found by operation; settled operations are counted by outcome; endpoints'
// standing and the events kept for replay. The columns added to existing
// rows are filled by backfill_v3 from the records themselves.
constexpr const char* kV3 = R"SQL(
ALTER TABLE operations ADD COLUMN outcome bigint NOT NULL DEFAULT 0;
CREATE TABLE outcome_counts (
  outcome bigint PRIMARY KEY,
  n bigint NOT NULL
);
INSERT INTO outcome_counts SELECT s, 0 FROM generate_series(1, 6) AS s;

ALTER TABLE outbox ADD COLUMN queue smallint NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN operation_key text COLLATE "C" NOT NULL DEFAULT '';
DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (queue, not_before_ms, id);
CREATE INDEX outbox_operation ON outbox (operation_key, id);

CREATE TABLE endpoint_states (
  name text COLLATE "C" PRIMARY KEY,
  data bytea NOT NULL
);
CREATE TABLE notifications (
  created_at_ms bigint NOT NULL,
  event_id text COLLATE "C" NOT NULL,
  data bytea NOT NULL,
  PRIMARY KEY (created_at_ms, event_id)
);
)SQL";

// Kept records: what a feature keeps by kind and key (agent tokens, for one).
constexpr const char* kV4 = R"SQL(
CREATE TABLE kept_records (
  kind text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  data bytea NOT NULL,
  PRIMARY KEY (kind, key)
);
)SQL";

// Count changes: each transaction that moves operations between states
// inserts what it changed, and rows are folded into the counts now and
// then (PgStorage::fold_counts), so that no transaction waits on a count
// row. kind 0: a state's count; 1: a settled outcome's.
constexpr const char* kV5 = R"SQL(
CREATE TABLE count_changes (
  id bigserial PRIMARY KEY,
  kind bigint NOT NULL,
  value bigint NOT NULL,
  delta bigint NOT NULL
);
)SQL";

// Outbox items by node: the node that queued an item (or last wrote it),
// and when, takes it first (store/postgres/pg_storage.h, Handoff); ''
// (items from before): any node.
constexpr const char* kV6 = R"SQL(
ALTER TABLE outbox ADD COLUMN node text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE outbox ADD COLUMN node_since_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX outbox_node_due ON outbox (queue, node, not_before_ms);
)SQL";

// A node's items in the order they fall due, ties by id: its due items
// are read from its own part of the index, in order, without walking
// other nodes' items or sorting.
constexpr const char* kV7 = R"SQL(
CREATE INDEX outbox_node_due_id ON outbox (queue, node, not_before_ms, id);
DROP INDEX outbox_node_due;
)SQL";

// Runs `fn` on each record the prepared statement `stmt` returns (its id
// or key in column 0, the record's bytes in column 1).
template <typename Message>
Status each_record(Conn& conn, const char* stmt, const char* what,
                   const std::function<Status(const Rows&, int, const Message&)>& fn) {
  OPGATE_ASSIGN_OR_RETURN(auto rows, conn.run(stmt, {}));
  for (int i = 0; i < rows.size(); ++i) {
    Message m;
    auto b = rows.bytes(i, 1);
    if (!m.ParseFromArray(b.data(), static_cast<int>(b.size())))
      return make_error(errc::corrupt_record, fmt::format("a stored {} does not parse", what));
    OPGATE_TRY(fn(rows, i, m));
  }
  return Status::Ok();
}

Status backfill_v3(Conn& conn) {
  OPGATE_TRY(conn.prepare("v3_settled", "SELECT key, data FROM operations WHERE state = 5"));
  OPGATE_TRY(conn.prepare("v3_outcome", "UPDATE operations SET outcome = $2 WHERE key = $1"));
  OPGATE_TRY(each_record<pb::Operation>(
      conn, "v3_settled", "operation", [&](const Rows&, int, const pb::Operation& op) -> Status {
        OPGATE_TRY(conn.run("v3_outcome", {text(op.key()), int8(op.outcome())}));
        return Status::Ok();
      }));
  OPGATE_TRY(
      conn.exec("UPDATE outcome_counts c SET n = (SELECT count(*) FROM operations o "
                "WHERE o.state = 5 AND o.outcome = c.outcome)"));
  OPGATE_TRY(conn.prepare("v3_items", "SELECT id, data FROM outbox"));
  OPGATE_TRY(conn.prepare(
      "v3_item", "UPDATE outbox SET queue = $2::bigint, operation_key = $3 WHERE id = $1"));
  return each_record<pb::OutboxItem>(
      conn, "v3_items", "outbox item",
      [&](const Rows& rows, int i, const pb::OutboxItem& item) -> Status {
        const int64_t queue = queue_of(item.kind()) == Queue::notifications ? 1 : 0;
        OPGATE_TRY(
            conn.run("v3_item", {int8(rows.int8(i, 0)), int8(queue), text(item.operation_key())}));
        return Status::Ok();
      });
}

constexpr int64_t kMigrationLock = 0x6f70676174654d31;  // "opgateM1"

std::string quote_ident(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> all = {
      {1, "records, indexes, the audit chain's head and the state counts", kV1},
      {2, "leases on the duties one node performs for all", kV2},
      {3,
       "notifications: two outbox queues, items by operation, settled counts by outcome, "
       "endpoint states, kept events",
       kV3, backfill_v3},
      {4, "kept records: agent tokens and what other features keep by kind and key", kV4},
      {5, "count changes, inserted by the transactions and folded into the counts", kV5},
      {6, "outbox items by the node that queued them", kV6},
      {7, "each node's outbox items in the order they fall due", kV7},
  };
  return all;
}

// The schema's version: the newest migration recorded.
constexpr const char* kCurrentVersion =
    "SELECT coalesce(max(version), 0)::bigint FROM schema_migrations";

Result<MigrationReport> migrate(const ConnOptions& options, int up_to) {
  ConnOptions o = options;
  o.statement_timeout_ms = 0;  // a migration may take long; the lock wait too
  OPGATE_ASSIGN_OR_RETURN(auto conn, Conn::connect(o));
  // Nothing to do (every start but the first of a new version): no lock,
  // which a node migrating or a paused one holding it would keep this one
  // waiting for.
  const int newest = std::min(up_to, migrations().back().version);
  OPGATE_TRY(conn->prepare("exists", "SELECT to_regclass('schema_migrations') IS NOT NULL"));
  if (auto exists = conn->run("exists", {}); exists && !exists->empty() && exists->boolean(0, 0)) {
    OPGATE_TRY(conn->prepare("current_unlocked", kCurrentVersion));
    OPGATE_ASSIGN_OR_RETURN(auto rows, conn->run("current_unlocked", {}));
    const int current = static_cast<int>(rows.int8(0, 0));
    if (current >= newest && current <= migrations().back().version)
      return MigrationReport{current, current, {}};
  }
  OPGATE_TRY(conn->exec(fmt::format("SELECT pg_advisory_lock({})", kMigrationLock)));
  auto run = [&]() -> Result<MigrationReport> {
    if (!o.schema.empty())
      OPGATE_TRY(conn->exec("CREATE SCHEMA IF NOT EXISTS " + quote_ident(o.schema)));
    OPGATE_TRY(
        conn->exec("CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                   "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"));
    OPGATE_TRY(conn->prepare("current", kCurrentVersion));
    OPGATE_ASSIGN_OR_RETURN(auto rows, conn->run("current", {}));
    MigrationReport report;
    report.from_version = static_cast<int>(rows.int8(0, 0));
    report.to_version = report.from_version;
    if (report.from_version > migrations().back().version)
      return make_error(errc::storage_unavailable,
                        fmt::format("the database holds schema version {}, newer than this opgate "
                                    "understands ({}); run a newer opgate",
                                    report.from_version, migrations().back().version));
    OPGATE_TRY(conn->prepare("record",
                             "INSERT INTO schema_migrations (version, description) "
                             "VALUES ($1::bigint, $2)"));
    for (const auto& m : migrations()) {
      if (m.version <= report.from_version || m.version > up_to) continue;
      OPGATE_TRY(conn->exec("BEGIN"));
      Status s = conn->exec(m.sql);
      if (s && m.backfill) s = m.backfill(*conn);
      if (s)
        s = conn->run("record", {int8(m.version), text(m.description)}).ok()
                ? Status::Ok()
                : Status(make_error(errc::storage_unavailable, "cannot record a migration"));
      if (s) s = conn->exec("COMMIT");
      if (!s) {
        (void)conn->exec("ROLLBACK");
        return make_error(errc::storage_unavailable,
                          fmt::format("migration {} ({}) failed: {}", m.version, m.description,
                                      s.error().message));
      }
      report.to_version = m.version;
      report.applied.push_back(fmt::format("{}: {}", m.version, m.description));
    }
    return report;
  };
  auto report = run();
  (void)conn->exec(fmt::format("SELECT pg_advisory_unlock({})", kMigrationLock));
  return report;
}

}  // namespace opgate::store::pg
