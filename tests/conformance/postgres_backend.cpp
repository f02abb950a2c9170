// The conformance suite against PostgreSQL: OPGATE_TEST_PG_URL names a
// server's database (tests/conformance/run_postgres.sh starts a private
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
                 "(tests/conformance/run_postgres.sh starts one)\n";
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
