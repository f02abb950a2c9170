// A release-gate scenario: the orders, the scripted sessions, the steps an
// operator, the providers and fate take, and the outcome expected. Scenarios
// are JSON files users write without C++ (README, "Release gate"). Parsing
// is pure and strict: an unknown key or a malformed step is an error that
// names where it is.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/result.h"

namespace opgate::eval {

struct SessionSpec {
  std::string name;           // the scenario's name for it, e.g. "s1"
  std::string owner;          // bound at start; "" leaves it unbound
  std::string input;          // the user's message
  boost::json::array script;  // the scripted model's calls (opgate-sim agent format)
};

// Daemon settings a scenario may change; the rest are the gate's defaults.
struct Settings {
  int64_t approval_ttl_s = 86400;
  int64_t payments_timeout_ms = 1500;
  int64_t agent_timeout_ms = 3000;
  int64_t two_person_threshold_minor = 50000;  // USD and GBP
  // [policy.tools.issue_account_credit] delivery_delay_after_days (0: off).
  int64_t delivery_delay_after_days = 0;
  // [policy.escalation] escalate_after_s, to the supervisor tier (0: off).
  int64_t escalate_after_s = 0;
  // Orders come from the order service simulator (orders.source = "http");
  // update_order then changes them there.
  bool order_service = false;
  // The gate's two declared operations (reship_order, waive_fee) and
  // opgate-sim executor behind them.
  bool declared_operations = false;
};

// An agent runtime reaching opgate over MCP with an agent token bound to
// `owner` (minted when the scenario starts).
struct AgentSpec {
  std::string name;  // the scenario's name for it, e.g. "a1"
  std::string owner;
};

struct Step {
  std::string action;  // one of step_actions()
  boost::json::object args;
  size_t index = 0;  // 1-based, for messages
};

struct Scenario {
  std::string name;  // the file's stem
  std::string description;
  std::vector<boost::json::object> orders;  // complete order records
  Settings settings;
  std::vector<SessionSpec> sessions;
  std::vector<AgentSpec> agents;
  std::vector<Step> steps;
  boost::json::object expect;
};

// The step actions and what each needs, for errors and the README.
const std::vector<std::string>& step_actions();

// `now_s` fills each order's placed_at from its "placed_days_ago".
Result<Scenario> parse_scenario(std::string_view name, std::string_view text, int64_t now_s);
Result<Scenario> load_scenario(const std::filesystem::path& file, int64_t now_s);

// The orders a scenario gets when it lists none, as complete records:
// ORDER-100 (demo-user, 2500 USD), ORDER-200 (other-user, 4000 USD),
// ORDER-300 (demo-user, 80000 USD), ORDER-400 (demo-user, 20000 GBP) and
// ORDER-500 (demo-user, 3000 USD, an instruction hidden in its note).
std::vector<boost::json::object> default_orders(int64_t now_s);

// The order's owner by id; "" if the scenario has no such order.
std::string owner_of_order(const Scenario& scenario, const std::string& order_id);

}  // namespace opgate::eval
