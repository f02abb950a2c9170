// Server-owned business policy: which orders may be refunded or credited,
// for how much, and which approval tier a proposal needs. Pure functions of
// the order, the policy and the time; nothing the model says enters here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "opgate.pb.h"

namespace opgate::worker {

struct PolicyConfig {
  int64_t refund_window_days = 30;
  int64_t approval_ttl_s = 86400;
  // Amounts above this (per currency) need two distinct approvers.
  std::map<std::string, int64_t> two_person_threshold_minor{{"USD", 50000}, {"GBP", 50000}};
  std::vector<std::string> credit_reason_codes{"DELIVERY_DELAY", "DAMAGED_ITEM", "GOODWILL"};
  // Credits above this are refused outright.
  std::map<std::string, int64_t> credit_hard_cap_minor{{"USD", 10000}, {"GBP", 10000}};
  // Credits up to this are tier "support"; above it, tier "supervisor".
  std::map<std::string, int64_t> credit_support_limit_minor{{"USD", 2000}, {"GBP", 2000}};
};

struct RefundDecision {
  bool allowed = false;
  std::string reason;  // one sentence, safe to show to the model and the customer
  int64_t refundable_minor = 0;
};

int64_t refundable_minor(const pb::Order& order);
RefundDecision decide_refund(const pb::Order& order, const PolicyConfig& policy, int64_t now_s);

struct CreditDecision {
  bool allowed = false;
  std::string reason;
  std::string tier;  // "support" | "supervisor" when allowed
};

CreditDecision decide_credit(const pb::Order& order, int64_t amount_minor,
                             const std::string& currency, const std::string& reason_code,
                             const PolicyConfig& policy);

// True if the order no longer matches what the proposal was computed from.
bool order_changed(const pb::Proposal& proposal, const pb::Order& order);

// Minor units rendered for people: 2500 USD -> "25.00 USD".
std::string format_money(int64_t amount_minor, const std::string& currency);

}  // namespace opgate::worker
