// Outbound notifications against a scripted HTTP client: the signature
// verifies with the ingress verifier, ids are stable across retries, the
// schedule and Retry-After are kept, 410 disables, an exhausted schedule
// marks the endpoint failing, each operation's events arrive in order, and a
// slow endpoint holds up no settlement.
#include "outbox/notifier.h"

#include <doctest/doctest.h>
#include <fmt/ranges.h>

#include <boost/json.hpp>
#include <condition_variable>
#include <set>

#include "common/webhook_signature.h"
#include "operations/decisions.h"
#include "operations/notifications.h"
#include "world.h"

using namespace opgate;
namespace json = boost::json;

namespace {

constexpr const char* kKey = "demo-user:ORDER-100:full-refund:v1";
const std::string kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

outbox::NotifyEndpoint endpoint(const std::string& name, std::set<std::string> events = {}) {
  outbox::NotifyEndpoint e;
  e.name = name;
  e.url = "http://receiver.test/hooks/" + name;
  e.raw_key = *webhooks::decode_secret(kSecret);
  e.events = std::move(events);
  return e;
}

struct Sent {
  std::string endpoint, webhook_id, timestamp, signature, type, body;
};

struct World : testing::World {
  std::mutex mu;
  std::vector<Sent> sent;
  // Answers by attempt, per webhook-id: the last one repeats; default 204.
  std::map<std::string, std::deque<int>> script;
  int answer = 204;
  std::string retry_after;
  std::function<void()> during_send;  // runs as a request goes out

  explicit World(std::vector<outbox::NotifyEndpoint> endpoints = {endpoint("ops")}) {
    outbox::NotifyConfig c;
    c.console_url = "https://console.test/console";
    c.endpoints = std::move(endpoints);
    notify.set(c);
    send = [this](const http::ClientRequest& r) -> Result<http::Response> {
      if (during_send) during_send();
      std::lock_guard lock(mu);
      json::error_code ec;
      auto v = json::parse(r.body, ec);
      std::string type = !ec && v.is_object() && v.as_object().contains("type")
                             ? std::string(v.at("type").as_string())
                             : "slack";
      auto sig = r.headers.find("webhook-signature");
      sent.push_back({r.url.substr(r.url.rfind('/') + 1), r.headers.at("webhook-id"),
                      r.headers.at("webhook-timestamp"), sig == r.headers.end() ? "" : sig->second,
                      type, r.body});
      int status = answer;
      if (auto it = script.find(r.headers.at("webhook-id")); it != script.end()) {
        status = it->second.front();
        if (it->second.size() > 1) it->second.pop_front();
      }
      if (status == 0) return make_error(errc::timeout, "the endpoint did not answer in time");
      http::Response res;
      res.status = status;
      if (!retry_after.empty()) res.headers["Retry-After"] = retry_after;
      return res;
    };
    seed_order("ORDER-100");
    REQUIRE(sync->bind("sess_1", "demo-user", "admin").ok());
  }

  // With wait_for_notifications false, only the work lanes are waited for.
  void propose(bool wait_for_notifications = true) {
    operations::SessionView v;
    v.required_actions = {{"call_1", "turn_1", "request_refund", R"({"order_id":"ORDER-100"})"}};
    {
      std::lock_guard lock(agents.mu);
      agents.views["sess_1"] = v;
    }
    webhook("msg_1", "sess_1");
    if (wait_for_notifications) return pump();
    for (int i = 0; i < 20; ++i) {
      engine->pass();
      lanes->wait_idle();
    }
  }

  void approve() {
    operations::Principal alice;
    alice.name = "alice";
    alice.scopes = {"operations:approve"};
    alice.owners = {"*"};
    alice.max_amount_minor = {{"USD", 100000}};
    auto op = operation(kKey);
    REQUIRE(storage
                ->transact([&](store::Transaction& txn) -> Status {
                  OPGATE_ASSIGN_OR_RETURN(auto a, operations::approve(txn, kKey, alice,
                                                                      {op.proposal().amount_minor(),
                                                                       op.proposal().currency(),
                                                                       op.fingerprint(),
                                                                       {},
                                                                       {}},
                                                                      *policy.get()));
                  return Status::Ok();
                })
                .ok());
  }

  // Pumps until no notification is left to send soon: a delivery waiting
  // for an earlier one of its operation is tried again a millisecond
  // later, which the test's clock reaches only when moved.
  void pump_all() {
    for (int i = 0; i < 50; ++i) {
      pump();
      auto soon = storage->reader().due(store::Queue::notifications, clock.now_ms() + 10, 10, {});
      REQUIRE(soon.ok());
      if (soon->empty()) return;
      clock.advance_ms(1);
    }
    FAIL("notifications never stopped coming due");
  }

