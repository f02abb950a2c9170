// opgate-sim: loopback simulators of the services opgate talks to.
//   opgate-sim payments --listen 127.0.0.1:0 --port-file FILE [--orders F] [--secret-key K]
//   opgate-sim agent --listen 127.0.0.1:0 --port-file FILE [--webhook-url URL]
//                    --webhook-secret whsec_... [--api-key K]
//   opgate-sim eval DIR [--opgate PATH] [--only NAME] [--keep] [--quiet] [--jobs N]
//   opgate-sim load --port P --secret whsec_... [--connections N] [--seconds S]
//   opgate-sim receiver --listen 127.0.0.1:0 --port-file FILE --secret whsec_...
//   opgate-sim executor --listen 127.0.0.1:0 --port-file FILE [--token T]
//   opgate-sim history --data-dir DIR [--settled N] [--outcome-unknown M]
// Each writes its bound port to --port-file (atomically), logs JSON lines on
// stderr, and exits 0 on SIGTERM or SIGINT. Admin endpoints (no auth):
//   both:     POST|GET|DELETE /_sim/faults, GET /_sim/stats, POST /_sim/reset
//   payments: POST /_sim/payment_intents, POST /_sim/customers,
//             POST /_sim/refunds/{id}/settle, GET /_sim/ledger
//   agent:    POST /_sim/sessions, GET /_sim/sessions/{id},
//             POST /_sim/sessions/{id}/messages, POST /_sim/sessions/{id}/notify,
//             POST|GET /_sim/webhook_target
//   executor: GET /_sim/executions
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "common/clock.h"
#include "common/files.h"
#include "common/signals.h"
#include "common/webhook_signature.h"
#include "http/server.h"
#include "sim/agent_sim.h"
#include "sim/approver.h"
#include "sim/eval/runner.h"
#include "sim/executor_sim.h"
#include "sim/history.h"
#include "sim/load_generator.h"
#include "sim/log.h"
#include "sim/orders_sim.h"
#include "sim/payments_sim.h"
#include "sim/receiver_sim.h"
#include "sim/sim_http.h"
#include "sim/webhook_sender.h"
#include "store/rocksdb/rocks_storage.h"

