#include "sim/eval/cluster.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>

#include <boost/json.hpp>
#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/crypto.h"
#include "http/client.h"
#ifdef OPGATE_WITH_POSTGRES
#include "sim/sim_errors.h"
#include "store/postgres/pg.h"
#endif

namespace opgate::eval {

namespace bp = boost::process;
namespace json = boost::json;

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Error failed(std::string message) {
  return make_error(sim_errc::cluster_failed, std::move(message));
}

}  // namespace

Result<Reply> send_request(const std::string& method, const std::string& url,
                           const std::string& body, http::Headers headers,
                           const std::string& ca_file) {
  http::ClientRequest req;
  req.method = method;
  req.url = url;
  req.ca_file = ca_file;
  req.headers = std::move(headers);
  req.body = body;
  if (!body.empty() && !req.headers.count("Content-Type"))
    req.headers["Content-Type"] = "application/json";
  req.timeout = std::chrono::seconds(20);
  auto res = http::send(req);
  if (!res) return failed(fmt::format("{} {}: {}", method, url, res.error().message));
  Reply r{res->status, nullptr, res->body, res->headers};
  json::error_code ec;
  r.body = json::parse(res->body, ec);
  if (ec) r.body = nullptr;
  return r;
}

namespace {

// Starts a child process; an executable that cannot run is an error value.
template <typename... Args>
Result<bp::child> start_child(const std::string& what, Args&&... args) {
  try {
    return bp::child(std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    return failed(fmt::format("cannot start {}: {}", what, e.what()));
  }
}

// Whether the child exited within the deadline (its exit code is then kept).
// Not bp::child::wait_for: Boost 1.81's swaps the process's SIGCHLD handler
// for the wait, which spins or sleeps out its whole deadline when several
// threads wait at once (the gate's --jobs).
bool exited_within(bp::child& c, std::chrono::milliseconds deadline) {
  std::error_code ec;
  return poll_until([&] { return !c.running(ec) || ec; }, deadline) && !ec;
}

void stop_child(bp::child& c) {
  std::error_code ec;
  if (!c.valid() || !c.running(ec)) return;
  ::kill(c.id(), SIGTERM);
  if (!exited_within(c, std::chrono::seconds(10))) {
    c.terminate(ec);
    c.wait(ec);
  }
}

}  // namespace

std::string token_for(const std::string& principal) {
  return "tok-" + principal + "-only-for-tests";
}

bool poll_until(const std::function<bool()>& done, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

std::string Cluster::webhook_secret() { return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"; }

Cluster::Cluster(ClusterOptions options) : options_(std::move(options)) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  if (options_.store.empty()) options_.store = env("OPGATE_EVAL_STORE");
  if (options_.store.empty()) options_.store = "rocksdb";
  if (options_.pg_url.empty()) options_.pg_url = env("OPGATE_EVAL_PG_URL");
}

namespace {
// The connection string with another database: a URI's path is replaced, a
// key=value string gets a later dbname (the last one wins).
std::string with_database(const std::string& url, const std::string& name) {
  for (std::string_view scheme : {"postgresql://", "postgres://"}) {
    if (url.rfind(scheme, 0) != 0) continue;
    const size_t host = scheme.size();
    size_t path = url.find_first_of("/?", host);
    std::string query;
    if (path != std::string::npos) {
      size_t q = url.find('?', path);
      if (q != std::string::npos) query = url.substr(q);
    }
    return url.substr(0, path == std::string::npos ? url.size() : path) + "/" + name + query;
  }
  return url + " dbname=" + name;
}
}  // namespace

Status Cluster::create_database() {
#ifdef OPGATE_WITH_POSTGRES
  if (options_.pg_url.empty())
    return failed("the postgres store needs a server: set OPGATE_EVAL_PG_URL");
  const std::string name = "opgate_eval_" + crypto::random_hex(6);
  store::pg::ConnOptions o;
  o.url = options_.pg_url;
  auto conn = store::pg::Conn::connect(o);
  if (!conn) return failed("cannot reach PostgreSQL: " + conn.error().message);
  if (auto s = (*conn)->exec("CREATE DATABASE " + name); !s)
    return failed("cannot create the cluster's database: " + s.error().message);
  database_url_ = with_database(options_.pg_url, name);
  return Status::Ok();
#else
  return failed("the postgres store is not built in");
#endif
}

void Cluster::drop_database() {
#ifdef OPGATE_WITH_POSTGRES
  if (database_url_.empty()) return;
  store::pg::ConnOptions o;
  o.url = options_.pg_url;
  auto conn = store::pg::Conn::connect(o);
  const auto name = database_url_.substr(database_url_.find_last_of("= /") + 1);
  if (conn) (void)(*conn)->exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
  database_url_.clear();
#endif
}

Result<std::unique_ptr<Cluster>> Cluster::start(ClusterOptions options) {
  std::unique_ptr<Cluster> c(new Cluster(std::move(options)));
  if (auto s = c->start_processes(); !s) return s.error();
  return c;
}

Status Cluster::start_processes() {
  dir_ = std::filesystem::temp_directory_path() / ("opgate-eval-" + crypto::random_hex(6));
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return failed(fmt::format("cannot create {}: {}", dir_.string(), ec.message()));
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (options_.store == "postgres") {
    if (auto s = create_database(); !s) return s;
  } else if (options_.store != "rocksdb") {
    return failed("unknown store " + options_.store + " (rocksdb or postgres)");
  }
  {
    std::ofstream out(dir_ / "orders.ndjson");
    for (const auto& o : options_.orders) out << json::serialize(o) << "\n";
    if (!out) return failed("cannot write orders.ndjson");
  }
  const auto sim = options_.sim_bin.string();
  auto payments_child =
      start_child("opgate-sim payments", sim, "payments", "--listen", "127.0.0.1:0", "--port-file",
                  (dir_ / "payments.port").string(), "--orders", (dir_ / "orders.ndjson").string(),
                  "--secret-key", "sk_test_eval", bp::std_out > (dir_ / "payments.out").string(),
                  bp::std_err > (dir_ / "payments.log").string());
  if (!payments_child) return payments_child.error();
  payments_ = std::move(*payments_child);
  auto payments_port = wait_port_file(dir_ / "payments.port", payments_);
  if (!payments_port) return payments_port.error();
  payments_port_ = static_cast<uint16_t>(std::stoi(*payments_port));
  // The provider knows each order's customer, as it would for credits.
  std::set<std::string> customers;
  for (const auto& o : options_.orders) customers.insert(std::string(o.at("customer").as_string()));
  for (const auto& customer : customers) {
    auto r =
        payments_admin("POST", "/_sim/customers", json::serialize(json::object{{"id", customer}}));
    if (!r) return r.error();
    if (r->status != 200) return failed("cannot register customer " + customer + ": " + r->raw);
  }
  auto agent_child =
      start_child("opgate-sim agent", sim, "agent", "--listen", "127.0.0.1:0", "--port-file",
                  (dir_ / "agent.port").string(), "--webhook-secret", webhook_secret(), "--api-key",
                  "sk-agent-eval", bp::std_out > (dir_ / "agent.out").string(),
                  bp::std_err > (dir_ / "agent.log").string());
  if (!agent_child) return agent_child.error();
  agent_ = std::move(*agent_child);
  auto agent_port = wait_port_file(dir_ / "agent.port", agent_);
  if (!agent_port) return agent_port.error();
  agent_port_ = static_cast<uint16_t>(std::stoi(*agent_port));
  if (options_.order_service) {
    auto orders_child =
        start_child("opgate-sim orders", sim, "orders", "--listen", "127.0.0.1:0", "--port-file",
                    (dir_ / "orders.port").string(), "--orders", (dir_ / "orders.ndjson").string(),
                    "--token", "tok-orders-eval", bp::std_out > (dir_ / "orders.out").string(),
                    bp::std_err > (dir_ / "orders.log").string());
    if (!orders_child) return orders_child.error();
    orders_ = std::move(*orders_child);
    auto orders_port = wait_port_file(dir_ / "orders.port", orders_);
    if (!orders_port) return orders_port.error();
    orders_port_ = static_cast<uint16_t>(std::stoi(*orders_port));
  }
  if (options_.declared_operations) {
    auto executor_child =
        start_child("opgate-sim executor", sim, "executor", "--listen", "127.0.0.1:0",
                    "--port-file", (dir_ / "executor.port").string(), "--token",
                    "tok-executor-eval", bp::std_out > (dir_ / "executor.out").string(),
                    bp::std_err > (dir_ / "executor.log").string());
    if (!executor_child) return executor_child.error();
    executor_ = std::move(*executor_child);
    auto executor_port = wait_port_file(dir_ / "executor.port", executor_);
    if (!executor_port) return executor_port.error();
    executor_port_ = static_cast<uint16_t>(std::stoi(*executor_port));
  }
  if (options_.notifications) {
    auto receiver_child =
        start_child("opgate-sim receiver", sim, "receiver", "--listen", "127.0.0.1:0",
                    "--port-file", (dir_ / "receiver.port").string(), "--secret", notify_secret(),
                    bp::std_out > (dir_ / "receiver.out").string(),
                    bp::std_err > (dir_ / "receiver.log").string());
    if (!receiver_child) return receiver_child.error();
    receiver_ = std::move(*receiver_child);
    auto receiver_port = wait_port_file(dir_ / "receiver.port", receiver_);
    if (!receiver_port) return receiver_port.error();
    receiver_port_ = static_cast<uint16_t>(std::stoi(*receiver_port));
  }
  return start_daemon();
}

std::string Cluster::notify_secret() { return "whsec_bm90aWZpY2F0aW9ucyBmb3IgdGhlIGdhdGUh"; }

Result<Reply> Cluster::receiver_admin(const std::string& method, const std::string& path,
                                      const std::string& body) {
  return send_request(method, fmt::format("http://127.0.0.1:{}{}", receiver_port_, path), body, {});
}

Result<Reply> Cluster::mcp(const std::string& method, const std::string& path,
                           const std::string& body, http::Headers headers) {
  return send_request(method, fmt::format("http://127.0.0.1:{}{}", mcp_port_, path), body,
                      std::move(headers));
}

Result<Reply> Cluster::executor_admin(const std::string& method, const std::string& path,
                                      const std::string& body) {
  if (!options_.declared_operations) return failed("this cluster has no declared operations");
  return send_request(method, fmt::format("http://127.0.0.1:{}{}", executor_port_, path), body, {});
}

std::string Cluster::declared_config() const {
  if (!options_.declared_operations) return "";
  return fmt::format(R"(
[[operations]]
name = "reship_order"
description = "Ship an order's items again when the carrier lost them. A person approves it."
money = "none"
tier = "support"
effect = "Order {{order_id}} is shipped again to the customer ({{carrier}}; {{note}})."
[operations.parameters]
required = ["order_id", "carrier"]
[operations.parameters.properties.carrier]
type = "string"
enum = ["standard", "express"]
[operations.parameters.properties.note]
type = "string"
maxLength = 200
[operations.executor]
url = "http://127.0.0.1:{0}/reship"
token_env = "OPGATE_EVAL_EXECUTOR_TOKEN"
timeout_ms = {1}

[[operations]]
name = "waive_fee"
description = "Waive a fee charged on an order, as a credit to the customer's account."
money = "credit"
amount_argument = "amount_minor"
tier = "support"
effect = "{{amount}} of the {{fee}} on order {{order_id}} is credited to the customer's account."
[operations.tier_above_minor]
supervisor = {{ USD = 2000, GBP = 2000 }}
[operations.parameters]
required = ["order_id", "fee", "amount_minor"]
[operations.parameters.properties.fee]
type = "string"
enum = ["late_fee", "restocking_fee"]
[operations.parameters.properties.amount_minor]
type = "integer"
minimum = 1
maximum = 5000
[operations.executor]
url = "http://127.0.0.1:{0}/waive"
token_env = "OPGATE_EVAL_EXECUTOR_TOKEN"
timeout_ms = {1}
)",
                     executor_port_, options_.settings.payments_timeout_ms);
}

Result<Reply> Cluster::orders_admin(const std::string& method, const std::string& path,
                                    const std::string& body) {
  if (!options_.order_service) return failed("this cluster has no order service");
  return send_request(method, fmt::format("http://127.0.0.1:{}{}", orders_port_, path), body, {});
}

std::string Cluster::notify_config() const {
  if (!options_.notifications) return "";
  // Two endpoints on the receiver: the team's webhook receiver (every event)
  // and a chat channel (proposals and attention only). Retries come quickly.
  return fmt::format(R"(
[notify]
console_url = "https://opgate.example/console"
retry_schedule_s = [1, 1, 2]
[[notify.endpoints]]
name = "ops"
url = "http://127.0.0.1:{port}/hooks/ops"
secret = "{secret}"
timeout_ms = 2000
[[notify.endpoints]]
name = "chat"
url = "http://127.0.0.1:{port}/hooks/chat"
secret = "{secret}"
format = "slack"
events = ["operation.proposed", "operation.needs_attention"]
timeout_ms = 2000
)",
                     fmt::arg("port", receiver_port_), fmt::arg("secret", notify_secret()));
}

