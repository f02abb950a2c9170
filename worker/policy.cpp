#include "worker/policy.h"

#include <fmt/format.h>

#include <algorithm>

namespace opgate::worker {

int64_t refundable_minor(const pb::Order& order) {
  if (order.status() != "paid") return 0;
  return std::max<int64_t>(0, order.amount_minor() - order.refunded_minor());
}

RefundDecision decide_refund(const pb::Order& order, const PolicyConfig& policy, int64_t now_s) {
  RefundDecision d;
  d.refundable_minor = refundable_minor(order);
  if (order.status() == "refunded" || (order.status() == "paid" && d.refundable_minor == 0)) {
    d.reason = "The order has already been refunded.";
  } else if (order.status() != "paid") {
    d.reason = fmt::format("The order is {}, not paid, so it cannot be refunded.", order.status());
  } else if (now_s - order.placed_at() > policy.refund_window_days * 86400) {
    d.reason =
        fmt::format("The order is outside the {}-day refund window.", policy.refund_window_days);
  } else {
    d.allowed = true;
    d.reason = fmt::format(
        "Eligible for a full refund of {} within the {}-day window; an "
        "operator must approve it.",
        format_money(d.refundable_minor, order.currency()), policy.refund_window_days);
  }
  if (!d.allowed) d.refundable_minor = 0;
  return d;
}

CreditDecision decide_credit(const pb::Order& order, int64_t amount_minor,
                             const std::string& currency, const std::string& reason_code,
                             const PolicyConfig& policy) {
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
  if (order.status() != "paid") {
    d.reason =
        fmt::format("The order is {}, so no credit can be issued against it.", order.status());
    return d;
  }
  const int64_t refundable = refundable_minor(order);
  if (amount_minor > refundable) {
    d.reason = fmt::format("The credit exceeds the order's refundable value of {}.",
                           format_money(refundable, order.currency()));
    return d;
  }
  auto cap = policy.credit_hard_cap_minor.find(currency);
  if (cap == policy.credit_hard_cap_minor.end() || amount_minor > cap->second) {
    d.reason = "The credit is above the limit for account credits; it cannot be issued.";
    return d;
  }
  auto support = policy.credit_support_limit_minor.find(currency);
  d.allowed = true;
  d.tier = (support != policy.credit_support_limit_minor.end() && amount_minor <= support->second)
               ? "support"
               : "supervisor";
  d.reason =
      fmt::format("Credit of {} needs {} approval.", format_money(amount_minor, currency), d.tier);
  return d;
}

bool order_changed(const pb::Proposal& p, const pb::Order& order) {
  return p.order_amount_minor() != order.amount_minor() || p.order_currency() != order.currency() ||
         p.order_status() != order.status() || p.owner() != order.owner();
}

std::string format_money(int64_t amount_minor, const std::string& currency) {
  const char* sign = amount_minor < 0 ? "-" : "";
  int64_t a = amount_minor < 0 ? -amount_minor : amount_minor;
  return fmt::format("{}{}.{:02} {}", sign, a / 100, a % 100, currency);
}

}  // namespace opgate::worker
