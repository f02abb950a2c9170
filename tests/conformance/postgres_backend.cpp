// The conformance suite against PostgreSQL: OPGATE_TEST_PG_URL names a
// server's database (scripts/with-postgres starts a private
// one). Each test gets a schema of its own, dropped when the next starts;
// reopen() opens a new Storage (a new pool of connections) on the same
// schema, as a restarted node would. OPGATE_TEST_PG_ISOLATION=serializable
// runs the backend at SERIALIZABLE instead of READ COMMITTED with locks.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <libpq-fe.h>
#include <poll.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "backend.h"
#include "common/crypto.h"
#include "common/mutex.h"
#include "store/postgres/pg_storage.h"
#include "store/postgres/schema.h"

namespace opgate::conformance {

namespace {

class PostgresBackend final : public Backend {
 public:
  explicit PostgresBackend(std::string url) : url_(std::move(url)) {}
  ~PostgresBackend() override { drop(); }
  std::string name() const override { return "postgres"; }
  bool shared() const override { return true; }

  std::unique_ptr<store::Storage> open_empty(const Clock& clock) override {
    drop();
    schema_ = "conformance_" + crypto::random_hex(6);
    return reopen(clock);
  }

  std::unique_ptr<store::Storage> reopen(const Clock& clock) override {
    store::pg::PgOptions o;
    o.conn.url = url_;
    o.conn.schema = schema_;
    o.pool_size = 8;
    const char* iso = std::getenv("OPGATE_TEST_PG_ISOLATION");
    if (iso && std::string(iso) == "serializable") o.isolation = store::pg::Isolation::serializable;
    auto s = store::pg::PgStorage::open(o, clock);
    REQUIRE_MESSAGE(s.ok(), s.error().message);
    return std::move(*s);
  }

 private:
  void drop() {
    if (schema_.empty()) return;
    store::pg::ConnOptions o;
    o.url = url_;
    auto c = store::pg::Conn::connect(o);
    if (c) (void)(*c)->exec("DROP SCHEMA IF EXISTS \"" + schema_ + "\" CASCADE");
    schema_.clear();
  }
  std::string url_;
  std::string schema_;
};

}  // namespace

std::unique_ptr<Backend> make_postgres_backend() {
  const char* url = std::getenv("OPGATE_TEST_PG_URL");
  if (!url || !*url) {
    std::cerr << "OPGATE_TEST_PG_URL is not set: it must name a PostgreSQL database "
                 "(scripts/with-postgres starts one)\n";
    std::exit(2);
  }
  return std::make_unique<PostgresBackend>(url);
}

}  // namespace opgate::conformance