Cluster::~Cluster() {
  for (auto* c : {&daemon_, &agent_, &payments_, &receiver_, &orders_, &executor_}) stop_child(*c);
  drop_database();
  if (!options_.keep_dir && !dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Result<std::string> Cluster::wait_port_file(const std::filesystem::path& file, bp::child& child) {
  std::string text;
  poll_until([&] {
    if (!child.running()) return true;
    if (std::filesystem::exists(file)) text = read_text(file);
    return !text.empty();
  });
  if (text.empty())
    return failed(fmt::format("{} did not appear; see the logs in {}", file.filename().string(),
                              dir_.string()));
  return text;
}

Status Cluster::write_config() const {
  auto token = [](const char* principal, const char* scopes, int64_t limit, const char* extra = "",
                  const char* owners = R"("*")") {
    return fmt::format(R"(
[[operator.tokens]]
principal = "{}"
token_sha256 = "{}"
scopes = [{}]
owners = [{}]
max_amount_minor = {{ USD = {}, GBP = {} }}
{}
)",
                       principal, crypto::sha256_hex(token_for(principal)), scopes, owners, limit,
                       limit, extra);
  };
  auto listen = [](uint16_t port) { return fmt::format("127.0.0.1:{}", port); };
  const auto& s = options_.settings;
  std::ofstream out(dir_ / "opgate.toml");
  out << fmt::format(
      R"(data_dir = "data"

[ingress]
listen = "{}"
timestamp_tolerance_s = 300
{}

[[ingress.sources]]
name = "agents"
secrets = ["{}"]

[operator]
listen = "{}"
{}

[mcp]
listen = "{}"
{}{}{}{}{}{}{}
[agent]
base_url = "http://127.0.0.1:{}/v1"
api_key_env = "OPGATE_EVAL_AGENT_KEY"
timeout_ms = {}

[payments]
base_url = "http://127.0.0.1:{}"
secret_key_env = "OPGATE_EVAL_PAYMENTS_KEY"
timeout_ms = {}

{}

[policy]
refund_window_days = 30
approval_ttl_s = {}
two_person_threshold_minor = {{ USD = {}, GBP = {} }}
credit_hard_cap_minor = {{ USD = 10000, GBP = 10000 }}
{}{}
)",
      listen(ingress_port_), options_.extra_ingress, webhook_secret(), listen(operator_port_),
      options_.extra_operator, listen(mcp_port_), token("admin", R"("admin")", 1000000),
      token("alice", R"("operations:read", "operations:approve")", 100000),
      token("bob", R"("operations:read", "operations:approve")", 100000),
      token("reader", R"("operations:read")", 0),
      token("support", R"("operations:read", "operations:approve")", 2000,
            R"(tiers = ["support"])") +
          token("refunds", R"("operations:read", "operations:approve")", 100000,
                R"(tiers = ["refund"])"),
      token("oncall", R"("operations:read", "operations:resolve")", 0),
      token("outsider",
            R"("operations:read", "operations:approve", "operations:resolve", "sessions:bind")",
            1000000, "", R"("outsider-*")"),
      agent_port_, s.agent_timeout_ms, payments_port_, s.payments_timeout_ms,
      options_.order_service
          ? fmt::format("[orders]\nsource = \"http\"\nbase_url = \"http://127.0.0.1:{}\"\n"
                        "token_env = \"OPGATE_EVAL_ORDERS_TOKEN\"\ntimeout_ms = {}\n",
                        orders_port_, options_.orders_timeout_ms)
          : std::string("[orders]\nsource = \"embedded\"\nseed_file = \"orders.ndjson\"\n"),
      s.approval_ttl_s, s.two_person_threshold_minor, s.two_person_threshold_minor,
      (s.delivery_delay_after_days > 0
           ? fmt::format("[policy.tools.issue_account_credit]\ndelivery_delay_after_days = {}\n",
                         s.delivery_delay_after_days)
           : std::string()) +
          (s.escalate_after_s > 0 ? fmt::format("[policy.escalation]\nescalate_after_s = {}\n"
                                                "escalate_to_tier = \"supervisor\"\n",
                                                s.escalate_after_s)
                                  : std::string()),
      notify_config() + declared_config() + options_.extra_config);
  if (options_.store == "postgres")
    out << R"(
[store]
backend = "postgres"
url_env = "OPGATE_EVAL_DB_URL"
pool_size = 24
)";
  if (!out) return failed("cannot write opgate.toml");
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> Cluster::daemon_variables() const {
  std::vector<std::pair<std::string, std::string>> v = {
      {"OPGATE_EVAL_AGENT_KEY", "sk-agent-eval"},
      {"OPGATE_EVAL_PAYMENTS_KEY", "sk_test_eval"},
      {"OPGATE_EVAL_ORDERS_TOKEN", "tok-orders-eval"},
      {"OPGATE_EVAL_EXECUTOR_TOKEN", "tok-executor-eval"}};
  if (!database_url_.empty()) v.emplace_back("OPGATE_EVAL_DB_URL", database_url_);
  return v;
}