  void deny() {
    operations::Principal alice;
    alice.name = "alice";
    alice.scopes = {"operations:approve"};
    alice.owners = {"*"};
    REQUIRE(storage
                ->transact([&](store::Transaction& txn) -> Status {
                  return operations::deny(txn, kKey, alice, "not eligible");
                })
                .ok());
  }

  // The types sent, as "a b c" (doctest prints strings, not vectors).
  std::string types_sent_to(const std::string& name) {
    std::string out;
    for (const auto& s : sent_to(name)) out += (out.empty() ? "" : " ") + s.type;
    return out;
  }

  std::vector<Sent> sent_to(const std::string& name) {
    std::lock_guard lock(mu);
    std::vector<Sent> out;
    for (const auto& s : sent)
      if (s.endpoint == name) out.push_back(s);
    return out;
  }
  pb::EndpointState state(const std::string& name) {
    return *storage->reader().endpoint_state(name);
  }
  size_t queued_deliveries() {
    return storage->reader().due(store::Queue::notifications, INT64_MAX, 1000, {})->size();
  }
};

}  // namespace

TEST_CASE(
    "a notification opgate signs verifies with the ingress verifier; its body carries the "
    "operation, the console link and the audit head") {
  World w;
  w.propose();
  auto sent = w.sent_to("ops");
  REQUIRE(sent.size() == 1);
  const auto& s = sent[0];
  CHECK(s.type == "operation.proposed");
  auto key = webhooks::decode_secret(kSecret);
  // The signature as sent, checked by the ingress's own verifier.
  CHECK(webhooks::verify({s.webhook_id, s.timestamp, s.signature, s.body}, {*key},
                         std::stoll(s.timestamp), 300)
            .ok());
  auto body = json::parse(s.body).as_object();
  CHECK(body.at("type").as_string() == "operation.proposed");
  const auto& data = body.at("data").as_object();
  CHECK(data.at("key").as_string() == kKey);
  CHECK(data.at("state").as_string() == "pending");
  CHECK(data.at("amount_minor").as_int64() == 2500);
  CHECK(data.at("console_url").as_string().find("/console/operations/demo-user%3AORDER-100") !=
        std::string::npos);
  const auto head = data.at("audit_head").as_object();
  auto records = w.storage->reader().audit_of(kKey);
  CHECK(head.at("seq").to_number<uint64_t>() == records->back().seq());
  CHECK(head.at("hash").as_string() == crypto::to_hex(records->back().hash()));
}

TEST_CASE("the signature the notifier sends is the one the ingress accepts") {
  auto e = endpoint("ops");
  pb::Notification n;
  n.set_type("operation.settled");
  n.set_event_id("evt_9_settled");
  n.set_webhook_id("msg_abc");
  n.set_operation_json(R"({"key":"k","amount_minor":1,"currency":"USD"})");
  auto req = outbox::delivery_request(e, n, "", 1'800'000'000);
  CHECK(webhooks::verify({req.headers.at("webhook-id"), req.headers.at("webhook-timestamp"),
                          req.headers.at("webhook-signature"), req.body},
                         {e.raw_key}, 1'800'000'000, 300)
            .ok());
  CHECK(webhooks::verify({req.headers.at("webhook-id"), req.headers.at("webhook-timestamp"),
                          req.headers.at("webhook-signature"), req.body + " "},
                         {e.raw_key}, 1'800'000'000, 300)
            .error()
            .code == "bad_signature");
}

TEST_CASE(
    "retries on 500, timeout and 429 keep the webhook-id, follow the schedule and "
    "Retry-After, with a fresh timestamp each time") {
  World w;
  w.answer = 500;
  w.propose();
  auto first = w.sent_to("ops");
  REQUIRE(first.size() == 1);
  const std::string id = first[0].webhook_id;
  w.script[id] = {500, 0, 429, 204};
  // The schedule: 5 s, then 300 s, then 1800 s (jitter is 0 here).
  w.clock.advance_ms(4999);
  w.pump();
  CHECK(w.sent_to("ops").size() == 1);
  w.clock.advance_ms(1);
  w.pump();
  CHECK(w.sent_to("ops").size() == 2);  // 500 again
  w.clock.advance_ms(300'000);
  w.pump();
  CHECK(w.sent_to("ops").size() == 3);  // timed out
  w.retry_after = "7200";               // the 429 asks for two hours, past the 1800 s wait
  w.clock.advance_ms(1'800'000);
  w.pump();
  CHECK(w.sent_to("ops").size() == 4);  // 429
  w.retry_after.clear();
  w.clock.advance_ms(1'800'000);
  w.pump();
  CHECK(w.sent_to("ops").size() == 4);  // not before Retry-After
  w.clock.advance_ms(5'400'000);
  w.pump();
  auto all = w.sent_to("ops");
  REQUIRE(all.size() == 5);
  for (const auto& s : all) CHECK(s.webhook_id == id);
  CHECK(all[0].timestamp != all[4].timestamp);
  CHECK(w.queued_deliveries() == 0);
  CHECK(w.metrics.counter_value("opgate_notifications_retried_total", {{"endpoint", "ops"}}) == 4);
  CHECK(w.metrics.counter_value("opgate_notifications_sent_total", {{"endpoint", "ops"}}) == 1);
  CHECK(w.state("ops").backlog() == 0);
}

TEST_CASE("410 Gone disables the endpoint: later events are not sent there") {
  World w({endpoint("ops"), endpoint("other")});
  w.answer = 410;
  w.propose();
  CHECK(w.state("ops").disabled());
  CHECK(w.state("other").disabled());
  w.answer = 204;
  w.approve();
  w.pump();
  CHECK(w.sent_to("ops").size() == 1);  // only the proposal, refused with 410
  REQUIRE(w.notifier->enable("ops").ok());
  w.clock.advance_ms(1000);
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(kKey));
                operations::emit(txn, *op, operations::notify::needs_attention);
                return Status::Ok();
              })
              .ok());
  w.pump();
  CHECK(w.sent_to("ops").size() == 2);
  CHECK(w.sent_to("other").size() == 1);
}

