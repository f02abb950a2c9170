// The dispatcher's intervals and liveness run on the clock's monotonic time,
// so a step of the wall clock (an NTP correction) neither starts a sweep
// early nor makes a stuck dispatcher look alive. Injected clock, real store.
#include "daemon/engine.h"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "becomes_true.h"
#include "world.h"

using namespace opgate;
using namespace std::chrono_literals;

namespace {

struct World : testing::World {
  World() {
    seed_order("ORDER-100");
    REQUIRE(sync->bind("sess_1", "demo-user", "admin").ok());
  }
  void require_lookup(const std::string& call_id) {
    operations::SessionView v;
    v.status = "requires_action";
    v.required_actions = {{call_id, "turn_1", "lookup_order", R"({"order_id":"ORDER-100"})"}};
    std::lock_guard lock(agents.mu);
    agents.views["sess_1"] = v;
  }
  bool answered(const std::string& call_id) {
    auto c = call("sess_1", "turn_1", call_id);
    return c && c->result_saved();
  }
  // Waits (bounded) for the dispatcher thread to finish a pass.
  static bool becomes_alive(const daemon::Engine& e, std::chrono::milliseconds within) {
    return testing::becomes_true([&] { return e.alive(within); }, 10s);
  }
};

}  // namespace

TEST_CASE("ManualClock: advancing moves both clocks, setting the wall clock moves it alone") {
  ManualClock clock(1'000'000);
  clock.advance_ms(1500);
  CHECK(clock.now_ms() == 1'001'500);
  CHECK(clock.monotonic_ms() == 1500);
  clock.set_ms(0);
  CHECK(clock.now_ms() == 0);
  CHECK(clock.monotonic_ms() == 1500);
}

TEST_CASE("a sweep starts when the interval passes on monotonic time, not on a wall-clock step") {
  World w;
  daemon::Engine engine(*w.storage, *w.sync, *w.drainer, *w.lanes, w.clock,
                        daemon::Engine::Options{200ms, 30s, 3600s, {}});
  w.require_lookup("call_1");  // its webhook was lost: only a sweep finds it
  engine.pass();
  w.lanes->wait_idle();
  CHECK_FALSE(w.answered("call_1"));
  w.clock.set_ms(w.clock.now_ms() + 10 * 60 * 1000);  // the wall clock jumps ten minutes
  engine.pass();
  w.lanes->wait_idle();
  CHECK_FALSE(w.answered("call_1"));
  w.clock.advance_ms(30'000);
  engine.pass();
  w.lanes->wait_idle();
  CHECK(w.answered("call_1"));
}

TEST_CASE("the dispatcher is alive only while its passes keep coming, on monotonic time") {
  World w;
  // A long tick: after its first pass the thread waits to be woken.
  daemon::Engine engine(*w.storage, *w.sync, *w.drainer, *w.lanes, w.clock,
                        daemon::Engine::Options{3600s, 0s, 3600s, {}});
  CHECK_FALSE(engine.alive(5s));  // no pass yet
  engine.start();
  REQUIRE(World::becomes_alive(engine, 5s));
  w.clock.advance_ms(6'000);
  CHECK_FALSE(engine.alive(5s));
  w.clock.set_ms(w.clock.now_ms() - 3'600'000);  // a wall step back changes nothing
  CHECK_FALSE(engine.alive(5s));
  engine.wake();
  CHECK(World::becomes_alive(engine, 5s));
  engine.stop();
}