Status Cluster::start_daemon() {
  if (auto s = write_config(); !s) return s;
  std::error_code ec;
  std::filesystem::remove(dir_ / "daemon.ports", ec);
  // A copy: the process's own environment stays as it is (clusters start
  // side by side, and setenv from several threads at once corrupts it).
  bp::environment env = boost::this_process::environment();
  for (const auto& [name, value] : daemon_variables()) env[name] = value;
  ++daemon_starts_;
  const rlim_t open_files = static_cast<rlim_t>(options_.daemon_open_files);
  auto daemon_child = start_child(
      "opgate serve", options_.opgate_bin.string(), "serve", "--config",
      (dir_ / "opgate.toml").string(), "--ports-file", (dir_ / "daemon.ports").string(), env,
      bp::std_out > (dir_ / fmt::format("daemon{}.out", daemon_starts_)).string(),
      bp::std_err > (dir_ / fmt::format("daemon{}.log", daemon_starts_)).string(),
      bp::extend::on_exec_setup = [open_files](auto&) {
        if (open_files == 0) return;
        rlimit rl{open_files, open_files};
        ::setrlimit(RLIMIT_NOFILE, &rl);
      });
  if (!daemon_child) return daemon_child.error();
  daemon_ = std::move(*daemon_child);
  auto ports = wait_port_file(dir_ / "daemon.ports", daemon_);
  if (!ports) {
    // A restart listens on the ports the daemon had. While it was down,
    // another process (tests run side by side) may have been given one of
    // them as a client's ephemeral port: then it starts on fresh ones.
    const bool on_old_ports = ingress_port_ != 0 || operator_port_ != 0 || mcp_port_ != 0;
    if (on_old_ports && !daemon_.running() &&
        daemon_log().find("cannot listen on") != std::string::npos) {
      ingress_port_ = operator_port_ = mcp_port_ = 0;
      return start_daemon();
    }
    return ports.error();
  }
  json::error_code jec;
  auto v = json::parse(*ports, jec);
  if (jec || !v.is_object()) return failed("daemon.ports is not JSON: " + *ports);
  ingress_port_ = static_cast<uint16_t>(v.at("ingress").as_int64());
  operator_port_ = static_cast<uint16_t>(v.at("operator").as_int64());
  mcp_port_ = static_cast<uint16_t>(v.at("mcp").as_int64());
  auto target = agent_admin(
      "POST", "/_sim/webhook_target",
      json::serialize(json::object{
          {"url", fmt::format("http://127.0.0.1:{}/v1/webhooks/agents", ingress_port_)}}));
  if (!target) return target.error();
  if (target->status != 200) return failed("cannot set the webhook target: " + target->raw);
  return Status::Ok();
}

