// Fault-injection rules shared by both simulators: parsed from the admin API,
// matched against requests by method, path prefix and an optional subject key
// (the payment's metadata[operation_key], or the agent event's call_id), each
// match consuming one of the rule's uses. Thread-safe: FaultTable locks itself.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/result.h"

namespace opgate::sim {

enum class FaultAction {
  kDelay,                 // sleep delay_ms, then process normally
  kDropBeforeCommit,      // close the connection; nothing happens
  kDropAfterCommit,       // process, then close without answering
  kError500BeforeCommit,  // answer 500; nothing happens
  kError500AfterCommit,   // process (and save for the idempotency key), answer 500
  kRateLimit,             // answer 429 with Retry-After; nothing happens
  kDecline,               // answer 402 card_declined (payments)
  kPending,               // create the refund as "pending" (payments, refunds)
  kGone,                  // answer 410 Gone (notification receiver)
  kMalformed,             // answer 200 with a body that is not what was asked (orders)
};

std::string_view to_string(FaultAction action);
std::optional<FaultAction> fault_action_from_string(std::string_view text);

// Sets of actions, as bit masks, for what an endpoint supports or a
// simulator accepts.
using FaultActionSet = uint32_t;
constexpr FaultActionSet fault_bit(FaultAction a) { return 1u << static_cast<uint32_t>(a); }
constexpr FaultActionSet fault_set(std::initializer_list<FaultAction> actions) {
  FaultActionSet s = 0;
  for (auto a : actions) s |= fault_bit(a);
  return s;
}
// The transport-level faults every endpoint supports.
constexpr FaultActionSet kTransportFaults =
    fault_set({FaultAction::kDelay, FaultAction::kDropBeforeCommit, FaultAction::kDropAfterCommit,
               FaultAction::kError500BeforeCommit, FaultAction::kError500AfterCommit,
               FaultAction::kRateLimit});

struct FaultRule {
  std::string method;                  // "" = any method
  std::string path_prefix;             // "" = any path
  std::optional<std::string> subject;  // exact subject key to match, if set
  FaultAction action = FaultAction::kDelay;
  int64_t delay_ms = 0;       // slept before the action, for every action
  int64_t retry_after_s = 1;  // rate_limit only
  int64_t times = 1;          // uses left; -1 = forever
  uint64_t id = 0;            // assigned by the table
};

// Parses {"rules":[...]}; every rule must name an action in `allowed`.
// `subject_field` is the JSON name of the subject key ("operation_key").
// Unknown fields are refused, so a typo cannot silently match everything.
Result<std::vector<FaultRule>> parse_fault_rules(const boost::json::value& body,
                                                 FaultActionSet allowed,
                                                 std::string_view subject_field);

boost::json::object fault_rule_to_json(const FaultRule& rule, std::string_view subject_field);

// What a request looks like to the matcher.
struct FaultQuery {
  std::string_view method;
  std::string_view path;
  std::optional<std::string_view> subject;
  FaultActionSet supported = kTransportFaults;  // actions this endpoint can act out
};

class FaultTable {
 public:
  static constexpr size_t kMaxRules = 1000;

  // Appends rules; error "too_many_rules" (nothing added) past kMaxRules.
  Status add(std::vector<FaultRule> rules) EXCLUDES(mu_);
  void clear() EXCLUDES(mu_);
  std::vector<FaultRule> list() const EXCLUDES(mu_);
  // First rule, in insertion order, that matches and has uses left; consumes
  // one use. Rules whose action the endpoint does not support never match.
  std::optional<FaultRule> take(const FaultQuery& query) EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::vector<FaultRule> rules_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
};

}  // namespace opgate::sim
