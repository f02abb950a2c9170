// The items a dispatcher's lanes hold: left out of its scans until their
// tasks end, and those asked to rest until their time has passed too.
#include "outbox/held_items.h"

#include <doctest/doctest.h>

using namespace opgate;
using outbox::HeldItems;

TEST_CASE("a held item is left out until its task ends; a resting one until its time, too") {
  HeldItems held;
  held.hold("a");
  held.hold("b");
  CHECK(held.current(0).size() == 2);
  {
    const HeldItems::Release ended(held, "a");
    const HeldItems::Release rested(held, "b");
    held.rest("b", 1'000);
    // Their tasks have not ended: both held, whatever the time.
    CHECK(held.current(5'000).size() == 2);
  }
  // "a" ends; "b" rests until 1,000.
  CHECK(held.current(999) == store::OutboxIds{"b"});
  CHECK(held.current(1'000).empty());
}

TEST_CASE("a resting item whose time passes before its task ends stays held until it ends") {
  HeldItems held;
  held.hold("a");
  std::optional<HeldItems::Release> task;
  task.emplace(held, "a");
  held.rest("a", 10);
  CHECK(held.current(100) == store::OutboxIds{"a"});  // still in its lane
  task.reset();
  CHECK(held.current(100).empty());
}

TEST_CASE("an item asked to rest that this dispatcher does not hold is not kept out") {
  HeldItems held;
  held.rest("x", 1'000'000);  // run outside the lanes
  CHECK(held.current(0).empty());
  held.hold("x");  // handed out later: not resting
  { const HeldItems::Release task(held, "x"); }
  CHECK(held.current(0).empty());
}
