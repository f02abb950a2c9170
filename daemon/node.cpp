#include "daemon/node.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "adapters/agents/agents_http_client.h"
#include "adapters/executors/http_executor.h"
#include "adapters/orders/http_order_service.h"
#include "adapters/payments/stripe_provider.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/version.h"
#include "daemon/gauges.h"
#include "daemon/metrics_catalogue.h"
#include "operations/decisions.h"
#include "operations/orders.h"
#include "store/rocksdb/rocks_storage.h"

namespace opgate::daemon {

namespace {

// The HTTP servers' threads. Ingress handlers never block (an accepted event
// is answered after its group commit): one thread per core suffices.
int ingress_threads() {
  return static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
}
// Operator API handlers run store transactions, and may wait on them.
constexpr int kOperatorThreads = 32;
// A tool call is answered by the front door's committers once durable, so
// the MCP threads never wait on a sync: one per core suffices, unless they
// read orders from the business's order service (a network call each).
int mcp_threads(const Config& config) {
  return config.orders_source == "http" ? 32 : ingress_threads();
}
// Connections the operator API and MCP ask for; each gets a share of the
// descriptors of its own (fewer when the limit is low).
constexpr size_t kOperatorConnections = 1024;
constexpr size_t kMcpConnections = 1024;
// Each thread of an HTTP server runs an event loop, and one more accepts;
// a loop holds three descriptors (epoll, its wake-up eventfd, a timerfd).
size_t event_loop_descriptors(const Config& config) {
  const int loops = (ingress_threads() + 1) + (kOperatorThreads + 1) +
                    (config.mcp.enabled() ? mcp_threads(config) + 1 : 0);
  return 3 * static_cast<size_t>(loops);
}

// Events are queued for fan-out while this node has an endpoint to hear
// them: a node fans out what it queues to the endpoints it is configured
// with, on a store other nodes share as on its own (docs/notifications.md).
bool fans_out(const outbox::NotifyConfig& notify) { return !notify.endpoints.empty(); }

ingress::IngressConfig ingress_config_of(const Config& c) {
  return {c.sources, c.timestamp_tolerance_s, c.max_backlog,
          std::chrono::milliseconds(c.reject_cooldown_ms)};
}

// The console's address on the operator listener as bound, for links in
// notifications; empty when the console is off or the listener is a
// wildcard address (set notify.console_url then).
std::string default_console_url(const Config& config, uint16_t operator_port) {
  if (!config.console.enabled) return "";
  std::string host = config.operator_listen.substr(0, config.operator_listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") return "";
  return fmt::format("{}://{}:{}/console", config.operator_tls.enabled() ? "https" : "http", host,
                     operator_port);
}

// Pending proposals take the tiers of the policy now in force (a decision
// would re-tier each anyway; this shows them in the queue at once).
void rebind_pending(store::Storage& storage, const operations::PolicyConfig& policy) {
  auto n = operations::retier_pending(storage, policy);
  if (!n)
    spdlog::error("cannot re-tier pending proposals: {}", n.error().message);
  else if (*n > 0)
    log_event(spdlog::level::info, "policy.retiered",
              fmt::format("{} pending proposal(s) re-tiered by the policy in force", *n), {});
}

// Jitter for every backoff, shared by the threads that back off.
Random shared_jitter() {
  struct Jitter {
    Mutex mu;
    std::mt19937_64 rng GUARDED_BY(mu){std::random_device{}()};
    std::uniform_real_distribution<double> dist GUARDED_BY(mu){0.0, 1.0};
    double next() {
      MutexLock lock(mu);
      return dist(rng);
    }
  };
  auto jitter = std::make_shared<Jitter>();
  return [jitter] { return jitter->next(); };
}

mcp::Access access_of(const Config::Mcp& m) { return {m.allowed_origins, m.allowed_hosts}; }

}  // namespace

Node::Node(const Config& config)
    : config_(config),
      random_(shared_jitter()),
      policy_(config.policy),
      principals_(config.principals),
      notify_(config.notify),
      mcp_access_(access_of(config.mcp)),
      execution_budget_ms_(execution_budget_ms(config)) {}

Result<std::unique_ptr<Node>> Node::start(const Config& config, const ServeOptions& options) {
  set_log_level(config.log_level);
  OPGATE_TRY(check_serviceable(config));
  if (config.data_dir_was_relative)
    spdlog::info("data_dir is relative: it resolves to {}, next to the config file",
                 config.data_dir);
  std::unique_ptr<Node> node(new Node(config));
  OPGATE_TRY(node->open_store());
  OPGATE_TRY(node->build_adapters());
  OPGATE_TRY(node->build_work());
  OPGATE_TRY(node->build_notifications());
  OPGATE_TRY(node->build_listeners());
  OPGATE_TRY(node->listen(options));
  return node;
}

Status Node::open_store() {
  metrics_.info("opgate_build_info", "The running opgate's version and git revision.",
                {{"version", std::string(kVersion)}, {"revision", std::string(kRevision)}});
  // Descriptors are shared out before anything opens one.
  const size_t open_files = raise_open_files_limit();
  fds_ = plan_descriptors(open_files,
                          {.ingress = static_cast<size_t>(config_.max_connections),
                           .operator_api = kOperatorConnections,
                           .mcp = config_.mcp.enabled() ? kMcpConnections : 0},
                          event_loop_descriptors(config_));
  if (open_files < fds_.needed)
    return make_error(errc::not_ready,
                      fmt::format("only {} file descriptors are available and opgate needs at "
                                  "least {} (its store, logs, outbound calls and a few "
                                  "connections per listener); raise LimitNOFILE",
                                  open_files, fds_.needed));
  if (fds_.capped)
    spdlog::warn(
        "only {} file descriptors are available: connections are capped at {} (webhooks), {} "
        "(operator){}; raise LimitNOFILE to allow more",
        open_files, fds_.ingress_connections, fds_.operator_connections,
        config_.mcp.enabled() ? fmt::format(" and {} (MCP)", fds_.mcp_connections) : "");
  // A store that stops accepting writes (a failed WAL sync makes RocksDB
  // read-only until it is opened again) cannot settle or answer anything:
  // the daemon stops and exits non-zero, so that the service manager starts
  // it again on what the disk holds (a fail-stop, as PostgreSQL does on a
  // failed fsync). Every retry after that is idempotent.
  OPGATE_ASSIGN_OR_RETURN(
      opened_, daemon::open_store(
                   config_, system_clock_, fds_.rocksdb_max_open_files, [](const std::string& why) {
                     log_event(spdlog::level::critical, "store.read_only",
                               "the store stopped accepting writes; stopping so that the "
                               "service manager restarts opgate on what the disk holds",
                               {{"reason", why}});
                     ::kill(::getpid(), SIGUSR1);
                   }));
  // Time for everything from here: a shared store's (the database's clock,
  // which every node agrees on) or this node's.
  if (opened_.clock) clock_ = opened_.clock;
  if (!config_.orders_seed_file.empty()) {
    OPGATE_ASSIGN_OR_RETURN(auto orders, operations::read_orders_file(config_.orders_seed_file));
    OPGATE_ASSIGN_OR_RETURN(auto n, operations::import_orders(*opened_.storage, std::move(orders),
                                                              "seed:" + config_.orders_seed_file));
    spdlog::info("seeded {} order(s) from {}", n, config_.orders_seed_file);
  }
  // Other processes share a store that is not this node's own RocksDB.
  shared_store_ = opened_.rocks == nullptr;
  ingress::InboxOptions inbox_options;
  inbox_options.shared_store = shared_store_;
  OPGATE_ASSIGN_OR_RETURN(inbox_, ingress::Inbox::open(*opened_.storage, *clock_, inbox_options));
  return Status::Ok();
}

Status Node::build_adapters() {
  for (const auto& p : config_.principals)
    if (p.owners.empty())
      spdlog::warn("operator token '{}' has no owner patterns: it can see and act on nothing",
                   p.name);
  agents_ = adapters::make_agents_http_client({config_.agent.base_url, config_.agent.secret,
                                               config_.agent.timeout_ms, config_.agent.ca_file});
  payments_ =
      adapters::make_stripe_provider({config_.payments.base_url, config_.payments.secret,
                                      config_.payments.timeout_ms, config_.payments.ca_file});
  provider_ = payments_.get();
  // orders.source = "http": the business's order service is read afresh at
  // each step, and cancellations go to it before the refund goes out.
  if (config_.orders_source == "http") {
    order_service_ =
        adapters::make_http_order_service({config_.orders.base_url, config_.orders.secret,
                                           config_.orders.timeout_ms, config_.orders.ca_file});
    cancelling_ = adapters::make_cancelling_provider(*payments_, *order_service_);
    provider_ = cancelling_.get();
  }
  // Declared operations go to their executors; the rest to the provider.
  declared_ = adapters::make_declared_executors(*provider_, policy_, execution_budget_ms_);
  provider_ = declared_.get();
  return Status::Ok();
}

Status Node::build_work() {
  store::Storage& storage = *opened_.storage;
  // Session syncs and outbox items run here, one lane per session,
  // operation or tool call; a slow one holds only its own lane.
  lanes_ = std::make_unique<Lanes>("lane", 32, 1024);
  sessions_ = std::make_unique<agent_sessions::SessionSync>(
      storage, *inbox_, *agents_, policy_, metrics_, *clock_, random_, order_service_.get());
  outbox::DrainerOptions drainer_options;
  // Longer than an execution can take: a cancellation at the order service
  // and then the refund.
  drainer_options.claim_lease_ms = execution_budget_ms_ + 10'000;
  drainer_options.call_budget_ms = execution_budget_ms_;
  drainer_options.shared_store = shared_store_;
  drainer_ =
      std::make_unique<outbox::Drainer>(storage, *lanes_, *provider_, *agents_, policy_, metrics_,
                                        *clock_, random_, drainer_options, order_service_.get());
  rebind_pending(storage, config_.policy);
  OPGATE_TRY(drainer_->recover_after_restart());
  if (opened_.hold_lease) leadership_.emplace(opened_.hold_lease, 10'000, *clock_);
  engine_ = std::make_unique<Engine>(
      storage, *sessions_, *drainer_, *lanes_, *clock_,
      Engine::Options{std::chrono::milliseconds(200),
                      std::chrono::seconds(config_.sweep_interval_s),
                      std::chrono::seconds(config_.sweep_window_s),
                      leadership_ ? std::function<bool()>([this] { return leadership_->leads(); })
                                  : std::function<bool()>()});
  lanes_->on_done([this] { engine_->wake(); });
  return Status::Ok();
}

Status Node::build_notifications() {
  store::Storage& storage = *opened_.storage;
  // Kept for replay always; queued for fan-out only while an endpoint may
  // hear them. Notifications run on lanes of their own: a slow endpoint
  // never holds up executions or tool results.
  storage.fan_out_notifications(fans_out(config_.notify));
  notify_lanes_ = std::make_unique<Lanes>("notify", 8, 1024);
  notifier_ = std::make_unique<outbox::Notifier>(storage, *notify_lanes_, notify_, metrics_,
                                                 *clock_, random_);
  notifier_->set_shared_store(shared_store_);
  notify_lanes_->on_done([this] { engine_->wake(); });
  engine_->notify_with(*notifier_, config_.attention);
  engine_->escalate_with(policy_);

  register_gauges(metrics_, storage, opened_.rocks, *inbox_, *clock_, config_.attention);
  std::vector<std::string> source_names;
  for (const auto& s : config_.sources) source_names.push_back(s.name);
  std::vector<std::string> endpoint_names;
  for (const auto& e : config_.notify.endpoints) endpoint_names.push_back(e.name);
  describe_metrics(metrics_, source_names, endpoint_names);
  register_notify_gauges(metrics_, storage, notify_);
  register_process_metrics(metrics_);

  // Work queued by a group commit wakes the dispatcher at once; so does work
  // another node committed to a shared store.
  inbox_->on_queued([this] { engine_->wake(); });
  if (opened_.listen) {
    opened_.listen([this] { engine_->wake(); });
    listening_to_store_ = true;
  }
  return Status::Ok();
}

Status Node::build_listeners() {
  webhooks_ = std::make_unique<ingress::WebhookHandler>(ingress_config_of(config_), *inbox_,
                                                        *clock_, metrics_);
  ingress_router_.add_async(
      "POST", "/v1/webhooks/{source}",
      [this](http::Request&& req, const http::PathParams& p, http::Respond respond) {
        webhooks_->handle(std::move(req), p.at("source"), std::move(respond));
      });
  http::ServerOptions ingress;
  ingress.listen = config_.ingress_listen;
  ingress.name = "ingress";
  ingress.max_body_bytes = config_.max_body_bytes;
  ingress.header_timeout = std::chrono::milliseconds(config_.header_timeout_ms);
  ingress.body_timeout = std::chrono::milliseconds(config_.body_timeout_ms);
  ingress.max_connections = fds_.ingress_connections;
  ingress.tls = config_.ingress_tls;
  ingress.threads = ingress_threads();
  ingress_server_ =
      std::make_unique<http::Server>(ingress, [this](http::Request&& r, http::Respond respond) {
        ingress_router_.dispatch(std::move(r), std::move(respond));
      });
  // The committer hands each batch's answers to the ingress threads; it is
  // stopped (answering what it holds) before the server it posts them to.
  inbox_->answer_with(
      [this](std::function<void()> answers) { ingress_server_->post(std::move(answers)); });

  store::rocks::RocksStorage* rocks = opened_.rocks;
  metrics_.gauge("opgate_ready", [this, rocks] {
    return ready_.load() && !(rocks && rocks->journal().failing()) ? 1.0 : 0.0;
  });
  api_deps_ = std::make_unique<operator_api::ApiDeps>(operator_api::ApiDeps{
      *opened_.storage, *sessions_, *drainer_, *agents_, metrics_, *clock_, principals_, policy_,
      [this] { engine_->wake(); }, ready_, config_.attention, notifier_.get(), &notify_});
  api_deps_->orders = order_service_.get();
  api_deps_->mcp_url = [this] { return mcp_url_; };
  // The approval console: pages under /console/, and the API for them under
  // /console/api/ with its session cookie.
  console::Options console_options = config_.console;
  console_options.tls = config_.operator_tls.enabled();  // cookies are Secure under TLS
  console_ = std::make_unique<console::Console>(console_options, principals_, *clock_);
  if (config_.console.enabled) {
    api_deps_->console_auth = [this](const http::Request& r, const operator_api::Principals& p) {
      return console_->authenticate(r, p);
    };
    api_deps_->passkey_site = [this](const http::Request& r) { return console_->passkey_site(r); };
  }
  operator_router_ = operator_api::make_router(*api_deps_);
  if (config_.console.enabled) console_->add_routes(operator_router_);
  http::ServerOptions op;
  op.name = "operator";
  op.listen = config_.operator_listen;
  op.threads = kOperatorThreads;
  op.max_connections = fds_.operator_connections;
  op.tls = config_.operator_tls;
  operator_server_ = std::make_unique<http::Server>(op, [this](http::Request&& r) {
    auto response = operator_router_.dispatch(r);
    console::Console::finish(r, response);
    return response;
  });
  metrics_.gauge("opgate_ingress_connections",
                 [this] { return static_cast<double>(ingress_server_->open_connections()); });
  if (config_.mcp.enabled()) build_mcp();
  return Status::Ok();
}

void Node::build_mcp() {
  mcp_ =
      std::make_unique<mcp::FrontDoor>(*opened_.storage, policy_, mcp_access_, order_service_.get(),
                                       metrics_, *clock_, [this] { engine_->wake(); });
  http::ServerOptions o;
  o.name = "mcp";
  o.listen = config_.mcp.listen;
  o.max_body_bytes = config_.max_body_bytes;
  o.header_timeout = std::chrono::milliseconds(config_.header_timeout_ms);
  o.body_timeout = std::chrono::milliseconds(config_.body_timeout_ms);
  o.max_connections = fds_.mcp_connections;
  o.tls = config_.mcp.tls;
  o.threads = mcp_threads(config_);
  mcp_server_ = std::make_unique<http::Server>(o, [this](http::Request&& r, http::Respond respond) {
    mcp_->handle(std::move(r), std::move(respond));
  });
}

Status Node::listen(const ServeOptions& options) {
  // The MCP listener first: the operator API, once serving, reads the URL
  // it names in minted tokens.
  uint16_t mcp_port = 0;
  if (mcp_server_) {
    OPGATE_ASSIGN_OR_RETURN(mcp_port, mcp_server_->start());
    mcp_url_ =
        !config_.mcp.public_url.empty()
            ? config_.mcp.public_url
            : fmt::format("{}://{}:{}", config_.mcp.tls.enabled() ? "https" : "http",
                          config_.mcp.listen.substr(0, config_.mcp.listen.rfind(':')), mcp_port);
  }
  OPGATE_ASSIGN_OR_RETURN(const uint16_t ingress_port, ingress_server_->start());
  OPGATE_ASSIGN_OR_RETURN(const uint16_t operator_port, operator_server_->start());
  // Notifications link to the console this daemon serves, unless the
  // configuration names the address people reach it at.
  console_default_ = default_console_url(config_, operator_port);
  if (config_.notify.console_url.empty() && !console_default_.empty()) {
    auto with_link = config_.notify;
    with_link.console_url = console_default_;
    notify_.set(with_link);
  }
  engine_->start();
  ready_ = true;
  if (!options.ports_file.empty())
    OPGATE_TRY(write_file_atomically(
        options.ports_file,
        fmt::format(R"({{"ingress":{},"operator":{}{}}})", ingress_port, operator_port,
                    mcp_server_ ? fmt::format(R"(,"mcp":{})", mcp_port) : std::string()) +
            "\n"));
  spdlog::info("listening: webhooks on port {}, operator API on port {}{}, data in {}",
               ingress_port, operator_port,
               mcp_server_ ? fmt::format(", MCP on port {}", mcp_port) : std::string(),
               opened_.description);
  notify_ready(
      fmt::format("webhooks on port {}, operator API on port {}", ingress_port, operator_port));
  // Healthy: the dispatcher keeps passing, the store can be written and,
  // over plain HTTP, the operator listener answers.
  auto listener_answers =
      config_.operator_tls.enabled()
          ? std::function<bool()>([] { return true; })
          : operator_health_check(config_.operator_listen, operator_port, std::chrono::seconds(2));
  watchdog_ = std::make_unique<Watchdog>([this, listener_answers] {
    return engine_->alive(std::chrono::seconds(5)) && opened_.storage->check_writable().ok() &&
           listener_answers();
  });
  return Status::Ok();
}

void Node::reload(const std::string& path) {
  auto fail = [](const std::string& why) {
    log_event(spdlog::level::err, "config.reload_failed",
              "the new configuration was not applied; the old one stays", {{"reason", why}});
  };
  auto next = load_config(path);
  if (!next) return fail(next.error().message);
  if (Status s = check_serviceable(*next); !s) return fail(s.error().message);
  for (const auto* tls : {&next->ingress_tls, &next->operator_tls, &next->mcp.tls})
    if (tls->enabled())
      if (Status s = http::check_tls_files(*tls); !s) return fail(s.error().message);
  Config& running = config_;
  // Checked against what stays: the retention is the store's, fixed at start.
  if (Status s = check_replay_window(running.inbox_retention_s, next->timestamp_tolerance_s); !s)
    return fail(s.error().message + " (the running retention: it changes with a restart)");
  const auto restart = keys_needing_restart(running, *next, execution_budget_ms_);
  // Every certificate is loaded before anything changes: a file that fails
  // now leaves both listeners (and everything else) as they were.
  std::shared_ptr<const http::LoadedTls> ingress_tls, operator_tls;
  if (running.ingress_tls.enabled() && next->ingress_tls.enabled()) {
    auto loaded = http::load_tls_files(next->ingress_tls);
    if (!loaded) return fail(loaded.error().message);
    ingress_tls = *loaded;
  }
  if (running.operator_tls.enabled() && next->operator_tls.enabled()) {
    auto loaded = http::load_tls_files(next->operator_tls);
    if (!loaded) return fail(loaded.error().message);
    operator_tls = *loaded;
  }
  std::shared_ptr<const http::LoadedTls> mcp_tls;
  if (mcp_server_ && running.mcp.tls.enabled() && next->mcp.tls.enabled()) {
    auto loaded = http::load_tls_files(next->mcp.tls);
    if (!loaded) return fail(loaded.error().message);
    mcp_tls = *loaded;
  }
  if (ingress_tls) ingress_server_->use_tls(ingress_tls);
  if (operator_tls) operator_server_->use_tls(operator_tls);
  if (mcp_tls) mcp_server_->use_tls(mcp_tls);
  // Hosts derived from the listen address follow the address listened on,
  // which changes with a restart only.
  auto allowed_hosts = next->mcp.hosts_from_listen ? default_allowed_hosts(running.mcp.listen)
                                                   : next->mcp.allowed_hosts;
  mcp_access_.set({next->mcp.allowed_origins, allowed_hosts});
  principals_.set(next->principals);
  policy_.set(next->policy);
  rebind_pending(*opened_.storage, next->policy);
  auto notify = next->notify;
  if (notify.console_url.empty()) notify.console_url = console_default_;
  // On before the new endpoints are live, off only after the last is gone.
  const bool fan_out = fans_out(notify);
  if (fan_out) opened_.storage->fan_out_notifications(true);
  notify_.set(notify);
  if (!fan_out) opened_.storage->fan_out_notifications(false);
  webhooks_->set_config(ingress_config_of(*next));
  set_log_level(next->log_level);
  // What was applied becomes the running configuration; what needs a
  // restart keeps its running value, so a later reload still names it.
  running.principals = next->principals;
  running.policy = next->policy;
  running.notify = next->notify;
  running.sources = next->sources;
  running.timestamp_tolerance_s = next->timestamp_tolerance_s;
  running.max_backlog = next->max_backlog;
  running.reject_cooldown_ms = next->reject_cooldown_ms;
  running.log_level = next->log_level;
  if (running.ingress_tls.enabled() && next->ingress_tls.enabled())
    running.ingress_tls = next->ingress_tls;
  if (running.operator_tls.enabled() && next->operator_tls.enabled())
    running.operator_tls = next->operator_tls;
  running.mcp.allowed_origins = next->mcp.allowed_origins;
  running.mcp.allowed_hosts = std::move(allowed_hosts);
  if (running.mcp.tls.enabled() && next->mcp.tls.enabled()) running.mcp.tls = next->mcp.tls;
  std::string needs_restart;
  for (const auto& k : restart) needs_restart += (needs_restart.empty() ? "" : ", ") + k;
  log_event(
      spdlog::level::info, "config.reloaded",
      fmt::format("configuration reloaded: {} token(s), {} webhook source(s), {} "
                  "notification endpoint(s)",
                  next->principals.size(), next->sources.size(), next->notify.endpoints.size()),
      {{"needs_restart", needs_restart}});
}

int Node::drain(bool store_failed) {
  notify_stopping("draining");
  if (watchdog_) watchdog_->stop();
  // Webhooks are refused before the node says it is unready, so that a
  // sender who saw it unready is refused too, never accepted after.
  webhooks_->set_draining(true);
  ready_ = false;
  ingress_server_->drain(std::chrono::seconds(10));
  // Answers whatever still waits for its group commit while the connections
  // it answers to can still be written.
  inbox_->stop();
  operator_server_->drain(std::chrono::seconds(10));
  if (mcp_) {
    // Waiting task results are answered ("ask again") before the listener
    // drains, so their connections close.
    mcp_->stop();
    mcp_server_->drain(std::chrono::seconds(10));
  }
  stop();
  if (store_failed) {
    spdlog::critical("drained; exiting with status {} for a restart", kExitStoreFailed);
    return kExitStoreFailed;
  }
  spdlog::info("drained; exiting");
  return 0;
}

void Node::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (watchdog_) watchdog_->stop();
  // In reverse order of building: the committer answers what it holds
  // before the server it posts answers to goes; the store stops waking the
  // dispatcher before the dispatcher goes; the lanes finish their work.
  if (inbox_) inbox_->stop();
  if (listening_to_store_ && opened_.stop_listening) opened_.stop_listening();
  if (engine_) engine_->stop();
  // Joined, not only idle: a thread's last on_done (waking the engine)
  // has returned before the engine goes. Deliveries not started yet are
  // left to the next start (they are durable, and sent again under the
  // same webhook-id), so a hanging endpoint holds the drain up for one
  // timeout at most.
  if (notify_lanes_) {
    notify_lanes_->stop(/*drop_waiting=*/true);
    notify_lanes_->join();
  }
  if (lanes_) {
    lanes_->stop();
    lanes_->join();
  }
  if (mcp_) mcp_->stop();
  if (ingress_server_) ingress_server_->stop();
  if (operator_server_) operator_server_->stop();
  if (mcp_server_) mcp_server_->stop();
}

Node::~Node() { stop(); }

}  // namespace opgate::daemon