// PostgreSQL only (not a port contract): the lease that elects the node
// performing the shared duties.
TEST_CASE("postgres: a duty's lease has one holder at a time; its token grows at each handover") {
  using opgate::conformance::backend;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto s = backend().open_empty(clock);
  auto* pg = dynamic_cast<opgate::store::pg::PgStorage*>(s.get());
  REQUIRE(pg);
  auto hold = [&](const char* holder, int64_t ttl_ms) {
    auto token = pg->hold_lease("duties", holder, ttl_ms);
    REQUIRE_MESSAGE(token.ok(), token.error().message);
    return *token;
  };
  CHECK(hold("A", 60'000) == std::optional<int64_t>(1));
  CHECK(hold("B", 60'000) == std::nullopt);               // A's lease runs
  CHECK(hold("A", 60'000) == std::optional<int64_t>(1));  // renewed, same token
  CHECK(hold("A", 0) == std::optional<int64_t>(1));       // renewed to end at once
  CHECK(hold("B", 60'000) == std::optional<int64_t>(2));  // lapsed: B takes it over
  CHECK(hold("A", 60'000) == std::nullopt);
}

// The options of a fresh, empty store of the backend under test.
opgate::store::pg::PgOptions fresh_options(const opgate::Clock& clock) {
  namespace pg = opgate::store::pg;
  auto fresh = opgate::conformance::backend().open_empty(clock);
  auto* opened = dynamic_cast<pg::PgStorage*>(fresh.get());
  REQUIRE(opened);
  return opened->options();
}

// PostgreSQL only: a database gone silent is noticed in about a minute, by
// default; what the connection string or the configuration says wins.
TEST_CASE("postgres: connections probe a silent database unless told otherwise") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  pg::ConnOptions o = fresh_options(clock).conn;
  auto c = pg::Conn::connect(o);
  REQUIRE(c.ok());
  CHECK((*c)->option("keepalives_idle") == "30");
  CHECK((*c)->option("keepalives_interval") == "10");
  CHECK((*c)->option("keepalives_count") == "3");
  CHECK((*c)->option("tcp_user_timeout") == "60000");
  o.params.emplace_back("keepalives_idle", "5");
  auto told = pg::Conn::connect(o);
  REQUIRE(told.ok());
  CHECK((*told)->option("keepalives_idle") == "5");
}

// A schema of its own migrated to an older version, dropped at the end: for
// what a migration does with what an older opgate wrote.
struct OlderSchema {
  opgate::store::pg::ConnOptions conn;
  opgate::Result<std::unique_ptr<opgate::store::pg::Conn>> c =
      opgate::make_error(opgate::errc::internal, "not connected");
  ~OlderSchema() {
    if (c.ok()) (void)(*c)->exec("DROP SCHEMA IF EXISTS \"" + conn.schema + "\" CASCADE");
  }
  static std::unique_ptr<OlderSchema> at(const opgate::Clock& clock, const std::string& suffix,
                                         int version) {
    namespace pg = opgate::store::pg;
    auto out = std::make_unique<OlderSchema>();
    out->conn = fresh_options(clock).conn;
    out->conn.schema += suffix;
    out->c = pg::Conn::connect(out->conn);
    REQUIRE(out->c.ok());
    auto migrated = pg::migrate(out->conn, version);
    REQUIRE_MESSAGE(migrated.ok(), migrated.error().message);
    REQUIRE(migrated->to_version == version);
    REQUIRE((*out->c)
                ->prepare("old_op",
                          "INSERT INTO operations (key, state, expires_at_ms, order_id, "
                          "session_id, owner, data) VALUES ($1, $2::bigint, 0, $3, '', '', $4)")
                .ok());
    REQUIRE((*out->c)
                ->prepare("old_count", "UPDATE state_counts SET n = n + 1 WHERE state = $1::bigint")
                .ok());
    return out;
  }
  // An operation as opgate wrote it before migration 3 (no outcome column),
  // counted in its state's row.
  void put_operation(const opgate::pb::Operation& op) {
    namespace pg = opgate::store::pg;
    REQUIRE(
        (*c)->run("old_op", {pg::text(op.key()), pg::int8(op.state()),
                             pg::text(op.proposal().order_id()), pg::bytea(op.SerializeAsString())})
            .ok());
    REQUIRE((*c)->run("old_count", {pg::int8(op.state())}).ok());
  }
};

// PostgreSQL only: a server that closed every connection while they were
// idle (a restart) costs no caller an error: a read is made again, and a
// transaction run again, on a new connection, as nothing was committed.
TEST_CASE("postgres: connections the server closed while idle are replaced, not failed with") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto s = backend().open_empty(clock);
  auto put_session = [&](const std::string& id) {
    return s->transact([&](opgate::store::Transaction& t) -> opgate::Status {
      OPGATE_ASSIGN_OR_RETURN(auto before, t.session(id));  // a read, then the write
      (void)before;
      opgate::pb::Session session;
      session.set_session_id(id);
      session.set_owner("u");
      t.put_session(session);
      return opgate::Status::Ok();
    });
  };
  // Several connections in the pool, idle.
  for (int i = 0; i < 4; ++i) REQUIRE(put_session("sess_" + std::to_string(i)).ok());
  auto terminate_all = [&] {
    pg::ConnOptions o = dynamic_cast<pg::PgStorage*>(s.get())->options().conn;
    auto admin = pg::Conn::connect(o);
    REQUIRE(admin.ok());
    REQUIRE((*admin)
                ->exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                       "current_database() AND pid <> pg_backend_pid() AND backend_type = "
                       "'client backend'")
                .ok());
  };
  terminate_all();
  auto read = s->reader().session("sess_0");
  REQUIRE_MESSAGE(read.ok(), read.error().message);
  CHECK(read->has_value());
  terminate_all();
  auto written = put_session("sess_new");
  REQUIRE_MESSAGE(written.ok(), written.error().message);
  CHECK(s->reader().session("sess_new")->has_value());
}

// PostgreSQL only: a schema already up to date is opened without the
// migration lock, so a node that holds it (migrating, or paused) keeps no
// other node from starting.
TEST_CASE("postgres: nothing to migrate takes no lock another node may hold") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto current = OlderSchema::at(clock, "_now", pg::migrations().back().version);
  // "opgateM1", the lock every migration takes.
  REQUIRE((*current->c)->exec("SELECT pg_advisory_lock(8030031803863878961)").ok());
  auto again = std::async(std::launch::async, [&] { return pg::migrate(current->conn); });
  // Bounded only as a guard against a hang; the answer does not wait on time.
  REQUIRE(again.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  auto report = again.get();
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  CHECK(report->applied.empty());
  CHECK(report->to_version == pg::migrations().back().version);
  (void)(*current->c)->exec("SELECT pg_advisory_unlock(8030031803863878961)");
}

// PostgreSQL only: migration 3 fills the columns it adds from the records
// already stored (settled outcomes, an outbox item's queue and operation).
TEST_CASE("postgres: migration 3 counts settled outcomes and indexes outbox items already stored") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto older = OlderSchema::at(clock, "_v2", 2);
  pg::ConnOptions& conn = older->conn;
  auto& c = older->c;
  // What opgate before migration 3 wrote: a settled (denied) operation and
  // an execute item.
  pb::Operation op;
  op.set_key("k1");
  op.set_state(pb::STATE_SETTLED);
  op.set_outcome(pb::OUTCOME_DENIED);
  op.mutable_proposal()->set_order_id("O1");
  pb::OutboxItem item;
  item.set_kind(pb::OUTBOX_EXECUTE);
  item.set_operation_key("k1");
  item.set_not_before_ms(5);
  older->put_operation(op);
  REQUIRE((*c)->prepare("item", "INSERT INTO outbox (not_before_ms, data) VALUES (5, $1)").ok());
  REQUIRE((*c)->run("item", {pg::bytea(item.SerializeAsString())}).ok());

  pg::PgOptions o;
  o.conn = conn;
  o.pool_size = 2;
  auto s = pg::PgStorage::open(o, clock);  // applies migration 3
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  auto counts = (*s)->reader().counts();
  REQUIRE(counts.ok());
  CHECK(counts->operations.at(pb::STATE_SETTLED) == 1);
  CHECK(counts->settled.at(pb::OUTCOME_DENIED) == 1);
  CHECK(counts->settled.at(pb::OUTCOME_SUCCEEDED) == 0);
  auto of = (*s)->reader().outbox_of("k1");
  REQUIRE(of.ok());
  REQUIRE(of->size() == 1);
  CHECK(of->at(0).item.kind() == pb::OUTBOX_EXECUTE);
  CHECK((*s)->reader().due(opgate::store::Queue::work, 10, 10, {})->size() == 1);
  CHECK((*s)->reader().due(opgate::store::Queue::notifications, 10, 10, {})->empty());
}

// PostgreSQL only: migration 5 keeps count changes as rows of their own,
// folded into the counts now and then. What the counts held before still
// counts, an operation moved on by several transactions is counted once,
// and a fold leaves every count as it was.
TEST_CASE("postgres: counts from before count changes still count, and a fold keeps them") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto older = OlderSchema::at(clock, "_v4", 4);
  pg::ConnOptions& conn = older->conn;
  auto& c = older->c;
  // Before migration 5: one pending operation, counted in its row.
  pb::Operation op;
  op.set_key("k1");
  op.set_state(pb::STATE_PENDING);
  op.mutable_proposal()->set_order_id("O1");
  older->put_operation(op);

  pg::PgOptions o;
  o.conn = conn;
  o.pool_size = 2;
  auto s = pg::PgStorage::open(o, clock);  // applies migration 5
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  auto counts = (*s)->reader().counts();
  REQUIRE(counts.ok());
  CHECK(counts->operations.at(pb::STATE_PENDING) == 1);

  // k1 on through three states and k2 made, one transaction each.
  auto move = [&](const std::string& key, pb::OperationState state, pb::Outcome outcome) {
    REQUIRE((*s)->transact([&](opgate::store::Transaction& t) -> opgate::Status {
      auto was = t.operation(key);
      if (!was.ok()) return was.error();
      pb::Operation next = was->value_or(op);
      next.set_key(key);
      next.set_state(state);
      next.set_outcome(outcome);
      return t.put_operation(next);
    }));
  };
  move("k1", pb::STATE_APPROVED, pb::OUTCOME_NONE);
  move("k2", pb::STATE_PENDING, pb::OUTCOME_NONE);
  move("k1", pb::STATE_EXECUTING, pb::OUTCOME_NONE);
  move("k1", pb::STATE_SETTLED, pb::OUTCOME_SUCCEEDED);
  REQUIRE(
      (*c)->prepare("changes", "SELECT count(*)::bigint FROM \"" + conn.schema + "\".count_changes")
          .ok());
  auto check = [&] {
    auto now = (*s)->reader().counts();
    REQUIRE(now.ok());
    CHECK(now->operations.at(pb::STATE_PENDING) == 1);
    CHECK(now->operations.at(pb::STATE_APPROVED) == 0);
    CHECK(now->operations.at(pb::STATE_EXECUTING) == 0);
    CHECK(now->operations.at(pb::STATE_SETTLED) == 1);
    CHECK(now->settled.at(pb::OUTCOME_SUCCEEDED) == 1);
    CHECK(now->settled.at(pb::OUTCOME_DENIED) == 0);
  };
  check();
  auto changes = (*c)->run("changes", {});
  REQUIRE(changes.ok());
  CHECK(changes->int8(0, 0) > 0);
  REQUIRE((*s)->fold_counts());
  check();
  changes = (*c)->run("changes", {});
  REQUIRE(changes.ok());
  CHECK(changes->int8(0, 0) == 0);
  REQUIRE((*s)->fold_counts());  // nothing to fold
  check();
}

// PostgreSQL only: folds running while transactions insert count changes
// fold each change once: the counts end as the operations are.
TEST_CASE("postgres: count changes folded while others are inserted are counted once") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto storage = backend().open_empty(clock);
  auto* s = dynamic_cast<pg::PgStorage*>(storage.get());
  REQUIRE(s);
  constexpr int kWriters = 3, kEach = 40;
  std::atomic<int> writing{kWriters};
  std::atomic<int> failed{0}, folds_failed{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < kEach; ++i) {
        pb::Operation op;
        op.set_key("w" + std::to_string(w) + ":" + std::to_string(i));
        op.set_state(i % 2 ? pb::STATE_PENDING : pb::STATE_SETTLED);
        op.set_outcome(i % 2 ? pb::OUTCOME_NONE : pb::OUTCOME_DENIED);
        op.mutable_proposal()->set_order_id("O" + std::to_string(i));
        if (!s->transact([&](opgate::store::Transaction& t) { return t.put_operation(op); }))
          failed++;
      }
      writing--;
    });
  int folds = 0;
  while (writing > 0) {
    if (!s->fold_counts()) folds_failed++;
    ++folds;
  }
  for (auto& t : threads) t.join();
  REQUIRE(s->fold_counts());
  CHECK(failed == 0);
  // At SERIALIZABLE a fold that conflicts with an insert fails (the next
  // one folds what it left); under the locks none does.
  if (s->options().isolation == pg::Isolation::read_committed) CHECK(folds_failed == 0);
  CHECK(folds > 0);
  auto counts = s->reader().counts();
  REQUIRE(counts.ok());
  CHECK(counts->operations.at(pb::STATE_PENDING) == kWriters * kEach / 2);
  CHECK(counts->operations.at(pb::STATE_SETTLED) == kWriters * kEach / 2);
  CHECK(counts->settled.at(pb::OUTCOME_DENIED) == kWriters * kEach / 2);
}

// Two audit records of `key` in one transaction; `refused` adds a write the
// database refuses (see refuse_operations()), which fails the pipeline that
// carries the commit, the head's lock and the records.
// From now on the store's database refuses to write an operation whose key
// starts with "refused-".
void refuse_operations(opgate::store::pg::PgStorage& s) {
  auto conn = s.pool().acquire();
  REQUIRE(conn.ok());
  REQUIRE((*conn)
              ->exec("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "IF NEW.key LIKE 'refused-%' THEN RAISE EXCEPTION 'refused'; END IF; "
                     "RETURN NEW; END $$; CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON "
                     "operations FOR EACH ROW EXECUTE FUNCTION refuse(); "
                     "CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "IF NEW.event_id LIKE 'refused-%' THEN RAISE EXCEPTION 'refused'; END IF; "
                     "RETURN NEW; END $$; CREATE TRIGGER refuse_event BEFORE INSERT ON "
                     "notifications FOR EACH ROW EXECUTE FUNCTION refuse_event()")
              .ok());
}

// Where refuse_operations() makes an audited commit fail: nowhere; in the
// commit's own pipeline, with the guess of the head; or in what the commit
// sends ahead of that without waiting (a write under no new lock).
enum class Refused { no, with_head, ahead };

// With `read`, the commit writes the operation `key` too, and asks for it
// to be read after the commit.
opgate::Status audited_commit(opgate::store::pg::PgStorage& s, const std::string& key,
                              Refused refused = Refused::no,
                              opgate::store::CommittedRead* read = nullptr) {
  return s.transact([&](opgate::store::Transaction& t) {
    if (read) {
      read->operation_key = key;
      t.read_after_commit(read);
      opgate::pb::Operation o;
      o.set_key(key);
      o.set_state(opgate::pb::STATE_APPROVED);
      if (auto put = t.put_operation(o); !put) return put;
    }
    opgate::pb::AuditRecord r;
    r.set_operation_key(key);
    r.set_action("step");
    t.append_audit(r);
    t.append_audit(r);
    if (refused == Refused::no) return opgate::Status::Ok();
    if (refused == Refused::ahead) {
      opgate::pb::Notification n;
      n.set_event_id("refused-" + key);
      n.set_audit_seq(1);
      t.keep_notification(n);
      return opgate::Status::Ok();
    }
    // An operation that records the head is written with the real one in
    // the commit's own pipeline; refuse_operations() makes the database
    // refuse it.
    auto head = t.head_to_record();
    if (!head.ok()) return opgate::Status(head.error());
    opgate::pb::Operation o;
    o.set_key("refused-" + key);
    o.set_state(opgate::pb::STATE_APPROVED);
    o.set_audit_seq(head->seq);
    o.set_audit_hash(head->hash);
    return t.put_operation(o);
  });
}

// Two nodes on one fresh store: two PgStorage on one schema, on one clock.
struct TwoNodes {
  static constexpr int64_t kStart = 1'800'000'000'000;
  opgate::ManualClock clock{kStart};
  std::unique_ptr<opgate::store::pg::PgStorage> a, b;
  explicit TwoNodes(int64_t handoff_ms = 1'000) {
    namespace pg = opgate::store::pg;
    pg::PgOptions o = fresh_options(clock);
    o.pool_size = 2;
    o.handoff_ms = handoff_ms;
    auto first = pg::PgStorage::open(o, clock);
    auto second = pg::PgStorage::open(o, clock);
    REQUIRE(first.ok());
    REQUIRE(second.ok());
    a = std::move(*first);
    b = std::move(*second);
  }
  TwoNodes(const TwoNodes&) = delete;
  TwoNodes& operator=(const TwoNodes&) = delete;
};

// A connection of the test's own to the nodes' schema, after `setup` (SQL)
// and a trigger `name` that runs `body` (PL/pgSQL) `when` ("AFTER INSERT ON
// audit FOR EACH STATEMENT").
std::unique_ptr<opgate::store::pg::Conn> watching(TwoNodes& nodes, const std::string& setup,
                                                  const std::string& name, const std::string& body,
                                                  const std::string& when) {
  auto conn = opgate::store::pg::Conn::connect(nodes.a->options().conn);
  REQUIRE(conn.ok());
  REQUIRE((*conn)
              ->exec(setup + fmt::format("; CREATE FUNCTION {0}() RETURNS trigger LANGUAGE "
                                         "plpgsql AS $$ BEGIN {1} RETURN NULL; END $$; "
                                         "CREATE TRIGGER {0} {2} EXECUTE FUNCTION {0}()",
                                         name, body, when))
              .ok());
  return std::move(*conn);
}

// How many work items are due for the node at `at` (at most 10).
size_t due(opgate::store::pg::PgStorage& s, int64_t at) {
  auto items = s.reader().due(opgate::store::Queue::work, at, 10, {});
  REQUIRE(items.ok());
  return items->size();
}

// When the node's next work item is due; -1 if none.
int64_t next(opgate::store::pg::PgStorage& s) {
  return s.reader().next_due_ms(opgate::store::Queue::work)->value_or(-1);
}

// PostgreSQL only: a walk through a queue a page at a time meets every
// item due for the node, its own and those it takes over from a node gone,
// in due order, however the two interleave.
TEST_CASE("postgres: a queue read a page at a time has every item, the node's and others'") {
  using opgate::conformance::backend;
  namespace pb = opgate::pb;
  using opgate::store::Queue;
  if (backend().name() != "postgres") return;
  constexpr int64_t T = TwoNodes::kStart;
  TwoNodes nodes;
  auto queue = [](opgate::store::pg::PgStorage& s, std::initializer_list<int64_t> due_at) {
    REQUIRE(s.transact([&](opgate::store::Transaction& t) {
      for (int64_t at : due_at) {
        pb::OutboxItem i;
        i.set_kind(pb::OUTBOX_RECONCILE);
        i.set_not_before_ms(T + at);
        t.enqueue(i);
      }
      return opgate::Status::Ok();
    }));
  };
  queue(*nodes.a, {1'000, 3'000, 5'000, 7'000});
  queue(*nodes.b, {2'000, 4'000, 6'000});
  std::vector<int64_t> walked;
  opgate::store::DuePosition after;
  for (;;) {
    auto page = nodes.b->reader().due_after(Queue::work, T + 60'000, after, 2);
    REQUIRE(page.ok());
    if (!page->end) break;
    for (const auto& e : page->entries) walked.push_back(e.item.not_before_ms() - T);
    after = *page->end;
  }
  CHECK(walked == std::vector<int64_t>{1'000, 2'000, 3'000, 4'000, 5'000, 6'000, 7'000});
}

// PostgreSQL only: an outbox item is due at once for the node that queued
// it (or last wrote it), and for the others once it is due and a handoff
// has passed since its node wrote it: a lease that ran out, at once.
TEST_CASE("postgres: an outbox item goes first to the node that queued or last wrote it") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  using opgate::store::Queue;
  if (backend().name() != "postgres") return;
  constexpr int64_t T = TwoNodes::kStart;  // the transactions' time
  TwoNodes nodes{5'000};
  auto& clock = nodes.clock;
  auto& a = nodes.a;
  auto& b = nodes.b;
  pb::OutboxItem now;  // due at once (not_before_ms 0)
  now.set_kind(pb::OUTBOX_DELIVER_RESULT);
  pb::OutboxItem later;  // due in 10 s
  later.set_kind(pb::OUTBOX_EXECUTE);
  later.set_not_before_ms(T + 10'000);
  REQUIRE(a->transact([&](opgate::store::Transaction& t) {
    t.enqueue(now);
    t.enqueue(later);
    return opgate::Status::Ok();
  }));
  CHECK(due(*a, T) == 1);
  CHECK(due(*a, T + 10'000) == 2);
  CHECK(next(*a) == 0);
  CHECK(due(*b, T + 4'999) == 0);
  CHECK(due(*b, T + 5'000) == 1);
  CHECK(due(*b, T + 9'999) == 1);
  CHECK(due(*b, T + 10'000) == 2);
  CHECK(next(*b) == T + 5'000);
  // b takes the later one over at T + 15 s (a claim: held until T + 30 s);
  // now a waits for it.
  auto items = b->reader().due(Queue::work, T + 15'000, 10, {});
  REQUIRE(items.ok());
  REQUIRE(items->size() == 2);
  opgate::store::OutboxEntry claimed =
      items->at(0).item.kind() == pb::OUTBOX_EXECUTE ? items->at(0) : items->at(1);
  claimed.item.set_not_before_ms(T + 30'000);
  clock.advance_ms(15'000);
  REQUIRE(b->transact([&](opgate::store::Transaction& t) {
    t.update_outbox(claimed);
    return opgate::Status::Ok();
  }));
  CHECK(due(*b, T + 30'000) == 2);
  CHECK(due(*a, T + 29'999) == 1);
  CHECK(due(*a, T + 30'000) == 2);  // the lease ran out: no handoff on top
  // b writes it again at T + 31 s (a retry due at T + 32 s): a leaves it to
  // b until a handoff after that write.
  claimed.item.set_not_before_ms(T + 32'000);
  clock.set_ms(T + 31'000);
  REQUIRE(b->transact([&](opgate::store::Transaction& t) {
    t.update_outbox(claimed);
    return opgate::Status::Ok();
  }));
  CHECK(due(*b, T + 32'000) == 2);
  CHECK(due(*a, T + 35'999) == 1);
  CHECK(due(*a, T + 36'000) == 2);
  // Items of no node (queued before nodes were recorded) are every node's.
  {
    auto conn = a->pool().acquire();
    REQUIRE(conn.ok());
    REQUIRE((*conn)->exec("UPDATE outbox SET node = ''").ok());
  }
  CHECK(due(*a, T + 32'000) == 2);
  CHECK(due(*b, T + 32'000) == 2);
}

// PostgreSQL only: a node alive (its node lease held) keeps its items past
// the handoff; once it is gone (the lease ended) they go to the others at
// their handoff, and those it has left for 30 handoffs go to the others
// even while it lives. The lease is by the database's clock, the handoff
// by the transactions' (here a hand-moved one).
TEST_CASE("postgres: a node alive keeps its work; a node gone leaves it after the handoff") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  using opgate::store::Queue;
  if (backend().name() != "postgres") return;
  constexpr int64_t T = TwoNodes::kStart;
  TwoNodes nodes{1'000};
  auto& a = nodes.a;
  auto& b = nodes.b;
  REQUIRE(a->stay_alive(60'000));
  REQUIRE(a->transact([&](opgate::store::Transaction& t) {
    pb::OutboxItem item;
    item.set_kind(pb::OUTBOX_EXECUTE);
    t.enqueue(item);
    return opgate::Status::Ok();
  }));
  CHECK(due(*a, T) == 1);
  CHECK(due(*b, T + 1'000) == 0);  // a lives
  CHECK(due(*b, T + 29'999) == 0);
  CHECK(next(*b) == T + 30'000);
  CHECK(due(*b, T + 30'000) == 1);  // left 30 handoffs: any node's
  // A retry a writes for a minute later is a's when it falls due, though a
  // wrote it more than 30 handoffs before: a has had no time to get to it.
  REQUIRE(a->transact([&](opgate::store::Transaction& t) {
    pb::OutboxItem item;
    item.set_kind(pb::OUTBOX_RECONCILE);
    item.set_not_before_ms(T + 60'000);
    t.enqueue(item);
    return opgate::Status::Ok();
  }));
  CHECK(due(*b, T + 60'000) == 1);  // the first item only
  CHECK(due(*b, T + 89'999) == 1);
  CHECK(due(*b, T + 90'000) == 2);
  CHECK(due(*a, T + 60'000) == 2);
  REQUIRE(a->stay_alive(0));  // a is gone
  CHECK(due(*b, T + 60'000) == 2);
  CHECK(next(*b) == T + 1'000);
  REQUIRE(a->transact([&](opgate::store::Transaction& t) {
    auto items = t.due(Queue::work, T + 60'000, 10, {});
    REQUIRE(items.ok());
    for (const auto& entry : *items)
      if (entry.item.kind() == pb::OUTBOX_RECONCILE) t.remove_outbox(entry.id);
    return opgate::Status::Ok();
  }));
  CHECK(due(*b, T + 1'000) == 1);
  CHECK(due(*b, T + 999) == 0);  // the handoff still holds
  CHECK(next(*b) == T + 1'000);
  // b's own lease is its own: a's items are still a's, b's are b's.
  REQUIRE(b->stay_alive(60'000));
  CHECK(due(*b, T + 1'000) == 1);
  CHECK(due(*a, T) == 1);
}

// PostgreSQL only: a node's due items come by when they fell due, its own
// and those it may take over from another node alike, so that a stream of
// its own never crowds out work a node gone left behind.
TEST_CASE("postgres: another node's older work comes before a node's newer own work") {
  using opgate::conformance::backend;
  namespace pb = opgate::pb;
  using opgate::store::Queue;
  if (backend().name() != "postgres") return;
  constexpr int64_t T = TwoNodes::kStart;
  TwoNodes nodes{5'000};
  auto queue = [](opgate::store::pg::PgStorage& s, int64_t not_before_ms, int n) {
    REQUIRE(s.transact([&](opgate::store::Transaction& t) {
      for (int i = 0; i < n; ++i) {
        pb::OutboxItem item;
        item.set_kind(pb::OUTBOX_EXECUTE);
        item.set_operation_key(fmt::format("k{}-{}", not_before_ms, i));
        item.set_not_before_ms(not_before_ms);
        t.enqueue(item);
      }
      return opgate::Status::Ok();
    }));
  };
  queue(*nodes.b, T, 1);  // b's, then b is gone
  nodes.clock.advance_ms(6'000);
  queue(*nodes.a, T + 6'000, 3);  // a's own, newer
  auto due = nodes.a->reader().due(Queue::work, T + 6'000, 1, {});
  REQUIRE(due.ok());
  REQUIRE(due->size() == 1);
  CHECK(due->at(0).item.operation_key() == fmt::format("k{}-0", T));
  due = nodes.a->reader().due(Queue::work, T + 6'000, 10, {});
  REQUIRE(due.ok());
  CHECK(due->size() == 4);
}

// Queues an execute item on node s in a transaction of its own: due now,
// or, given due_in_ms, leased to its process until then (as an approval's
// execute item is).
void queue_execute(opgate::store::pg::PgStorage& s, int64_t due_in_ms = 0) {
  REQUIRE(s.transact([&](opgate::store::Transaction& t) {
    opgate::pb::OutboxItem item;
    item.set_kind(opgate::pb::OUTBOX_EXECUTE);
    if (due_in_ms > 0) {
      item.set_not_before_ms(t.now_ms() + due_in_ms);
      item.set_lease_token("t1");
    }
    t.enqueue(item);
    return opgate::Status::Ok();
  }));
}

// PostgreSQL only: a node is woken at once for work it committed, and for
// work another node committed only a handoff later (when it may be due
// for it): a commit that queues work wakes its own node, not every node.
TEST_CASE("postgres: another node's work wakes a node only once its handoff has passed") {
  using opgate::conformance::backend;
  if (backend().name() != "postgres") return;
  TwoNodes nodes{5'000};
  auto& clock = nodes.clock;
  opgate::Mutex mu;
  opgate::CondVar cv;
  int woken_a = 0, woken_b = 0;
  auto counter = [&](int& n) {
    return [&] {
      {
        opgate::MutexLock lock(mu);
        ++n;
      }
      cv.notify_all();
    };
  };
  // Waits (up to 30 s) until `n` reaches `at_least`; what it is then.
  auto wait_for = [&](const int& n, int at_least) {
    opgate::MutexLock lock(mu);
    cv.wait_for(mu, std::chrono::seconds(30), [&] { return n >= at_least; });
    return n;
  };
  nodes.a->listen(counter(woken_a));
  nodes.b->listen(counter(woken_b));
  // Each is woken once as it starts listening (for what came before).
  REQUIRE(wait_for(woken_a, 1) == 1);
  REQUIRE(wait_for(woken_b, 1) == 1);
  queue_execute(*nodes.a);
  CHECK(wait_for(woken_a, 2) == 2);
  // b hears a's work before its own (notifications arrive in commit
  // order), and is woken for its own only.
  queue_execute(*nodes.b);
  CHECK(wait_for(woken_b, 2) == 2);
  // Likewise a hears b's before its own second one.
  queue_execute(*nodes.a);
  CHECK(wait_for(woken_a, 3) == 3);
  {
    opgate::MutexLock lock(mu);
    CHECK(woken_b == 2);
    CHECK(woken_a == 3);
  }
  // A handoff later, each is woken for the other's.
  clock.advance_ms(5'000);
  CHECK(wait_for(woken_a, 4) == 4);
  CHECK(wait_for(woken_b, 3) == 3);
  // Work that comes while a wake-up for earlier work is waiting is woken
  // for a handoff after it, not lost in the earlier one: b's at 0 and 2 s
  // wake a at 5 s and at 7 s. (b is woken for a's likewise, but when it
  // hears a's last commit is not ordered against the clock's steps here.)
  queue_execute(*nodes.b);
  CHECK(wait_for(woken_b, 4) == 4);
  queue_execute(*nodes.a);  // a has heard b's once woken for its own
  CHECK(wait_for(woken_a, 5) == 5);
  clock.advance_ms(2'000);
  queue_execute(*nodes.b);
  CHECK(wait_for(woken_b, 5) == 5);
  queue_execute(*nodes.a);
  CHECK(wait_for(woken_a, 6) == 6);
  clock.advance_ms(3'000);
  CHECK(wait_for(woken_a, 7) == 7);
  clock.advance_ms(2'000);
  CHECK(wait_for(woken_a, 8) == 8);
  nodes.a->stop_listening();
  nodes.b->stop_listening();
}

// PostgreSQL only: a node commits on the audit head its last commit left;
// when another node has moved it since, the guess misses and the commit
// goes on the real head: the chain stays one, whatever the interleaving.
TEST_CASE("postgres: audited commits on a guessed head keep one chain when another node moves it") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  auto& a = nodes.a;
  auto& b = nodes.b;
  // Each commit also reads its operation after it, in its round trip: the
  // records as the chain holds them, on a guess that held or missed alike.
  auto audited = [](pg::PgStorage& s, const std::string& key) {
    opgate::store::CommittedRead read;
    REQUIRE(audited_commit(s, key, Refused::no, &read));
    REQUIRE(read.read);
    REQUIRE(read.history);
    auto stored = s.reader().audit_of(key);
    REQUIRE(stored.ok());
    REQUIRE(read.history->records.size() == stored->size());
    for (size_t i = 0; i < stored->size(); ++i) {
      CHECK(read.history->records[i].seq() == (*stored)[i].seq());
      CHECK(read.history->records[i].hash() == (*stored)[i].hash());
    }
  };
  // a, a (on its guess), b (a's guess now wrong), a (misses, then the real
  // head), then each in turn; a's misses make it stop guessing a while.
  for (const char* who : {"a", "a", "b", "a", "b", "a", "b", "a", "a", "a", "a", "b", "a"})
    audited(who[0] == 'a' ? *a : *b, who);
  CHECK(a->guesses_missed() > 0);
  CHECK(a->reads_after_commit_alone() == 0);
  CHECK(b->reads_after_commit_alone() == 0);
  auto head = b->reader().audit_head();
  REQUIRE(head.ok());
  CHECK(head->seq == 26);
  auto v = a->verify_audit();
  REQUIRE(v.ok());
  CHECK(v->ok);
  CHECK(v->records == 26);
  auto of_a = a->reader().audit_of("a");
  REQUIRE(of_a.ok());
  CHECK(of_a->size() == 18);
}

TEST_CASE("postgres: a chain with records cut from its end does not verify against its head") {
  using opgate::conformance::backend;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  for (int i = 0; i < 3; ++i) REQUIRE(audited_commit(*nodes.a, "a"));
  auto whole = nodes.a->verify_audit();
  REQUIRE(whole.ok());
  REQUIRE(whole->ok);
  const uint64_t last = whole->head.seq;
  {
    auto conn = nodes.a->pool().acquire();
    REQUIRE(conn.ok());
    REQUIRE((*conn)->exec(fmt::format("DELETE FROM audit WHERE seq = {}", last)).ok());
  }
  auto cut = nodes.a->verify_audit();
  REQUIRE(cut.ok());
  CHECK_FALSE(cut->ok);
  CHECK(cut->first_bad_seq == last);
  CHECK(cut->problem.find("removed from its end") != std::string::npos);
}

// Leaves node a a guess of the chain's head that b's commit has made wrong:
// a's last commits leave it the guess (a miss makes it skip guessing for
// two), and b's moves the head.
void make_guess_wrong(TwoNodes& nodes) {
  for (int i = 0; i < 3; ++i) REQUIRE(audited_commit(*nodes.a, "a"));
  REQUIRE(audited_commit(*nodes.b, "b"));
}

// Appends an approval's audit record for `key` to t; the head it chains onto.
opgate::Result<opgate::store::AuditHead> append_approval(opgate::store::Transaction& t,
                                                         const std::string& key) {
  opgate::pb::AuditRecord r;
  r.set_operation_key(key);
  r.set_action("approve");
  t.append_audit(r);
  return t.head_to_record();
}

// PostgreSQL only: an operation that records the head its transaction
// chains onto carries the real head when the node's guess of it missed,
// whether it was written once at commit or, read back in the transaction,
// first with the provisional head; and whether the guess had a savepoint
// to roll back to or, after many guesses that held, the whole transaction
// ran again.
TEST_CASE("postgres: an operation records the real head when the guess of it missed") {
  using opgate::conformance::backend;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  auto& a = nodes.a;
  auto& b = nodes.b;
  for (bool sure : {false, true})
    for (bool read_back : {false, true}) {
      CAPTURE(sure);
      CAPTURE(read_back);
      const std::string key = std::string(read_back ? "read" : "once") + (sure ? "-sure" : "");
      // Past the commits a miss skips guessing, enough guesses that hold.
      if (sure)
        for (int i = 0; i < opgate::store::pg::HeadGuess::kSureAfter + 3; ++i)
          REQUIRE(audited_commit(*a, "a"));
      make_guess_wrong(nodes);
      const auto lost_before = a->guesses_lost(), retries_before = a->retries();
      int runs = 0;
      REQUIRE(a->transact([&](opgate::store::Transaction& t) {
        runs++;
        auto head = append_approval(t, key);
        if (!head.ok()) return opgate::Status(head.error());
        pb::Operation o;
        o.set_key(key);
        o.set_state(pb::STATE_APPROVED);
        o.mutable_proposal()->set_order_id("O1");
        o.mutable_proposal()->set_owner("u");
        o.set_audit_seq(head->seq);
        o.set_audit_hash(head->hash);
        if (auto s = t.put_operation(o); !s.ok()) return s;
        if (read_back) {
          auto read = t.operation(key);
          if (!read.ok()) return opgate::Status(read.error());
          CHECK((*read)->state() == pb::STATE_APPROVED);
        }
        return opgate::Status::Ok();
      }));
      CHECK(runs == (sure ? 2 : 1));
      CHECK(a->guesses_lost() == lost_before + (sure ? 1 : 0));
      CHECK(a->retries() == retries_before + (sure ? 1 : 0));
      auto records = b->reader().audit_of(key);
      REQUIRE(records.ok());
      REQUIRE(records->size() == 1);
      auto o = b->reader().operation(key);
      REQUIRE(o.ok());
      REQUIRE(o->has_value());
      CHECK((*o)->audit_seq() == records->at(0).seq());
      CHECK((*o)->audit_hash() == records->at(0).hash());
    }
  auto v = a->verify_audit();
  REQUIRE(v.ok());
  CHECK(v->ok);
}

// PostgreSQL only: a notification that names the head its transaction
// chains onto is written only once the guess of that head is known to be
// the head. Its event id carries the head's sequence number, which another
// node may be guessing at the same moment: a row written on a wrong guess
// would make that node's transaction wait for this one. A trigger counts
// every insert tried, those rolled back too (a sequence is not).
TEST_CASE("postgres: a notification is written only on the real head, never on a missed guess") {
  using opgate::conformance::backend;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  auto& a = nodes.a;
  auto& b = nodes.b;
  auto conn = watching(nodes, "CREATE SEQUENCE notification_tries", "count_notification_try",
                       "PERFORM nextval('notification_tries');",
                       "BEFORE INSERT ON notifications FOR EACH ROW");
  auto& c = *conn;
  REQUIRE(
      c.prepare("tries", "SELECT last_value - 1 + is_called::int FROM notification_tries").ok());
  auto tries = [&] {
    auto rows = c.run("tries", {});
    REQUIRE(rows.ok());
    return rows->int8(0, 0);
  };
  make_guess_wrong(nodes);
  const auto missed_before = a->guesses_missed();
  REQUIRE(a->transact([&](opgate::store::Transaction& t) {
    auto head = append_approval(t, "n");
    if (!head.ok()) return opgate::Status(head.error());
    t.keep_notification(
        opgate::conformance::notification_on(*head, "operation.approved", t.now_ms()));
    return opgate::Status::Ok();
  }));
  CHECK(a->guesses_missed() == missed_before + 1);
  CHECK(tries() == 1);
  auto records = b->reader().audit_of("n");
  REQUIRE(records.ok());
  REQUIRE(records->size() == 1);
}

// PostgreSQL only: a commit wakes the dispatchers of every node only for
// work due now. An item leased to its process at once (an approval's
// execute item), or due later, sends no notification: the pass finds it
// when it falls due. Notifications arrive in commit order, so once one
// sent after both commits has arrived, any they sent has too.
TEST_CASE("postgres: only work due now wakes the dispatchers") {
  using opgate::conformance::backend;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  auto listener = opgate::store::pg::Conn::connect(nodes.a->options().conn);
  REQUIRE(listener.ok());
  REQUIRE((*listener)->exec("LISTEN opgate_work; LISTEN test_fence").ok());
  queue_execute(*nodes.a, 30'000);  // leased at once
  queue_execute(*nodes.a);          // due now
  auto fence = opgate::store::pg::Conn::connect(nodes.a->options().conn);
  REQUIRE(fence.ok());
  REQUIRE((*fence)->exec("NOTIFY test_fence").ok());
  PGconn* c = (*listener)->raw();
  int wakes = 0;
  bool fenced = false;
  for (int waited_ms = 0; !fenced && waited_ms < 10'000; waited_ms += 100) {
    pollfd fd{PQsocket(c), POLLIN, 0};
    REQUIRE(::poll(&fd, 1, 100) >= 0);
    REQUIRE(PQconsumeInput(c) == 1);
    while (PGnotify* n = PQnotifies(c)) {
      if (std::string(n->relname) == "test_fence")
        fenced = true;
      else
        ++wakes;
      PQfreemem(n);
    }
  }
  REQUIRE(fenced);
  CHECK(wakes == 1);
}

// PostgreSQL only: an audited change writes its operation once, at commit
// with the real head, though the transaction reads other records after it
// (a settlement reads the order's funds and the tool call); only a read of
// operations makes it write the provisional one first (a trigger counts
// the writes). And a record the transaction read is not read again: a
// change made behind the locks' back (as no opgate process does) is not
// seen by the second read.
TEST_CASE("postgres: an audited change writes its operation once; a record is read once") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  // Read committed's: at SERIALIZABLE the change behind the transaction's
  // back fails its commit instead.
  if (nodes.a->options().isolation != pg::Isolation::read_committed) return;
  auto conn = watching(nodes,
                       "CREATE TABLE op_writes (n bigint NOT NULL); "
                       "INSERT INTO op_writes VALUES (0)",
                       "count_op_write", "UPDATE op_writes SET n = n + 1;",
                       "AFTER INSERT OR UPDATE ON operations FOR EACH ROW");
  auto& c = *conn;
  REQUIRE(c.prepare("writes", "SELECT n FROM op_writes").ok());
  auto writes = [&] {
    auto rows = c.run("writes", {});
    REQUIRE(rows.ok());
    return rows->int8(0, 0);
  };
  auto funds = [](int64_t refunded) {
    pb::OrderFunds f;
    f.set_order_id("O1");
    f.set_refunded_minor(refunded);
    return f;
  };
  REQUIRE(nodes.a->transact([&](opgate::store::Transaction& t) {
    t.put_funds(funds(1));
    pb::Operation o;
    o.set_key("k");
    o.set_state(pb::STATE_EXECUTING);
    o.mutable_proposal()->set_order_id("O1");
    o.mutable_proposal()->set_owner("u");
    return t.put_operation(o);
  }));
  const auto writes_before = writes();
  const std::string behind_the_locks =
      "UPDATE funds SET data = '\\x" + opgate::crypto::to_hex(funds(9).SerializeAsString()) + "'";
  int64_t second_read = -1;
  REQUIRE(nodes.a->transact([&](opgate::store::Transaction& t) {
    auto op = t.operation("k");
    if (!op.ok()) return opgate::Status(op.error());
    pb::AuditRecord r;
    r.set_operation_key("k");
    r.set_action("settle");
    t.append_audit(r);
    auto head = t.head_to_record();
    if (!head.ok()) return opgate::Status(head.error());
    pb::Operation o = **op;
    o.set_state(pb::STATE_SETTLED);
    o.set_audit_seq(head->seq);
    o.set_audit_hash(head->hash);
    if (auto s = t.put_operation(o); !s.ok()) return s;
    auto first = t.funds("O1");
    if (!first.ok()) return opgate::Status(first.error());
    if (auto s = c.exec(behind_the_locks); !s.ok()) return s;
    auto second = t.funds("O1");
    if (!second.ok()) return opgate::Status(second.error());
    second_read = second->refunded_minor();
    t.put_funds(funds(5));
    pb::CallRef ref;
    ref.set_session_id("s");
    ref.set_turn_id("t");
    ref.set_call_id("c");
    auto call = t.call(ref);
    if (!call.ok()) return opgate::Status(call.error());
    return opgate::Status::Ok();
  }));
  CHECK(second_read == 1);
  CHECK(writes() - writes_before == 1);
  // Read ahead: likewise read once.
  int64_t read_after = -1;
  REQUIRE(nodes.a->transact([&](opgate::store::Transaction& t) {
    opgate::store::ReadAhead ahead;
    ahead.funds = {"O1"};
    if (auto s = t.read_ahead(ahead); !s.ok()) return s;
    if (auto s = c.exec(behind_the_locks); !s.ok()) return s;
    auto read = t.funds("O1");
    if (!read.ok()) return opgate::Status(read.error());
    read_after = read->refunded_minor();
    t.put_funds(funds(5));
    return opgate::Status::Ok();
  }));
  CHECK(read_after == 5);
  auto records = nodes.b->reader().audit_of("k");
  REQUIRE(records.ok());
  REQUIRE(records->size() == 1);
  auto o = nodes.b->reader().operation("k");
  REQUIRE(o.ok());
  CHECK((*o)->state() == pb::STATE_SETTLED);
  CHECK((*o)->audit_seq() == records->at(0).seq());
  CHECK(nodes.b->reader().funds("O1")->refunded_minor() == 5);
}

// PostgreSQL only: a transaction holding the audit head commits without
// waiting for its flush, so that it releases the head early; it is reported
// only once a synchronous commit behind it has flushed the log past it. A
// trigger notes where the log was as the record went in; when the commit
// returns, the log is flushed that far. (Without the flush the log waits
// for the WAL writer, 200 ms by default.) And a connection that holds the
// head pays its turn once: a Conn's batch sent after the commit, read apart.
TEST_CASE("postgres: an audited commit releases the head early and returns once it is flushed") {
  using opgate::conformance::backend;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  auto conn = watching(nodes, "CREATE TABLE audit_lsn (lsn pg_lsn NOT NULL)", "note_audit_lsn",
                       "INSERT INTO audit_lsn VALUES (pg_current_wal_insert_lsn());",
                       "AFTER INSERT ON audit FOR EACH STATEMENT");
  auto& c = *conn;
  REQUIRE(c.prepare("flushed",
                    "SELECT (pg_current_wal_flush_lsn() >= max(lsn))::int::bigint, count(*) "
                    "FROM audit_lsn")
              .ok());
  for (int i = 0; i < 5; ++i) {
    REQUIRE(audited_commit(*nodes.a, "k" + std::to_string(i)));
    auto flushed = c.run("flushed", {});
    REQUIRE(flushed.ok());
    CHECK(flushed->int8(0, 1) == i + 1);
    CHECK(flushed->int8(0, 0) == 1);
  }
  // The batch behind: read by the next call, its failure that call's.
  REQUIRE(c.prepare("one", "SELECT 1").ok());
  REQUIRE(c.prepare("zero", "SELECT 1 / 0").ok());
  REQUIRE(c.send_ahead({{"one", {}}, {"one", {}}}).ok());
  REQUIRE(c.send_ahead({{"one", {}}}).ok());
  REQUIRE(c.read_all_but_last().ok());
  auto rest = c.pipeline({});
  REQUIRE(rest.ok());
  CHECK(rest->empty());
  REQUIRE(c.send_ahead({{"one", {}}}).ok());
  REQUIRE(c.send_ahead({{"zero", {}}}).ok());
  REQUIRE(c.read_all_but_last().ok());
  auto next = c.pipeline({{"one", {}}, {"one", {}}});
  CHECK_FALSE(next.ok());
  CHECK(c.last_sqlstate() == "22012");
  CHECK(c.run("one", {}).ok());
  // The first batch's failure is read_all_but_last()'s; the last is left.
  REQUIRE(c.send_ahead({{"zero", {}}}).ok());
  REQUIRE(c.send_ahead({{"one", {}}}).ok());
  CHECK_FALSE(c.read_all_but_last().ok());
  CHECK(c.last_sqlstate() == "22012");
  CHECK(c.pipeline({}).ok());
}

// PostgreSQL only: a node's audited commits from many threads, some of
// which fail in the pipeline that carries their guess of the head or in
// the one sent ahead of it (a key the database refuses): each commit that
// succeeded is in the one chain once, each that failed is not, and every
// node sees the head the last one left.
TEST_CASE("postgres: audited commits of many threads keep one chain when some fail to commit") {
  using opgate::conformance::backend;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  TwoNodes nodes;
  auto& a = nodes.a;
  refuse_operations(*a);
  constexpr int kThreads = 8, kEach = 40;
  std::atomic<int> committed{0}, refused{0}, unexpected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const bool bad = (t + i) % 7 == 0;
        // Half the threads read their operation after the commit: read
        // when it commits, with both its records; unread when it fails.
        opgate::store::CommittedRead read;
        auto s = audited_commit(*a, fmt::format("t{}-{}", t, i),
                                !bad    ? Refused::no
                                : i % 2 ? Refused::with_head
                                        : Refused::ahead,
                                t % 2 ? &read : nullptr);
        // A refused one fails with the database's refusal, not with what
        // an aborted transaction answers to the statements after it.
        if (s.ok() == !bad && (s.ok() || s.error().message.find("refused") != std::string::npos))
          (s.ok() ? committed : refused)++;
        else
          unexpected++;
        if (t % 2 && read.read != s.ok()) unexpected++;
        if (t % 2 && s.ok() && (!read.history || read.history->records.size() != 2)) unexpected++;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(unexpected == 0);
  CHECK(refused > 0);
  auto v = a->verify_audit();
  REQUIRE(v.ok());
  CHECK(v->ok);
  CHECK(v->records == static_cast<uint64_t>(2 * committed));
  // And the node goes on guessing on a head it left (b agrees on it).
  REQUIRE(a->transact([&](opgate::store::Transaction& txn) {
    pb::AuditRecord r;
    r.set_operation_key("last");
    txn.append_audit(r);
    return opgate::Status::Ok();
  }));
  auto head = nodes.b->reader().audit_head();
  REQUIRE(head.ok());
  CHECK(head->seq == static_cast<uint64_t>(2 * committed + 1));
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kEach; ++i) {
      auto of = a->reader().audit_of(fmt::format("t{}-{}", t, i));
      REQUIRE(of.ok());
      CHECK(of->size() == ((t + i) % 7 == 0 ? 0u : 2u));
    }
}

// PostgreSQL only: a node's audited commits from many threads are sent
// one right behind another (each waits in the database for the one before
// it, not for its answer), and none of them misses its guess of the head;
// each is released early, and their flushes are shared.
TEST_CASE("postgres: a node's audited commits go one behind another without missing the head") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  pg::PgOptions o = fresh_options(clock);
  o.pool_size = 8;
  auto opened = pg::PgStorage::open(o, clock);
  REQUIRE(opened.ok());
  auto& s = **opened;
  constexpr int kThreads = 8, kEach = 30;
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        opgate::store::CommittedRead read;
        if (!audited_commit(s, fmt::format("t{}-{}", t, i), Refused::no, &read).ok() ||
            !read.read || !read.history || read.history->records.size() != 2)
          failed++;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failed == 0);
  CHECK(s.reads_after_commit_alone() == 0);
  auto v = s.verify_audit();
  REQUIRE(v.ok());
  CHECK(v->ok);
  CHECK(v->records == 2u * kThreads * kEach);
  CHECK(s.commits_sent_behind() > 0);
  // At SERIALIZABLE a commit whose snapshot is older than the head it
  // guessed misses it.
  if (o.isolation == pg::Isolation::read_committed) CHECK(s.guesses_missed() == 0);
  CHECK(s.early_releases() == static_cast<uint64_t>(kThreads * kEach));
  CHECK(s.flushes() > 0);
  CHECK(s.flushes() <= s.early_releases());
  // Commits one right behind another share their flushes (at SERIALIZABLE
  // they miss and take their turns one at a time).
  if (o.isolation == pg::Isolation::read_committed) {
    CHECK(s.flushes() < s.early_releases());
    // The store's count of flushes (opgate_wal_fsyncs_total) shows it.
    CHECK(s.stats().wal_syncs < s.stats().synced_writes);
  }
}

// PostgreSQL only: a shared flush that fails tells the commits waiting for
// it, and the next wait runs a flush of its own.
TEST_CASE("postgres: a flush that fails is told to the commits that waited for it") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  pg::PgOptions o = fresh_options(clock);
  auto opened = pg::PgStorage::open(o, clock);
  REQUIRE(opened.ok());
  pg::ConnOptions nowhere = o.conn;
  nowhere.url = "host=/nonexistent-opgate-socket-dir port=1 user=nobody connect_timeout=1";
  pg::Pool unreachable(nowhere, 1, [](pg::Conn&) { return opgate::Status::Ok(); });
  pg::SharedFlush flush;
  auto failed = flush.wait_past(unreachable);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().is(opgate::errc::storage_unavailable));
  CHECK(flush.wait_past((*opened)->pool()).ok());
  CHECK(flush.flushes() == 2);
}

// PostgreSQL only: the TLS keys of [store] reach libpq after the connection
// string, so they override what it says (the private server listens on a
// Unix socket, where libpq does not use TLS; an invalid mode shows the
// order).
TEST_CASE("postgres: TLS settings from the config override the connection string's") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  if (backend().name() != "postgres") return;
  pg::ConnOptions o;
  o.url = std::string(std::getenv("OPGATE_TEST_PG_URL")) + " sslmode=disable";
  CHECK(pg::Conn::connect(o).ok());
  o.params = {{"sslmode", "no-such-mode"}};
  auto refused = pg::Conn::connect(o);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("sslmode") != std::string::npos);
  o.url = std::string(std::getenv("OPGATE_TEST_PG_URL")) + " sslmode=no-such-mode";
  o.params = {{"sslmode", "disable"}};
  auto c = pg::Conn::connect(o);
  CHECK_MESSAGE(c.ok(), c.error().message);
}

// Nodes keep time by the database's clock: a node whose own clock is far
// off writes its records and leases with the database's time.
TEST_CASE("postgres: with database_clock, a node whose clock is off keeps the database's time") {
  using opgate::conformance::backend;
  if (backend().name() != "postgres") return;
  const char* url = std::getenv("OPGATE_TEST_PG_URL");
  opgate::ManualClock skewed{1'000'000};  // 1970, give or take
  opgate::store::pg::PgOptions o;
  o.conn.url = url;
  o.pool_size = 2;
  o.database_clock = true;
  auto s = opgate::store::pg::PgStorage::open(o, skewed);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  opgate::SystemClock real;
  // The database runs on this machine: its clock is the real one.
  CHECK(std::llabs((*s)->clock().now_ms() - real.now_ms()) < 5'000);
  int64_t written = 0;
  REQUIRE((*s)->transact([&](opgate::store::Transaction& txn) {
                written = txn.now_ms();
                return opgate::Status::Ok();
              })
              .ok());
  CHECK(std::llabs(written - real.now_ms()) < 5'000);
  // Without it, the given clock is the store's (tests move time by hand).
  o.database_clock = false;
  auto manual = opgate::store::pg::PgStorage::open(o, skewed);
  REQUIRE(manual.ok());
  CHECK((*manual)->clock().now_ms() == skewed.now_ms());
}
