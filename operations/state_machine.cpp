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
  return make_error("invalid_transition", std::string("cannot ") + std::string(to_string(event)) +
                                              " an operation that is " +
                                              std::string(to_string(from)));
}

namespace {
constexpr std::array<std::string_view, 5> kStates = {"pending", "approved", "executing",
                                                     "outcome_unknown", "settled"};
constexpr std::array<std::string_view, 7> kOutcomes = {"",        "succeeded", "failed",   "denied",
                                                       "expired", "rejected",  "cancelled"};
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

std::string_view to_string(State s) { return kStates[static_cast<size_t>(s)]; }
std::string_view to_string(Outcome o) { return kOutcomes[static_cast<size_t>(o)]; }
std::string_view to_string(Event e) { return kEvents[static_cast<size_t>(e)]; }

std::optional<State> parse_state(std::string_view s) {
  for (size_t i = 0; i < kStates.size(); ++i)
    if (kStates[i] == s) return static_cast<State>(i);
  return std::nullopt;
}

std::optional<Outcome> parse_outcome(std::string_view s) {
  for (size_t i = 1; i < kOutcomes.size(); ++i)
    if (kOutcomes[i] == s) return static_cast<Outcome>(i);
  return std::nullopt;
}

}  // namespace opgate::operations
