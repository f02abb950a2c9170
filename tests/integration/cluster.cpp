#include "cluster.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>

#include <boost/process.hpp>

namespace opgate::testing {

namespace bp = boost::process;

namespace {

// The value of a call that must succeed.
template <typename T>
T required(Result<T> r, const std::string& what) {
  REQUIRE_MESSAGE(r.ok(), what << ": " << r.error().message);
  return std::move(r).value();
}

}  // namespace

bool eventually(const std::function<bool()>& fn, std::chrono::milliseconds deadline) {
  return eval::poll_until(fn, deadline);
}

Cluster::Cluster(ClusterOptions options) {
  eval::ClusterOptions o;
  o.opgate_bin = std::string(OPGATE_BIN_DIR) + "/opgate";
  o.sim_bin = std::string(OPGATE_BIN_DIR) + "/opgate-sim";
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  if (options.orders.empty()) o.orders = eval::default_orders(now_s);
  for (const auto& line : options.orders) o.orders.push_back(json::parse(line).as_object());
  o.settings.payments_timeout_ms = options.payments_timeout_ms;
  o.settings.agent_timeout_ms = options.agent_timeout_ms;
  o.settings.approval_ttl_s = options.approval_ttl_s;
  o.extra_ingress = options.extra_ingress;
  o.extra_config = options.extra_config;
  o.daemon_open_files = options.daemon_open_files;
  o.extra_operator = options.extra_operator;
  o.extra_config = options.extra_config;
  o.operator_ca_file = options.operator_ca_file;
  o.order_service = options.order_service;
  o.declared_operations = options.declared_operations;
  o.orders_timeout_ms = options.orders_timeout_ms;
  ca_file_ = options.operator_ca_file;
  o.keep_dir = std::getenv("OPGATE_KEEP_TEST_DIRS") != nullptr;
  c_ = required(eval::Cluster::start(std::move(o)), "start the cluster");
}

Cluster::~Cluster() = default;

void Cluster::start_daemon() {
  auto s = c_->start_daemon();
  REQUIRE_MESSAGE(s.ok(), s.error().message);
}

void Cluster::restart_daemon(bool kill9) {
  auto s = c_->restart_daemon(kill9);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
}

void Cluster::signal_daemon(int signal) { c_->signal_daemon(signal); }

int Cluster::wait_daemon_exit() { return required(c_->wait_daemon_exit(), "daemon exit"); }

void Cluster::stop_daemon_gracefully(int* exit_code) {
  signal_daemon(SIGTERM);
  int code = wait_daemon_exit();
  if (exit_code) *exit_code = code;
}

Reply Cluster::op(const std::string& method, const std::string& path, const std::string& body,
                  const std::string& token) {
  return required(c_->op(method, path, body, token), method + " " + path);
}

Reply Cluster::mcp(const std::string& method, const std::string& path, const std::string& body,
                   http::Headers headers) {
  return required(c_->mcp(method, path, body, std::move(headers)), method + " " + path);
}

Reply Cluster::agent_admin(const std::string& method, const std::string& path,
                           const std::string& body) {
  return required(c_->agent_admin(method, path, body), method + " " + path);
}

Reply Cluster::agent_api(const std::string& method, const std::string& path,
                         const std::string& body, const std::string& idempotency_key) {
  return required(
      eval::send_request(method, fmt::format("http://127.0.0.1:{}{}", c_->agent_port(), path), body,
                         {{"Authorization", "Bearer sk-agent-eval"},
                          {"OpenAI-Beta", "agents=v1"},
                          {"Idempotency-Key", idempotency_key}}),
      method + " " + path);
}

Reply Cluster::payments_admin(const std::string& method, const std::string& path,
                              const std::string& body) {
  return required(c_->payments_admin(method, path, body), method + " " + path);
}

Reply Cluster::receiver_admin(const std::string& method, const std::string& path,
                              const std::string& body) {
  return required(c_->receiver_admin(method, path, body), method + " " + path);
}

Reply Cluster::executor_admin(const std::string& method, const std::string& path,
                              const std::string& body) {
  return required(c_->executor_admin(method, path, body), method + " " + path);
}

Reply Cluster::orders_admin(const std::string& method, const std::string& path,
                            const std::string& body) {
  return required(c_->orders_admin(method, path, body), method + " " + path);
}

http::Response Cluster::webhook(const std::string& source, const http::Headers& headers,
                                const std::string& body) {
  http::ClientRequest req;
  req.method = "POST";
  req.url = fmt::format("http://127.0.0.1:{}/v1/webhooks/{}", c_->ingress_port(), source);
  req.headers = headers;
  req.body = body;
  auto res = http::send(req);
  REQUIRE(res.ok());
  return *res;
}

std::string Cluster::create_session(const std::string& script, const std::string& owner) {
  auto created = agent_admin("POST", "/_sim/sessions",
                             fmt::format(R"({{"input":"help me","script":{}}})", script));
  REQUIRE_MESSAGE(created.status == 200, created.raw);
  std::string id = str(created.body, "id");
  if (!owner.empty()) {
    auto bound =
        op("POST", "/v1/sessions/" + id + "/bind", json::serialize(json::object{{"owner", owner}}));
    REQUIRE_MESSAGE(bound.status == 200, bound.raw);
  }
  return id;
}

json::object Cluster::operation(const std::string& key) {
  auto r = op("GET", "/v1/operations/" + key);
  REQUIRE_MESSAGE(r.status == 200, r.raw);
  return r.body.as_object();
}

json::object Cluster::wait_operation(const std::string& key,
                                     const std::function<bool(const json::object&)>& pred) {
  json::object last;
  bool ok = eventually([&] {
    auto r = op("GET", "/v1/operations/" + key);
    if (r.status != 200) return false;
    last = r.body.as_object();
    return pred(last);
  });
  REQUIRE_MESSAGE(ok, "operation " << key << " never reached the expected state; last: "
                                   << json::serialize(last) << "\nlog:\n"
                                   << daemon_log());
  return last;
}

json::object Cluster::wait_session_sim(const std::string& session,
                                       const std::function<bool(const json::object&)>& pred) {
  json::object last;
  bool ok = eventually([&] {
    auto r = agent_admin("GET", "/_sim/sessions/" + session);
    if (r.status != 200) return false;
    last = r.body.as_object();
    return pred(last);
  });
  REQUIRE_MESSAGE(ok, "session " << session << " never reached the expected state; last: "
                                 << json::serialize(last) << "\nlog:\n"
                                 << daemon_log());
  return last;
}

json::object Cluster::approve(const std::string& key, const std::string& token, int expect_status) {
  auto op_json = operation(key);
  auto r = op("POST", "/v1/operations/" + key + "/approve",
              json::serialize(json::object{{"amount_minor", op_json.at("amount_minor")},
                                           {"currency", op_json.at("currency")},
                                           {"fingerprint", op_json.at("fingerprint")}}),
              token);
  CHECK_MESSAGE(r.status == expect_status, r.raw);
  return r.body.is_object() ? r.body.as_object() : json::object{};
}

std::pair<int, std::string> Cluster::cli(const std::vector<std::string>& args,
                                         const std::string& token, const std::string& url) {
  // A copy: the process's own environment stays as it is. The CLI reads
  // the daemon's configuration as the daemon does, with its variables.
  bp::environment env = boost::this_process::environment();
  for (const auto& [name, value] : c_->daemon_variables()) env[name] = value;
  env["OPGATE_URL"] = url.empty() ? c_->operator_url() : url;
  env["OPGATE_TOKEN"] = token;
  if (!ca_file_.empty()) env["OPGATE_CA_FILE"] = ca_file_;
  bp::ipstream out;
  bp::child c(std::string(OPGATE_BIN_DIR) + "/opgate", bp::args(args), env, bp::std_out > out,
              bp::std_err > bp::null, bp::std_in < bp::null);
  std::string text, line;
  while (std::getline(out, line)) text += line + "\n";
  c.wait();
  return {c.exit_code(), text};
}

std::string root_status(const json::object& sim) {
  return str(sim.at("turns").as_array().at(0), "status");
}

std::vector<json::object> results(const json::object& sim) {
  std::vector<json::object> out;
  for (const auto& item : sim.at("items").as_array()) {
    if (str(item, "type") != "function_call") continue;
    auto* r = sim.at("results").as_object().if_contains(str(item, "call_id"));
    if (r) out.push_back(r->as_object());
  }
  return out;
}

json::array provider_refunds_for(Cluster& c, const std::string& key) {
  auto ledger = c.payments_admin("GET", "/_sim/ledger");
  json::array out;
  for (const auto& r : ledger.body.at("refunds").as_array())
    if (str(r.at("metadata"), "operation_key") == key) out.push_back(r);
  return out;
}

}  // namespace opgate::testing
