// A running opgate node: every part `opgate serve` is made of, as members
// built in order by start() (the store, the adapters, the work that runs on
// lanes, the dispatcher, the listeners) and stopped in reverse by drain()
// or, on any other way out, by the destructor. reload() applies what a
// SIGHUP may change. One controlling thread calls start, reload and drain;
// the parts are thread-safe where they say so.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "agent_sessions/session_sync.h"
#include "common/clock.h"
#include "common/descriptors.h"
#include "common/lanes.h"
#include "common/live.h"
#include "common/metrics.h"
#include "console/console.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/engine.h"
#include "daemon/leadership.h"
#include "daemon/service_manager.h"
#include "daemon/store_factory.h"
#include "http/router.h"
#include "http/server.h"
#include "ingress/inbox.h"
#include "ingress/webhook_handler.h"
#include "mcp/front_door.h"
#include "operations/agent_platform.h"
#include "operations/order_service.h"
#include "operations/payment_provider.h"
#include "operator_api/api.h"
#include "outbox/drainer.h"
#include "outbox/notifier.h"

namespace opgate::daemon {

class Node {
 public:
  // Builds every part and starts serving; an error says why the node
  // cannot start (the daemon exits 2).
  static Result<std::unique_ptr<Node>> start(const Config& config, const ServeOptions& options);
  // Stops whatever still runs, in reverse order of building.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // SIGHUP: reads the configuration file again and applies what may change
  // live (tokens, webhook secrets, policy, notification endpoints, TLS
  // certificates, log level). An invalid file changes nothing and is
  // logged; keys that need a restart are named and keep their value.
  void reload(const std::string& config_path);

  // Stops accepting, answers or refuses what is in flight, lets the lanes
  // finish their work, and stops. Returns the exit status: 0, or
  // kExitStoreFailed when the store failed.
  int drain(bool store_failed);

 private:
  explicit Node(const Config& config);
  Status open_store();
  Status build_adapters();
  Status build_work();
  Status build_notifications();
  Status build_listeners();
  void build_mcp();
  Status listen(const ServeOptions& options);
  void stop();

  Config config_;
  SystemClock system_clock_;
  Metrics metrics_;
  DescriptorPlan fds_;
  OpenedStore opened_;
  // A shared store's clock (the database's), or this node's.
  const Clock* clock_ = &system_clock_;
  bool shared_store_ = false;
  std::unique_ptr<ingress::Inbox> inbox_;

  std::unique_ptr<operations::AgentPlatform> agents_;
  std::unique_ptr<operations::PaymentProvider> payments_;
  std::unique_ptr<operations::OrderService> order_service_;
  std::unique_ptr<operations::PaymentProvider> cancelling_;
  std::unique_ptr<operations::PaymentProvider> declared_;
  operations::PaymentProvider* provider_ = nullptr;

  Random random_;
  Live<operations::PolicyConfig> policy_;
  Live<operator_api::Principals> principals_;
  Live<outbox::NotifyConfig> notify_;
  std::unique_ptr<Lanes> lanes_;
  std::unique_ptr<agent_sessions::SessionSync> sessions_;
  std::unique_ptr<outbox::Drainer> drainer_;
  std::optional<Leadership> leadership_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Lanes> notify_lanes_;
  std::unique_ptr<outbox::Notifier> notifier_;
  bool listening_to_store_ = false;

  std::unique_ptr<ingress::WebhookHandler> webhooks_;
  http::Router ingress_router_;
  std::unique_ptr<http::Server> ingress_server_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<operator_api::ApiDeps> api_deps_;
  std::unique_ptr<console::Console> console_;
  http::Router operator_router_;
  std::unique_ptr<http::Server> operator_server_;
  // The MCP front door, when [mcp] listen is set.
  Live<mcp::Access> mcp_access_;
  std::unique_ptr<mcp::FrontDoor> mcp_;
  std::unique_ptr<http::Server> mcp_server_;
  std::string mcp_url_;  // what minted tokens' capability URLs start with
  // notify.console_url when the file names none: the console served here.
  std::string console_default_;
  // How long one execution may take, as the claim lease was sized at start.
  const int64_t execution_budget_ms_;
  std::unique_ptr<Watchdog> watchdog_;
  bool stopped_ = false;
};

}  // namespace opgate::daemon