TEST_CASE("a delivery that uses up its schedule marks the endpoint failing; a success clears it") {
  World w;
  outbox::NotifyConfig c = *w.notify.get();
  c.retry_schedule_s = {1, 1};
  w.notify.set(c);
  w.answer = 503;
  w.propose();
  for (int i = 0; i < 3; ++i) {
    w.clock.advance_ms(1000);
    w.pump();
  }
  CHECK(w.sent_to("ops").size() == 3);  // first try and two retries
  CHECK(w.state("ops").failing());
  CHECK(w.queued_deliveries() == 0);
  CHECK(w.metrics.counter_value("opgate_notifications_failed_total", {{"endpoint", "ops"}}) == 1);
  w.answer = 204;
  w.approve();
  w.pump();
  CHECK_FALSE(w.state("ops").failing());
}

TEST_CASE("an operation's events reach an endpoint in order, also when the first is retried") {
  World w;
  w.answer = 500;
  w.propose();
  w.answer = 204;
  const std::string proposed = w.sent_to("ops").at(0).webhook_id;
  w.script[proposed] = {204};  // its second attempt succeeds
  w.approve();                 // approved, executing, settled follow while the proposal waits
  w.pump();
  for (const auto& s : w.sent_to("ops")) CHECK(s.type == "operation.proposed");
  w.clock.advance_ms(5000);
  w.pump();
  w.clock.advance_ms(10);
  w.pump();
  w.clock.advance_ms(10);
  w.pump();
  std::vector<std::string> types;
  for (const auto& s : w.sent_to("ops")) types.push_back(s.type);
  CAPTURE(fmt::format("{}", fmt::join(types, ", ")));
  CHECK(types == std::vector<std::string>{"operation.proposed", "operation.proposed",
                                          "operation.approved", "operation.settled"});
}

namespace {

// A delivery to `to` of operation i's proposal, as a fan-out queues it.
pb::OutboxItem delivery(const std::string& to, int i) {
  pb::OutboxItem item;
  item.set_kind(pb::OUTBOX_NOTIFY_DELIVERY);
  item.set_operation_key(fmt::format("demo-user:ORDER-{}:full-refund:v1", i));
  auto& n = *item.mutable_notification();
  n.set_type("operation.proposed");
  n.set_event_id(fmt::format("evt_{}_0", i));
  n.set_operation_json(
      json::serialize(json::object{{"key", item.operation_key()}, {"state", "pending"}}));
  n.set_endpoint(to);
  n.set_webhook_id(fmt::format("msg_{}_{}", to, i));
  return item;
}

// The World's sends to the endpoint "slow" hang until released; a send to
// "fast" wakes whoever waits for one.
struct HangingEndpoint {
  std::mutex m;
  std::condition_variable cv;
  bool released = false;
  std::condition_variable fast_sent;

