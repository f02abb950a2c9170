#include "daemon/daemon.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include "adapters/agents/agents_http_client.h"
#include "adapters/orders/http_order_service.h"
#include "adapters/payments/stripe_provider.h"
#include "agent_sessions/session_sync.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/descriptors.h"
#include "common/files.h"
#include "common/lanes.h"
#include "common/live.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/signals.h"
#include "common/version.h"
#include "console/console.h"
#include "daemon/engine.h"
#include "daemon/metrics_catalogue.h"
#include "daemon/service_manager.h"
#include "daemon/store_factory.h"
#include "http/router.h"
#include "http/server.h"
#include "ingress/inbox.h"
#include "ingress/webhook_handler.h"
#include "operations/attention.h"
#include "operations/decisions.h"
#include "operations/orders.h"
#include "operations/state_machine.h"
#include "operator_api/api.h"
#include "outbox/drainer.h"
#include "store/rocksdb/rocks_storage.h"

namespace opgate::daemon {

namespace {

Status write_ports_file(const std::string& path, uint16_t ingress, uint16_t op) {
  return write_file_atomically(
      path, fmt::format(R"({{"ingress":{},"operator":{}}})", ingress, op) + "\n");
}

// Gauges read when /metrics is scraped: each is a counter kept in step with
// the writes or an in-memory value, never a scan of history.
void register_gauges(Metrics& metrics, store::Storage& storage, store::rocks::RocksStorage* rocks,
                     ingress::Inbox& inbox, const Clock& clock,
                     operations::AttentionPolicy attention) {
  metrics.gauge("opgate_inbox_backlog", [&] { return static_cast<double>(inbox.backlog()); });
  // Group commit: synced writes of new webhook events, and the events in them.
  metrics.gauge("opgate_inbox_group_commits_total",
                [&] { return static_cast<double>(inbox.group_commits()); });
  metrics.gauge("opgate_inbox_group_commit_events_total",
                [&] { return static_cast<double>(inbox.committed_events()); });
  metrics.gauge("opgate_inbox_events_per_group_commit", [&] {
    const auto commits = inbox.group_commits();
    return commits == 0 ? 0.0 : static_cast<double>(inbox.committed_events()) / commits;
  });
  if (rocks) {  // the embedded backend's own group commit
    metrics.gauge("opgate_journal_commits_total",
                  [rocks] { return static_cast<double>(rocks->journal().commits()); });
    metrics.gauge("opgate_journal_transactions_total",
                  [rocks] { return static_cast<double>(rocks->journal().transactions()); });
  }
  metrics.gauge("opgate_synced_writes_total",
                [&] { return static_cast<double>(storage.stats().synced_writes); });
  metrics.gauge("opgate_wal_fsyncs_total",
                [&] { return static_cast<double>(storage.stats().wal_syncs); });
  // The unknown operations are few (an alert fires long before there are
  // many); they are read from the state index, never the settled history.
  // A gauge whose records cannot be read is NaN (an alert on it neither
  // fires nor clears by mistake), logged and counted.
  auto unreadable = [&metrics](const char* gauge, const Error& e) {
    spdlog::warn("metrics: cannot read {}: {}", gauge, e.message);
    metrics.inc("opgate_metric_read_errors_total", {{"gauge", gauge}});
    return std::numeric_limits<double>::quiet_NaN();
  };
  auto unknown_stats = [&storage, &clock, attention, unreadable] {
    std::pair<double, double> out{0, 0};
    store::OperationQuery q;
    q.state = pb::STATE_OUTCOME_UNKNOWN;
    q.limit = 10000;
    auto page = storage.reader().operations(q);
    if (!page) {
      const double nan = unreadable("opgate_oldest_outcome_unknown_seconds", page.error());
      return std::pair<double, double>{nan, nan};
    }
    const int64_t now = clock.now_ms();
    for (const auto& op : page->operations) {
      out.first = std::max(out.first, (now - op.unknown_since_ms()) / 1000.0);
      if (operations::needs_attention(op, now, attention)) out.second += 1;
    }
    return out;
  };
  metrics.gauge("opgate_oldest_outcome_unknown_seconds", [=] { return unknown_stats().first; });
  metrics.gauge("opgate_operations_needing_attention", [=] { return unknown_stats().second; });
  metrics.gauge_family(
      "opgate_operations",
      [&storage, unreadable] {
        std::map<std::string, double> out;
        auto counts = storage.reader().counts();
        if (!counts) {
          unreadable("opgate_operations", counts.error());
          return out;
        }
        for (const auto& [state, n] : counts->operations)
          out[std::string(operations::to_string(static_cast<operations::State>(state)))] =
              static_cast<double>(n);
        return out;
      },
      "state");
  metrics.gauge_family(
      "opgate_operations_settled",
      [&storage, unreadable] {
        std::map<std::string, double> out;
        auto counts = storage.reader().counts();
        if (!counts) {
          unreadable("opgate_operations_settled", counts.error());
          return out;
        }
        for (const auto& [outcome, n] : counts->settled)
          out[std::string(operations::to_string(static_cast<operations::Outcome>(outcome)))] =
              static_cast<double>(n);
        return out;
      },
      "outcome");
  // The pending proposal that expires first is the oldest one: read through
  // the expiry index, one entry.
  metrics.gauge("opgate_oldest_pending_seconds", [&storage, &clock, unreadable] {
    auto first = storage.reader().expired_by(INT64_MAX, 1);
    if (!first) return unreadable("opgate_oldest_pending_seconds", first.error());
    if (first->empty()) return 0.0;
    auto op = storage.reader().operation(first->front());
    if (!op) return unreadable("opgate_oldest_pending_seconds", op.error());
    if (!*op) return 0.0;
    return std::max<double>(0, (clock.now_ms() - (*op)->created_at_ms()) / 1000.0);
  });
}

// Per configured endpoint (as reloaded): its backlog and whether it is healthy.
void register_notify_gauges(Metrics& metrics, store::Storage& storage,
                            Live<outbox::NotifyConfig>& notify) {
  auto read = [&storage, &notify](bool backlog) {
    std::map<std::string, double> out;
    for (const auto& e : notify.get()->endpoints) {
      auto state = storage.reader().endpoint_state(e.name);
      if (!state) continue;
      out[e.name] = backlog ? static_cast<double>(state->backlog())
                            : (state->failing() || state->disabled() ? 0.0 : 1.0);
    }
    return out;
  };
  metrics.gauge_family(
      "opgate_notification_backlog", [read] { return read(true); }, "endpoint");
  metrics.gauge_family(
      "opgate_notification_endpoint_healthy", [read] { return read(false); }, "endpoint");
  // Deliveries waiting for an endpoint this node's configuration does not
  // name (held, never dropped): by the kept standing of every endpoint.
  metrics.gauge_family(
      "opgate_notifications_held",
      [&storage, &notify] {
        std::map<std::string, double> out;
        auto states = storage.reader().endpoint_states();
        if (!states) return out;
        auto config = notify.get();
        for (const auto& st : *states) {
          bool known = false;
          for (const auto& e : config->endpoints) known = known || e.name == st.name();
          if (!known && st.backlog() > 0) out[st.name()] = static_cast<double>(st.backlog());
        }
        return out;
      },
      "endpoint");
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

// What SIGHUP can change without a restart, applied together.
struct Reloadable {
  Live<operations::PolicyConfig>& policy;
  Live<outbox::NotifyConfig>& notify;
  store::Storage& storage;
  bool shared_store;  // other nodes may have endpoints: always fan out
  Live<operator_api::Principals>& principals;
  ingress::WebhookHandler& webhooks;
  http::Server& ingress_server;
  http::Server& operator_server;
  std::string console_default;  // notify.console_url when the file names none
};

// Events are queued for fan-out while some endpoint may hear them: one of
// this node's, or, on a store other nodes share, one of theirs.
bool fans_out(bool shared_store, const outbox::NotifyConfig& notify) {
  return shared_store || !notify.endpoints.empty();
}

ingress::IngressConfig ingress_config_of(const Config& c) {
  return {c.sources, c.timestamp_tolerance_s, c.max_backlog,
          std::chrono::milliseconds(c.reject_cooldown_ms)};
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

// Reads the configuration file again and applies what may change live:
// tokens, webhook secrets, policy, TLS certificates, log level. An invalid
// file changes nothing; keys that need a restart are named and kept.
void reload(const std::string& path, Config& running, Reloadable& r) {
  auto fail = [](const std::string& why) {
    log_event(spdlog::level::err, "config.reload_failed",
              "the new configuration was not applied; the old one stays", {{"reason", why}});
  };
  auto next = load_config(path);
  if (!next) return fail(next.error().message);
  if (Status s = check_serviceable(*next); !s) return fail(s.error().message);
  for (const auto* tls : {&next->ingress_tls, &next->operator_tls})
    if (tls->enabled())
      if (Status s = http::check_tls_files(*tls); !s) return fail(s.error().message);
  const auto restart = keys_needing_restart(running, *next);
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
  if (ingress_tls) r.ingress_server.use_tls(ingress_tls);
  if (operator_tls) r.operator_server.use_tls(operator_tls);
  r.principals.set(next->principals);
  r.policy.set(next->policy);
  rebind_pending(r.storage, next->policy);
  auto notify = next->notify;
  if (notify.console_url.empty()) notify.console_url = r.console_default;
  // On before the new endpoints are live, off only after the last is gone.
  const bool fan_out = fans_out(r.shared_store, notify);
  if (fan_out) r.storage.fan_out_notifications(true);
  r.notify.set(notify);
  if (!fan_out) r.storage.fan_out_notifications(false);
  r.webhooks.set_config(ingress_config_of(*next));
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
  std::string needs_restart;
  for (const auto& k : restart) needs_restart += (needs_restart.empty() ? "" : ", ") + k;
  log_event(
      spdlog::level::info, "config.reloaded",
      fmt::format("configuration reloaded: {} token(s), {} webhook source(s), {} "
                  "notification endpoint(s)",
                  next->principals.size(), next->sources.size(), next->notify.endpoints.size()),
      {{"needs_restart", needs_restart}});
}

// Of the processes sharing a store, the one holding the "duties" lease
// expires pending operations and sweeps sessions for all (the others
// would only repeat it: both are safe twice, being transactions over
// locked records). It acts for two thirds of the lease after each renewal,
// so it stops before another can take the lease over. Dispatcher thread.
class Leadership {
 public:
  using Hold = std::function<Result<std::optional<int64_t>>(const std::string&, const std::string&,
                                                            int64_t)>;
  Leadership(Hold hold, int64_t ttl_ms, const Clock& clock)
      : hold_(std::move(hold)),
        holder_(fmt::format("{}-{}", ::getpid(), crypto::random_hex(6))),
        ttl_ms_(ttl_ms),
        clock_(clock) {}

  bool leads() {
    const int64_t now = clock_.monotonic_ms();
    if (now - last_try_ms_ >= ttl_ms_ / 3) {
      last_try_ms_ = now;
      auto token = hold_("duties", holder_, ttl_ms_);
      const bool held = token && token->has_value();
      if (held && **token != token_)
        spdlog::info("this node performs the shared duties (expiry, sweeps); lease token {}",
                     **token);
      if (!held && until_ms_ > now) spdlog::info("another node performs the shared duties now");
      if (!token) spdlog::warn("cannot renew the duties lease: {}", token.error().message);
      token_ = held ? **token : 0;
      until_ms_ = held ? now + ttl_ms_ * 2 / 3 : 0;
    }
    return now < until_ms_;
  }

 private:
  Hold hold_;
  std::string holder_;
  int64_t ttl_ms_;
  const Clock& clock_;
  int64_t last_try_ms_ = INT64_MIN / 2;
  int64_t until_ms_ = 0;
  int64_t token_ = 0;
};

}  // namespace

int serve(const Config& initial, const ServeOptions& options) {
  // Taken by wait_for_signal below; blocked before any thread starts.
  const sigset_t signals = block_daemon_signals();
  Config config = initial;
  set_log_level(config.log_level);
  if (Status s = check_serviceable(config); !s) {
    spdlog::critical("cannot start: {}", s.error().message);
    return 2;
  }
  if (config.data_dir_was_relative)
    spdlog::info("data_dir is relative: it resolves to {}, next to the config file",
                 config.data_dir);

  SystemClock system_clock;
  Metrics metrics;
  metrics.info("opgate_build_info", "The running opgate's version and git revision.",
               {{"version", std::string(kVersion)}, {"revision", std::string(kRevision)}});
  // Descriptors are shared out before anything opens one.
  const size_t open_files = raise_open_files_limit();
  const DescriptorPlan fds =
      plan_descriptors(open_files, static_cast<size_t>(config.max_connections), 1024);
  if (fds.capped)
    spdlog::warn(
        "only {} file descriptors are available: connections are capped at {} (webhooks) and {} "
        "(operator); raise LimitNOFILE to allow more",
        open_files, fds.ingress_connections, fds.operator_connections);
  // A store that stops accepting writes (a failed WAL sync makes RocksDB
  // read-only until it is opened again) cannot settle or answer anything:
  // the daemon stops and exits non-zero, so that the service manager starts
  // it again on what the disk holds (a fail-stop, as PostgreSQL does on a
  // failed fsync). Every retry after that is idempotent.
  auto opened =
      open_store(config, system_clock, fds.rocksdb_max_open_files, [](const std::string& why) {
        log_event(spdlog::level::critical, "store.read_only",
                  "the store stopped accepting writes; stopping so that the "
                  "service manager restarts opgate on what the disk holds",
                  {{"reason", why}});
        ::kill(::getpid(), SIGUSR1);
      });
  if (!opened) {
    spdlog::critical("cannot start: {}", opened.error().message);
    return 2;
  }
  store::Storage& storage = *opened->storage;
  // Time for everything from here: a shared store's (the database's clock,
  // which every node agrees on) or this node's.
  const Clock& clock = opened->clock ? *opened->clock : system_clock;
  if (!config.orders_seed_file.empty()) {
    auto orders = operations::read_orders_file(config.orders_seed_file);
    auto n = orders ? operations::import_orders(storage, std::move(*orders),
                                                "seed:" + config.orders_seed_file)
                    : Result<size_t>(orders.error());
    if (!n) {
      spdlog::critical("cannot start: {}", n.error().message);
      return 2;
    }
    spdlog::info("seeded {} order(s) from {}", *n, config.orders_seed_file);
  }
  // Other processes share a store that is not this node's own RocksDB.
  const bool shared_store = opened->rocks == nullptr;
  ingress::InboxOptions inbox_options;
  inbox_options.shared_store = shared_store;
  auto inbox = ingress::Inbox::open(storage, clock, inbox_options);
  if (!inbox) {
    spdlog::critical("cannot start: {}", inbox.error().message);
    return 2;
  }
  for (const auto& p : config.principals)
    if (p.owners.empty())
      spdlog::warn("operator token '{}' has no owner patterns: it can see and act on nothing",
                   p.name);

  auto agents = adapters::make_agents_http_client(
      {config.agent.base_url, config.agent.secret, config.agent.timeout_ms, config.agent.ca_file});
  auto payments =
      adapters::make_stripe_provider({config.payments.base_url, config.payments.secret,
                                      config.payments.timeout_ms, config.payments.ca_file});
  // orders.source = "http": the business's order service is read afresh at
  // each step, and cancellations go to it before the refund goes out.
  std::unique_ptr<operations::OrderService> order_service;
  std::unique_ptr<operations::PaymentProvider> cancelling;
  if (config.orders_source == "http") {
    order_service =
        adapters::make_http_order_service({config.orders.base_url, config.orders.secret,
                                           config.orders.timeout_ms, config.orders.ca_file});
    cancelling = adapters::make_cancelling_provider(*payments, *order_service);
  }
  operations::PaymentProvider* provider = cancelling ? cancelling.get() : payments.get();

  // Jitter for every backoff, shared by the threads that back off.
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
  Random random = [jitter] { return jitter->next(); };
  Live<operations::PolicyConfig> policy(config.policy);
  Live<operator_api::Principals> principals(config.principals);
  // Session syncs and outbox items run here, one lane per session,
  // operation or tool call; a slow one holds only its own lane.
  Lanes lanes("lane", 32, 1024);
  agent_sessions::SessionSync sessions(storage, **inbox, *agents, policy, metrics, clock, random,
                                       order_service.get());
  outbox::DrainerOptions drainer_options;
  // Longer than an execution can take: a cancellation at the order service
  // and then the refund.
  drainer_options.claim_lease_ms =
      config.payments.timeout_ms + (order_service ? config.orders.timeout_ms : 0) + 10'000;
  drainer_options.shared_store = shared_store;
  outbox::Drainer drainer(storage, lanes, *provider, *agents, policy, metrics, clock, random,
                          drainer_options, order_service.get());
  rebind_pending(storage, config.policy);
  if (Status s = drainer.recover_after_restart(); !s) {
    spdlog::critical("cannot start: {}", s.error().message);
    return 2;
  }
  std::optional<Leadership> leadership;
  if (opened->hold_lease) leadership.emplace(opened->hold_lease, 10'000, clock);
  Engine engine(storage, sessions, drainer, lanes, clock,
                {std::chrono::milliseconds(200), std::chrono::seconds(config.sweep_interval_s),
                 std::chrono::seconds(config.sweep_window_s),
                 leadership ? std::function<bool()>([&leadership] { return leadership->leads(); })
                            : std::function<bool()>()});
  lanes.on_done([&engine] { engine.wake(); });
  // Notifications run on lanes of their own: a slow endpoint never holds
  // up executions or tool results.
  Live<outbox::NotifyConfig> notify(config.notify);
  // Kept for replay always; queued for fan-out only while an endpoint may
  // hear them.
  storage.fan_out_notifications(fans_out(shared_store, config.notify));
  Lanes notify_lanes("notify", 8, 1024);
  outbox::Notifier notifier(storage, notify_lanes, notify, metrics, clock, random);
  notifier.set_shared_store(shared_store);
  notify_lanes.on_done([&engine] { engine.wake(); });
  engine.notify_with(notifier, config.attention);

  register_gauges(metrics, storage, opened->rocks, **inbox, clock, config.attention);
  std::vector<std::string> source_names;
  for (const auto& s : config.sources) source_names.push_back(s.name);
  std::vector<std::string> endpoint_names;
  for (const auto& e : config.notify.endpoints) endpoint_names.push_back(e.name);
  describe_metrics(metrics, source_names, endpoint_names);
  register_notify_gauges(metrics, storage, notify);
  register_process_metrics(metrics);

  // Work queued by a group commit wakes the dispatcher at once; so does work
  // another node committed to a shared store.
  (*inbox)->on_queued([&engine] { engine.wake(); });
  if (opened->listen) opened->listen([&engine] { engine.wake(); });
  // Before the engine goes, on every way out.
  std::shared_ptr<void> unlisten(nullptr, [&](void*) {
    if (opened->stop_listening) opened->stop_listening();
  });
  ingress::WebhookHandler webhooks(ingress_config_of(config), **inbox, clock, metrics);
  http::Router ingress_router;
  ingress_router.add_async(
      "POST", "/v1/webhooks/{source}",
      [&](http::Request&& req, const http::PathParams& p, http::Respond respond) {
        webhooks.handle(std::move(req), p.at("source"), std::move(respond));
      });
  http::ServerOptions ingress_options;
  ingress_options.listen = config.ingress_listen;
  ingress_options.name = "ingress";
  ingress_options.max_body_bytes = config.max_body_bytes;
  ingress_options.header_timeout = std::chrono::milliseconds(config.header_timeout_ms);
  ingress_options.body_timeout = std::chrono::milliseconds(config.body_timeout_ms);
  ingress_options.max_connections = fds.ingress_connections;
  ingress_options.tls = config.ingress_tls;
  // Handlers never block: an accepted event is answered after its group
  // commit, on these threads, so one thread per core suffices.
  ingress_options.threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  http::Server ingress_server(ingress_options, [&](http::Request&& r, http::Respond respond) {
    ingress_router.dispatch(std::move(r), std::move(respond));
  });
  // The committer hands each batch's answers to the ingress threads; on any
  // way out of this scope it stops (answering what it holds) before the
  // server it posts them to goes.
  (*inbox)->answer_with([&ingress_server](std::function<void()> answers) {
    ingress_server.post(std::move(answers));
  });
  std::shared_ptr<void> stop_inbox_first(nullptr, [&](void*) { (*inbox)->stop(); });

  std::atomic<bool> ready{false};
  store::rocks::RocksStorage* rocks = opened->rocks;
  metrics.gauge("opgate_ready", [&ready, rocks] {
    return ready.load() && !(rocks && rocks->journal().failing()) ? 1.0 : 0.0;
  });
  operator_api::ApiDeps deps{storage,    sessions,         drainer,
                             *agents,    metrics,          clock,
                             principals, policy,           [&] { engine.wake(); },
                             ready,      config.attention, &notifier,
                             &notify};
  deps.orders = order_service.get();
  // The approval console: pages under /console/, and the API for them under
  // /console/api/ with its session cookie.
  console::Options console_options = config.console;
  console_options.tls = config.operator_tls.enabled();  // cookies are Secure under TLS
  console::Console console(console_options, principals, clock);
  if (config.console.enabled)
    deps.console_auth = [&console](const http::Request& r, const operator_api::Principals& p) {
      return console.authenticate(r, p);
    };
  http::Router operator_router = operator_api::make_router(deps);
  if (config.console.enabled) console.add_routes(operator_router);
  http::ServerOptions operator_options;
  operator_options.name = "operator";
  operator_options.listen = config.operator_listen;
  operator_options.threads = 32;
  operator_options.max_connections = fds.operator_connections;
  operator_options.tls = config.operator_tls;
  http::Server operator_server(operator_options, [&](http::Request&& r) {
    auto response = operator_router.dispatch(r);
    console::Console::finish(r, response);
    return response;
  });

  metrics.gauge("opgate_ingress_connections",
                [&] { return static_cast<double>(ingress_server.open_connections()); });
  auto ingress_port = ingress_server.start();
  if (!ingress_port) {
    spdlog::critical("cannot start: {}", ingress_port.error().message);
    return 2;
  }
  auto operator_port = operator_server.start();
  if (!operator_port) {
    spdlog::critical("cannot start: {}", operator_port.error().message);
    return 2;
  }
  // Notifications link to the console this daemon serves, unless the
  // configuration names the address people reach it at.
  const std::string console_default = default_console_url(config, *operator_port);
  if (config.notify.console_url.empty() && !console_default.empty()) {
    auto with_link = config.notify;
    with_link.console_url = console_default;
    notify.set(with_link);
  }
  engine.start();
  ready = true;
  if (!options.ports_file.empty()) {
    if (Status s = write_ports_file(options.ports_file, *ingress_port, *operator_port); !s) {
      spdlog::critical("{}", s.error().message);
      return 2;
    }
  }
  spdlog::info("listening: webhooks on port {}, operator API on port {}, data in {}", *ingress_port,
               *operator_port, opened->description);
  notify_ready(
      fmt::format("webhooks on port {}, operator API on port {}", *ingress_port, *operator_port));
  // Healthy: the dispatcher keeps passing, the store can be written and,
  // over plain HTTP, the operator listener answers.
  auto listener_answers =
      config.operator_tls.enabled()
          ? std::function<bool()>([] { return true; })
          : operator_health_check(config.operator_listen, *operator_port, std::chrono::seconds(2));
  Watchdog watchdog([&, listener_answers] {
    return engine.alive(std::chrono::seconds(5)) && storage.check_writable().ok() &&
           listener_answers();
  });

  Reloadable reloadable{policy,   notify,         storage,         shared_store,   principals,
                        webhooks, ingress_server, operator_server, console_default};
  int sig = 0;
  while ((sig = wait_for_signal(signals)) == SIGHUP)
    reload(options.config_path, config, reloadable);
  const bool store_failed = sig == SIGUSR1;
  spdlog::info("{}; draining", store_failed ? std::string("the store failed")
                                            : fmt::format("signal {} received", sig));
  notify_stopping("draining");
  watchdog.stop();
  ready = false;
  webhooks.set_draining(true);
  ingress_server.drain(std::chrono::seconds(10));
  // Answers whatever still waits for its group commit while the connections
  // it answers to can still be written.
  (*inbox)->stop();
  operator_server.drain(std::chrono::seconds(10));
  unlisten.reset();
  engine.stop();
  lanes.stop();
  lanes.wait_idle();
  notify_lanes.stop();
  notify_lanes.wait_idle();
  ingress_server.stop();
  operator_server.stop();
  if (store_failed) {
    spdlog::critical("drained; exiting with status {} for a restart", kExitStoreFailed);
    return kExitStoreFailed;
  }
  spdlog::info("drained; exiting");
  return 0;
}

}  // namespace opgate::daemon
