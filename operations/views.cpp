#include "operations/views.h"

#include <boost/json.hpp>

#include "common/crypto.h"
#include "operations/orders.h"
#include "operations/policy.h"
#include "operations/state_machine.h"

namespace opgate::operations {

namespace json = boost::json;

std::string_view delivery_text(pb::Delivery d) {
  switch (d) {
    case pb::DELIVERY_PENDING:
      return "pending";
    case pb::DELIVERY_DELIVERED:
      return "delivered";
    case pb::DELIVERY_CONFLICT:
      return "conflict";
    case pb::DELIVERY_STALE:
      return "stale";
    default:
      return "none";
  }
}

json::object operation_json(const pb::Operation& op, bool attention) {
  const auto& p = op.proposal();
  json::array approvals;
  for (const auto& a : op.approvals())
    approvals.push_back(json::object{{"principal", a.principal()}, {"at_ms", a.at_ms()}});
  json::array calls;
  for (const auto& c : op.calls())
    calls.push_back(json::object{
        {"session_id", c.session_id()}, {"turn_id", c.turn_id()}, {"call_id", c.call_id()}});
  json::object o{{"key", op.key()},
                 {"state", state_text(op)},
                 {"outcome", nullptr},
                 {"owner", p.owner()},
                 {"order_id", p.order_id()},
                 {"kind", p.kind()},
                 {"amount_minor", p.amount_minor()},
                 {"currency", p.currency()},
                 {"fingerprint", op.fingerprint()},
                 {"session_id", op.session_id()},
                 {"call_id", op.call_id()},
                 {"proposal", json::object{{"payment_intent", p.payment_intent()},
                                           {"customer", p.customer()},
                                           {"payment_method", p.payment_method()},
                                           {"reason", p.reason()},
                                           {"effect", p.effect()},
                                           {"tier", p.tier()},
                                           {"order_amount_minor", p.order_amount_minor()}}},
                 {"approvals", approvals},
                 {"calls", calls},
                 {"decided_by", op.decided_by()},
                 {"decision_reason", op.decision_reason()},
                 {"evidence", op.evidence()},
                 {"attempts", op.attempts()},
                 {"last_error", op.last_error()},
                 {"provider_object_id", op.provider_object_id()},
                 {"idempotency_key", op.idempotency_key()},
                 {"created_at_ms", op.created_at_ms()},
                 {"updated_at_ms", op.updated_at_ms()},
                 {"expires_at_ms", op.expires_at_ms()}};
  if (!is(op, Outcome::none)) o["outcome"] = outcome_text(op);
  if (!p.arguments_json().empty()) {
    // A declared operation: what it moves, and the arguments as approved.
    auto& proposal = o["proposal"].as_object();
    proposal["money"] = p.money();
    json::error_code ec;
    auto arguments = json::parse(p.arguments_json(), ec);
    proposal["arguments"] = ec ? json::value(p.arguments_json()) : std::move(arguments);
  }
  if (is(op, State::outcome_unknown)) o["unknown_since_ms"] = op.unknown_since_ms();
  if (op.reminded_at_ms() != 0) o["reminded_at_ms"] = op.reminded_at_ms();
  if (op.escalated_at_ms() != 0) {
    o["escalated_at_ms"] = op.escalated_at_ms();
    o["escalated_to_tier"] = op.escalated_to_tier();
  }
  if (p.original_amount_minor() != 0) {
    o["original_amount_minor"] = p.original_amount_minor();
    o["edited_by"] = p.edited_by();
    o["edit_reason"] = p.edit_reason();
  }
  o["needs_attention"] = attention;
  return o;
}

json::object call_json(const pb::ToolCall& c) {
  json::object o{{"session_id", c.session_id()},
                 {"turn_id", c.turn_id()},
                 {"call_id", c.call_id()},
                 {"name", c.name()},
                 {"arguments", c.arguments_json()},
                 {"operation_key", c.operation_key()},
                 {"result", nullptr},
                 {"delivery", delivery_text(c.delivery())},
                 {"delivery_error", c.delivery_error()},
                 {"created_at_ms", c.created_at_ms()}};
  if (c.result_saved())
    o["result"] = json::object{{"success", c.result().success()},
                               {"output", c.result().output()},
                               {"error", c.result().error()}};
  return o;
}

json::object ledger_json(const pb::LedgerEntry& l) {
  json::object o{{"operation_key", l.operation_key()},
                 {"session_id", l.session_id()},
                 {"owner", l.owner()},
                 {"order_id", l.order_id()},
                 {"kind", l.kind()},
                 {"amount_minor", l.amount_minor()},
                 {"currency", l.currency()},
                 {"provider_object_id", l.provider_object_id()},
                 {"at_ms", l.at_ms()},
                 {"recorded_by", l.recorded_by()}};
  if (l.original_amount_minor() != 0) o["original_amount_minor"] = l.original_amount_minor();
  return o;
}

json::object audit_json(const pb::AuditRecord& r) {
  json::error_code ec;
  json::value details = json::parse(r.details_json(), ec);
  if (ec) details = r.details_json();
  return json::object{{"seq", r.seq()},
                      {"at_ms", r.at_ms()},
                      {"principal", r.principal()},
                      {"operation_key", r.operation_key()},
                      {"action", r.action()},
                      {"from", r.from_state()},
                      {"to", r.to_state()},
                      {"fingerprint", r.fingerprint()},
                      {"details", details},
                      {"hash", crypto::to_hex(r.hash())}};
}

json::object funds_json(const pb::Order& order, const pb::OrderFunds& funds) {
  return json::object{{"paid_minor", order.amount_minor()},
                      {"refunded_outside_minor", order.refunded_minor()},
                      {"refunded_minor", funds.refunded_minor()},
                      {"credited_minor", funds.credited_minor()},
                      {"in_progress_minor", funds.reserved_minor()},
                      {"remaining_minor", remaining_minor(order, funds)},
                      {"currency", order.currency()},
                      {"status", order_status_text(order.status())}};
}

}  // namespace opgate::operations