  explicit HangingEndpoint(World& w) {
    auto inner = w.send;
    w.send = [this, inner](const http::ClientRequest& r) -> Result<http::Response> {
      if (r.url.ends_with("/slow")) {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return released; });
      }
      auto answer = inner(r);
      if (r.url.ends_with("/fast")) fast_sent.notify_all();
      return answer;
    };
  }
  void wait_for_fast(std::chrono::milliseconds at_most) {
    std::unique_lock lock(m);
    fast_sent.wait_for(lock, at_most);
  }
  void release() {
    {
      std::lock_guard lock(m);
      released = true;
    }
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("an endpoint that hangs holds up neither another endpoint nor the settlement") {
  World w({endpoint("slow"), endpoint("fast")});
  HangingEndpoint hang(w);
  w.propose(false);  // the slow endpoint's proposal is held now, in its lane
  w.approve();
  // Drive the payment outbox and the fast endpoint; never wait on "slow".
  for (int i = 0; i < 20; ++i) {
    w.engine->pass();
    w.lanes->wait_idle();
  }
  CHECK(w.operation(kKey).outcome() == pb::OUTCOME_SUCCEEDED);
  // Passes until the fast endpoint hears of the settlement, however slowly
  // its lane runs on a loaded machine; the deadline only ends a failing run.
  bool fast_settled = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fast_settled && std::chrono::steady_clock::now() < deadline) {
    w.engine->pass();
    for (const auto& s : w.sent_to("fast")) fast_settled |= s.type == "operation.settled";
    if (fast_settled) break;
    hang.wait_for_fast(std::chrono::milliseconds(10));
  }
  CHECK(fast_settled);
  hang.release();
  w.notify_lanes->wait_idle();
}

TEST_CASE("a backlog an endpoint has no room for waits out of the way of other endpoints'") {
  auto slow = endpoint("slow");
  slow.max_in_flight = 2;
  World w({slow, endpoint("fast")});
  HangingEndpoint hang(w);
  // 300 deliveries to "slow" (of as many operations), queued before 3 to
  // "fast": far more than one read of the queue holds.
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                for (int i = 0; i < 300; ++i) txn.enqueue(delivery("slow", i));
                for (int i = 0; i < 3; ++i) txn.enqueue(delivery("fast", 1000 + i));
                return Status::Ok();
              })
              .ok());
  // Passes, the clock standing still, until "fast" has all three; the
  // deadline only ends a failing run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t to_fast = 0;
  while (to_fast < 3 && std::chrono::steady_clock::now() < deadline) {
    w.notifier->dispatch();
    hang.wait_for_fast(std::chrono::milliseconds(5));
    to_fast = w.sent_to("fast").size();
  }
  CHECK(to_fast == 3);
  CHECK(w.sent_to("slow").size() == 0);  // both in flight, held
  hang.release();
  w.notify_lanes->wait_idle();
}

TEST_CASE("an endpoint that hangs takes no more than its share of the notification threads") {
  auto slow = endpoint("slow");
  slow.max_in_flight = 8;  // more than the pool's four threads
  World w({slow, endpoint("fast")});
  HangingEndpoint hang(w);
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                for (int i = 0; i < 10; ++i) txn.enqueue(delivery("slow", i));
                txn.enqueue(delivery("fast", 1000));
                return Status::Ok();
              })
              .ok());
  // Without a share, "slow" would hold every thread and queue behind them
  // the delivery to "fast". The deadline only ends a failing run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (w.sent_to("fast").empty() && std::chrono::steady_clock::now() < deadline) {
    w.notifier->dispatch();
    hang.wait_for_fast(std::chrono::milliseconds(5));
  }
  CHECK(w.sent_to("fast").size() == 1);
  hang.release();
  w.notify_lanes->wait_idle();
}

TEST_CASE("a Slack endpoint gets the exact proposal and the console link, no buttons") {
  auto slack = endpoint("chat", {"operation.proposed"});
  slack.format = outbox::NotifyEndpoint::Format::slack;
  World w({slack});
  w.propose();
  auto sent = w.sent_to("chat");
  REQUIRE(sent.size() == 1);
  auto body = json::parse(sent[0].body).as_object();
  REQUIRE(body.size() == 1);
  const std::string text(body.at("text").as_string());
  for (const char* part :
       {"operation.proposed", "25.00 USD", "ORDER-100", "demo-user", "visa ending 4242",
        "is returned to the customer", kKey, "https://console.test/console/operations/"})
    CHECK_MESSAGE(text.find(part) != std::string::npos, part);
  w.approve();
  w.pump();
  CHECK(w.sent_to("chat").size() == 1);  // subscribed to proposals only
}

