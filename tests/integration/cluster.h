// A real cluster for integration tests: the release gate's cluster of child
// processes (sim/eval/cluster.h), with doctest assertions on every call and
// the helpers the tests share. Waiting is by polling a condition with a
// deadline, never by sleeping for time to pass.
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "http/client.h"
#include "sim/eval/cluster.h"
#include "sim/eval/json_fields.h"

namespace opgate::testing {

namespace json = boost::json;

struct ClusterOptions {
  std::vector<std::string> orders;  // NDJSON lines; default: the demo orders
  int payments_timeout_ms = 1500;
  int agent_timeout_ms = 3000;
  int64_t approval_ttl_s = 86400;
  std::string extra_ingress;     // TOML lines appended to [ingress]
  int daemon_open_files = 0;     // a hard limit on the daemon's open files (0: inherited)
  std::string extra_operator;    // TOML lines appended to [operator]
  std::string extra_config;      // TOML tables appended at the end
  std::string operator_ca_file;  // the operator listener has TLS: trust this CA
  // Orders from the business's order service (opgate-sim orders) instead of
  // the embedded store, read with this timeout.
  bool order_service = false;
  int orders_timeout_ms = 2000;
  // The gate's declared operations (reship_order, waive_fee) and their
  // executor (opgate-sim executor).
  bool declared_operations = false;
};

// Tokens configured for every cluster; their principals in the comments.
inline constexpr const char* kAdminToken = "tok-admin-only-for-tests";    // admin: every scope
inline constexpr const char* kAliceToken = "tok-alice-only-for-tests";    // approver, limit 100000
inline constexpr const char* kBobToken = "tok-bob-only-for-tests";        // approver, limit 100000
inline constexpr const char* kReaderToken = "tok-reader-only-for-tests";  // operations:read only
inline constexpr const char* kSupportToken = "tok-support-only-for-tests";  // approver, limit 2000
inline constexpr const char* kOncallToken = "tok-oncall-only-for-tests";    // read + resolve
// Every scope, but only for owners matching "outsider-*".
inline constexpr const char* kOutsiderToken = "tok-outsider-only-for-tests";

using Reply = eval::Reply;

class Cluster {
 public:
  explicit Cluster(ClusterOptions options = {});
  ~Cluster();

  // Operator API (token defaults to admin).
  Reply op(const std::string& method, const std::string& path, const std::string& body = "",
           const std::string& token = kAdminToken);
  Reply agent_admin(const std::string& method, const std::string& path,
                    const std::string& body = "");
  Reply payments_admin(const std::string& method, const std::string& path,
                       const std::string& body = "");
  // The notification receiver (opgate-sim receiver): endpoints "ops" and "chat".
  Reply receiver_admin(const std::string& method, const std::string& path,
                       const std::string& body = "");
  // The executor's admin routes (declared_operations clusters).
  Reply executor_admin(const std::string& method, const std::string& path,
                       const std::string& body = "");
  // The order service's admin routes (order_service clusters).
  Reply orders_admin(const std::string& method, const std::string& path,
                     const std::string& body = "");
  // The agent platform's public API, as another client of it would call it.
  Reply agent_api(const std::string& method, const std::string& path, const std::string& body,
                  const std::string& idempotency_key);
  // A raw request to the MCP front door ("/mcp" or "/mcp/{token}").
  Reply mcp(const std::string& method, const std::string& path, const std::string& body,
            http::Headers headers = {});
  uint16_t mcp_port() const { return c_->mcp_port(); }
  // Raw POST to the webhook ingress.
  http::Response webhook(const std::string& source, const http::Headers& headers,
                         const std::string& body);

  // Creates a scripted session and binds it to `owner` (unless empty).
  // `script` is a JSON array of {"name","arguments"}.
  std::string create_session(const std::string& script, const std::string& owner = "demo-user");

  // The operation with this key, polling until `pred` holds (or failing).
  json::object wait_operation(const std::string& key,
                              const std::function<bool(const json::object&)>& pred);
  json::object wait_session_sim(const std::string& session,
                                const std::function<bool(const json::object&)>& pred);
  json::object operation(const std::string& key);
  json::object approve(const std::string& key, const std::string& token = kAliceToken,
                       int expect_status = 200);

  // Runs the opgate CLI with OPGATE_URL/OPGATE_TOKEN set (the URL the
  // daemon's operator API, or `url`); returns exit code and stdout.
  std::pair<int, std::string> cli(const std::vector<std::string>& args,
                                  const std::string& token = kAdminToken,
                                  const std::string& url = "");

  void restart_daemon(bool kill9);
  void stop_daemon_gracefully(int* exit_code = nullptr);
  void signal_daemon(int signal);
  int wait_daemon_exit();
  void start_daemon();

  const std::filesystem::path& dir() const { return c_->dir(); }
  uint16_t ingress_port() const { return c_->ingress_port(); }
  uint16_t operator_port() const { return c_->operator_port(); }
  std::string webhook_secret() const { return eval::Cluster::webhook_secret(); }
  std::string daemon_log() const { return c_->daemon_log(); }
  // "rocksdb" or "postgres" (OPGATE_EVAL_STORE).
  const std::string& store() const { return c_->store(); }
  std::filesystem::path config_file() const { return c_->dir() / "opgate.toml"; }

 private:
  std::unique_ptr<eval::Cluster> c_;
  std::string ca_file_;
};

// The status of a simulated session's root turn.
std::string root_status(const json::object& sim);
// The results a simulated session received, in call order.
std::vector<json::object> results(const json::object& sim);
// The provider's refunds carrying this operation key.
json::array provider_refunds_for(Cluster& c, const std::string& key);

// Polls `fn` until it returns true or the deadline passes.
bool eventually(const std::function<bool()>& fn,
                std::chrono::milliseconds deadline = std::chrono::seconds(20));

using eval::str;  // a field as text

}  // namespace opgate::testing
