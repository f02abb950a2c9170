// Operations declared in configuration: the declaration's checks (every
// refusal names its key), the published schema, the arguments checked
// outside the model, tiers by amount, the effect, and the proposal a
// declared tool makes (money counted against the order, the arguments in
// the fingerprint, the policy in force rechecked).
#include "operations/declared.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "operations/keys.h"
#include "operations/paid_order.h"
#include "operations/policy.h"
#include "operations/policy_replay.h"
#include "operations/tools.h"
#include "operations/views.h"

using namespace opgate;
namespace json = boost::json;

namespace {

using testing::kNow;
using testing::paid_order;

json::value waive_fee_json() {
  return json::parse(R"({
    "name": "waive_fee",
    "description": "Waive a fee on an order.",
    "money": "credit",
    "amount_argument": "amount_minor",
    "tier": "support",
    "tier_above_minor": {"supervisor": {"USD": 2000}},
    "effect": "{amount} of the {fee} on order {order_id} is credited to {customer}.",
    "parameters": {
      "required": ["order_id", "fee", "amount_minor"],
      "properties": {
        "fee": {"type": "string", "enum": ["late_fee", "restocking_fee"]},
        "amount_minor": {"type": "integer", "maximum": 5000},
        "urgent": {"type": "boolean"}
      }
    },
    "executor": {"url": "http://127.0.0.1:9/waive/", "token_env": "WAIVE_TOKEN", "timeout_ms": 800}
  })");
}

json::value reship_json() {
  return json::parse(R"({
    "name": "reship_order",
    "description": "Ship an order again.",
    "tier": "support",
    "effect": "Order {order_id} is shipped again ({carrier}).",
    "parameters": {
      "required": ["carrier"],
      "properties": {"carrier": {"type": "string", "enum": ["standard", "express"]},
                     "note": {"type": "string", "maxLength": 20}}
    },
    "executor": {"url": "https://ship.example/reship", "token_env": "SHIP_TOKEN"}
  })");
}

operations::DeclaredOperation parsed(const json::value& v) {
  auto op = operations::parse_declared_operation(v, "operations[0]");
  REQUIRE_MESSAGE(op.ok(), op.error().message);
  return *op;
}

// The error a declaration changed by `edit` gives.
std::string refusal_of(json::value v, const std::function<void(json::object&)>& edit) {
  edit(v.as_object());
  auto op = operations::parse_declared_operation(v, "operations[0]");
  REQUIRE_FALSE(op.ok());
  return op.error().message;
}

struct Fixture {
  std::map<std::string, pb::Order> orders{{"ORDER-1", paid_order("ORDER-1", "demo-user")},
                                          {"ORDER-2", paid_order("ORDER-2", "other-user")}};
  std::map<std::string, pb::OrderFunds> funds;
  operations::PolicyConfig policy;
  Fixture() {
    policy.declared.push_back(parsed(waive_fee_json()));
    policy.declared.push_back(parsed(reship_json()));
  }
  operations::ToolOutcome run(std::string_view tool, std::string_view args) {
    operations::OrderLookup lookup =
        [this](const std::string& id) -> Result<std::optional<operations::OrderView>> {
      auto it = orders.find(id);
      if (it == orders.end()) return std::optional<operations::OrderView>();
      return std::optional<operations::OrderView>(operations::OrderView{it->second, funds[id]});
    };
    auto out = operations::dispatch_tool(tool, args, "demo-user", lookup, policy, kNow);
    REQUIRE(out.ok());
    return *out;
  }
};

std::string refusal(const operations::ToolOutcome& out) {
  REQUIRE(out.result);
  CHECK_FALSE(out.result->success());
  return out.result->error();
}

}  // namespace

TEST_CASE("a declaration parses: order_id first and bounded, the amount positive") {
  const auto op = parsed(waive_fee_json());
  CHECK(op.name == "waive_fee");
  CHECK(op.money == operations::Money::credit);
  CHECK(op.executor.url == "http://127.0.0.1:9/waive");  // trailing slash dropped
  CHECK(op.executor.timeout_ms == 800);
  REQUIRE(op.parameters.size() == 4);
  CHECK(op.parameters[0].name == "order_id");
  CHECK(op.parameters[0].required);
  CHECK(op.parameters[0].max_length == 64);
  const auto amount = std::find_if(op.parameters.begin(), op.parameters.end(),
                                   [](const auto& p) { return p.name == "amount_minor"; });
  CHECK(amount->minimum == 1);
  CHECK(amount->maximum == 5000);
  CHECK(op.tier_above_minor.at("supervisor").at("USD") == 2000);

  const auto def = operations::declared_tool_definition(op);
  const auto& params = def.at("parameters").as_object();
  CHECK(params.at("additionalProperties") == false);
  CHECK(params.at("properties").at("order_id").at("pattern") == "^[A-Za-z0-9._-]{1,64}$");
  CHECK(params.at("properties").at("fee").at("enum").as_array().size() == 2);
  CHECK(params.at("required").as_array().size() == 3);
}

