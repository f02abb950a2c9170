#include "http/router.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

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
  // A HEAD is routed as its GET (the server leaves the body out), and a GET
  // route allows it.
  r.add("GET", "/v1/me", [](const http::Request&, const http::PathParams&) {
    return http::json_response(200, "me");
  });
  req.target = "/v1/me";
  req.method = "HEAD";
  CHECK(r.dispatch(req).body == "me");
  req.method = "DELETE";
  CHECK(r.dispatch(req).headers["Allow"] == "GET, HEAD");
}

TEST_CASE("a path or query that is not UTF-8 text, or holds a NUL, is refused before a handler") {
  http::Router r;
  int handled = 0;
  r.add("GET", "/v1/operations/{key}", [&](const http::Request&, const http::PathParams&) {
    ++handled;
    return http::json_response(200, "{}");
  });
  http::Request req;
  req.method = "GET";
  for (const char* target :
       {"/v1/operations/%FF", "/v1/operations/k%00", "/v1/operations/%C0%AF",
        "/v1/operations/k?cursor=%C0", "/v1/operations/k?%00=1", "/v1/operations/k?a=%ED%A0%80"}) {
    req.target = target;
    CHECK_MESSAGE(r.dispatch(req).status == 400, target);
  }
  CHECK(handled == 0);
  req.target = "/v1/operations/caf%C3%A9?cursor=%E8%BF%94";  // text: matched
  CHECK(r.dispatch(req).status == 200);
  CHECK(handled == 1);
}

TEST_CASE("an asynchronous route answers through respond; misses answer at once") {
  http::Router r;
  http::Respond held;  // the answer a group commit would send later
  std::string seen;
  r.add_async("POST", "/v1/webhooks/{source}",
              [&](http::Request&& req, const http::PathParams& p, http::Respond respond) {
                seen = p.at("source") + ":" + req.body;
                held = std::move(respond);
              });
  std::vector<http::Response> answers;
  auto collect = [&](http::Response res) { answers.push_back(std::move(res)); };
  http::Request req;
  req.method = "POST";
  req.target = "/v1/webhooks/agents";
  req.body = "{}";
  r.dispatch(http::Request(req), collect);
  CHECK(seen == "agents:{}");
  CHECK(answers.empty());  // not answered until the route says so
  held(http::json_response(200, "{}"));
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].status == 200);
  req.method = "GET";
  r.dispatch(http::Request(req), collect);
  REQUIRE(answers.size() == 2);
  CHECK(answers[1].status == 405);
  req.target = "/v1/nothing";
  r.dispatch(http::Request(req), collect);
  REQUIRE(answers.size() == 3);
  CHECK(answers[2].status == 404);
  // The synchronous dispatch cannot wait for an asynchronous route.
  req.method = "POST";
  req.target = "/v1/webhooks/agents";
  CHECK(r.dispatch(req).status == 500);
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
