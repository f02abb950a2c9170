#include "operations/policy.h"

#include <fmt/format.h>

#include <algorithm>

#include "operations/keys.h"
#include "operations/orders.h"

namespace opgate::operations {

bool known_tool(std::string_view name) {
  return std::find(std::begin(kToolNames), std::end(kToolNames), name) != std::end(kToolNames);
}

bool proposing_tool(std::string_view name) {
  return name == "request_refund" || name == "issue_account_credit" || name == "cancel_order";
}

std::vector<std::string_view> tiers_of_tool(std::string_view tool) {
  if (tool == "lookup_order") return {"auto"};
  if (tool == "add_internal_note") return {"evidence"};
  if (tool == "draft_customer_reply") return {"auto"};
  if (tool == "request_refund") return {"refund", "support", "supervisor"};
  if (tool == "issue_account_credit") return {"support", "supervisor"};
  if (tool == "cancel_order") return {"supervisor", "support"};
  return {};
}

std::map<std::string, ToolPolicy, std::less<>> PolicyConfig::default_tools() {
  std::map<std::string, ToolPolicy, std::less<>> out;
  for (auto name : kToolNames) out[std::string(name)] = {true, std::string(tiers_of_tool(name)[0])};
  return out;
}

bool PolicyConfig::enabled(std::string_view tool) const {
  auto it = tools.find(tool);
  return it != tools.end() && it->second.enabled;
}

const DeclaredOperation* PolicyConfig::declared_operation(std::string_view name) const {
  for (const auto& op : declared)
    if (op.name == name) return &op;
  return nullptr;
}

bool PolicyConfig::offers(std::string_view tool) const {
  return enabled(tool) || declared_operation(tool) != nullptr;
}

bool PolicyConfig::proposes(std::string_view tool) const {
  return proposing_tool(tool) || declared_operation(tool) != nullptr;
}

std::string PolicyConfig::tier(std::string_view tool) const {
  if (const auto* op = declared_operation(tool)) return op->tier;
  auto it = tools.find(tool);
  if (it != tools.end() && !it->second.tier.empty()) return it->second.tier;
  auto tiers = tiers_of_tool(tool);
  return tiers.empty() ? "supervisor" : std::string(tiers[0]);
}

namespace {

// Credits up to the support limit are the tool's tier when that is
// "support"; every other credit is "supervisor".
std::string credit_tier(int64_t amount_minor, const std::string& currency,
                        const PolicyConfig& policy) {
  auto support = policy.credit_support_limit_minor.find(currency);
  return policy.tier("issue_account_credit") == "support" &&
                 support != policy.credit_support_limit_minor.end() &&
                 amount_minor <= support->second
             ? "support"
             : "supervisor";
}

}  // namespace

int tier_rank(std::string_view tier) {
  if (tier == "refund") return 1;
  if (tier == "support") return 2;
  if (tier == "supervisor") return 3;
  return 0;
}

std::string tier_in_force(const pb::Proposal& p, const PolicyConfig& policy) {
  if (p.kind() == kAccountCredit) return credit_tier(p.amount_minor(), p.currency(), policy);
  if (p.kind() == kCancelOrder) return policy.tier("cancel_order");
  if (p.kind() == kFullRefund) return policy.tier("request_refund");
  if (const auto* op = policy.declared_operation(p.kind()))
    return declared_tier(*op, p.amount_minor(), p.currency());
  return "supervisor";  // a kind the policy does not know: the highest tier
}

std::optional<std::string> money_refusal(const pb::Order& order, const pb::OrderFunds& funds,
                                         int64_t amount_minor) {
  if (order.status() != pb::ORDER_PAID)
    return fmt::format("The order is {}, so no money can move against it.",
                       order_status_text(order.status()));
  const int64_t remaining = remaining_minor(order, funds);
  if (amount_minor > remaining)
    return fmt::format(
        "The amount exceeds what remains of the order's value ({}) after refunds and credits.",
        format_money(remaining, order.currency()));
  return std::nullopt;
}

bool counts_as_credit(const pb::Proposal& p) {
  return p.kind() == kAccountCredit || p.money() == "credit";
}

int64_t remaining_minor(const pb::Order& order, const pb::OrderFunds& funds) {
  if (order.status() != pb::ORDER_PAID) return 0;
  return std::max<int64_t>(0, order.amount_minor() - order.refunded_minor() -
                                  funds.refunded_minor() - funds.credited_minor() -
                                  funds.reserved_minor());
}

RefundDecision decide_refund(const pb::Order& order, const pb::OrderFunds& funds,
                             const PolicyConfig& policy, int64_t now_s) {
  RefundDecision d;
  const int64_t remaining = remaining_minor(order, funds);
  const bool refunded_in_full =
      order.status() == pb::ORDER_REFUNDED ||
      order.refunded_minor() + funds.refunded_minor() >= order.amount_minor();
  if (refunded_in_full) {
    d.reason = "The order has already been refunded.";
  } else if (order.status() != pb::ORDER_PAID) {
    d.reason = fmt::format("The order is {}, not paid, so it cannot be refunded.",
                           order_status_text(order.status()));
  } else if (remaining == 0) {
    d.reason =
        "Nothing remains to refund on this order: what was paid has been refunded, credited "
        "or is being paid out.";
  } else if (now_s - order.placed_at() > policy.refund_window_days * 86400) {
    d.reason =
        fmt::format("The order is outside the {}-day refund window.", policy.refund_window_days);
  } else {
    d.allowed = true;
    d.refundable_minor = remaining;
    d.reason = fmt::format(
        "Eligible for a full refund of {} within the {}-day window; an "
        "operator must approve it.",
        format_money(remaining, order.currency()), policy.refund_window_days);
  }
  return d;
}

CreditDecision decide_credit(const pb::Order& order, const pb::OrderFunds& funds,
                             int64_t amount_minor, const std::string& currency,
                             const std::string& reason_code, const PolicyConfig& policy,
                             int64_t now_s) {
  CreditDecision d;
  const auto& codes = policy.credit_reason_codes;
  if (std::find(codes.begin(), codes.end(), reason_code) == codes.end()) {
    d.reason = "The reason code is not one of the allowed codes.";
    return d;
  }
  if (currency != order.currency()) {
    d.reason = fmt::format("A credit for this order must be in {}.", order.currency());
    return d;
  }
  if (amount_minor <= 0) {
    d.reason = "The credit amount must be positive.";
    return d;
  }
  if (order.status() != pb::ORDER_PAID) {
    d.reason = fmt::format("The order is {}, so no credit can be issued against it.",
                           order_status_text(order.status()));
    return d;
  }
  const int64_t remaining = remaining_minor(order, funds);
  if (amount_minor > remaining) {
    d.reason = fmt::format(
        "The credit exceeds what remains of the order's value ({}) after refunds and credits.",
        format_money(remaining, order.currency()));
    return d;
  }
  auto cap = policy.credit_hard_cap_minor.find(currency);
  if (cap == policy.credit_hard_cap_minor.end() || amount_minor > cap->second) {
    d.reason = "The credit is above the limit for account credits; it cannot be issued.";
    return d;
  }
  if (reason_code == "DELIVERY_DELAY" && policy.delivery_delay_after_days > 0) {
    // Server-side fields only: the event statuses and times, never their text.
    if (delivered(order)) {
      d.reason = "The order was delivered, so a delivery-delay credit does not apply.";
      return d;
    }
    if (now_s - order.placed_at() < policy.delivery_delay_after_days * 86400) {
      d.reason = fmt::format(
          "A delivery-delay credit applies only to an order not delivered {} days after it was "
          "placed.",
          policy.delivery_delay_after_days);
      return d;
    }
  }
  d.allowed = true;
  d.tier = credit_tier(amount_minor, currency, policy);
  d.reason =
      fmt::format("Credit of {} needs {} approval.", format_money(amount_minor, currency), d.tier);
  return d;
}

CancelDecision decide_cancel(const pb::Order& order, const pb::OrderFunds& funds,
                             const PolicyConfig& policy, int64_t now_s) {
  CancelDecision d;
  if (order.status() == pb::ORDER_CANCELLED) {
    d.reason = "The order is already cancelled.";
  } else if (order.status() != pb::ORDER_PAID) {
    d.reason = fmt::format("The order is {}, so it cannot be cancelled.",
                           order_status_text(order.status()));
  } else if (delivered(order)) {
    d.reason = "The order was delivered, so it can no longer be cancelled; ask for a refund.";
  } else if (funds.reserved_minor() > 0) {
    d.reason = "A refund or credit for this order is being paid out; it must settle first.";
  } else if (remaining_minor(order, funds) == 0) {
    d.reason =
        "Nothing remains to refund on this order, so opgate cannot cancel it; a person must do "
        "it at the order service.";
  } else if (now_s - order.placed_at() > policy.cancel_window_days * 86400) {
    d.reason = fmt::format("The order is outside the {}-day window for cancellations.",
                           policy.cancel_window_days);
  } else {
    d.allowed = true;
    d.refund_minor = remaining_minor(order, funds);
    d.reason =
        fmt::format("The order can be cancelled, refunding {}; a {} must approve it.",
                    format_money(d.refund_minor, order.currency()), policy.tier("cancel_order"));
  }
  return d;
}

bool order_changed(const pb::Proposal& p, const pb::Order& order) {
  return p.order_amount_minor() != order.amount_minor() || p.order_currency() != order.currency() ||
         p.order_status() != order.status() || p.owner() != order.owner() ||
         p.payment_intent() != order.payment_intent() || p.customer() != order.customer();
}

std::optional<std::string> recheck(const pb::Proposal& p, const pb::Order& order,
                                   const pb::OrderFunds& funds, const PolicyConfig& policy,
                                   int64_t now_s) {
  if (order_changed(p, order)) return "The order changed after the proposal was made.";
  if (p.kind() == kFullRefund) {
    auto d = decide_refund(order, funds, policy, now_s);
    if (!d.allowed) return d.reason;
    if (p.amount_minor() > d.refundable_minor)
      return fmt::format("The order no longer has {} left to refund ({} remains).",
                         format_money(p.amount_minor(), p.currency()),
                         format_money(d.refundable_minor, p.currency()));
    return std::nullopt;
  }
  if (p.kind() == kAccountCredit) {
    // The tier is not compared here: a pending proposal is re-tiered before
    // it is decided (decisions.h), and the decision binds its execution.
    auto d = decide_credit(order, funds, p.amount_minor(), p.currency(), p.reason(), policy, now_s);
    if (!d.allowed) return d.reason;
    return std::nullopt;
  }
  if (p.kind() == kCancelOrder) {
    auto d = decide_cancel(order, funds, policy, now_s);
    if (!d.allowed) return d.reason;
    if (p.amount_minor() != d.refund_minor)
      return fmt::format("The order now has {} left to refund, not {}.",
                         format_money(d.refund_minor, p.currency()),
                         format_money(p.amount_minor(), p.currency()));
    return std::nullopt;
  }
  if (const auto* op = policy.declared_operation(p.kind())) {
    if (p.money() != to_string(op->money))
      return fmt::format("The declaration of {} changed how it moves money.", op->name);
    // A reload may have narrowed what the declaration accepts (a lower
    // maximum, an enum value dropped, a parameter renamed or required): the
    // proposal is held to the declaration in force, as a credit to its cap.
    auto checked = check_declared_arguments(*op, p.arguments_json());
    if (const auto* refusal = std::get_if<std::string>(&checked))
      return fmt::format("Its arguments no longer fit the declaration of {}: {}", op->name,
                         *refusal);
    if (op->money == Money::none) return std::nullopt;
    const auto& args = std::get<boost::json::object>(checked);
    const auto* amount = args.if_contains(op->amount_argument);
    if (!amount || !amount->is_int64() || amount->as_int64() != p.amount_minor())
      return fmt::format("The declaration of {} now takes its amount from another argument.",
                         op->name);
    return money_refusal(order, funds, p.amount_minor());
  }
  if (!p.money().empty())
    return fmt::format("{} is no longer declared in the configuration.", p.kind());
  return "The policy does not know this kind of operation.";
}

int approvals_needed(const pb::Proposal& p, const PolicyConfig& policy) {
  auto threshold = policy.two_person_threshold_minor.find(p.currency());
  if (threshold == policy.two_person_threshold_minor.end()) return 2;
  return p.amount_minor() > threshold->second ? 2 : 1;
}

std::string format_money(int64_t amount_minor, const std::string& currency) {
  const char* sign = amount_minor < 0 ? "-" : "";
  int64_t a = amount_minor < 0 ? -amount_minor : amount_minor;
  return fmt::format("{}{}.{:02} {}", sign, a / 100, a % 100, currency);
}

bool valid_currency(const std::string& code) {
  return code.size() == 3 &&
         std::all_of(code.begin(), code.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

}  // namespace opgate::operations