namespace {

using opgate::Status;
using opgate::sim::log_info;
using opgate::sim::log_warn;

struct CommonFlags {
  std::string listen = "127.0.0.1:0";
  std::string port_file;
  int threads = 8;
};

void add_common(CLI::App* app, CommonFlags& flags) {
  app->add_option("--listen", flags.listen, "host:port to listen on (port 0 picks one)")
      ->capture_default_str();
  app->add_option("--port-file", flags.port_file,
                  "file to receive the bound port (written atomically)");
  app->add_option("--threads", flags.threads, "server threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

Status write_port_file(const std::string& path, uint16_t port) {
  if (path.empty()) return Status::Ok();
  return opgate::write_file_atomically(path, std::to_string(port) + "\n");
}

// Serves `handler` until a stop signal; returns the exit code.
int serve(const CommonFlags& flags, const sigset_t& signals, opgate::http::Handler handler,
          std::string_view name) {
  opgate::http::ServerOptions options;
  options.listen = flags.listen;
  options.threads = flags.threads;
  options.max_connections = 4096;
  opgate::http::Server server(options, std::move(handler));
  auto port = server.start();
  if (!port) {
    log_warn("cannot listen", {{"error", port.error().message}});
    return 1;
  }
  if (auto written = write_port_file(flags.port_file, *port); !written) {
    log_warn("cannot write port file", {{"error", written.error().message}});
    server.stop();
    return 1;
  }
  log_info("listening", {{"port", *port}, {"sim", name}});
  int sig = opgate::wait_for_signal(signals);
  log_info("stopping", {{"signal", sig}});
  opgate::sim::interrupt_delays();
  server.drain(std::chrono::milliseconds(2000));
  server.stop();
  return 0;
}

}  // namespace

// The history is dated so that its last operation settled a day ago.
static int write_history(const std::string& dir, const opgate::sim::HistoryOptions& options) {
  const int64_t span_ms =
      static_cast<int64_t>(options.settled + options.outcome_unknown) * 1000 + 86'400'000;
  opgate::ManualClock clock(opgate::SystemClock().now_ms() - span_ms);
  spdlog::set_level(spdlog::level::warn);  // not a line per change of a million operations
  // A bulk writer, not the daemon: a large block cache keeps the reads its
  // transactions make (prefix scans seek every level) out of the files.
  opgate::store::rocks::OpenOptions open_options;
  open_options.block_cache_bytes = size_t{1} << 30;
  auto storage = opgate::store::rocks::RocksStorage::open(dir, open_options, clock);
  if (!storage) {
    std::cerr << "error: " << storage.error().message << "\n";
    return 2;
  }
  size_t reported = 0;
  Status s = opgate::sim::fill_history(**storage, clock, options, [&](size_t done) {
    if (done - reported >= 100'000) {
      std::cerr << done << " operations written\n";
      reported = done;
    }
  });
  if (!s) {
    std::cerr << "error: " << s.error().message << "\n";
    return 1;
  }
  // Months of history have been compacted by the time anyone measures the
  // present; a bulk load has not, and its compaction debt would be measured
  // instead of the daemon.
  for (size_t cf = 0; cf < opgate::store::rocks::kCfCount; ++cf) {
    if (Status c = (*storage)->db().compact(static_cast<opgate::store::rocks::Cf>(cf)); !c) {
      std::cerr << "error: " << c.error().message << "\n";
      return 1;
    }
  }
  std::cout << options.settled + options.outcome_unknown << " operations written to " << dir
            << "\n";
  return 0;
}

int main(int argc, char** argv) {
  const sigset_t signals = opgate::block_daemon_signals();

  CLI::App app{
      "opgate-sim: simulators of the agent platform, the payment provider and the order service"};
  app.require_subcommand(1);

  CommonFlags payments_flags;
  std::string orders_file;
  std::string secret_key;
  auto* payments = app.add_subcommand("payments", "Stripe-shaped payment provider");
  add_common(payments, payments_flags);
  payments->add_option("--orders", orders_file, "NDJSON orders whose payment intents to register")
      ->check(CLI::ExistingFile);
  payments->add_option("--secret-key", secret_key,
                       "the only accepted secret key (default: any key starting sk_)");

  CommonFlags agent_flags;
  std::string webhook_url;
  std::string webhook_secret;
  std::string api_key;
  auto* agent = app.add_subcommand("agent", "OpenAI Agents API (beta) with a scripted model");
  add_common(agent, agent_flags);
  agent->add_option("--webhook-url", webhook_url,
                    "where to POST action_required webhooks (or set it later with "
                    "POST /_sim/webhook_target; until then webhooks wait)");
  agent->add_option("--webhook-secret", webhook_secret, "whsec_... signing secret")->required();
  agent->add_option("--api-key", api_key, "the only accepted API key (default: any)");

  CommonFlags orders_flags;
  std::string orders_seed;
  std::string orders_token;
  auto* orders = app.add_subcommand(
      "orders", "the business's order service (orders.source = \"http\"), with faults");
  add_common(orders, orders_flags);
  orders->add_option("--orders", orders_seed, "NDJSON orders to serve (the seed-file format)")
      ->check(CLI::ExistingFile);
  orders->add_option("--token", orders_token, "the only accepted bearer token (default: any)");

  CommonFlags executor_flags;
  std::string executor_token;
  auto* executor = app.add_subcommand(
      "executor", "a declared operation's executor ([[operations]] executor), with faults");
  add_common(executor, executor_flags);
  executor->add_option("--token", executor_token, "the only accepted bearer token (default: any)");

  CommonFlags receiver_flags;
  std::string receiver_secret;
  auto* receiver = app.add_subcommand(
      "receiver", "a notification endpoint that verifies and keeps every delivery");
  add_common(receiver, receiver_flags);
  receiver->add_option("--secret", receiver_secret, "whsec_... the deliveries are signed with")
      ->required();

  std::string scenarios_dir;
  std::string only;
  bool keep = false;
  bool quiet = false;
  opgate::eval::RunOptions eval_options;
  auto* eval = app.add_subcommand(
      "eval", "The release gate: run every scenario in DIR against a real daemon and simulators");
  eval->add_option("dir", scenarios_dir, "directory of scenario files (*.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  eval->add_option("--opgate", eval_options.opgate_bin,
                   "the opgate executable (default: next to opgate-sim)")
      ->check(CLI::ExistingFile);
  eval->add_option("--only", only, "run only the scenario with this file stem");
  eval->add_flag("--keep", keep, "keep each scenario's directory (logs and data)");
  eval->add_flag("--quiet", quiet, "show evidence only for properties that failed");
  eval->add_option("--jobs", eval_options.jobs, "scenarios run at once (default 1)")
      ->check(CLI::Range(1, 64));

  opgate::sim::LoadOptions load_options;
  auto* load = app.add_subcommand(
      "load", "A webhook sender for benchmarks: signed requests on keep-alive connections");
  load->add_option("--port", load_options.port, "the daemon's webhook ingress port")->required();
  load->add_option("--secret", load_options.secret, "whsec_... to sign with")->required();
  load->add_option("--connections", load_options.connections)->capture_default_str();
  load->add_option("--seconds", load_options.seconds)->capture_default_str();
  load->add_option("--body-bytes", load_options.body_bytes)->capture_default_str();
  load->add_option("--type", load_options.event_type, "the events' type")->capture_default_str();
  load->add_option("--threads", load_options.threads)->capture_default_str();
  load->add_flag("--bad-signatures", load_options.bad_signatures,
                 "sign with the wrong key (a flood of forgeries)");

  opgate::sim::LoadOptions mcp_options;
  opgate::sim::McpLoad mcp_load;
  std::string mcp_token_env;
  auto* mcp_client =
      app.add_subcommand("mcp-load",
                         "An MCP client for benchmarks: tools/call after tools/call on keep-alive "
                         "connections, each with its own session");
  mcp_client->add_option("--port", mcp_options.port, "the MCP server's port")->required();
  mcp_client->add_option("--path", mcp_load.path)->capture_default_str();
  mcp_client->add_option(
      "--token-env", mcp_token_env,
      "the environment variable holding the bearer token (none: no Authorization)");
  mcp_client->add_option("--tool", mcp_load.tool, "the tool to call")->required();
  mcp_client
      ->add_option("--arguments", mcp_load.arguments,
                   "its arguments, a JSON object; {n} becomes a number unique within the run")
      ->capture_default_str();
  mcp_client->add_option("--first-n", mcp_load.first_n, "where {n} starts")->capture_default_str();
  mcp_client->add_option("--connections", mcp_options.connections)->capture_default_str();
  mcp_client->add_option("--seconds", mcp_options.seconds)->capture_default_str();
  mcp_client->add_option("--threads", mcp_options.threads)->capture_default_str();

  opgate::sim::ApproverOptions approve_options;
  std::string approve_jobs;
  auto* approve = app.add_subcommand(
      "approve", "An approver for benchmarks: approvals exactly as shown, N at a time");
  approve->add_option("--port", approve_options.port, "the daemon's operator API port")->required();
  approve
      ->add_option("--jobs", approve_jobs,
                   "NDJSON: one {key, amount_minor, currency, fingerprint} per line")
      ->required()
      ->check(CLI::ExistingFile);
  approve
      ->add_option("--token-env", approve_options.token,
                   "the environment variable holding the operator's bearer token")
      ->required();
  approve->add_option("--connections", approve_options.connections)->capture_default_str();

  std::string history_dir;
  opgate::sim::HistoryOptions history_options;
  auto* history = app.add_subcommand(
      "history", "Fill a (stopped daemon's) data directory with settled refunds, for benchmarks");
  history->add_option("--data-dir", history_dir, "the data directory (created if missing)")
      ->required();
  history->add_option("--settled", history_options.settled)->capture_default_str();
  history->add_option("--outcome-unknown", history_options.outcome_unknown)->capture_default_str();

  CLI11_PARSE(app, argc, argv);

  if (history->parsed()) return write_history(history_dir, history_options);

  if (approve->parsed()) {
    const char* token = std::getenv(approve_options.token.c_str());
    if (!token || !*token) {
      std::cerr << "error: " << approve_options.token << " is not set\n";
      return 2;
    }
    approve_options.token = token;
    std::ifstream in(approve_jobs);
    std::stringstream text;
    text << in.rdbuf();
    auto jobs = opgate::sim::parse_approval_jobs(text.str());
    if (!jobs) {
      std::cerr << "error: " << approve_jobs << ": " << jobs.error().message << "\n";
      return 2;
    }
    auto report = opgate::sim::run_approvals(approve_options, *jobs);
    if (!report) {
      std::cerr << "error: " << report.error().message << "\n";
      return 2;
    }
    std::cout << report->to_json() << std::endl;
    return 0;
  }

  if (mcp_client->parsed()) {
    if (!mcp_token_env.empty()) {
      const char* token = std::getenv(mcp_token_env.c_str());
      if (!token || !*token) {
        std::cerr << "error: " << mcp_token_env << " is not set\n";
        return 2;
      }
      mcp_load.bearer = token;
    }
    mcp_options.mcp = mcp_load;
    load_options = mcp_options;
  }
  if (load->parsed() || mcp_client->parsed()) {
    auto report = opgate::sim::run_load(load_options);
    if (!report) {
      std::cerr << "error: " << report.error().message << "\n";
      return 2;
    }
    std::cout << report->to_json() << std::endl;
    return 0;
  }

  if (eval->parsed()) {
    std::error_code ec;
    eval_options.sim_bin = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) eval_options.sim_bin = argv[0];
    if (eval_options.opgate_bin.empty())
      eval_options.opgate_bin = eval_options.sim_bin.parent_path() / "opgate";
    eval_options.keep_dirs = keep;
    return opgate::eval::run_gate(scenarios_dir, only, eval_options, !quiet, std::cout);
  }

  opgate::SystemClock clock;
  if (receiver->parsed()) {
    auto key = opgate::webhooks::decode_secret(receiver_secret);
    if (!key) {
      log_warn("bad --secret", {{"error", key.error().message}});
      return 2;
    }
    opgate::sim::ReceiverSim sim(*key, clock);
    return serve(
        receiver_flags, signals,
        [&sim](opgate::http::Request&& r) { return sim.handle(std::move(r)); }, "receiver");
  }
  if (executor->parsed()) {
    opgate::sim::ExecutorSim sim(executor_token);
    return serve(
        executor_flags, signals,
        [&sim](opgate::http::Request&& r) { return sim.handle(std::move(r)); }, "executor");
  }
  if (orders->parsed()) {
    opgate::sim::OrdersSim sim(orders_token, clock);
    if (!orders_seed.empty()) {
      if (auto loaded = sim.load_orders(orders_seed); !loaded) {
        log_warn("cannot load orders", {{"error", loaded.error().message}});
        return 1;
      }
    }
    return serve(
        orders_flags, signals,
        [&sim](opgate::http::Request&& r) { return sim.handle(std::move(r)); }, "orders");
  }
  if (payments->parsed()) {
    opgate::sim::PaymentsOptions options;
    if (!secret_key.empty()) options.secret_key = secret_key;
    opgate::sim::PaymentsSim sim(options, clock);
    if (!orders_file.empty()) {
      if (auto loaded = sim.load_orders(orders_file); !loaded) {
        log_warn("cannot load orders", {{"error", loaded.error().message}});
        return 1;
      }
    }
    return serve(
        payments_flags, signals,
        [&sim](opgate::http::Request&& r) { return sim.handle(std::move(r)); }, "payments");
  }

  if (!webhook_url.empty() && !webhook_url.starts_with("http://")) {
    log_warn("bad --webhook-url", {{"error", "only http:// URLs are supported"}});
    return 2;
  }
  auto raw_key = opgate::webhooks::decode_secret(webhook_secret);
  if (!raw_key) {
    log_warn("bad --webhook-secret", {{"error", raw_key.error().message}});
    return 2;
  }
  opgate::sim::WebhookSenderOptions webhook_options;
  webhook_options.url = webhook_url;
  webhook_options.raw_key = raw_key.value();
  opgate::sim::WebhookSender webhooks(webhook_options, clock);
  opgate::sim::AgentOptions options;
  if (!api_key.empty()) options.api_key = api_key;
  int code = 0;
  {
    opgate::sim::AgentSim sim(options, clock, webhooks);
    code = serve(
        agent_flags, signals,
        [&sim](opgate::http::Request&& r) { return sim.handle(std::move(r)); }, "agent");
    sim.stop();
  }
  webhooks.stop();
  return code;
}
