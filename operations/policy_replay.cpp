#include "operations/policy_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>

#include "operations/keys.h"
#include "operations/step_up.h"

namespace opgate::operations {

namespace {

std::string_view tool_of(std::string_view kind) {
  if (kind == kFullRefund) return "request_refund";
  if (kind == kAccountCredit) return "issue_account_credit";
  if (kind == kCancelOrder) return "cancel_order";
  return "";
}

// Why `policy` would refuse the proposal outright, from what was recorded.
std::string refusal(const pb::Proposal& p, const PolicyConfig& policy) {
  if (!p.money().empty()) {
    const auto* op = policy.declared_operation(p.kind());
    if (!op) return fmt::format("{} is not declared", p.kind());
    if (to_string(op->money) != p.money())
      return fmt::format("{} moves money as \"{}\"", p.kind(), to_string(op->money));
    return "";
  }
  const auto tool = tool_of(p.kind());
  if (!tool.empty() && !policy.enabled(tool)) return fmt::format("{} is disabled", tool);
  if (p.kind() == kAccountCredit) {
    auto cap = policy.credit_hard_cap_minor.find(p.currency());
    if (cap == policy.credit_hard_cap_minor.end())
      return fmt::format("no credits in {}", p.currency());
    if (p.amount_minor() > cap->second)
      return fmt::format("over the credit cap of {}", format_money(cap->second, p.currency()));
    const auto& codes = policy.credit_reason_codes;
    if (std::find(codes.begin(), codes.end(), p.reason()) == codes.end())
      return fmt::format("reason code {} is not allowed", p.reason());
  }
  return "";
}

}  // namespace

std::vector<ReplayDifference> replay_proposal(const pb::Proposal& proposal,
                                              const PolicyConfig& current,
                                              const PolicyConfig& next) {
  std::vector<ReplayDifference> out;
  const std::string refused_now = refusal(proposal, current);
  const std::string refused_next = refusal(proposal, next);
  if (refused_now != refused_next) {
    out.push_back({"refused", refused_now.empty() ? "allowed" : refused_now,
                   refused_next.empty() ? "allowed" : refused_next});
    if (!refused_next.empty()) return out;  // nothing else would happen
  }
  const std::string tier_next = tier_in_force(proposal, next);
  if (tier_in_force(proposal, current) != tier_next)
    out.push_back({"tier", tier_in_force(proposal, current), tier_next});
  const int needed_now = approvals_needed(proposal, current);
  const int needed_next = approvals_needed(proposal, next);
  if (needed_now != needed_next)
    out.push_back({"approvals_needed", std::to_string(needed_now), std::to_string(needed_next)});
  pb::Proposal as_next = proposal;
  as_next.set_tier(tier_next);
  pb::Proposal as_now = proposal;
  as_now.set_tier(tier_in_force(proposal, current));
  const bool step_now = step_up_required(as_now, current.step_up);
  const bool step_next = step_up_required(as_next, next.step_up);
  if (step_now != step_next)
    out.push_back({"step_up", step_now ? "passkey" : "none", step_next ? "passkey" : "none"});
  return out;
}

Result<PolicyConfig> policy_from_json(const boost::json::object& shown) {
  namespace json = boost::json;
  auto bad = [](std::string what) {
    return make_error(errc::bad_request, "The policy shown has no valid " + what + ".");
  };
  auto amounts = [](const json::value* v, std::map<std::string, int64_t>& out) {
    if (!v || !v->is_object()) return false;
    out.clear();
    for (const auto& [currency, amount] : v->as_object()) {
      if (!amount.is_int64()) return false;
      out[std::string(currency)] = amount.as_int64();
    }
    return true;
  };
  auto integer = [](const json::object& o, const char* key, int64_t& out) {
    const auto* v = o.if_contains(key);
    if (!v || !v->is_int64()) return false;
    out = v->as_int64();
    return true;
  };
  PolicyConfig p;
  const auto* tools = shown.if_contains("tools");
  if (!tools || !tools->is_array()) return bad("tools");
  for (const auto& t : tools->as_array()) {
    if (!t.is_object()) return bad("tools");
    const auto& o = t.as_object();
    if (const auto* d = o.if_contains("declared"); d && d->is_bool() && d->as_bool()) continue;
    const auto* name = o.if_contains("name");
    const auto* enabled = o.if_contains("enabled");
    const auto* tier = o.if_contains("tier");
    const auto* limits = o.if_contains("limits");
    if (!name || !name->is_string() || !known_tool(name->as_string()) || !enabled ||
        !enabled->is_bool() || !tier || !tier->is_string() || !limits || !limits->is_object())
      return bad("tool");
    const std::string n(name->as_string());
    p.tools[n] = {enabled->as_bool(), std::string(tier->as_string())};
    const auto& l = limits->as_object();
    if (n == "request_refund" && !integer(l, "window_days", p.refund_window_days))
      return bad("request_refund window");
    if (n == "cancel_order" && !integer(l, "window_days", p.cancel_window_days))
      return bad("cancel_order window");
    if (n == "add_internal_note" && !integer(l, "max_evidence", p.note_max_evidence))
      return bad("note evidence limit");
    if (n == "issue_account_credit") {
      const auto* codes = l.if_contains("reason_codes");
      if (!codes || !codes->is_array()) return bad("reason codes");
      p.credit_reason_codes.clear();
      for (const auto& c : codes->as_array()) {
        if (!c.is_string()) return bad("reason codes");
        p.credit_reason_codes.emplace_back(c.as_string());
      }
      if (!amounts(l.if_contains("hard_cap_minor"), p.credit_hard_cap_minor) ||
          !amounts(l.if_contains("support_limit_minor"), p.credit_support_limit_minor) ||
          !integer(l, "delivery_delay_after_days", p.delivery_delay_after_days))
        return bad("credit limits");
    }
  }
  // Declared operations: what tiers and refuses them (their schemas and
  // executors play no part in a replay).
  if (const auto* declared = shown.if_contains("declared")) {
    if (!declared->is_array()) return bad("declared operations");
    for (const auto& d : declared->as_array()) {
      if (!d.is_object()) return bad("declared operation");
      const auto& o = d.as_object();
      DeclaredOperation op;
      std::string money;
      for (auto [key, out] : {std::pair{"name", &op.name},
                              {"money", &money},
                              {"amount_argument", &op.amount_argument},
                              {"tier", &op.tier}}) {
        const auto* v = o.if_contains(key);
        if (!v || !v->is_string()) return bad("declared operation");
        *out = std::string(v->as_string());
      }
      op.money = money == "refund"   ? Money::refund
                 : money == "credit" ? Money::credit
                                     : Money::none;
      const auto* above = o.if_contains("tier_above_minor");
      if (!above || !above->is_object()) return bad("declared tiers");
      for (const auto& [tier, m] : above->as_object())
        if (!amounts(&m, op.tier_above_minor[std::string(tier)])) return bad("declared tiers");
      p.declared.push_back(std::move(op));
    }
  }
  if (!integer(shown, "approval_ttl_s", p.approval_ttl_s)) return bad("approval_ttl_s");
  if (!amounts(shown.if_contains("two_person_threshold_minor"), p.two_person_threshold_minor))
    return bad("two-person threshold");
  const auto* esc = shown.if_contains("escalation");
  if (!esc || !esc->is_object() ||
      !integer(esc->as_object(), "remind_after_s", p.escalation.remind_after_s) ||
      !integer(esc->as_object(), "escalate_after_s", p.escalation.escalate_after_s) ||
      !esc->as_object().contains("escalate_to_tier") ||
      !esc->as_object().at("escalate_to_tier").is_string())
    return bad("escalation");
  p.escalation.escalate_to_tier = std::string(esc->as_object().at("escalate_to_tier").as_string());
  const auto* step = shown.if_contains("step_up");
  if (!step || !step->is_object() || !step->as_object().contains("tiers") ||
      !step->as_object().at("tiers").is_array() ||
      !amounts(step->as_object().if_contains("above_minor"), p.step_up.above_minor))
    return bad("step-up");
  for (const auto& t : step->as_object().at("tiers").as_array()) {
    if (!t.is_string()) return bad("step-up tiers");
    p.step_up.tiers.emplace_back(t.as_string());
  }
  return p;
}

}  // namespace opgate::operations
