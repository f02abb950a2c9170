// Transactions per second through the storage port, for choosing the
// PostgreSQL backend's isolation (README: "Running on PostgreSQL").
//   store_bench --backend postgres|rocksdb [--isolation read_committed|serializable]
//               [--threads N] [--seconds S] [--orders K]
// Each transaction is one step of an approval -> claim -> settle loop: it
// reads an operation and its order's funds, moves the operation on, writes
// the funds and appends an audit record (the chain's head is shared by all).
// With --orders 1 every transaction touches the same records; with many,
// they contend on the audit chain's head and the state counts only.
// PostgreSQL: OPGATE_TEST_PG_URL names the database (a fresh schema is used).
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/crypto.h"
#include "store/postgres/pg_storage.h"
#include "store/rocksdb/rocks_storage.h"

using namespace opgate;

int main(int argc, char** argv) {
  std::string backend = "postgres", isolation = "read_committed";
  int threads = 8, seconds = 10, orders = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--backend")
      backend = v;
    else if (k == "--isolation")
      isolation = v;
    else if (k == "--threads")
      threads = std::stoi(v);
    else if (k == "--seconds")
      seconds = std::stoi(v);
    else if (k == "--orders")
      orders = std::stoi(v);
  }
  SystemClock clock;
  std::unique_ptr<store::Storage> storage;
  std::string schema, dir;
  store::pg::Pool* pool = nullptr;
  store::pg::PgStorage* pg = nullptr;
  if (backend == "postgres") {
    const char* url = std::getenv("OPGATE_TEST_PG_URL");
    if (!url) {
      std::cerr << "set OPGATE_TEST_PG_URL\n";
      return 2;
    }
    store::pg::PgOptions o;
    o.conn.url = url;
    schema = "bench_" + crypto::random_hex(4);
    o.conn.schema = schema;
    o.pool_size = static_cast<size_t>(threads);
    o.isolation = isolation == "serializable" ? store::pg::Isolation::serializable
                                              : store::pg::Isolation::read_committed;
    auto s = store::pg::PgStorage::open(o, clock);
    if (!s) {
      std::cerr << s.error().message << "\n";
      return 1;
    }
    pg = s->get();
    pool = &pg->pool();
    storage = std::move(*s);
  } else {
    dir = (std::filesystem::temp_directory_path() / ("opgate-bench-" + crypto::random_hex(4)))
              .string();
    auto s = store::rocks::RocksStorage::open(dir, {}, clock);
    if (!s) {
      std::cerr << s.error().message << "\n";
      return 1;
    }
    storage = std::move(*s);
  }
  // One operation per (order, thread): a thread moves its own operations
  // through the states; funds are per order, shared by the threads.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0}, failed{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      uint64_t n = 0;
      while (!stop) {
        const std::string order = fmt::format("O{}", (n * threads + t) % orders);
        const std::string key = fmt::format("{}:t{}:{}", order, t, n / 4);
        Status s = storage->transact([&](store::Transaction& txn) -> Status {
          OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
          pb::Operation next = op ? *op : pb::Operation();
          next.set_key(key);
          next.mutable_proposal()->set_order_id(order);
          next.set_state(static_cast<pb::OperationState>(1 + n % 4 + (n % 4 == 3 ? 1 : 0)));
          OPGATE_TRY(txn.put_operation(next));
          OPGATE_ASSIGN_OR_RETURN(auto funds, txn.funds(order));
          funds.set_reserved_minor(funds.reserved_minor() + 1);
          txn.put_funds(funds);
          pb::AuditRecord a;
          a.set_operation_key(key);
          a.set_action("step");
          txn.append_audit(a);
          return Status::Ok();
        });
        if (s)
          done++;
        else
          failed++;
        ++n;
      }
    });
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto v = storage->verify_audit();
  fmt::print(
      "backend={} isolation={} threads={} orders={}: {:.0f} tx/s ({} committed, {} failed, {} "
      "retries), audit chain {} ({} records)\n",
      backend, backend == "postgres" ? isolation : "-", threads, orders, done / secs, done.load(),
      failed.load(), pg ? pg->retries() : 0, v && v->ok ? "verifies" : "BROKEN",
      v ? v->records : 0);
  storage.reset();
  (void)pool;
  if (!schema.empty()) {
    store::pg::ConnOptions o;
    o.url = std::getenv("OPGATE_TEST_PG_URL");
    if (auto c = store::pg::Conn::connect(o))
      (void)(*c)->exec("DROP SCHEMA " + schema + " CASCADE");
  }
  if (!dir.empty()) std::filesystem::remove_all(dir);
  return v && v->ok ? 0 : 1;
}