namespace opgate::operations {

json::object policy_json(const PolicyConfig& policy) {
  auto amounts = [](const std::map<std::string, int64_t>& m) {
    json::object o;
    for (const auto& [currency, amount] : m) o[currency] = amount;
    return o;
  };
  json::array tools;
  for (auto name : kToolNames) {
    json::array allowed;
    for (auto t : tiers_of_tool(name)) allowed.push_back(json::string(t));
    json::object limits;
    if (name == "request_refund") limits["window_days"] = policy.refund_window_days;
    if (name == "cancel_order") limits["window_days"] = policy.cancel_window_days;
    if (name == "add_internal_note") limits["max_evidence"] = policy.note_max_evidence;
    if (name == "issue_account_credit") {
      json::array codes;
      for (const auto& c : policy.credit_reason_codes) codes.push_back(json::string(c));
      limits["reason_codes"] = std::move(codes);
      limits["hard_cap_minor"] = amounts(policy.credit_hard_cap_minor);
      limits["support_limit_minor"] = amounts(policy.credit_support_limit_minor);
      limits["delivery_delay_after_days"] = policy.delivery_delay_after_days;
    }
    tools.push_back(json::object{{"name", name},
                                 {"enabled", policy.enabled(name)},
                                 {"tier", policy.tier(name)},
                                 {"tiers_allowed", std::move(allowed)},
                                 {"proposes", proposing_tool(name)},
                                 {"limits", std::move(limits)}});
  }
  json::array declared;
  for (const auto& op : policy.declared) {
    // Shown with the built-in tools (always enabled: declaring it offers
    // it), and in full under "declared".
    // Its thresholds by amount are under "declared".
    json::object limits{{"money", to_string(op.money)}};
    tools.push_back(json::object{{"name", op.name},
                                 {"enabled", true},
                                 {"tier", op.tier},
                                 {"tiers_allowed", json::array{"refund", "support", "supervisor"}},
                                 {"proposes", true},
                                 {"declared", true},
                                 {"limits", std::move(limits)}});
    declared.push_back(declared_to_json(op));
  }
  json::array step_up_tiers;
  for (const auto& t : policy.step_up.tiers) step_up_tiers.push_back(json::string(t));
  return json::object{
      {"tools", std::move(tools)},
      {"declared", std::move(declared)},
      {"approval_ttl_s", policy.approval_ttl_s},
      {"two_person_threshold_minor", amounts(policy.two_person_threshold_minor)},
      {"escalation", json::object{{"remind_after_s", policy.escalation.remind_after_s},
                                  {"escalate_after_s", policy.escalation.escalate_after_s},
                                  {"escalate_to_tier", policy.escalation.escalate_to_tier}}},
      {"step_up", json::object{{"tiers", std::move(step_up_tiers)},
                               {"above_minor", amounts(policy.step_up.above_minor)}}}};
}

std::string policy_sha256(const PolicyConfig& policy) {
  if (!policy.sha256.empty()) return policy.sha256;
  return crypto::sha256_hex(json::serialize(policy_json(policy)));
}

}  // namespace opgate::operations
