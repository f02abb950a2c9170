// Failed attempts per key, bounded in time and memory: an attempt is
// checked and counted in one step, so attempts arriving together from many
// threads cannot all pass one check; a success takes its attempt back.
#include "common/failure_limiter.h"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace opgate;

TEST_CASE("attempts are checked and counted together; a success takes its own back") {
  FailureLimiter limiter({3, 60'000, 100});
  // Three attempts in flight at once, none decided yet: the fourth waits.
  CHECK_FALSE(limiter.attempt("10.0.0.1", 1'000));
  CHECK_FALSE(limiter.attempt("10.0.0.1", 1'001));
  CHECK_FALSE(limiter.attempt("10.0.0.1", 1'002));
  auto wait = limiter.attempt("10.0.0.1", 1'003);
  REQUIRE(wait);
  CHECK(*wait == 60'000 - 3);
  CHECK_FALSE(limiter.attempt("10.0.0.2", 1'003));  // another address is not held
  // One of them succeeded: one more may try.
  limiter.succeeded("10.0.0.1", 1'001);
  CHECK_FALSE(limiter.attempt("10.0.0.1", 1'004));
  CHECK(limiter.attempt("10.0.0.1", 1'005));
  // Once the window has passed, all may try again.
  CHECK_FALSE(limiter.attempt("10.0.0.1", 62'000));
}

TEST_CASE("many threads attempting at once get no more than the limit through") {
  FailureLimiter limiter({10, 60'000, 100});
  std::atomic<int> through{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i)
        if (!limiter.attempt("10.0.0.1", 5'000)) ++through;
    });
  for (auto& t : threads) t.join();
  CHECK(through.load() == 10);
}