void Cluster::signal_daemon(int signal) { ::kill(daemon_.id(), signal); }

Status Cluster::reload(const std::string& extra_toml) {
  auto count = [this](std::string_view event) {
    const std::string log = daemon_log();
    const std::string mark = fmt::format("\"event\":\"{}\"", event);
    size_t n = 0;
    for (size_t at = log.find(mark); at != std::string::npos; at = log.find(mark, at + 1)) ++n;
    return n;
  };
  const size_t reloaded = count("config.reloaded"), refused = count("config.reload_failed");
  options_.extra_config += "\n" + extra_toml + "\n";
  if (auto s = write_config(); !s) return s;
  signal_daemon(SIGHUP);
  if (!poll_until([&] {
        return count("config.reloaded") > reloaded || count("config.reload_failed") > refused;
      }))
    return failed("the daemon did not log a reload within 20 s");
  if (count("config.reload_failed") > refused)
    return failed("the daemon refused the new configuration (see its log)");
  return Status::Ok();
}

Result<int> Cluster::wait_daemon_exit() {
  if (!exited_within(daemon_, std::chrono::seconds(20)))
    return failed("the daemon did not exit within 20 s");
  return daemon_.exit_code();
}

std::string Cluster::daemon_log() const {
  return read_text(dir_ / fmt::format("daemon{}.log", daemon_starts_));
}

