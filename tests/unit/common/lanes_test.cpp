#include "common/lanes.h"

#include <doctest/doctest.h>

#include <future>
#include <string>

using opgate::Lanes;

TEST_CASE("a dispatcher loads work until twice the threads are in flight, then none") {
  Lanes lanes("t", 2, 16);
  std::promise<void> release;
  auto released = release.get_future().share();
  CHECK(lanes.batch_for(100) == 2 * 2 + 8);  // nothing in flight
  CHECK(lanes.batch_for(5) == 5);            // never more than asked
  for (int i = 0; i < 3; ++i)
    REQUIRE(lanes.try_post("lane" + std::to_string(i), [released] { released.wait(); }));
  CHECK(lanes.batch_for(100) == 1 + 8);  // two running, one queued
  REQUIRE(lanes.try_post("lane3", [released] { released.wait(); }));
  CHECK(lanes.batch_for(100) == 0);       // every thread busy and as many queued behind
  CHECK(lanes.try_post("lane4", [] {}));  // a caller that insists is still accepted
  release.set_value();
  lanes.wait_idle();
  CHECK(lanes.batch_for(100) == 2 * 2 + 8);
}