TEST_CASE(
    "on a shared store a delivery is leased before it is sent; one taken over meanwhile "
    "records nothing, and the new holder sends it again under the same webhook-id") {
  World w;
  w.notifier->set_shared_store(true);
  bool taken = false;
  w.during_send = [&] {
    if (taken) return;
    taken = true;
    auto items = w.storage->reader().due(store::Queue::notifications, INT64_MAX, 10, {});
    REQUIRE(items->size() == 1);
    store::OutboxEntry held = items->at(0);
    // Leased for the attempt: out of the way of other processes, fenced.
    CHECK_FALSE(held.item.lease_token().empty());
    CHECK(held.item.not_before_ms() > w.clock.now_ms());
    held.item.set_lease_token("the-other-process");
    held.item.set_not_before_ms(w.clock.now_ms() + 60'000);
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  txn.update_outbox(held);
                  return Status::Ok();
                })
                .ok());
  };
  w.propose();
  auto first = w.sent_to("ops");
  REQUIRE(first.size() == 1);
  // Not recorded by the process that lost it: still queued as the other
  // process left it, still counted in the backlog, not counted as sent.
  auto items = w.storage->reader().due(store::Queue::notifications, INT64_MAX, 10, {});
  REQUIRE(items->size() == 1);
  CHECK(items->at(0).item.lease_token() == "the-other-process");
  CHECK(w.state("ops").backlog() == 1);
  CHECK(w.metrics.counter_value("opgate_notifications_sent_total", {{"endpoint", "ops"}}) == 0);
  // Its lease passes: sent again, same webhook-id, now recorded.
  w.clock.advance_ms(60'000);
  w.pump();
  auto all = w.sent_to("ops");
  REQUIRE(all.size() == 2);
  CHECK(all[1].webhook_id == first[0].webhook_id);
  CHECK(w.queued_deliveries() == 0);
  CHECK(w.state("ops").backlog() == 0);
  CHECK(w.metrics.counter_value("opgate_notifications_sent_total", {{"endpoint", "ops"}}) == 1);
}

TEST_CASE("a delivery waits for an earlier event of its operation that is not fanned out yet") {
  World w;
  auto notification = [](int64_t seq, const std::string& type) {
    pb::Notification n;
    n.set_event_id("evt_" + std::to_string(seq) + "_op-x");
    n.set_type(type);
    n.set_audit_seq(seq);
    n.set_operation_json(R"({"key":"op-x"})");
    return n;
  };
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                // The earlier change's event, not due yet (so not fanned out)...
                pb::OutboxItem event;
                event.set_kind(pb::OUTBOX_NOTIFY_EVENT);
                event.set_operation_key("op-x");
                event.set_not_before_ms(w.clock.now_ms() + 1000);
                *event.mutable_notification() = notification(5, "operation.approved");
                txn.enqueue(event);
                // ... and the later change's delivery, due now.
                pb::OutboxItem delivery;
                delivery.set_kind(pb::OUTBOX_NOTIFY_DELIVERY);
                delivery.set_operation_key("op-x");
                *delivery.mutable_notification() = notification(7, "operation.settled");
                delivery.mutable_notification()->set_endpoint("ops");
                delivery.mutable_notification()->set_webhook_id("msg_settled");
                txn.enqueue(delivery);
                return Status::Ok();
              })
              .ok());
  w.pump();
  CHECK(w.sent_to("ops").empty());  // the settled waits for the approved
  for (int i = 0; i < 5; ++i) {
    w.clock.advance_ms(1000);
    w.pump();
  }
  std::vector<std::string> types;
  for (const auto& s : w.sent_to("ops")) types.push_back(s.type);
  CHECK(types == std::vector<std::string>{"operation.approved", "operation.settled"});
}

TEST_CASE("each change a person must hear about is sent once: denied, expired, outcome_unknown") {
  SUBCASE("denied") {
    World w;
    w.propose();
    w.deny();
    w.pump_all();
    CHECK(w.types_sent_to("ops") == "operation.proposed operation.denied operation.settled");
    auto last = json::parse(w.sent_to("ops").back().body).as_object();
    CHECK(last.at("data").at("outcome").as_string() == "denied");
  }
  SUBCASE("expired") {
    World w;
    w.propose();
    w.clock.advance_ms((w.policy.get()->approval_ttl_s + 1) * 1000);
    w.pump_all();
    CHECK(w.types_sent_to("ops") == "operation.proposed operation.expired operation.settled");
  }
  SUBCASE("approved, then outcome_unknown, then settled by the reconciler") {
    World w;
    w.propose();
    w.approve();
    w.provider.answers = {{operations::Verdict::indeterminate, "", "", "timeout", ""}};
    w.pump_all();
    CHECK(w.types_sent_to("ops") ==
          "operation.proposed operation.approved operation.outcome_unknown");
    operations::LookupResult found;
    found.lookup = operations::Lookup::found;
    found.object = {operations::Verdict::succeeded, "re_found", "succeeded", "", ""};
    w.provider.lookups = {found};
    w.clock.advance_ms(60'000);
    w.pump_all();
    CHECK(w.types_sent_to("ops").ends_with(" operation.settled"));
  }
}

TEST_CASE("replay queues an endpoint's kept events again since a time, with the same ids") {
  World w({endpoint("ops"), endpoint("chat")});
  w.propose();
  w.deny();
  w.pump_all();
  const auto first = w.sent_to("ops");
  REQUIRE(first.size() == 3);
  const auto chat_before = w.sent_to("chat").size();
  // Everything since before the proposal: the three events again, to ops only.
  auto queued = w.notifier->replay("ops", w.clock.now_ms() - 3'600'000, "alice");
  REQUIRE(queued.ok());
  CHECK(*queued == 3);
  w.pump_all();
  const auto after = w.sent_to("ops");
  REQUIRE(after.size() == 6);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(after[3 + i].webhook_id == first[i].webhook_id);
    CHECK(after[3 + i].type == first[i].type);
  }
  CHECK(w.sent_to("chat").size() == chat_before);
  // Since a time after every event: nothing; an unknown endpoint: an error.
  CHECK(*w.notifier->replay("ops", w.clock.now_ms() + 1, "alice") == 0);
  CHECK_FALSE(w.notifier->replay("nobody", 0, "alice").ok());
}

