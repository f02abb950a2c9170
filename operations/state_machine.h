// The operation state machine as a pure function: given a state and an
// event, the next state and outcome, or an error naming the refused
// transition. The enums carry the stored (protobuf) values, so converting
// between the two is one cast, done by state_of/outcome_of and set_target.
// No I/O; thread-safe.
//
//   from              event                               to
//   (none)            valid tool request                  pending
//   pending           every approval the policy requires  approved
//   pending           deny | expire                       settled/denied | expired
//   pending,approved  reject (order or policy changed)    settled/rejected
//   approved          claim (durably, before the call)    executing
//   executing         provider succeeded | refused        settled/succeeded | failed
//   executing         indeterminate | restart             outcome_unknown
//   outcome_unknown   reconcile found: succeeded | failed settled/succeeded | failed
//   outcome_unknown   reconcile proved absent             executing (same key)
//   outcome_unknown   resolve (on-call, with evidence)    settled/succeeded | failed
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "opgate.pb.h"

namespace opgate::operations {

enum class State {
  pending = pb::STATE_PENDING,
  approved = pb::STATE_APPROVED,
  executing = pb::STATE_EXECUTING,
  outcome_unknown = pb::STATE_OUTCOME_UNKNOWN,
  settled = pb::STATE_SETTLED,
};
enum class Outcome {
  none = pb::OUTCOME_NONE,
  succeeded = pb::OUTCOME_SUCCEEDED,
  failed = pb::OUTCOME_FAILED,
  denied = pb::OUTCOME_DENIED,
  expired = pb::OUTCOME_EXPIRED,
  rejected = pb::OUTCOME_REJECTED,
  cancelled = pb::OUTCOME_CANCELLED,
};

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

// Error code "invalid_transition" for every transition the table above does
// not allow.
Result<Target> next(State from, Event event);

inline State state_of(const pb::Operation& op) { return static_cast<State>(op.state()); }
inline Outcome outcome_of(const pb::Operation& op) { return static_cast<Outcome>(op.outcome()); }
inline bool is(const pb::Operation& op, State s) { return state_of(op) == s; }
inline bool is(const pb::Operation& op, Outcome o) { return outcome_of(op) == o; }
inline void set_target(pb::Operation& op, Target t) {
  op.set_state(static_cast<pb::OperationState>(t.state));
  op.set_outcome(static_cast<pb::Outcome>(t.outcome));
}

std::string_view to_string(State s);
std::string_view to_string(Outcome o);  // "" for none
std::string_view to_string(Event e);
std::optional<State> parse_state(std::string_view s);
std::optional<Outcome> parse_outcome(std::string_view s);
// The stored state's text ("" for a record with none).
std::string_view state_text(const pb::Operation& op);
std::string_view outcome_text(const pb::Operation& op);

}  // namespace opgate::operations
