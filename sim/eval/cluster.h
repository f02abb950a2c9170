// A private cluster of real processes, for a release-gate scenario or an
// integration test: opgate-sim payments, opgate-sim agent and opgate serve
// as child processes on ephemeral loopback ports, in a temporary directory
// of their own. Every call returns errors as values; waiting is by polling a
// condition against a deadline.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/process/child.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "http/message.h"
#include "sim/eval/scenario.h"

namespace opgate::eval {

struct ClusterOptions {
  std::filesystem::path opgate_bin;  // the daemon executable
  std::filesystem::path sim_bin;     // opgate-sim
  std::vector<boost::json::object> orders;
  Settings settings;
  std::string extra_ingress;  // TOML lines appended to [ingress]
  // If set, the daemon runs with this hard and soft limit on open files.
  int daemon_open_files = 0;
  std::string extra_operator;  // TOML lines appended to [operator]
  std::string extra_config;    // TOML appended at the end (whole tables)
  // If set, the operator listener is reached over https, trusting this CA.
  std::string operator_ca_file;
  // A notification receiver (opgate-sim receiver) with two endpoints on it:
  // "ops" (standard, every event) and "chat" (slack, proposals and
  // attention).
  bool notifications = true;
  bool keep_dir = false;  // leave the directory (logs, data) for inspection
  // The daemon's store: "rocksdb", or "postgres" with a database of the
  // cluster's own on the server pg_url names (a libpq connection string),
  // created at start and dropped at the end. Empty: from the environment,
  // OPGATE_EVAL_STORE and OPGATE_EVAL_PG_URL (rocksdb if unset).
  std::string store;
  std::string pg_url;
  // Orders come from the business's order service (orders.source = "http"):
  // opgate-sim orders serves `orders`, and the daemon reads it with this
  // timeout.
  bool order_service = false;
  int orders_timeout_ms = 2000;
  // Two declared operations ([[operations]]), reship_order (money none,
  // tier support) and waive_fee (a credit of at most 5000, supervisor above
  // 2000), carried out by opgate-sim executor.
  bool declared_operations = false;
};

struct Reply {
  int status = 0;
  boost::json::value body;  // null if the body is not JSON
  std::string raw;
  http::Headers headers;
};

// Operator tokens every cluster has, by principal: admin (every scope),
// alice and bob (approve up to 100000), support (approve up to 2000, tier
// "support"), oncall (read and resolve), reader (read only), and outsider
// (every scope but for owners "outsider-*" only). The token is
// "tok-{principal}-only-for-tests".
std::string token_for(const std::string& principal);

class Cluster {
 public:
  static Result<std::unique_ptr<Cluster>> start(ClusterOptions options);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // The operator API with a bearer token ("" sends none).
  Result<Reply> op(const std::string& method, const std::string& path, const std::string& body = "",
                   const std::string& token = token_for("admin"));
  Result<Reply> agent_admin(const std::string& method, const std::string& path,
                            const std::string& body = "");
  Result<Reply> payments_admin(const std::string& method, const std::string& path,
                               const std::string& body = "");
  Result<Reply> receiver_admin(const std::string& method, const std::string& path,
                               const std::string& body = "");
  // A request to the MCP front door: `path` is "/mcp" or "/mcp/{token}".
  Result<Reply> mcp(const std::string& method, const std::string& path, const std::string& body,
                    http::Headers headers = {});
  // opgate-sim executor's admin routes (declared_operations clusters only).
  Result<Reply> executor_admin(const std::string& method, const std::string& path,
                               const std::string& body = "");
  // opgate-sim orders' admin routes (order_service clusters only).
  Result<Reply> orders_admin(const std::string& method, const std::string& path,
                             const std::string& body = "");
  static std::string notify_secret();
  // A raw POST to the daemon's webhook ingress for the "agents" source.
  Result<http::Response> webhook(const http::Headers& headers, const std::string& body);

  // kill -9 (or SIGTERM, which must exit 0), then start again on the same
  // ports and data.
  Status restart_daemon(bool kill);
  // Starts the daemon (again); it must not be running.
  Status start_daemon();
  // The variables the daemon's configuration names (its secrets, its
  // database), as the daemon is given them: for a CLI run against the same
  // configuration. The process's own environment is never changed.
  std::vector<std::pair<std::string, std::string>> daemon_variables() const;
  void signal_daemon(int signal);
  // Appends TOML to the configuration, sends SIGHUP and waits until the
  // daemon logs that it reloaded (an error if it refused the new file).
  Status reload(const std::string& extra_toml);
  // The daemon's exit code, once it exits within 20 s.
  Result<int> wait_daemon_exit();
  // The daemon's current log (JSON lines).
  std::string daemon_log() const;

  const std::filesystem::path& dir() const { return dir_; }
  uint16_t ingress_port() const { return ingress_port_; }
  uint16_t operator_port() const { return operator_port_; }
  uint16_t agent_port() const { return agent_port_; }
  // The MCP front door ([mcp] listen; 0 before the daemon first started).
  uint16_t mcp_port() const { return mcp_port_; }
  // "rocksdb" or "postgres".
  const std::string& store() const { return options_.store; }
  // "http://127.0.0.1:PORT" or https when the operator listener has TLS.
  std::string operator_url() const;
  static std::string webhook_secret();

 private:
  explicit Cluster(ClusterOptions options);
  Status start_processes();
  Status write_config() const;
  Result<std::string> wait_port_file(const std::filesystem::path& file,
                                     boost::process::child& child);

  Status create_database();
  void drop_database();

  ClusterOptions options_;
  std::filesystem::path dir_;
  std::string database_url_;  // postgres: the cluster's own database
  std::string notify_config() const;
  std::string declared_config() const;
  boost::process::child payments_, agent_, daemon_, receiver_, orders_, executor_;
  uint16_t payments_port_ = 0, agent_port_ = 0, ingress_port_ = 0, operator_port_ = 0,
           receiver_port_ = 0, orders_port_ = 0, mcp_port_ = 0, executor_port_ = 0;
  int daemon_starts_ = 0;
};

// One HTTP request with a 20 s timeout; a JSON content type if there is a body.
Result<Reply> send_request(const std::string& method, const std::string& url,
                           const std::string& body, http::Headers headers,
                           const std::string& ca_file = "");

// Polls `done` every 20 ms until it returns true or `deadline` passes.
bool poll_until(const std::function<bool()>& done,
                std::chrono::milliseconds deadline = std::chrono::seconds(20));

}  // namespace opgate::eval
