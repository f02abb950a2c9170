// The stage for stateful unit tests: a real RocksDB store in a private
// temporary directory, an injected clock, a scripted Agents API and a
// scripted payment provider, and the daemon's own inbox, session sync,
// drainer and dispatcher wired as `opgate serve` wires them. Tests drive
// the dispatcher by hand (pump) instead of waiting for time.
#pragma once

#include <doctest/doctest.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent_sessions/session_sync.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/lanes.h"
#include "common/live.h"
#include "common/metrics.h"
#include "daemon/engine.h"
#include "ingress/inbox.h"
#include "operations/agent_platform.h"
#include "operations/payment_provider.h"
#include "operations/policy.h"
#include "outbox/drainer.h"
#include "outbox/notifier.h"
#include "store/rocksdb/rocks_storage.h"

namespace opgate::testing {

// Answers as scripted and records what it was asked. Thread-safe: the
// lanes call it from their threads.
class FakeAgents final : public operations::AgentPlatform {
 public:
  std::optional<Error> fetch_error;                      // for every session
  std::map<std::string, Error> session_errors;           // for one session
  std::map<std::string, operations::SessionView> views;  // per session; else `view`
  operations::SessionView view;
  int fetches = 0;
  std::map<std::string, int> fetches_of;
  Result<operations::SubmitVerdict> verdict = operations::SubmitVerdict::accepted;
  std::vector<std::string> idempotency_keys;
  std::vector<std::pair<pb::CallRef, pb::ToolResult>> submitted;
  // A session whose fetch waits until released (a slow platform call).
  std::string held_session;
  bool holding = false;

  Result<operations::SessionView> get_session(const std::string& session_id) override {
    std::unique_lock lock(mu);
    ++fetches;
    ++fetches_of[session_id];
    if (session_id == held_session) {
      holding = true;
      cv.notify_all();
      cv.wait(lock, [&] { return held_session.empty(); });
      holding = false;
    }
    if (fetch_error) return *fetch_error;
    if (auto it = session_errors.find(session_id); it != session_errors.end()) return it->second;
    if (auto it = views.find(session_id); it != views.end()) return it->second;
    return view;
  }
  Result<operations::SubmitVerdict> submit_result(const std::string&, const pb::CallRef& ref,
                                                  const pb::ToolResult& result,
                                                  const std::string& key) override {
    std::lock_guard lock(mu);
    idempotency_keys.push_back(key);
    submitted.emplace_back(ref, result);
    return verdict;
  }
  Result<std::string> get_turns(const std::string&) override { return std::string("{}"); }
  Result<operations::Page> get_items(const std::string&, const std::string& after, int) override {
    std::lock_guard lock(mu);
    ++item_fetches;
    return items_after ? items_after(after) : items_page;
  }
  void wait_until_holding() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return holding; });
  }
  void release() {
    std::lock_guard lock(mu);
    held_session.clear();
    cv.notify_all();
  }

  // What every page of a session's items answers, and how many were asked for.
  operations::Page items_page;
  std::function<operations::Page(const std::string& after)> items_after;  // else items_page
  int item_fetches = 0;
  std::mutex mu;
  std::condition_variable cv;
};

// The payment provider as the drainer sees it: answers from a script, in
// order (the last answer repeats), and records every request.
class FakeProvider final : public operations::PaymentProvider {
 public:
  std::deque<operations::PaymentResult> answers;
  std::deque<operations::LookupResult> lookups;
  std::vector<operations::PaymentRequest> executed;
  std::vector<operations::PaymentRequest> looked_up;
  bool throw_on_execute = false;
  // Runs while the provider is being called (another process acting then).
  std::function<void()> during_execute;
  // Runs while the provider's records are being read.
  std::function<void()> during_find;

  operations::PaymentResult execute(const operations::PaymentRequest& r) override {
    if (during_execute) during_execute();
    std::lock_guard lock(mu);
    executed.push_back(r);
    if (throw_on_execute) throw std::runtime_error("the provider client blew up");
    return next(answers, succeeded(r));
  }
  operations::LookupResult find(const operations::PaymentRequest& r) override {
    if (during_find) during_find();
    std::lock_guard lock(mu);
    looked_up.push_back(r);
    operations::LookupResult unreachable;
    unreachable.error = "no script";
    return next(lookups, unreachable);
  }
  static operations::PaymentResult succeeded(const operations::PaymentRequest& r) {
    return {operations::Verdict::succeeded, "re_" + r.operation_key, "succeeded", "", ""};
  }
  size_t calls() {
    std::lock_guard lock(mu);
    return executed.size();
  }

 private:
  template <typename T>
  T next(std::deque<T>& script, T fallback) {
    if (script.empty()) return fallback;
    T v = script.front();
    if (script.size() > 1) script.pop_front();
    return v;
  }
  std::mutex mu;
};

