// The operator API over a real store (testing::World) with two pending
// refunds: ORDER-300 (800.00 USD, above the two-person threshold) proposed
// first, then a minute later ORDER-100 (25.00 USD), so that the order of
// creation is not the order of the keys. Requests are
// dispatched straight to the router, without sockets. Principals: alice and
// bob (read and approve, any owner), outsider (the same for "outsider-*"
// only); each token is "tok-" + name + "-only-for-tests".
#pragma once

#include <boost/json.hpp>
#include <memory>

#include "operations/state_machine.h"
#include "operator_api/api.h"
#include "world.h"

namespace opgate::testing {

inline constexpr const char* kRefund = "demo-user:ORDER-100:full-refund:v1";
inline constexpr const char* kLarge = "demo-user:ORDER-300:full-refund:v1";

inline http::Request request(std::string method, std::string target, http::Headers headers = {},
                             std::string body = "") {
  http::Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.headers = std::move(headers);
  r.body = std::move(body);
  return r;
}

struct ApiStage : World {
  static operations::Principal principal(std::string name, std::vector<std::string> owners) {
    operations::Principal p;
    p.name = name;
    p.token_sha256 = crypto::sha256_hex("tok-" + name + "-only-for-tests");
    p.scopes = {"operations:read", "operations:approve"};
    p.owners = std::move(owners);
    p.max_amount_minor = {{"USD", 100000}};
    return p;
  }
  static operator_api::Principals principals() {
    return {principal("alice", {"*"}), principal("bob", {"*"}),
            principal("outsider", {"outsider-*"})};
  }

  Live<operator_api::Principals> people{principals()};
  std::atomic<bool> ready{true};
  std::unique_ptr<operator_api::ApiDeps> deps;
  http::Router router;

  explicit ApiStage(store::rocks::OpenOptions options = {}) : World(options) {
    seed_order("ORDER-100", 2500);
    seed_order("ORDER-300", 80000);
    propose("sess_1", "ORDER-300");
    clock.advance_ms(60'000);
    propose("sess_2", "ORDER-100");
  }

  // Builds the router; with a console authenticator the routes are served
  // under /console/api too.
  void open_api(operator_api::Authenticator console_auth = {}) {
    deps = std::make_unique<operator_api::ApiDeps>(operator_api::ApiDeps{
        *storage, *sync, *drainer, agents, metrics, clock, people, policy, [] {}, ready,
        operations::AttentionPolicy{}, nullptr, nullptr, std::move(console_auth)});
    router = operator_api::make_router(*deps);
  }

  void propose(const std::string& session, const std::string& order) {
    REQUIRE(sync->bind(session, "demo-user", "admin").ok());
    operations::SessionView v;
    v.required_actions = {
        {"call_" + session, "turn_1", "request_refund", R"({"order_id":")" + order + R"("})"}};
    agents.views[session] = v;
    webhook("msg_" + session, session);
    pump();
  }

  static boost::json::value body_of(const http::Response& r) { return boost::json::parse(r.body); }

  std::string state(const std::string& key) {
    return std::string(operations::state_text(operation(key)));
  }
};

}  // namespace opgate::testing
