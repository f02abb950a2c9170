// libpq, as the PostgreSQL backend uses it: one connection (prepared
// statements, binary parameters and results, pipelines that send several
// statements in one round trip) and a bounded pool of them. Nothing here
// knows the schema. A Conn is used by one thread at a time; the Pool is
// thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/result.h"

struct pg_conn;
struct pg_result;

namespace opgate::store::pg {

// A parameter, sent in binary format: text as its bytes, bigint as 8
// big-endian bytes, boolean as one byte, bytea as its bytes.
struct Param {
  std::string bytes;
  bool null = false;
};
Param text(std::string_view v);
Param int8(int64_t v);
Param boolean(bool v);
inline Param bytea(std::string_view v) { return text(v); }
inline Param null_param() { return {"", true}; }
// A one-dimensional array of non-null elements in binary format, of the
// element type the statement's `$n::type[]` names.
enum class Oid : uint32_t { boolean = 16, bytea = 17, int8 = 20, text = 25 };
Param array(Oid element, const std::vector<Param>& items);

// The rows of one statement's result (binary format). Movable, owns it.
class Rows {
 public:
  Rows() = default;
  explicit Rows(pg_result* r);
  ~Rows();
  Rows(Rows&& o) noexcept;
  Rows& operator=(Rows&& o) noexcept;
  Rows(const Rows&) = delete;
  Rows& operator=(const Rows&) = delete;

  int size() const;
  bool empty() const { return size() == 0; }
  bool null(int row, int col) const;
  std::string_view bytes(int row, int col) const;
  std::string str(int row, int col) const { return std::string(bytes(row, col)); }
  int64_t int8(int row, int col) const;  // a bigint column
  int32_t int4(int row, int col) const;  // an integer column
  bool boolean(int row, int col) const;  // a boolean column
  int64_t affected() const;              // rows an INSERT/UPDATE/DELETE touched

 private:
  pg_result* r_ = nullptr;
};

// A statement of a pipeline: a prepared statement's name and its parameters.
struct Stmt {
  std::string name;
  std::vector<Param> params;
};

struct ConnOptions {
  // libpq connection string or URI (sslmode, sslrootcert, host, ...).
  std::string url;
  int connect_timeout_s = 10;
  // 0: the server's default. Applied to every statement of the session.
  int64_t statement_timeout_ms = 30'000;
  // A session idle inside a transaction this long is ended by the server,
  // releasing its locks (a paused process cannot hold them for ever).
  int64_t idle_in_transaction_timeout_ms = 60'000;
  // Non-empty: the schema the tables live in (created if missing).
  std::string schema;
  // libpq keywords that override the connection string's (TLS from the
  // config: sslmode, sslrootcert, sslcert, sslkey).
  std::vector<std::pair<std::string, std::string>> params;
};

class Conn {
 public:
  static Result<std::unique_ptr<Conn>> connect(const ConnOptions& options);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // A statement (or several) without parameters, through the simple
  // protocol; its results are dropped.
  Status exec(const std::string& sql);
  Status prepare(const std::string& name, const std::string& sql);
  // Runs a prepared statement.
  Result<Rows> run(const std::string& name, const std::vector<Param>& params);
  // Runs prepared statements in one pipeline (one round trip); a failure
  // fails the call, and statements after it are not executed.
  Result<std::vector<Rows>> pipeline(const std::vector<Stmt>& stmts);
  // Sends prepared statements in a pipeline without waiting for them, for
  // statements whose results nobody reads: the next call on the connection
  // reads them first and fails with their first failure, if any. Inside a
  // transaction that failure aborted it, so what the call sends does
  // nothing; exec() still runs its statement, so that a ROLLBACK ends it.
  Status send_ahead(const std::vector<Stmt>& stmts);
  // Reads every batch sent but the last, and fails with the first failure
  // among them, leaving the last to the next call, as with send_ahead
  // (pipeline({}) waits for it alone).
  Status read_all_but_last();
  // Reads every batch sent, as pipeline({}) does, and returns the last
  // one's results.
  Result<std::vector<Rows>> read_rest();

  // A connection option's value in effect (libpq's keyword), if set.
  std::optional<std::string> option(std::string_view keyword) const;
  // The SQLSTATE of the last failure ("" if none or not from the server).
  const std::string& last_sqlstate() const { return sqlstate_; }
  // Serialisation failure or deadlock: the transaction may run again.
  bool last_failure_retryable() const;
  // The connection is gone (or was never made): drop it.
  bool broken() const;
  // Whether a transaction block is open on the server.
  bool in_transaction() const;
  pg_conn* raw() { return c_; }

 private:
  Conn() = default;
  Error failure(std::string_view what, pg_result* r);
  // Sends a batch and its sync, entering pipeline mode if not in it, and
  // remembers it as sent; on failure the connection is closed.
  Status send_batch(const std::vector<Stmt>& stmts);
  // Reads one batch's results (and its sync) into out; the first failure
  // is kept in err.
  void read_batch(const std::vector<std::string>& names, std::vector<Rows>* out,
                  std::optional<Error>& err);
  // Reads every batch sent, the last one's results into last (if given),
  // and leaves pipeline mode; fails with the first failure.
  Status read_sent(std::vector<Rows>* last);
  // Reads every batch sent but the `keep` last ones, the last one read's
  // results into out; stays in pipeline mode.
  Status read_sent_but(size_t keep, std::vector<Rows>* out);
  pg_conn* c_ = nullptr;
  std::string sqlstate_;
  std::vector<std::vector<std::string>> sent_;  // batches sent, unread: their names
};

// Connections made on demand up to `size`, handed out one at a time.
class Pool {
 public:
  // Called on each new connection before it is used (prepare statements).
  using Setup = std::function<Status(Conn&)>;
  Pool(ConnOptions options, size_t size, Setup setup,
       std::chrono::milliseconds wait = std::chrono::seconds(30));
  ~Pool();

  class Lease {
   public:
    Lease(Pool& pool, std::unique_ptr<Conn> conn) : pool_(&pool), conn_(std::move(conn)) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), conn_(std::move(o.conn_)) { o.pool_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    Conn& operator*() { return *conn_; }
    Conn* operator->() { return conn_.get(); }
    // The connection is closed, not returned (its state is unknown).
    void discard() { conn_.reset(); }

   private:
    Pool* pool_;
    std::unique_ptr<Conn> conn_;
  };

  // A connection, waiting up to `wait` for one to be free.
  Result<Lease> acquire() EXCLUDES(mu_);
  size_t size() const { return size_; }
  const ConnOptions& options() const { return options_; }

 private:
  void give_back(std::unique_ptr<Conn> conn) EXCLUDES(mu_);
  ConnOptions options_;
  size_t size_;
  Setup setup_;
  std::chrono::milliseconds wait_;
  Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<Conn>> idle_ GUARDED_BY(mu_);
  size_t open_ GUARDED_BY(mu_) = 0;  // connections made and not dropped
};

// A 64-bit lock id for a key (FNV-1a), for pg_advisory_xact_lock.
int64_t lock_id(std::string_view key);

// A fixed-width rendering of a sequence number: string order = numeric order.
std::string fixed_id(int64_t v);
std::optional<int64_t> parse_fixed_id(std::string_view s);

}  // namespace opgate::store::pg