TEST_CASE("bad declarations are refused, naming the key") {
  const auto w = waive_fee_json();
  CHECK(refusal_of(w, [](auto& o) { o["name"] = "request_refund"; }).find("built-in") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["name"] = "Waive Fee"; }).find("operations[0].name") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["colour"] = "red"; }).find("operations[0].colour") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["subject"] = "customer"; }).find("operations[0].subject") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["money"] = "cash"; }).find("operations[0].money") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o.erase("amount_argument");
        }).find("operations[0].amount_argument") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["amount_argument"] = "fee"; }).find("required integer") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["tier"] = "auto"; }).find("operations[0].tier") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o["tier_above_minor"] = json::object{{"refund", 1}};
        }).find("above 'support'") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["effect"] = "Credit {bogus} now."; }).find("{bogus}") !=
        std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o["effect"] = "Credit {amount"; }).find("never closed") !=
        std::string::npos);
  // An argument named as an effect field would be shown as the order's value.
  for (const char* clash : {"amount", "customer", "payment_method"}) {
    const auto refused = refusal_of(w, [&](auto& o) {
      o["parameters"].as_object()["properties"].as_object()[clash] =
          json::object{{"type", "string"}};
    });
    CHECK_MESSAGE(refused.find(std::string("properties.") + clash) != std::string::npos, refused);
    CHECK(refused.find("field of the effect") != std::string::npos);
  }
  // The schema subset: anything outside it is named.
  CHECK(refusal_of(w, [](auto& o) {
          o["parameters"].as_object()["properties"].as_object()["fee"].as_object()["pattern"] =
              "^x$";
        }).find("operations[0].parameters.properties.fee.pattern") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o["parameters"].as_object()["properties"].as_object()["price"] =
              json::object{{"type", "number"}};
        }).find("operations[0].parameters.properties.price.type") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o["parameters"].as_object()["additionalProperties"] = true;
        }).find("additionalProperties") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o["parameters"].as_object()["required"] = json::array{"order_id", "ghost"};
        }).find("'ghost'") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o["parameters"].as_object()["properties"].as_object()["order_id"] =
              json::object{{"type", "integer"}};
        }).find("order_id") != std::string::npos);
  // The executor.
  CHECK(refusal_of(w, [](auto& o) {
          o["executor"].as_object()["url"] = "ftp://x/y";
        }).find("operations[0].executor.url") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o["executor"].as_object()["token_env"] = "lower case";
        }).find("operations[0].executor.token_env") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) {
          o["executor"].as_object()["timeout_ms"] = 60000;
        }).find("operations[0].executor.timeout_ms") != std::string::npos);
  CHECK(refusal_of(w, [](auto& o) { o.erase("executor"); }).find("operations[0].executor") !=
        std::string::npos);
  // A declaration that moves no money has no amount and no thresholds.
  const auto r = reship_json();
  CHECK(refusal_of(r, [](auto& o) {
          o["amount_argument"] = "carrier";
        }).find("operations[0].amount_argument") != std::string::npos);
  CHECK(refusal_of(r, [](auto& o) { o["effect"] = "Reship {amount}."; }).find("{amount}") !=
        std::string::npos);
}

