// The conformance suite against PostgreSQL: OPGATE_TEST_PG_URL names a
// server's database (scripts/with-postgres starts a private
// one). Each test gets a schema of its own, dropped when the next starts;
// reopen() opens a new Storage (a new pool of connections) on the same
// schema, as a restarted node would. OPGATE_TEST_PG_ISOLATION=serializable
// runs the backend at SERIALIZABLE instead of READ COMMITTED with locks.
#include <doctest/doctest.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "backend.h"
#include "common/crypto.h"
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

// PostgreSQL only: migration 3 fills the columns it adds from the records
// already stored (settled outcomes, an outbox item's queue and operation).
TEST_CASE("postgres: migration 3 counts settled outcomes and indexes outbox items already stored") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto fresh = backend().open_empty(clock);  // a schema of its own; dropped and made again
  auto* opened = dynamic_cast<pg::PgStorage*>(fresh.get());
  REQUIRE(opened);
  pg::ConnOptions conn = opened->options().conn;
  fresh.reset();
  conn.schema += "_v2";
  auto c = pg::Conn::connect(conn);
  REQUIRE(c.ok());
  struct DropSchema {
    pg::Conn& c;
    std::string schema;
    ~DropSchema() { (void)c.exec("DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE"); }
  } drop{**c, conn.schema};
  auto v2 = pg::migrate(conn, 2);
  REQUIRE_MESSAGE(v2.ok(), v2.error().message);
  REQUIRE(v2->to_version == 2);
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
  REQUIRE((*c)->prepare("op",
                        "INSERT INTO operations (key, state, expires_at_ms, order_id, "
                        "session_id, owner, data) VALUES ('k1', 5, 0, 'O1', '', '', $1)")
              .ok());
  REQUIRE((*c)->prepare("item", "INSERT INTO outbox (not_before_ms, data) VALUES (5, $1)").ok());
  REQUIRE((*c)->run("op", {pg::bytea(op.SerializeAsString())}).ok());
  REQUIRE((*c)->run("item", {pg::bytea(item.SerializeAsString())}).ok());
  REQUIRE((*c)->exec("UPDATE \"" + conn.schema + "\".state_counts SET n = 1 WHERE state = 5").ok());

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

// PostgreSQL only: migration 5 keeps the counts in shards. What the rows of
// before counted still counts, and an operation counted by one transaction
// and moved on by others, each adding to its own shard, is counted once.
TEST_CASE("postgres: counts from before the shards still count, and sharded changes add up") {
  using opgate::conformance::backend;
  namespace pg = opgate::store::pg;
  namespace pb = opgate::pb;
  if (backend().name() != "postgres") return;
  opgate::ManualClock clock{1'800'000'000'000};
  auto fresh = backend().open_empty(clock);
  auto* opened = dynamic_cast<pg::PgStorage*>(fresh.get());
  REQUIRE(opened);
  pg::ConnOptions conn = opened->options().conn;
  fresh.reset();
  conn.schema += "_v4";
  auto c = pg::Conn::connect(conn);
  REQUIRE(c.ok());
  struct DropSchema {
    pg::Conn& c;
    std::string schema;
    ~DropSchema() { (void)c.exec("DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE"); }
  } drop{**c, conn.schema};
  auto v4 = pg::migrate(conn, 4);
  REQUIRE_MESSAGE(v4.ok(), v4.error().message);
  REQUIRE(v4->to_version == 4);
  // Before migration 5: one pending operation, counted in its row.
  pb::Operation op;
  op.set_key("k1");
  op.set_state(pb::STATE_PENDING);
  op.mutable_proposal()->set_order_id("O1");
  REQUIRE((*c)->prepare("op",
                        "INSERT INTO operations (key, state, expires_at_ms, order_id, "
                        "session_id, owner, data) VALUES ('k1', 1, 0, 'O1', '', '', $1)")
              .ok());
  REQUIRE((*c)->run("op", {pg::bytea(op.SerializeAsString())}).ok());
  REQUIRE((*c)->exec("UPDATE \"" + conn.schema + "\".state_counts SET n = 1 WHERE state = 1").ok());

  pg::PgOptions o;
  o.conn = conn;
  o.pool_size = 2;
  auto s = pg::PgStorage::open(o, clock);  // applies migration 5
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  auto counts = (*s)->reader().counts();
  REQUIRE(counts.ok());
  CHECK(counts->operations.at(pb::STATE_PENDING) == 1);

  // k1 on through three states and k2 made, one transaction each: every
  // one adds to another shard than the one before it.
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
  counts = (*s)->reader().counts();
  REQUIRE(counts.ok());
  CHECK(counts->operations.at(pb::STATE_PENDING) == 1);
  CHECK(counts->operations.at(pb::STATE_APPROVED) == 0);
  CHECK(counts->operations.at(pb::STATE_EXECUTING) == 0);
  CHECK(counts->operations.at(pb::STATE_SETTLED) == 1);
  CHECK(counts->settled.at(pb::OUTCOME_SUCCEEDED) == 1);
  REQUIRE((*c)->prepare("shards", "SELECT count(DISTINCT shard)::bigint FROM \"" + conn.schema +
                                      "\".state_count_shards WHERE n <> 0")
              .ok());
  auto shards = (*c)->run("shards", {});
  REQUIRE(shards.ok());
  CHECK(shards->int8(0, 0) >= 2);
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