struct World {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("opgate-unit-" + crypto::random_hex(6));
  ManualClock clock{1'800'000'000'000};
  Metrics metrics;
  FakeAgents agents;
  FakeProvider provider;
  Live<operations::PolicyConfig> policy{operations::PolicyConfig{}};
  Live<outbox::NotifyConfig> notify{outbox::NotifyConfig{}};
  // What the notifier's HTTP client does; by default every endpoint says 204.
  outbox::HttpSend send = [](const http::ClientRequest&) -> Result<http::Response> {
    http::Response r;
    r.status = 204;
    return r;
  };
  std::unique_ptr<store::rocks::RocksStorage> storage;
  std::unique_ptr<ingress::Inbox> inbox;
  std::unique_ptr<Lanes> lanes;
  std::unique_ptr<agent_sessions::SessionSync> sync;
  std::unique_ptr<outbox::Drainer> drainer;
  std::unique_ptr<Lanes> notify_lanes;
  std::unique_ptr<outbox::Notifier> notifier;
  std::unique_ptr<daemon::Engine> engine;

  explicit World(store::rocks::OpenOptions options = {},
                 operations::PolicyConfig policy_config = {}) {
    policy.set(std::move(policy_config));
    options.clock = &clock;
    open(options);
  }

  void open(store::rocks::OpenOptions options) {
    options.clock = &clock;
    auto opened = store::rocks::RocksStorage::open(dir.string(), options, clock);
    REQUIRE_MESSAGE(opened.ok(), opened.error().message);
    storage = std::move(*opened);
    auto in = ingress::Inbox::open(*storage, clock);
    REQUIRE(in.ok());
    inbox = std::move(*in);
    lanes = std::make_unique<Lanes>("test-lane", 4, 256);
    sync = std::make_unique<agent_sessions::SessionSync>(*storage, *inbox, agents, policy, metrics,
                                                         clock, [] { return 0.0; });
    outbox::DrainerOptions d;
    d.claim_lease_ms = 30'000;
    drainer = std::make_unique<outbox::Drainer>(
        *storage, *lanes, provider, agents, policy, metrics, clock, [] { return 0.0; }, d);
    engine =
        std::make_unique<daemon::Engine>(*storage, *sync, *drainer, *lanes, clock,
                                         daemon::Engine::Options{std::chrono::milliseconds(200),
                                                                 std::chrono::seconds(0),
                                                                 std::chrono::seconds(3600),
                                                                 {}});
    notify_lanes = std::make_unique<Lanes>("test-notify", 4, 256);
    notifier = std::make_unique<outbox::Notifier>(
        *storage, *notify_lanes, notify, metrics, clock, [] { return 0.0; },
        [this](const http::ClientRequest& r) { return send(r); });
    engine->notify_with(*notifier, operations::AttentionPolicy{});
    engine->escalate_with(policy);
  }

  void close() {
    engine.reset();
    if (lanes) lanes->wait_idle();
    if (notify_lanes) notify_lanes->wait_idle();
    notifier.reset();
    notify_lanes.reset();
    drainer.reset();
    sync.reset();
    lanes.reset();
    inbox.reset();
    storage.reset();
  }

  // Reopens the same data directory, as a restart does.
  void restart(store::rocks::OpenOptions options = {}) {
    close();
    open(options);
  }

  ~World() {
    close();
    std::filesystem::remove_all(dir);
  }

  // Runs dispatcher passes until nothing is left to hand out at this time.
  void pump() {
    for (int i = 0; i < 100; ++i) {
      const size_t work = engine->pass();
      lanes->wait_idle();
      notify_lanes->wait_idle();
      if (work == 0) return;
    }
    FAIL("the dispatcher never ran out of work");
  }

  void seed_order(const std::string& id, int64_t amount = 2500,
                  const std::string& owner = "demo-user", const std::string& currency = "USD") {
    pb::Order order;
    order.set_order_id(id);
    order.set_owner(owner);
    order.set_amount_minor(amount);
    order.set_currency(currency);
    order.set_payment_intent("pi_" + id);
    order.set_customer("cus_" + owner);
    order.set_payment_method("visa ending 4242");
    order.set_status(pb::ORDER_PAID);
    order.set_placed_at(clock.now_s() - 60);
    REQUIRE(storage
                ->transact([&](store::Transaction& txn) {
                  txn.put_order(order);
                  return Status::Ok();
                })
                .ok());
  }

  void webhook(const std::string& id, const std::string& session) {
    ingress::Envelope e{"evt_" + id, std::string(ingress::kActionRequired), session};
    REQUIRE(inbox->accept("agents", id, "{}" + id, e).ok());
  }

  pb::Operation operation(const std::string& key) {
    auto op = storage->reader().operation(key);
    REQUIRE(op.ok());
    REQUIRE_MESSAGE(op->has_value(), "no operation " << key);
    return **op;
  }

  std::optional<pb::ToolCall> call(const std::string& session, const std::string& turn,
                                   const std::string& call_id) {
    pb::CallRef ref;
    ref.set_session_id(session);
    ref.set_turn_id(turn);
    ref.set_call_id(call_id);
    auto c = storage->reader().call(ref);
    REQUIRE(c.ok());
    return *c;
  }

  std::vector<store::OutboxEntry> due(int64_t at_ms) {
    auto d = storage->reader().due(store::Queue::work, at_ms, 1000, {});
    REQUIRE(d.ok());
    return *d;
  }
};

}  // namespace opgate::testing
