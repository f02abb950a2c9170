// Server-owned business policy: which orders may be refunded or credited,
// for how much, which approval tier a proposal needs and how many people
// must approve it. Pure functions of the order, what opgate already moved
// for it, the policy and the time; nothing the model says enters here.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "operations/declared.h"
#include "opgate.pb.h"

namespace opgate::operations {

// The tools the model is offered, in the order they are published.
inline constexpr std::string_view kToolNames[] = {"lookup_order",         "add_internal_note",
                                                  "draft_customer_reply", "request_refund",
                                                  "issue_account_credit", "cancel_order"};
bool known_tool(std::string_view name);
// Whether calling the tool may propose an operation (and so may wait for a
// person): refunds, credits, cancellations.
bool proposing_tool(std::string_view name);

// The tiers a tool may be given ([policy.tools.NAME] tier), its default
// first: "auto" answers at once, "evidence" answers at once once the
// server has checked the agent's evidence, "refund", "support" and
// "supervisor" are the approval tiers of a proposal.
std::vector<std::string_view> tiers_of_tool(std::string_view tool);

struct ToolPolicy {
  bool enabled = true;
  std::string tier;  // one of tiers_of_tool(name)
};

// The approval tiers, lowest first: refund < support < supervisor; 0 for
// anything else.
int tier_rank(std::string_view tier);

// [policy.escalation]: a proposal nobody decided is reminded about after
// remind_after_s (operation.reminder), and after escalate_after_s its tier
// is raised to escalate_to_tier (operation.escalated). 0 turns either off.
// Expiry still fails closed at approval_ttl_s.
// [console.step_up]: approvals of proposals in these tiers, or above these
// amounts (per currency), need a passkey's assertion (operations/step_up.h);
// with any amount set, so does money in a currency it names no amount for.
struct StepUpPolicy {
  std::vector<std::string> tiers;
  std::map<std::string, int64_t> above_minor;
};

struct EscalationPolicy {
  int64_t remind_after_s = 0;
  int64_t escalate_after_s = 0;
  std::string escalate_to_tier = "supervisor";
};

struct PolicyConfig {
  // [policy.tools.NAME]: whether the tool is offered, and its tier. Every
  // known tool has an entry; today's tiers are the defaults.
  std::map<std::string, ToolPolicy, std::less<>> tools = default_tools();
  static std::map<std::string, ToolPolicy, std::less<>> default_tools();
  bool enabled(std::string_view tool) const;
  std::string tier(std::string_view tool) const;

  // [[operations]]: the tools a team declared (operations/declared.h),
  // offered after the built-in ones, in the file's order.
  std::vector<DeclaredOperation> declared;
  const DeclaredOperation* declared_operation(std::string_view name) const;
  // Whether the model is offered the tool (built-in and enabled, or
  // declared), and whether calling it may propose an operation.
  bool offers(std::string_view tool) const;
  bool proposes(std::string_view tool) const;

  // add_internal_note: at most this many pieces of evidence per note.
  int64_t note_max_evidence = 10;
  // DELIVERY_DELAY credits need an order with no "delivered" event at least
  // this many days after it was placed; 0 disables the check.
  int64_t delivery_delay_after_days = 0;

  int64_t refund_window_days = 30;
  // cancel_order: orders placed longer ago than this are not cancelled.
  int64_t cancel_window_days = 30;
  int64_t approval_ttl_s = 86400;
  // Amounts above this (per currency) need two distinct approvers; a
  // currency without an entry always does.
  std::map<std::string, int64_t> two_person_threshold_minor{{"USD", 50000}, {"GBP", 50000}};
  std::vector<std::string> credit_reason_codes{"DELIVERY_DELAY", "DAMAGED_ITEM", "GOODWILL"};
  // Credits above this are refused outright; a currency without an entry
  // gets no credits.
  std::map<std::string, int64_t> credit_hard_cap_minor{{"USD", 10000}, {"GBP", 10000}};
  // Credits up to this are tier "support"; above it, tier "supervisor".
  std::map<std::string, int64_t> credit_support_limit_minor{{"USD", 2000}, {"GBP", 2000}};
  EscalationPolicy escalation;
  StepUpPolicy step_up;
  // operations::policy_sha256 of this policy, set once it is loaded (empty:
  // computed when asked).
  std::string sha256;
};

// What refunds and credits may still take from the order: what was paid,
// less what was refunded outside opgate, less what opgate refunded, credited
// or is paying out now. Zero unless the order is paid.
int64_t remaining_minor(const pb::Order& order, const pb::OrderFunds& funds);

struct RefundDecision {
  bool allowed = false;
  std::string reason;  // one sentence, safe to show to the model and the customer
  int64_t refundable_minor = 0;
};
RefundDecision decide_refund(const pb::Order& order, const pb::OrderFunds& funds,
                             const PolicyConfig& policy, int64_t now_s);

struct CreditDecision {
  bool allowed = false;
  std::string reason;
  std::string tier;  // "support" | "supervisor" when allowed
};
CreditDecision decide_credit(const pb::Order& order, const pb::OrderFunds& funds,
                             int64_t amount_minor, const std::string& currency,
                             const std::string& reason_code, const PolicyConfig& policy,
                             int64_t now_s);

// cancel_order: the order may be cancelled while it is paid and not
// delivered; what remains refundable is refunded with it (possibly
// nothing, when all was credited).
struct CancelDecision {
  bool allowed = false;
  std::string reason;
  int64_t refund_minor = 0;
};
CancelDecision decide_cancel(const pb::Order& order, const pb::OrderFunds& funds,
                             const PolicyConfig& policy, int64_t now_s);

// Why the order cannot give `amount_minor` to a declared operation that
// moves money (not paid, or more than remains), or nothing.
std::optional<std::string> money_refusal(const pb::Order& order, const pb::OrderFunds& funds,
                                         int64_t amount_minor);

// Whether a settled proposal adds to what was credited (a credit, built in
// or declared) rather than to what was refunded.
bool counts_as_credit(const pb::Proposal& proposal);

// The approval tier the policy gives a proposal now: the tool's tier for a
// refund or a cancellation, by amount for a credit or a declared operation
// (a kind no longer declared: supervisor). A pending proposal is
// decided under the tier in force at the decision (decisions.h).
std::string tier_in_force(const pb::Proposal& proposal, const PolicyConfig& policy);

// True if the order no longer matches what the proposal was computed from.
bool order_changed(const pb::Proposal& proposal, const pb::Order& order);

// Whether the policy still allows the proposal now (before an approval and
// before execution): nothing if it does, else the reason it must be
// rejected. `funds` must not yet hold this operation's own reservation.
std::optional<std::string> recheck(const pb::Proposal& proposal, const pb::Order& order,
                                   const pb::OrderFunds& funds, const PolicyConfig& policy,
                                   int64_t now_s);

// Distinct approvals the proposal needs: two above the currency's threshold,
// and two when the currency has none (fail closed).
int approvals_needed(const pb::Proposal& proposal, const PolicyConfig& policy);

// Minor units rendered for people: 2500 USD -> "25.00 USD".
std::string format_money(int64_t amount_minor, const std::string& currency);

// Upper-case three-letter codes (ISO 4217 form).
bool valid_currency(const std::string& code);

}  // namespace opgate::operations
