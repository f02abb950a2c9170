// The properties the release gate checks on every trace, and the scenario's
// own expected outcome. Pure: a Trace is what the run collected from the
// daemon, the agent platform and the payment provider once it was over; the
// checks compare those independent records with each other and with the
// scenario, and say why with evidence.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <map>
#include <string>
#include <vector>

#include "sim/eval/scenario.h"

namespace opgate::eval {

struct SessionTrace {
  std::string id;                // the agent platform's session id
  std::string owner;             // the owner opgate bound it to
  boost::json::object platform;  // the agent simulator's full record of it
};

// A tools/call an MCP agent made, with what it received as the agent sees it.
struct McpCall {
  std::string call_id;  // the task's id, or the result's call_id ("" if refused at once)
  std::string name;
  std::string arguments;  // JSON text
  bool task = false;
  std::string operation_key;  // when it proposed
  bool answered = false;      // it holds a final result
  bool success = false;       // a settled result or an answer (not a refusal)
  std::string output;         // the result's JSON text
  std::string error;          // a refusal's sentence
  // False for an agent whose token was revoked: it can no longer read its
  // results (its operations still settle).
  bool readable = true;
};

struct AgentTrace {
  std::string token_id;
  std::string token;
  std::string owner;
  std::string session;  // Mcp-Session-Id
  bool revoked = false;
  std::vector<McpCall> calls;
};

// What the session and the provider looked like when a proposal was pending.
struct Pause {
  std::string key;
  std::string session_status;  // the platform's session status then
  bool call_pending = false;   // the proposing call was still awaiting its result
  int64_t provider_posts = 0;  // provider requests for the key until then
};

struct Trace {
  std::map<std::string, SessionTrace> sessions;  // by the scenario's session name
  std::map<std::string, AgentTrace> agents;      // MCP agents, by the scenario's name
  boost::json::array operations;                 // opgate's operations, each with its history
  boost::json::array ledger;                     // opgate's ledger
  boost::json::array provider_objects;           // refunds and balance transactions
  boost::json::object provider_by_key;           // operation key -> {"posts","objects"}
  boost::json::object agent_stats;               // results received, conflicts, unknown calls
  boost::json::object audit_check;  // opgate's audit chain verification {"ok","records"}
  std::vector<Pause> pauses;
  std::vector<std::string> interruptions;  // restarts and injected faults, in order
  // What a principal whose owner patterns match no owner of the scenario
  // could read: {"probes": n, "seen": ["what it saw", ...]}.
  boost::json::object outsider;
  // What the notification receiver got, in arrival order: path (/hooks/ops:
  // standard, /hooks/chat: slack), webhook_id, verified, type, key, ...
  boost::json::array notifications;
};

struct PropertyResult {
  std::string name;
  bool passed = true;
  std::vector<std::string> evidence;  // why it passed, or what broke it
};

// The properties of every trace: the release gate's seven, then the
// design's invariants 8 (every linked call answered exactly once), 9
// (nothing outside a principal's owner patterns) and 10 (an order pays out
// at most what was paid), and 11: every proposal was notified once per
// endpoint, signed, and each operation's notifications arrived in order.
std::vector<PropertyResult> check_properties(const Scenario& scenario, const Trace& trace);
// The scenario's "expect" section against the trace.
PropertyResult check_expected_outcome(const Scenario& scenario, const Trace& trace);

// The tools opgate offers, and the argument names each accepts and requires.
struct ToolShape {
  std::vector<std::string> required;
  std::vector<std::string> optional;
};
const std::map<std::string, ToolShape>& permitted_tools();
// The gate's declared operations (settings.declared_operations):
// reship_order and waive_fee.
const std::map<std::string, ToolShape>& declared_tools();

}  // namespace opgate::eval