Status Cluster::restart_daemon(bool kill) {
  std::error_code ec;
  if (kill) {
    daemon_.terminate(ec);  // SIGKILL
    daemon_.wait(ec);
  } else {
    signal_daemon(SIGTERM);
    auto code = wait_daemon_exit();
    if (!code) return code.error();
    if (*code != 0) return failed(fmt::format("the daemon exited {} after SIGTERM", *code));
  }
  return start_daemon();
}

std::string Cluster::operator_url() const {
  return fmt::format("{}://127.0.0.1:{}", options_.operator_ca_file.empty() ? "http" : "https",
                     operator_port_);
}

Result<Reply> Cluster::op(const std::string& method, const std::string& path,
                          const std::string& body, const std::string& token) {
  http::Headers headers;
  if (!token.empty()) headers["Authorization"] = "Bearer " + token;
  return send_request(method, operator_url() + path, body, std::move(headers),
                      options_.operator_ca_file);
}

Result<Reply> Cluster::agent_admin(const std::string& method, const std::string& path,
                                   const std::string& body) {
  return send_request(method, fmt::format("http://127.0.0.1:{}{}", agent_port_, path), body, {});
}

Result<Reply> Cluster::payments_admin(const std::string& method, const std::string& path,
                                      const std::string& body) {
  return send_request(method, fmt::format("http://127.0.0.1:{}{}", payments_port_, path), body, {});
}

Result<http::Response> Cluster::webhook(const http::Headers& headers, const std::string& body) {
  http::ClientRequest req;
  req.method = "POST";
  req.url = fmt::format("http://127.0.0.1:{}/v1/webhooks/agents", ingress_port_);
  req.headers = headers;
  req.body = body;
  req.timeout = std::chrono::seconds(20);
  auto res = http::send(req);
  if (!res) return failed("webhook: " + res.error().message);
  return *res;
}

}  // namespace opgate::eval
