#include "sim/faults.h"

#include <doctest/doctest.h>

#include <boost/json/parse.hpp>

using namespace opgate::sim;

namespace {

std::vector<FaultRule> rules_of(const char* text, FaultActionSet allowed = ~0u) {
  auto parsed = parse_fault_rules(boost::json::parse(text), allowed, "operation_key");
  REQUIRE(parsed.ok());
  return parsed.value();
}

}  // namespace

TEST_CASE("sim faults: parsing fills defaults and refuses typos") {
  auto rules =
      rules_of(R"({"rules":[{"method":"post","path_prefix":"/v1/refunds","action":"delay"}]})");
  REQUIRE(rules.size() == 1);
  CHECK(rules[0].method == "POST");
  CHECK(rules[0].times == 1);
  CHECK(rules[0].delay_ms == 0);
  CHECK(rules[0].retry_after_s == 1);
  CHECK_FALSE(rules[0].subject.has_value());

  auto bad = [](const char* text, FaultActionSet allowed = ~0u) {
    return !parse_fault_rules(boost::json::parse(text), allowed, "operation_key").ok();
  };
  CHECK(bad(R"({"rules":[{"path":"/v1","action":"delay"}]})"));         // unknown field
  CHECK(bad(R"({"rules":[{"action":"explode"}]})"));                    // unknown action
  CHECK(bad(R"({"rules":[{"path_prefix":"/v1"}]})"));                   // no action
  CHECK(bad(R"({"rules":[{"action":"delay","times":0}]})"));            // zero uses
  CHECK(bad(R"({"rules":[{"action":"delay","delay_ms":-1}]})"));        // negative delay
  CHECK(bad(R"({"rule":[]})"));                                         // no rules array
  CHECK(bad(R"({"rules":[{"action":"decline"}]})", kTransportFaults));  // not allowed here
  CHECK_FALSE(bad(R"({"rules":[{"action":"delay","times":-1}]})"));     // forever
}

TEST_CASE("sim faults: first matching rule with uses left wins, each match consumes one") {
  FaultTable table;
  REQUIRE(table
              .add(rules_of(R"({"rules":[
      {"method":"POST","path_prefix":"/v1/refunds","operation_key":"k1","action":"decline"},
      {"method":"POST","path_prefix":"/v1/refunds","action":"error_500_before_commit","times":2},
      {"path_prefix":"/v1/","action":"delay","times":-1}]})"))
              .ok());
  const FaultActionSet all = ~0u;
  auto take = [&](std::string_view method, std::string_view path,
                  std::optional<std::string_view> subject, FaultActionSet supported) {
    auto r =
        table.take({.method = method, .path = path, .subject = subject, .supported = supported});
    return r ? std::string(to_string(r->action)) : std::string("none");
  };
  // The subject rule only matches its key.
  CHECK(take("POST", "/v1/refunds", "k2", all) == "error_500_before_commit");
  CHECK(take("POST", "/v1/refunds", "k1", all) == "decline");
  CHECK(take("POST", "/v1/refunds", "k1", all) == "error_500_before_commit");
  // Both used up: the catch-all delay applies, forever.
  CHECK(take("POST", "/v1/refunds", std::nullopt, all) == "delay");
  CHECK(take("GET", "/v1/refunds", std::nullopt, all) == "delay");
  CHECK(take("GET", "/_sim/ledger", std::nullopt, all) == "none");
  auto listed = table.list();
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].times == 0);
  CHECK(listed[1].times == 0);
  CHECK(listed[2].times == -1);
  table.clear();
  CHECK(take("POST", "/v1/refunds", std::nullopt, all) == "none");
}

TEST_CASE("sim faults: rules an endpoint cannot act out do not match and are not consumed") {
  FaultTable table;
  REQUIRE(table.add(rules_of(R"({"rules":[{"path_prefix":"/v1","action":"pending"}]})")).ok());
  auto r = table.take({.method = "POST",
                       .path = "/v1/customers/c/balance_transactions",
                       .subject = std::nullopt,
                       .supported = kTransportFaults | fault_bit(FaultAction::kDecline)});
  CHECK_FALSE(r.has_value());
  CHECK(table.list()[0].times == 1);
  r = table.take({.method = "POST",
                  .path = "/v1/refunds",
                  .subject = std::nullopt,
                  .supported = kTransportFaults | fault_bit(FaultAction::kPending)});
  REQUIRE(r.has_value());
  CHECK(r->action == FaultAction::kPending);
}
