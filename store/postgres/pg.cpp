#include "store/postgres/pg.h"

#include <endian.h>
#include <fmt/format.h>
#include <libpq-fe.h>

#include <charconv>
#include <cstring>

namespace opgate::store::pg {

Param text(std::string_view v) { return {std::string(v), false}; }

Param int8(int64_t v) {
  const uint64_t be = htobe64(static_cast<uint64_t>(v));
  std::string b(8, '\0');
  std::memcpy(b.data(), &be, 8);
  return {std::move(b), false};
}

Param boolean(bool v) { return {std::string(1, v ? '\1' : '\0'), false}; }

namespace {
void put_int4(std::string& b, uint32_t v) {
  const uint32_t be = htobe32(v);
  b.append(reinterpret_cast<const char*>(&be), 4);
}
}  // namespace

Param array(Oid element, const std::vector<Param>& items) {
  // array_recv's layout: dimensions, has-nulls, element type, then per
  // dimension its length and lower bound, then each element's length and bytes.
  std::string b;
  put_int4(b, 1);
  put_int4(b, 0);
  put_int4(b, static_cast<uint32_t>(element));
  put_int4(b, static_cast<uint32_t>(items.size()));
  put_int4(b, 1);
  for (const auto& item : items) {
    put_int4(b, static_cast<uint32_t>(item.bytes.size()));
    b += item.bytes;
  }
  return {std::move(b), false};
}

Rows::Rows(pg_result* r) : r_(r) {}
Rows::~Rows() {
  if (r_) PQclear(r_);
}
Rows::Rows(Rows&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
Rows& Rows::operator=(Rows&& o) noexcept {
  if (this != &o) {
    if (r_) PQclear(r_);
    r_ = o.r_;
    o.r_ = nullptr;
  }
  return *this;
}

int Rows::size() const { return r_ ? PQntuples(r_) : 0; }
bool Rows::null(int row, int col) const { return PQgetisnull(r_, row, col) != 0; }
std::string_view Rows::bytes(int row, int col) const {
  if (null(row, col)) return {};
  return {PQgetvalue(r_, row, col), static_cast<size_t>(PQgetlength(r_, row, col))};
}
int64_t Rows::int8(int row, int col) const {
  if (null(row, col) || PQgetlength(r_, row, col) != 8) return 0;
  uint64_t be;
  std::memcpy(&be, PQgetvalue(r_, row, col), 8);
  return static_cast<int64_t>(be64toh(be));
}
int32_t Rows::int4(int row, int col) const {
  if (null(row, col) || PQgetlength(r_, row, col) != 4) return 0;
  uint32_t be;
  std::memcpy(&be, PQgetvalue(r_, row, col), 4);
  return static_cast<int32_t>(be32toh(be));
}
bool Rows::boolean(int row, int col) const {
  return !null(row, col) && PQgetlength(r_, row, col) == 1 && PQgetvalue(r_, row, col)[0] != 0;
}
int64_t Rows::affected() const {
  if (!r_) return 0;
  const char* n = PQcmdTuples(r_);
  int64_t v = 0;
  if (n && *n) std::from_chars(n, n + std::strlen(n), v);
  return v;
}

namespace {

std::string quote_ident(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The first line of libpq's message, without the trailing newline.
std::string first_line(const char* m) {
  std::string s = m ? m : "";
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

}  // namespace

std::optional<std::string> Conn::option(std::string_view keyword) const {
  std::optional<std::string> value;
  PQconninfoOption* options = PQconninfo(c_);
  if (!options) return value;
  for (PQconninfoOption* o = options; o->keyword; ++o)
    if (keyword == o->keyword && o->val) value = o->val;
  PQconninfoFree(options);
  return value;
}

Result<std::unique_ptr<Conn>> Conn::connect(const ConnOptions& o) {
  const std::string timeout = std::to_string(o.connect_timeout_s);
  // Ours first: the connection string, expanded from dbname, overrides them;
  // then the configured ones (params), which override the string. A
  // database gone silent (a failover, a partition) is noticed in about a
  // minute: TCP keepalives after 30 s idle, three probes 10 s apart, and
  // data sent but not acknowledged for 60 s; by default it took the kernel's
  // 15 minutes of retransmissions, or two hours of idle, while a thread
  // (the webhook committer's) waited on it.
  std::vector<const char*> keys = {
      "connect_timeout",  "keepalives",       "keepalives_idle",           "keepalives_interval",
      "keepalives_count", "tcp_user_timeout", "fallback_application_name", "dbname"};
  std::vector<const char*> values = {timeout.c_str(), "1",      "30",         "10", "3",
                                     "60000",         "opgate", o.url.c_str()};
  for (const auto& [k, v] : o.params) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  std::unique_ptr<Conn> c(new Conn());
  c->c_ = PQconnectdbParams(keys.data(), values.data(), 1);
  if (!c->c_) return make_error(errc::storage_unavailable, "PostgreSQL: out of memory");
  if (PQstatus(c->c_) != CONNECTION_OK)
    return make_error(errc::storage_unavailable,
                      "cannot connect to PostgreSQL: " + first_line(PQerrorMessage(c->c_)));
  // Notices (NOTICE: ... already exists, drop cascades) are not errors.
  PQsetNoticeProcessor(
      c->c_, [](void*, const char*) {}, nullptr);
  std::string setup = "SET TIME ZONE 'UTC'";
  if (o.statement_timeout_ms > 0)
    setup += fmt::format("; SET statement_timeout = {}", o.statement_timeout_ms);
  if (o.idle_in_transaction_timeout_ms > 0)
    setup += fmt::format("; SET idle_in_transaction_session_timeout = {}",
                         o.idle_in_transaction_timeout_ms);
  if (!o.schema.empty()) setup += "; SET search_path TO " + quote_ident(o.schema);
  if (Status s = c->exec(setup); !s) return s.error();
  return c;
}

Conn::~Conn() {
  if (c_) PQfinish(c_);
}

bool Conn::broken() const { return !c_ || PQstatus(c_) != CONNECTION_OK; }

bool Conn::in_transaction() const { return c_ && PQtransactionStatus(c_) != PQTRANS_IDLE; }

bool Conn::last_failure_retryable() const { return sqlstate_ == "40001" || sqlstate_ == "40P01"; }

Error Conn::failure(std::string_view what, pg_result* r) {
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  sqlstate_ = state ? state : "";
  std::string msg = r ? first_line(PQresultErrorMessage(r)) : "";
  if (msg.empty()) msg = first_line(PQerrorMessage(c_));
  return make_error(errc::storage_unavailable, fmt::format("PostgreSQL ({}): {}", what, msg));
}

Status Conn::exec(const std::string& sql) {
  sqlstate_.clear();
  // What was sent ahead fails this call, but the statement still runs: a
  // ROLLBACK after a failed batch must.
  const Status ahead = read_sent(nullptr);
  const std::string ahead_state = sqlstate_;
  if (broken()) return ahead ? failure("exec", nullptr) : ahead;
  PQsendQuery(c_, sql.c_str());
  std::optional<Error> err;
  while (pg_result* r = PQgetResult(c_)) {
    auto st = PQresultStatus(r);
    if (!err && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) err = failure("exec", r);
    PQclear(r);
  }
  if (!ahead) {
    sqlstate_ = ahead_state;
    return ahead;
  }
  if (err) return *err;
  if (broken()) return failure("exec", nullptr);
  return Status::Ok();
}

Status Conn::prepare(const std::string& name, const std::string& sql) {
  sqlstate_.clear();
  OPGATE_TRY(read_sent(nullptr));
  pg_result* r = PQprepare(c_, name.c_str(), sql.c_str(), 0, nullptr);
  Rows owned(r);
  if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) return failure("prepare " + name, r);
  return Status::Ok();
}

namespace {
struct Packed {
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  explicit Packed(const std::vector<Param>& params) {
    for (const auto& p : params) {
      values.push_back(p.null ? nullptr : p.bytes.data());
      lengths.push_back(static_cast<int>(p.bytes.size()));
      formats.push_back(1);
    }
  }
};
}  // namespace

Result<Rows> Conn::run(const std::string& name, const std::vector<Param>& params) {
  sqlstate_.clear();
  OPGATE_TRY(read_sent(nullptr));
  Packed p(params);
  pg_result* r = PQexecPrepared(c_, name.c_str(), static_cast<int>(params.size()), p.values.data(),
                                p.lengths.data(), p.formats.data(), 1);
  Rows rows(r);
  auto st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return failure(name, r);
  return rows;
}

Status Conn::send_batch(const std::vector<Stmt>& stmts) {
  bool sent = PQpipelineStatus(c_) == PQ_PIPELINE_ON || PQenterPipelineMode(c_) == 1;
  for (size_t i = 0; sent && i < stmts.size(); ++i) {
    Packed p(stmts[i].params);
    sent = PQsendQueryPrepared(c_, stmts[i].name.c_str(), static_cast<int>(stmts[i].params.size()),
                               p.values.data(), p.lengths.data(), p.formats.data(), 1) == 1;
  }
  if (sent && PQpipelineSync(c_) == 1) {
    std::vector<std::string> names;
    for (const auto& s : stmts) names.push_back(s.name);
    sent_.push_back(std::move(names));
    return Status::Ok();
  }
  Error e = failure("pipeline", nullptr);
  // The connection's state is unknown: the caller drops it.
  PQfinish(c_);
  c_ = nullptr;
  sent_.clear();
  return e;
}

void Conn::read_batch(const std::vector<std::string>& names, std::vector<Rows>* out,
                      std::optional<Error>& err) {
  // One result per statement (each followed by a null), then the sync.
  for (const auto& name : names) {
    pg_result* r = PQgetResult(c_);
    if (!r) {
      if (!err) err = failure(name, nullptr);
      break;
    }
    Rows rows(r);
    auto st = PQresultStatus(r);
    if (st == PGRES_PIPELINE_ABORTED) {
      // After the failure reported already.
    } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      if (!err) err = failure(name, r);
    }
    if (out) out->push_back(std::move(rows));
    while (pg_result* extra = PQgetResult(c_)) PQclear(extra);
  }
  // Up to the sync.
  for (;;) {
    pg_result* r = PQgetResult(c_);
    if (!r) {
      if (broken()) break;
      continue;
    }
    auto st = PQresultStatus(r);
    PQclear(r);
    if (st == PGRES_PIPELINE_SYNC) break;
  }
}

Status Conn::read_sent_but(size_t keep, std::vector<Rows>* out) {
  const size_t n = sent_.size() > keep ? sent_.size() - keep : 0;
  std::optional<Error> err;
  for (size_t i = 0; i < n; ++i) read_batch(sent_[i], i + 1 == n ? out : nullptr, err);
  sent_.erase(sent_.begin(), sent_.begin() + static_cast<std::ptrdiff_t>(n));
  if (err) return *err;
  if (broken()) return failure("pipeline", nullptr);
  return Status::Ok();
}

Status Conn::read_sent(std::vector<Rows>* last) {
  if (sent_.empty()) return Status::Ok();
  Status s = read_sent_but(0, last);
  sent_.clear();
  PQexitPipelineMode(c_);
  return s;
}

Status Conn::send_ahead(const std::vector<Stmt>& stmts) {
  if (stmts.empty()) return Status::Ok();
  if (broken()) return failure("pipeline", nullptr);
  return send_batch(stmts);
}

Result<std::vector<Rows>> Conn::pipeline(const std::vector<Stmt>& stmts) {
  sqlstate_.clear();
  std::vector<Rows> out;
  if (stmts.size() == 1 && sent_.empty()) {
    auto r = run(stmts[0].name, stmts[0].params);
    if (!r) return r.error();
    out.push_back(std::move(*r));
    return out;
  }
  // An empty call collects the batches sent ahead and returns no results.
  if (!stmts.empty()) OPGATE_TRY(send_batch(stmts));
  OPGATE_TRY(read_sent(stmts.empty() ? nullptr : &out));
  return out;
}

Status Conn::read_all_but_last() {
  sqlstate_.clear();
  return read_sent_but(1, nullptr);
}

Result<std::vector<Rows>> Conn::read_rest() {
  sqlstate_.clear();
  std::vector<Rows> out;
  OPGATE_TRY(read_sent(&out));
  return out;
}

Pool::Pool(ConnOptions options, size_t size, Setup setup, std::chrono::milliseconds wait)
    : options_(std::move(options)),
      size_(std::max<size_t>(1, size)),
      setup_(std::move(setup)),
      wait_(wait) {}

Pool::~Pool() = default;

Pool::Lease::~Lease() {
  if (pool_) pool_->give_back(std::move(conn_));
}

Result<Pool::Lease> Pool::acquire() {
  {
    MutexLock lock(mu_);
    const auto until = std::chrono::steady_clock::now() + wait_;
    while (idle_.empty() && open_ >= size_) {
      if (cv_.wait_until(mu_, until) == std::cv_status::timeout && idle_.empty() && open_ >= size_)
        return make_error(errc::overloaded,
                          fmt::format("every one of the {} database connections is busy", size_));
    }
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return Lease(*this, std::move(c));
    }
    ++open_;  // reserved; made below without the lock
  }
  auto c = Conn::connect(options_);
  Status s = c ? (setup_ ? setup_(**c) : Status::Ok()) : Status(c.error());
  if (!s) {
    MutexLock lock(mu_);
    --open_;
    cv_.notify_one();
    return s.error();
  }
  return Lease(*this, std::move(*c));
}

void Pool::give_back(std::unique_ptr<Conn> conn) {
  std::vector<std::unique_ptr<Conn>> dropped;  // closed after the lock
  MutexLock lock(mu_);
  if (conn && !conn->broken() && !conn->in_transaction()) {
    idle_.push_back(std::move(conn));
  } else {
    --open_;
    // A connection lost: the idle ones most likely went with it (a server
    // restart), and each would fail its next user once. New ones are made
    // as needed.
    if (conn && conn->broken()) {
      open_ -= idle_.size();
      dropped = std::move(idle_);
      idle_.clear();
    }
  }
  cv_.notify_all();
}

int64_t lock_id(std::string_view key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

std::string fixed_id(int64_t v) { return fmt::format("{:016x}", static_cast<uint64_t>(v)); }

std::optional<int64_t> parse_fixed_id(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace opgate::store::pg
