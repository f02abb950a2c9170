// JSON views of the domain's records, as the operator API, the console and
// outbound notifications show them (the operation's fields are a stable
// contract: clients and receivers read them). Pure; thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>

#include "operations/attention.h"
#include "operations/policy.h"
#include "opgate.pb.h"

namespace opgate::operations {

// Always: key, state, outcome (null until settled), owner, order_id, kind,
// amount_minor, currency, fingerprint, session_id, call_id; then the
// proposal's details, approvals, calls, decision and attempts.
boost::json::object operation_json(const pb::Operation& op, bool needs_attention);
boost::json::object call_json(const pb::ToolCall& call);
boost::json::object ledger_json(const pb::LedgerEntry& row);
boost::json::object audit_json(const pb::AuditRecord& record);
boost::json::object funds_json(const pb::Order& order, const pb::OrderFunds& funds);
// The policy in force, for people: every tool (enabled or not, its tier and
// the tiers it may have, its limits), the two-person thresholds, the
// approval time, escalation and step-up.
boost::json::object policy_json(const PolicyConfig& policy);
// The SHA-256 (hex) of policy_json: what the audit records of proposals and
// decisions name as the policy they were made under. Cached on the policy
// when the configuration is loaded.
std::string policy_sha256(const PolicyConfig& policy);
std::string_view delivery_text(pb::Delivery delivery);

}  // namespace opgate::operations