TEST_CASE("reloaded endpoints: a new one hears later events, a removed one hears nothing more") {
  World w({endpoint("ops")});
  w.propose();
  REQUIRE(w.types_sent_to("ops") == "operation.proposed");
  outbox::NotifyConfig c = *w.notify.get();
  c.endpoints = {endpoint("audit")};  // ops removed, audit added (a SIGHUP)
  w.notify.set(c);
  w.deny();
  w.pump_all();
  CHECK(w.types_sent_to("ops") == "operation.proposed");
  CHECK(w.types_sent_to("audit") == "operation.denied operation.settled");
}

TEST_CASE("replay pages through events that share a millisecond, each queued once") {
  World w({endpoint("ops")});
  // 1,201 kept events: 700 in one millisecond (more than a page of 500),
  // then 500 in the next (a page boundary falls inside each), then one.
  const int64_t t0 = w.clock.now_ms();
  std::set<std::string> kept;
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                auto keep = [&](int64_t at, int i) {
                  pb::Notification n;
                  n.set_type("operation.proposed");
                  n.set_event_id(fmt::format("evt_{}_{:04}", at - t0, i));
                  n.set_created_at_ms(at);
                  n.set_operation_json(R"({"key":"demo-user:ORDER-100:full-refund:v1"})");
                  kept.insert(n.event_id());
                  txn.keep_notification(n);
                };
                for (int i = 0; i < 700; ++i) keep(t0, i);
                for (int i = 0; i < 500; ++i) keep(t0 + 1, i);
                keep(t0 + 2, 0);
                return Status::Ok();
              })
              .ok());
  auto queued = w.notifier->replay("ops", t0, "alice");
  REQUIRE(queued.ok());
  CHECK(*queued == 1'201);
  std::multiset<std::string> events;
  auto due = w.storage->reader().due(store::Queue::notifications, w.clock.now_ms() + 86'400'000,
                                     5'000, {});
  REQUIRE(due.ok());
  for (const auto& e : *due)
    if (e.item.kind() == pb::OUTBOX_NOTIFY_DELIVERY)
      events.insert(e.item.notification().event_id());
  CHECK(events.size() == 1'201);
  CHECK(std::set<std::string>(events.begin(), events.end()) == kept);
  // Past the first hundred, paced: a new event queued now goes ahead of
  // all but those.
  auto now_due = w.storage->reader().due(store::Queue::notifications, w.clock.now_ms(), 5'000, {});
  REQUIRE(now_due.ok());
  CHECK(now_due->size() == outbox::Notifier::kReplayAtOnce + 1);
  auto last_due =
      w.storage->reader().due(store::Queue::notifications,
                              w.clock.now_ms() + (1'201 - outbox::Notifier::kReplayAtOnce - 1) *
                                                     outbox::Notifier::kReplayPaceMs,
                              5'000, {});
  REQUIRE(last_due.ok());
  CHECK(last_due->size() == 1'201);
}

TEST_CASE("with no endpoint configured nothing is queued to fan out; replay reaches a later one") {
  World w(std::vector<outbox::NotifyEndpoint>{});
  // As the daemon sets it for a configuration without endpoints.
  w.storage->fan_out_notifications(false);
  w.propose();
  w.deny();
  CHECK(w.queued_deliveries() == 0);  // with fan-out on: the two events of the denial
  auto kept = w.storage->reader().notifications_since(0, 100);
  REQUIRE(kept.ok());
  CHECK(kept->size() == 3);  // proposed, denied, settled: kept for replay
  // An endpoint configured later (a SIGHUP) hears the past by replay.
  outbox::NotifyConfig c = *w.notify.get();
  c.endpoints = {endpoint("ops")};
  w.notify.set(c);
  w.storage->fan_out_notifications(true);
  auto queued = w.notifier->replay("ops", 0, "alice");
  REQUIRE(queued.ok());
  CHECK(*queued == 3);
  w.pump_all();
  CHECK(w.types_sent_to("ops") == "operation.proposed operation.denied operation.settled");
}

namespace {

// A delivery for `endpoint` queued as another node's fan-out would queue it.
// Queues `count` deliveries of the first kept event to `endpoint`, in one
// transaction.
void queue_delivery_for(World& w, const std::string& endpoint, int count = 1) {
  auto kept = w.storage->reader().notifications_since(0, 10);
  REQUIRE(kept.ok());
  REQUIRE_FALSE(kept->empty());
  pb::OutboxItem d;
  d.set_kind(pb::OUTBOX_NOTIFY_DELIVERY);
  d.set_operation_key(kKey);
  *d.mutable_notification() = kept->front();
  d.mutable_notification()->set_endpoint(endpoint);
  d.mutable_notification()->set_webhook_id(
      outbox::Notifier::webhook_id(kept->front().event_id(), endpoint));
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                OPGATE_ASSIGN_OR_RETURN(auto st, txn.endpoint_state(endpoint));
                st.set_backlog(st.backlog() + count);
                txn.put_endpoint_state(st);
                for (int i = 0; i < count; ++i) txn.enqueue(d);
                return Status::Ok();
              })
              .ok());
}

TEST_CASE("releasing held deliveries reads a long queue through, page by page") {
  World w({endpoint("ops")});
  w.propose();
  // More than a page of them, between and behind deliveries to another
  // endpoint that is not released.
  queue_delivery_for(w, "kept-held", 300);
  queue_delivery_for(w, "old-chat", 700);
  queue_delivery_for(w, "kept-held", 300);
  queue_delivery_for(w, "old-chat", 500);
  auto discarded = w.notifier->release_held("old-chat", "", "admin");
  REQUIRE(discarded.ok());
  CHECK(*discarded == 1200);
  CHECK(w.queued_deliveries() == 600);
  CHECK(w.state("old-chat").backlog() == 0);
  CHECK(w.state("kept-held").backlog() == 600);
  // The next release finds none.
  CHECK(*w.notifier->release_held("old-chat", "", "admin") == 0);
}

double held_total(World& w, const std::string& endpoint) {
  const auto text = w.metrics.render();
  const std::string series = "opgate_notifications_held_total{endpoint=\"" + endpoint + "\"} ";
  const auto at = text.find(series);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size()));
}

}  // namespace

TEST_CASE("a delivery for an endpoint this node does not know is held and counted, never deleted") {
  // On a shared store it is set aside in memory, not rewritten: rewritten,
  // it would be this node's again, and the node that knows the endpoint
  // takes a live node's item only once it has been left due a while.
  for (const bool shared : {false, true}) {
    CAPTURE(shared);
    World w({endpoint("ops")});
    w.notifier->set_shared_store(shared);
    w.propose();
    // Another node, whose configuration names "chat", fanned an event out to it.
    queue_delivery_for(w, "chat");
    auto queued_chat = [&] {
      auto due = w.storage->reader().due(store::Queue::notifications, INT64_MAX, 100, {});
      REQUIRE(due.ok());
      std::vector<store::OutboxEntry> out;
      for (const auto& e : *due)
        if (e.item.notification().endpoint() == "chat") out.push_back(e);
      REQUIRE(out.size() == 1);
      return out[0];
    };
    const auto before = queued_chat();
    // Set aside, the delivery is still due in the store: pump_all would
    // wait for it to stop being due.
    auto settle = [&] { shared ? w.pump() : w.pump_all(); };
    settle();
    CHECK(w.sent_to("chat").empty());
    CHECK(w.queued_deliveries() == 1);  // held, not dropped
    CHECK(held_total(w, "chat") == 1);
    CHECK((queued_chat().item.not_before_ms() == before.item.not_before_ms()) == shared);
    auto states = w.storage->reader().endpoint_states();
    REQUIRE(states.ok());
    bool held = false;
    for (const auto& st : *states) held = held || (st.name() == "chat" && st.backlog() == 1);
    CHECK(held);
    // Looked at again only after the recheck interval.
    settle();
    CHECK(held_total(w, "chat") == 1);
    // This node's reload names it now: the held delivery goes out.
    outbox::NotifyConfig c = *w.notify.get();
    c.endpoints.push_back(endpoint("chat"));
    w.notify.set(c);
    w.clock.advance_ms(outbox::kHeldRecheckMs);
    settle();
    CHECK(w.types_sent_to("chat") == "operation.proposed");
    CHECK(w.queued_deliveries() == 0);
    CHECK(w.state("chat").backlog() == 0);
  }
}

TEST_CASE("a pass holds all its deliveries for unknown endpoints in one transaction") {
  World w({endpoint("ops")});
  w.propose();
  w.pump_all();
  queue_delivery_for(w, "chat", 10);  // fewer than a pass reads
  const auto before = w.storage->stats().synced_writes;
  w.pump();
  CHECK(held_total(w, "chat") == 10);
  CHECK(w.storage->stats().synced_writes - before == 1);  // one transaction, not one each
}

TEST_CASE("held deliveries are replayed to another endpoint or discarded on demand, counted") {
  World w({endpoint("ops"), endpoint("audit")});
  w.propose();
  queue_delivery_for(w, "old-chat");
  queue_delivery_for(w, "gone");
  w.pump_all();
  REQUIRE(w.queued_deliveries() == 2);
  // A configured endpoint's deliveries are not held: refused.
  auto configured = w.notifier->release_held("ops", "audit", "admin");
  REQUIRE_FALSE(configured.ok());
  CHECK(configured.error().is(errc::conflict));
  CHECK_FALSE(w.notifier->release_held("old-chat", "nowhere", "admin").ok());
  auto replayed = w.notifier->release_held("old-chat", "audit", "admin");
  REQUIRE(replayed.ok());
  CHECK(*replayed == 1);
  w.pump_all();
  // The replayed event under audit's webhook-id for it: the receiver sees a
  // repeat of the proposal it had, not a new event.
  auto to_audit = w.sent_to("audit");
  REQUIRE(to_audit.size() == 2);
  CHECK(to_audit[0].webhook_id == to_audit[1].webhook_id);
  CHECK(to_audit[1].webhook_id ==
        outbox::Notifier::webhook_id(
            w.storage->reader().notifications_since(0, 1)->at(0).event_id(), "audit"));
  CHECK(w.state("old-chat").backlog() == 0);
  auto discarded = w.notifier->release_held("gone", "", "admin");
  REQUIRE(discarded.ok());
  CHECK(*discarded == 1);
  CHECK(w.queued_deliveries() == 0);
  CHECK(w.metrics.render().find("opgate_notifications_dropped_total{endpoint=\"gone\"} 1") !=
        std::string::npos);
  // A name no delivery was ever queued for (a typo): refused, and neither a
  // state nor a series is made for it.
  auto typo = w.notifier->release_held("gnoe", "", "admin");
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.error().is(errc::not_found));
  auto states = w.storage->reader().endpoint_states();
  REQUIRE(states.ok());
  CHECK(std::none_of(states->begin(), states->end(),
                     [](const auto& s) { return s.name() == "gnoe"; }));
  CHECK(w.metrics.render().find("gnoe") == std::string::npos);
}

