// The bytes a response goes out as: framing the server sets itself, and
// headers that could break it left out.
#include <doctest/doctest.h>

#include <string>

#include "http/message.h"

using namespace opgate;

TEST_CASE("serialize: status line, headers, Content-Length, then the body") {
  auto r = http::json_response(200, R"({"accepted":true})");
  r.headers["Retry-After"] = "5";
  CHECK(http::serialize(r, "OK", true) ==
        "HTTP/1.1 200 OK\r\n"
        "Content-Type: application/json\r\n"
        "Retry-After: 5\r\n"
        "Content-Length: 17\r\n"
        "\r\n"
        R"({"accepted":true})");
}

TEST_CASE("serialize: Connection: close when the connection will not be kept") {
  http::Response r;
  r.status = 503;
  CHECK(http::serialize(r, "Service Unavailable", false) ==
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

TEST_CASE("serialize: the framing headers are the server's; unsafe headers are left out") {
  http::Response r;
  r.status = 200;
  r.body = "abc";
  r.headers["content-length"] = "999";
  r.headers["Connection"] = "keep-alive";
  r.headers["X-Split"] = "a\r\nSet-Cookie: stolen=1";
  r.headers["X-Nul"] = std::string("a\0b", 3);
  r.headers["Bad Name"] = "1";
  r.headers["Bad:Name"] = "1";
  r.headers[""] = "1";
  r.headers["X-Fine"] = "ok";
  CHECK(http::serialize(r, "OK", true) ==
        "HTTP/1.1 200 OK\r\nX-Fine: ok\r\nContent-Length: 3\r\n\r\nabc");
}

TEST_CASE("serialize: a 204 or 304 has neither body nor Content-Length") {
  http::Response r;
  r.status = 204;
  r.body = "ignored";
  CHECK(http::serialize(r, "No Content", true) == "HTTP/1.1 204 No Content\r\n\r\n");
  r.status = 304;
  CHECK(http::serialize(r, "Not Modified", false) ==
        "HTTP/1.1 304 Not Modified\r\nConnection: close\r\n\r\n");
}

TEST_CASE("url_component: all but the unreserved characters are percent-encoded") {
  CHECK(http::url_component("ORDER-100_a.b~c") == "ORDER-100_a.b~c");
  CHECK(http::url_component("demo-user:ORDER-100/v1") == "demo-user%3AORDER-100%2Fv1");
  CHECK(http::url_component("a b&c=d?e#f%") == "a%20b%26c%3Dd%3Fe%23f%25");
  CHECK(http::url_component("é") == "%C3%A9");
  CHECK(http::url_component("") == "");
}

TEST_CASE("request fields: names without case, repeats joined, order kept") {
  http::Fields f;
  f.add("Content-Type", "application/json");
  f.add("X-Seen", "a");
  f.add("x-seen", "b");
  CHECK(f.size() == 2);
  CHECK(f.at("content-type") == "application/json");
  CHECK(f.at("X-SEEN") == "a, b");
  CHECK(f.count("x-missing") == 0);
  CHECK_THROWS_AS(f.at("x-missing"), std::out_of_range);
  f["X-New"] = "1";
  f["x-new"] += "2";
  CHECK(f.at("X-New") == "12");
  std::string order;
  for (const auto& [name, value] : f) order += name + ";";
  CHECK(order == "Content-Type;X-Seen;X-New;");
  http::Request r;
  r.headers = http::Headers{{"Webhook-Id", "msg_1"}};
  CHECK(r.header("webhook-id") == std::optional<std::string_view>("msg_1"));
  CHECK_FALSE(r.header("webhook-signature"));
}