TEST_CASE("a declared tool's arguments are checked outside the model") {
  Fixture f;
  CHECK(refusal(f.run("reship_order", R"({"order_id":"ORDER-1"})")).find("carrier") !=
        std::string::npos);
  CHECK(refusal(f.run("reship_order", R"({"order_id":"ORDER-1","carrier":"drone"})"))
            .find("carrier must be one of: standard, express") != std::string::npos);
  CHECK(refusal(f.run("reship_order",
                      R"({"order_id":"ORDER-1","carrier":"express","owner":"other-user"})"))
            .find("Unknown argument 'owner'") != std::string::npos);
  {  // a name quoted in part is cut between characters: the refusal can be stored and read
    auto out = f.run("reship_order", R"({"order_id":"ORDER-1","carrier":"express",")" +
                                         std::string(63, 'a') + "\u00e9\":1}");
    REQUIRE(out.result);
    pb::ToolResult read;
    CHECK(read.ParseFromString(out.result->SerializeAsString()));
    CHECK(read.error().find(std::string(63, 'a') + "'") != std::string::npos);
  }
  CHECK(
      refusal(
          f.run(
              "reship_order",
              R"({"order_id":"ORDER-1","carrier":"express","note":"a note far longer than twenty"})"))
          .find("note must be 0 to 20 characters") != std::string::npos);
  CHECK(refusal(f.run("reship_order", R"({"order_id":"../etc","carrier":"express"})"))
            .find("order_id must be") != std::string::npos);
  CHECK(refusal(f.run("waive_fee", R"({"order_id":"ORDER-1","fee":"late_fee","amount_minor":"9"})"))
            .find("amount_minor must be an integer") != std::string::npos);
  CHECK(refusal(f.run("waive_fee", R"({"order_id":"ORDER-1","fee":"late_fee","amount_minor":0})"))
            .find("between 1 and 5000") != std::string::npos);
  CHECK(
      refusal(f.run("waive_fee", R"({"order_id":"ORDER-1","fee":"late_fee","amount_minor":5001})"))
          .find("between 1 and 5000") != std::string::npos);
  CHECK(refusal(f.run("waive_fee",
                      R"({"order_id":"ORDER-1","fee":"late_fee","amount_minor":1,"urgent":"yes"})"))
            .find("urgent must be true or false") != std::string::npos);
  // Another owner's order is a missing one.
  CHECK(refusal(f.run("reship_order", R"({"order_id":"ORDER-2","carrier":"express"})"))
            .find("No order with that id") != std::string::npos);
  // An amount above what the order has left (invariant 10).
  f.funds["ORDER-1"].set_refunded_minor(2000);
  CHECK(refusal(f.run("waive_fee", R"({"order_id":"ORDER-1","fee":"late_fee","amount_minor":600})"))
            .find("exceeds what remains of the order's value (5.00 USD)") != std::string::npos);
}

TEST_CASE("a declared tool proposes the exact operation: arguments, money, tier by amount") {
  Fixture f;
  auto out = f.run("waive_fee", R"({"amount_minor":1500,"fee":"late_fee","order_id":"ORDER-1"})");
  REQUIRE(out.proposal);
  const auto& p = *out.proposal;
  CHECK(p.kind() == "waive_fee");
  CHECK(p.owner() == "demo-user");
  CHECK(p.amount_minor() == 1500);
  CHECK(p.money() == "credit");
  CHECK(p.tier() == "support");
  // Canonical: keys in declaration order, whatever order the model used.
  CHECK(p.arguments_json() == R"({"order_id":"ORDER-1","amount_minor":1500,"fee":"late_fee"})");
  CHECK(p.effect() == "15.00 USD of the late_fee on order ORDER-1 is credited to cus_demo-user.");
  CHECK(operations::operation_key(p.owner(), p.order_id(), p.kind(), 1) ==
        "demo-user:ORDER-1:waive_fee:v1");
  // The arguments are part of what is approved.
  pb::Proposal other = p;
  other.set_arguments_json(R"({"order_id":"ORDER-1","amount_minor":1500,"fee":"restocking_fee"})");
  CHECK(operations::fingerprint(other) != operations::fingerprint(p));

  auto big = f.run("waive_fee", R"({"order_id":"ORDER-1","fee":"late_fee","amount_minor":2001})");
  REQUIRE(big.proposal);
  CHECK(big.proposal->tier() == "supervisor");
  CHECK(operations::tier_in_force(*big.proposal, f.policy) == "supervisor");
  // A currency without a threshold needs the higher tier (fails closed).
  CHECK(operations::declared_tier(f.policy.declared[0], 10, "GBP") == "supervisor");

  auto reship = f.run("reship_order", R"({"order_id":"ORDER-1","carrier":"express"})");
  REQUIRE(reship.proposal);
  CHECK(reship.proposal->amount_minor() == 0);
  CHECK(reship.proposal->money() == "none");
  CHECK(reship.proposal->effect() == "Order ORDER-1 is shipped again (express).");
  CHECK(operations::counts_as_credit(p));
  CHECK_FALSE(operations::counts_as_credit(*reship.proposal));
}

