#include "operations/state_machine.h"

#include <doctest/doctest.h>

#include <map>

using namespace opgate::operations;

namespace {
// The whole transition table (operations/state_machine.h); every pair not in it must be refused.
const std::map<std::pair<State, Event>, Target> kAllowed = {
    {{State::pending, Event::approve}, {State::approved}},
    {{State::pending, Event::deny}, {State::settled, Outcome::denied}},
    {{State::pending, Event::expire}, {State::settled, Outcome::expired}},
    {{State::pending, Event::reject}, {State::settled, Outcome::rejected}},
    {{State::approved, Event::reject}, {State::settled, Outcome::rejected}},
    {{State::approved, Event::claim}, {State::executing}},
    {{State::executing, Event::provider_succeeded}, {State::settled, Outcome::succeeded}},
    {{State::executing, Event::provider_refused}, {State::settled, Outcome::failed}},
    {{State::executing, Event::provider_indeterminate}, {State::outcome_unknown}},
    {{State::executing, Event::restart}, {State::outcome_unknown}},
    {{State::outcome_unknown, Event::reconcile_succeeded}, {State::settled, Outcome::succeeded}},
    {{State::outcome_unknown, Event::reconcile_failed}, {State::settled, Outcome::failed}},
    {{State::outcome_unknown, Event::reconcile_absent}, {State::executing}},
    {{State::outcome_unknown, Event::resolve_succeeded}, {State::settled, Outcome::succeeded}},
    {{State::outcome_unknown, Event::resolve_failed}, {State::settled, Outcome::failed}},
};
const State kStates[] = {State::pending, State::approved, State::executing, State::outcome_unknown,
                         State::settled};
}  // namespace

TEST_CASE("every transition of the design table is allowed with its target") {
  for (const auto& [from_event, target] : kAllowed) {
    const State from = from_event.first;
    const Event event = from_event.second;
    auto r = next(from, event);
    CAPTURE(to_string(from));
    CAPTURE(to_string(event));
    REQUIRE(r.ok());
    CHECK(*r == target);
  }
}

TEST_CASE("every transition outside the design table is refused as an error") {
  int refused = 0;
  for (State s : kStates) {
    for (int e = 0; e <= static_cast<int>(Event::resolve_failed); ++e) {
      Event event = static_cast<Event>(e);
      if (kAllowed.count({s, event})) continue;
      auto r = next(s, event);
      CAPTURE(to_string(s));
      CAPTURE(to_string(event));
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == "invalid_transition");
      ++refused;
    }
  }
  CHECK(refused == 5 * 14 - static_cast<int>(kAllowed.size()));
}

TEST_CASE("only an explicit decision moves pending; a timeout never fails an operation") {
  for (Event e : {Event::claim, Event::provider_succeeded, Event::provider_refused, Event::restart,
                  Event::reconcile_absent})
    CHECK_FALSE(next(State::pending, e).ok());
  auto timeout = next(State::executing, Event::provider_indeterminate);
  REQUIRE(timeout.ok());
  CHECK(timeout->state == State::outcome_unknown);
  CHECK(timeout->outcome == Outcome::none);
}

TEST_CASE("a settled operation accepts no event at all") {
  for (int e = 0; e <= static_cast<int>(Event::resolve_failed); ++e)
    CHECK_FALSE(next(State::settled, static_cast<Event>(e)).ok());
}

TEST_CASE("states and outcomes round-trip through their names") {
  for (State s : kStates) CHECK(parse_state(to_string(s)) == s);
  CHECK(parse_outcome("denied") == Outcome::denied);
  CHECK_FALSE(parse_state("done").has_value());
  CHECK_FALSE(parse_outcome("").has_value());
}
