// The operation state machine of DESIGN.md §2 as a pure function: given a
// state and an event, the next state and outcome, or an error naming the
// refused transition. No I/O; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace opgate::operations {

enum class State { pending, approved, executing, outcome_unknown, settled };
enum class Outcome { none, succeeded, failed, denied, expired, rejected, cancelled };

enum class Event {
  approve,                 // all approvals the policy requires are present
  deny,                    // an operator denies
  expire,                  // the approval TTL passed
  reject,                  // the order or policy changed since the proposal
  claim,                   // the drainer takes it, durably, before the provider call
  provider_succeeded,      // the provider confirms success
  provider_refused,        // a definite refusal (decline, invalid request)
  provider_indeterminate,  // timeout, 5xx, 429, connection loss
  restart,                 // the daemon started while the operation was executing
  reconcile_succeeded,     // the reconciler found the provider object, succeeded
  reconcile_failed,        // the reconciler found the provider object, failed
  reconcile_absent,        // the provider proved it has no object for the key
  resolve_succeeded,       // on-call settles by hand with evidence
  resolve_failed,
};

struct Target {
  State state;
  Outcome outcome = Outcome::none;
  bool operator==(const Target&) const = default;
};

// Error code "invalid_transition" for every transition §2 does not allow.
Result<Target> next(State from, Event event);

std::string_view to_string(State s);
std::string_view to_string(Outcome o);  // "" for none
std::string_view to_string(Event e);
std::optional<State> parse_state(std::string_view s);
std::optional<Outcome> parse_outcome(std::string_view s);

}  // namespace opgate::operations
