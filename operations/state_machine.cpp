#include "operations/state_machine.h"

#include <array>

namespace opgate::operations {

Result<Target> next(State from, Event event) {
  using S = State;
  using E = Event;
  using O = Outcome;
  auto to = [](S s, O o = O::none) { return Result<Target>(Target{s, o}); };
  switch (from) {
    case S::pending:
      switch (event) {
        case E::approve:
          return to(S::approved);
        case E::deny:
          return to(S::settled, O::denied);
        case E::expire:
          return to(S::settled, O::expired);
        case E::reject:
          return to(S::settled, O::rejected);
        default:
          break;
      }
      break;
    case S::approved:
      switch (event) {
        case E::reject:
          return to(S::settled, O::rejected);
        case E::claim:
          return to(S::executing);
        default:
          break;
      }
      break;
    case S::executing:
      switch (event) {
        case E::provider_succeeded:
          return to(S::settled, O::succeeded);
        case E::provider_refused:
          return to(S::settled, O::failed);
        case E::provider_indeterminate:
        case E::restart:
          return to(S::outcome_unknown);
        default:
          break;
      }
      break;
    case S::outcome_unknown:
      switch (event) {
        case E::reconcile_succeeded:
        case E::resolve_succeeded:
          return to(S::settled, O::succeeded);
        case E::reconcile_failed:
        case E::resolve_failed:
          return to(S::settled, O::failed);
        case E::reconcile_absent:
          return to(S::executing);
        default:
          break;
      }
      break;
    case S::settled:
      break;
  }
  return make_error(errc::invalid_transition,
                    std::string("cannot ") + std::string(to_string(event)) +
                        " an operation that is " + std::string(to_string(from)));
}

namespace {
struct StateName {
  State state;
  std::string_view name;
};
constexpr std::array<StateName, 5> kStates = {{{State::pending, "pending"},
                                               {State::approved, "approved"},
                                               {State::executing, "executing"},
                                               {State::outcome_unknown, "outcome_unknown"},
                                               {State::settled, "settled"}}};
struct OutcomeName {
  Outcome outcome;
  std::string_view name;
};
constexpr std::array<OutcomeName, 7> kOutcomes = {{{Outcome::none, ""},
                                                   {Outcome::succeeded, "succeeded"},
                                                   {Outcome::failed, "failed"},
                                                   {Outcome::denied, "denied"},
                                                   {Outcome::expired, "expired"},
                                                   {Outcome::rejected, "rejected"},
                                                   {Outcome::cancelled, "cancelled"}}};
constexpr std::array<std::string_view, 14> kEvents = {"approve",
                                                      "deny",
                                                      "expire",
                                                      "reject",
                                                      "claim",
                                                      "provider_succeeded",
                                                      "provider_refused",
                                                      "provider_indeterminate",
                                                      "restart",
                                                      "reconcile_succeeded",
                                                      "reconcile_failed",
                                                      "reconcile_absent",
                                                      "resolve_succeeded",
                                                      "resolve_failed"};
}  // namespace

std::string_view to_string(State s) {
  for (const auto& n : kStates)
    if (n.state == s) return n.name;
  return "";
}
std::string_view to_string(Outcome o) {
  for (const auto& n : kOutcomes)
    if (n.outcome == o) return n.name;
  return "";
}
std::string_view to_string(Event e) { return kEvents[static_cast<size_t>(e)]; }

std::optional<State> parse_state(std::string_view s) {
  for (const auto& n : kStates)
    if (n.name == s) return n.state;
  return std::nullopt;
}

std::optional<Outcome> parse_outcome(std::string_view s) {
  for (const auto& n : kOutcomes)
    if (!n.name.empty() && n.name == s) return n.outcome;
  return std::nullopt;
}

std::string_view state_text(const pb::Operation& op) { return to_string(state_of(op)); }
std::string_view outcome_text(const pb::Operation& op) { return to_string(outcome_of(op)); }

}  // namespace opgate::operations
