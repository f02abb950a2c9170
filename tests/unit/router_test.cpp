#include "http/router.h"

#include <doctest/doctest.h>

#include "common/backoff.h"

using namespace opgate;

TEST_CASE("routes match with decoded path parameters; 404 and 405 otherwise") {
  http::Router r;
  r.add("POST", "/v1/operations/{key}/approve",
        [](const http::Request&, const http::PathParams& p) {
          return http::json_response(200, p.at("key"));
        });
  http::Request req;
  req.method = "POST";
  req.target = "/v1/operations/demo-user%3AORDER-100%3Afull-refund%3Av1/approve?x=1";
  auto res = r.dispatch(req);
  CHECK(res.status == 200);
  CHECK(res.body == "demo-user:ORDER-100:full-refund:v1");
  req.method = "GET";
  res = r.dispatch(req);
  CHECK(res.status == 405);
  CHECK(res.headers["Allow"] == "POST");
  req.target = "/v1/nothing";
  CHECK(r.dispatch(req).status == 404);
  req.target = "/v1/operations//approve";
  req.method = "POST";
  CHECK(r.dispatch(req).status == 404);
}

TEST_CASE("query parameters are decoded") {
  http::Request req;
  req.target = "/v1/operations?state=outcome_unknown&owner=a%20b";
  CHECK(req.query_param("state") == "outcome_unknown");
  CHECK(req.query_param("owner") == "a b");
  CHECK_FALSE(req.query_param("limit").has_value());
}

TEST_CASE("backoff grows exponentially, is capped, and jitters within [half, full]") {
  Random low = [] { return 0.0; };
  Random high = [] { return 0.999999; };
  CHECK(backoff_ms(0, 100, 10000, low) == 50);
  CHECK(backoff_ms(3, 100, 10000, low) == 400);
  CHECK(backoff_ms(3, 100, 10000, high) <= 800);
  CHECK(backoff_ms(3, 100, 10000, high) >= 799);
  CHECK(backoff_ms(30, 100, 10000, high) <= 10000);
  CHECK(backoff_ms(30, 100, 10000, low) == 5000);
}
