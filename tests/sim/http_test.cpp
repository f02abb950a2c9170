// A simulator answers a URL it does not serve in its provider's own error
// format, keeping the router's Allow header on a 405.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "common/clock.h"
#include "sim/payments_sim.h"
#include "sim/sim_http.h"

using namespace opgate;
namespace json = boost::json;

TEST_CASE("sim: an unserved method is a 405 in the provider's format, with Allow") {
  ManualClock clock{1'800'000'000'000};
  sim::PaymentsSim payments({}, clock);
  http::Request req;
  req.method = "DELETE";
  req.target = "/v1/refunds";
  req.headers = {{"Authorization", "Bearer sk_test_x"}};
  auto res = payments.handle(std::move(req));
  CHECK(res.status == 405);
  CHECK(res.headers["Allow"] == "POST, GET, HEAD");
  auto body = json::parse(res.body);
  CHECK(body.at("error").at("type").as_string() == "invalid_request_error");

  req = {};
  req.method = "GET";
  req.target = "/v1/nothing";
  req.headers = {{"Authorization", "Bearer sk_test_x"}};
  res = payments.handle(std::move(req));
  CHECK(res.status == 404);
  CHECK(res.headers.count("Allow") == 0);
}
