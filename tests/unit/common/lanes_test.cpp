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

TEST_CASE("stopped with drop_waiting, the tasks running finish and those waiting never run") {
  Lanes lanes("t", 1, 16);
  std::promise<void> started, release;
  auto released = release.get_future().share();
  int ran = 0, dropped_ran = 0, done_calls = 0;
  lanes.on_done([&] { ++done_calls; });
  REQUIRE(lanes.try_post("a", [&, released] {
    started.set_value();
    released.wait();
    ++ran;
  }));
  started.get_future().wait();
  REQUIRE(lanes.try_post("b", [&] { ++dropped_ran; }));
  lanes.stop(/*drop_waiting=*/true);
  CHECK_FALSE(lanes.try_post("c", [] {}));
  CHECK_FALSE(lanes.busy("b"));
  release.set_value();
  lanes.join();  // the running task and its on_done are over
  CHECK(ran == 1);
  CHECK(dropped_ran == 0);
  CHECK(done_calls == 1);
}