TEST_CASE("Slack text escapes markup from order data; only the console link is a link") {
  auto slack = endpoint("chat", {"operation.proposed"});
  slack.format = outbox::NotifyEndpoint::Format::slack;
  slack.raw_key.clear();  // Slack reads no signature: none is needed, none is sent
  World w({slack});
  auto order = *w.storage->reader().order("ORDER-100");
  REQUIRE(order);
  order->set_payment_method("<!channel> <https://evil.example|Open the console> & more");
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                txn.put_order(*order);
                return Status::Ok();
              })
              .ok());
  w.propose();
  auto sent = w.sent_to("chat");
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].signature.empty());
  const std::string text(json::parse(sent[0].body).at("text").as_string());
  CHECK(text.find("<!channel>") == std::string::npos);
  CHECK(text.find("<https://evil") == std::string::npos);
  CHECK(text.find("&lt;!channel&gt; &lt;https://evil.example|Open the console&gt; &amp; more") !=
        std::string::npos);
  size_t links = 0;
  for (size_t at = text.find('<'); at != std::string::npos; at = text.find('<', at + 1)) ++links;
  CHECK(links == 1);
  CHECK(text.find("<https://console.test/console/operations/") != std::string::npos);
  CHECK(outbox::slack_escape("a<b>&c") == "a&lt;b&gt;&amp;c");
}

TEST_CASE("a standard body leaves out evidence and the last error unless the endpoint asks") {
  auto with = endpoint("audit");
  with.include_evidence = true;
  World w({endpoint("ops"), with});
  w.propose();
  auto plain = json::parse(w.sent_to("ops").at(0).body).at("data").as_object();
  CHECK_FALSE(plain.contains("evidence"));
  CHECK_FALSE(plain.contains("last_error"));
  CHECK(plain.contains("decision_reason"));
  auto full = json::parse(w.sent_to("audit").at(0).body).at("data").as_object();
  CHECK(full.contains("evidence"));
  CHECK(full.contains("last_error"));
}
