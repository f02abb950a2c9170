#include "daemon/daemon.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "adapters/agents/agents_client.h"
#include "adapters/payments/provider.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "common/version.h"
#include "daemon/service_manager.h"
#include "http/router.h"
#include "http/server.h"
#include "ingress/inbox.h"
#include "ingress/webhook_handler.h"
#include "operations/repository.h"
#include "operator/api.h"
#include "outbox/drainer.h"
#include "outbox/outbox.h"
#include "store/journal.h"
#include "worker/engine.h"
#include "worker/orders.h"
#include "worker/session_sync.h"

namespace opgate::daemon {

namespace {

Status write_ports_file(const std::string& path, uint16_t ingress, uint16_t op) {
  return write_file_atomically(
      path, fmt::format(R"({{"ingress":{},"operator":{}}})", ingress, op) + "\n");
}

}  // namespace

int serve(const Config& config, const ServeOptions& options) {
  // Taken by wait_for_stop_signal below; blocked before any thread starts.
  const sigset_t signals = block_stop_signals();

  SystemClock clock;
  Metrics metrics;
  metrics.info("opgate_build_info", "The running opgate's version and git revision.",
               {{"version", std::string(kVersion)}, {"revision", std::string(kRevision)}});
  store::OpenOptions store_options;
  store_options.inbox_retention_ms = config.inbox_retention_s * 1000;
  store_options.clock = &clock;
  auto store = store::Store::open(config.data_dir, store_options);
  if (!store) {
    spdlog::critical("cannot start: {}", store.error().message);
    return 2;
  }
  auto& db = **store;
  if (!config.orders_seed_file.empty()) {
    auto n = worker::import_orders_file(db, config.orders_seed_file, clock.now_ms());
    if (!n) {
      spdlog::critical("cannot start: {}", n.error().message);
      return 2;
    }
    spdlog::info("seeded {} order(s) from {}", *n, config.orders_seed_file);
  }
  auto journal = store::Journal::open(db, clock);
  if (!journal) {
    spdlog::critical("cannot start: {}", journal.error().message);
    return 2;
  }
  ingress::Inbox inbox(db, clock);
  outbox::Outbox outbox(db);

  auto agents = adapters::make_agents_http_client(
      {config.agent.base_url, config.agent.secret, config.agent.timeout_ms, config.agent.ca_file});
  auto provider =
      adapters::make_stripe_provider({config.payments.base_url, config.payments.secret,
                                      config.payments.timeout_ms, config.payments.ca_file});

  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  auto dist = std::make_shared<std::uniform_real_distribution<double>>(0.0, 1.0);
  // The session sync and the drainer each lock their own use of it.
  auto rng_mu = std::make_shared<std::mutex>();
  Random random = [rng, dist, rng_mu] {
    std::lock_guard lock(*rng_mu);
    return (*dist)(*rng);
  };
  worker::SessionSync sessions(**journal, inbox, outbox, *agents, config.policy, metrics, random);
  outbox::Drainer drainer(**journal, outbox, *provider, *agents, metrics, random);
  if (Status s = drainer.recover_after_restart(); !s) {
    spdlog::critical("cannot start: {}", s.error().message);
    return 2;
  }
  worker::Engine engine(
      sessions, drainer,
      {std::chrono::milliseconds(200), std::chrono::seconds(config.sweep_interval_s),
       std::chrono::seconds(config.sweep_window_s)});

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
  metrics.gauge("opgate_synced_writes_total",
                [&] { return static_cast<double>(db.synced_writes()); });
  metrics.gauge("opgate_wal_fsyncs_total", [&] { return static_cast<double>(db.wal_syncs()); });
  // Oldest outcome_unknown age and how many need a person; computed on read.
  auto unknown_stats = [&db, &clock, attention = config.attention] {
    std::pair<double, double> out{0, 0};
    auto keys = operations::keys_in_state(db, operations::State::outcome_unknown, 100000);
    if (!keys) return out;
    for (const auto& k : *keys) {
      auto op = operations::load(db, k);
      if (!op || !op->has_value()) continue;
      out.first = std::max(out.first, (clock.now_ms() - (*op)->unknown_since_ms()) / 1000.0);
      if (outbox::needs_attention(**op, clock.now_ms(), attention)) out.second += 1;
    }
    return out;
  };
  metrics.gauge("opgate_oldest_outcome_unknown_seconds", [=] { return unknown_stats().first; });
  metrics.gauge("opgate_operations_needing_attention", [=] { return unknown_stats().second; });
  metrics.gauge_family(
      "opgate_operations",
      [&] {
        std::map<std::string, double> out;
        for (auto st :
             {operations::State::pending, operations::State::approved, operations::State::executing,
              operations::State::outcome_unknown, operations::State::settled}) {
          auto n = operations::count_in_state(db, st);
          out[std::string(operations::to_string(st))] = n ? static_cast<double>(*n) : 0.0;
        }
        return out;
      },
      "state");

  // Work queued by a group commit wakes the worker at once.
  inbox.on_queued([&engine] { engine.wake(); });
  ingress::IngressConfig ingress_config{config.sources, config.timestamp_tolerance_s,
                                        config.max_backlog,
                                        std::chrono::milliseconds(config.reject_cooldown_ms)};
  ingress::WebhookHandler webhooks(ingress_config, inbox, clock, metrics);
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
  ingress_options.max_connections = static_cast<size_t>(config.max_connections);
  // Handlers never block: an accepted event is answered by the inbox's
  // committer after its group commit, so one thread per core suffices.
  ingress_options.threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  http::Server ingress_server(ingress_options, [&](http::Request&& r, http::Respond respond) {
    ingress_router.dispatch(std::move(r), std::move(respond));
  });

  std::atomic<bool> ready{false};
  operator_api::ApiDeps deps{**journal, outbox,          sessions,          drainer,
                             *agents,   metrics,         config.principals, [&] { engine.wake(); },
                             ready,     config.attention};
  http::Router operator_router = operator_api::make_router(deps);
  http::ServerOptions operator_options;
  operator_options.name = "operator";
  operator_options.listen = config.operator_listen;
  operator_options.threads = 8;
  http::Server operator_server(operator_options,
                               [&](http::Request&& r) { return operator_router.dispatch(r); });

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
  engine.start();
  ready = true;
  if (!options.ports_file.empty()) {
    if (Status s = write_ports_file(options.ports_file, *ingress_port, *operator_port); !s) {
      spdlog::critical("{}", s.error().message);
      return 2;
    }
  }
  spdlog::info("listening: webhooks on port {}, operator API on port {}, data in {}", *ingress_port,
               *operator_port, config.data_dir);
  notify_ready(
      fmt::format("webhooks on port {}, operator API on port {}", *ingress_port, *operator_port));
  Watchdog watchdog(
      operator_health_check(config.operator_listen, *operator_port, std::chrono::seconds(2)));

  const int sig = wait_for_stop_signal(signals);
  spdlog::info("signal {} received; draining", sig);
  notify_stopping("draining");
  watchdog.stop();
  ready = false;
  webhooks.set_draining(true);
  ingress_server.drain(std::chrono::seconds(10));
  // Answers whatever still waits for its group commit while the connections
  // it answers to can still be written.
  inbox.stop();
  operator_server.drain(std::chrono::seconds(10));
  engine.stop();
  ingress_server.stop();
  operator_server.stop();
  spdlog::info("drained; exiting");
  return 0;
}

}  // namespace opgate::daemon
