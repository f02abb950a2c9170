// Name lookups within a request's time: one that does not answer is given
// up at its deadline, as a failure to connect (nothing was sent), and only
// so many wait at once.
#include "http/name_lookup.h"

#include <doctest/doctest.h>

#include <future>

#include "becomes_true.h"
#include "http/client.h"

using namespace opgate;

namespace {

// A lookup that answers only once released.
struct Hanging {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();

  http::LookUp look_up() {
    return [r = released](const std::string&, const std::string&) -> Result<http::Addresses> {
      r.wait();
      return make_error(errc::connect_failed, "answered late");
    };
  }
};

}  // namespace

TEST_CASE("a name lookup that does not answer is given up at its deadline, as nothing sent") {
  Hanging dns;
  auto found =
      http::look_up_within("api.example", "443", std::chrono::milliseconds(20), dns.look_up());
  dns.release.set_value();  // the lookup left behind ends on its own
  REQUIRE_FALSE(found.ok());
  CHECK(found.error().is(errc::connect_failed));
  CHECK_FALSE(http::may_have_reached_peer(found.error()));
  CHECK(found.error().message ==
        "cannot connect to api.example:443: no address for the name in time");
}

TEST_CASE("a lookup that answers gives its addresses; past 64 waiting, one is refused at once") {
  auto found = http::look_up_within("127.0.0.1", "80", std::chrono::seconds(10));
  REQUIRE(found.ok());
  CHECK(found->begin()->endpoint().port() == 80);
  Hanging dns;
  for (int i = 0; i < http::kLookupsAtOnce; ++i)
    CHECK_FALSE(
        http::look_up_within("a.example", "80", std::chrono::milliseconds(0), dns.look_up()).ok());
  auto refused = http::look_up_within("127.0.0.1", "80", std::chrono::seconds(10));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("too many name lookups") != std::string::npos);
  // Those left behind end once answered, and make room again.
  dns.release.set_value();
  CHECK(testing::becomes_true(
      [] { return http::look_up_within("127.0.0.1", "80", std::chrono::seconds(10)).ok(); },
      std::chrono::seconds(10)));
}