TEST_CASE("a pending declared proposal is rechecked under the policy in force") {
  Fixture f;
  auto out = f.run("waive_fee", R"({"order_id":"ORDER-1","fee":"late_fee","amount_minor":1500})");
  REQUIRE(out.proposal);
  const auto& p = *out.proposal;
  const auto& o = f.orders["ORDER-1"];
  CHECK_FALSE(operations::recheck(p, o, {}, f.policy, kNow));
  pb::OrderFunds spent;
  spent.set_credited_minor(1500);
  CHECK(operations::recheck(p, o, spent, f.policy, kNow)->find("exceeds what remains") !=
        std::string::npos);
  // Undeclared by a reload: rejected before it is decided or executed.
  auto without = f.policy;
  without.declared.erase(without.declared.begin());
  CHECK(operations::recheck(p, o, {}, without, kNow)->find("no longer declared") !=
        std::string::npos);
  CHECK(operations::tier_in_force(p, without) == "supervisor");
  // Its threshold lowered by a reload: re-tiered.
  auto stricter = f.policy;
  stricter.declared[0].tier_above_minor["supervisor"]["USD"] = 1000;
  CHECK(operations::tier_in_force(p, stricter) == "supervisor");
  const auto diff = operations::replay_proposal(p, f.policy, stricter);
  REQUIRE_FALSE(diff.empty());
  CHECK(diff[0].what == "tier");
  // What the declaration accepts narrowed by a reload: rejected, as a
  // credit above a lowered cap is.
  auto parameter = [](operations::PolicyConfig & policy, const std::string& name) -> auto& {
    for (auto& q : policy.declared[0].parameters)
      if (q.name == name) return q;
    FAIL("no parameter " << name);
    return policy.declared[0].parameters.front();
  };
  auto lower = f.policy;
  parameter(lower, "amount_minor").maximum = 1000;
  CHECK(operations::recheck(p, o, {}, lower, kNow).value_or("").find("no longer fit") !=
        std::string::npos);
  auto dropped = f.policy;
  parameter(dropped, "fee").values = {"restocking_fee"};  // late_fee dropped
  CHECK(operations::recheck(p, o, {}, dropped, kNow).value_or("").find("fee must be one of") !=
        std::string::npos);
  auto renamed = f.policy;
  parameter(renamed, "amount_minor").name = "fee_minor";
  renamed.declared[0].amount_argument = "fee_minor";
  CHECK(operations::recheck(p, o, {}, renamed, kNow).value_or("").find("no longer fit") !=
        std::string::npos);
  auto moved = f.policy;  // the amount now read from another integer argument
  operations::DeclaredParameter cap;
  cap.name = "cap_minor";
  cap.type = operations::DeclaredParameter::Type::integer;
  moved.declared[0].parameters.push_back(cap);
  moved.declared[0].amount_argument = "cap_minor";
  CHECK(operations::recheck(p, o, {}, moved, kNow).value_or("").find("another argument") !=
        std::string::npos);
}

TEST_CASE("declared tools are published after the built-in ones, and shown by policy show") {
  Fixture f;
  const auto tools = operations::tool_definitions(f.policy);
  REQUIRE(tools.size() == std::size(operations::kToolNames) + 2);
  CHECK(tools.at(tools.size() - 2).at("name") == "waive_fee");
  CHECK(f.policy.offers("reship_order"));
  CHECK(f.policy.proposes("reship_order"));
  CHECK_FALSE(f.policy.offers("delete_customer"));
  const auto shown = operations::policy_json(f.policy);
  const auto& declared = shown.at("declared").as_array();
  REQUIRE(declared.size() == 2);
  CHECK(declared[0].at("executor").at("token_env") == "WAIVE_TOKEN");
  CHECK_FALSE(declared[0].at("executor").as_object().contains("token"));
  // What policy test reads back: the tiers of the declared operations.
  auto back = operations::policy_from_json(shown);
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  REQUIRE(back->declared.size() == 2);
  CHECK(back->declared[0].tier_above_minor.at("supervisor").at("USD") == 2000);
  CHECK(back->declared[0].money == operations::Money::credit);
}
