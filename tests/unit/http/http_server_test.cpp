// What the HTTP server accepts as the address to listen on.
#include <doctest/doctest.h>

#include "http/server.h"

using namespace opgate;

namespace {

Result<uint16_t> start_on(const std::string& listen) {
  http::ServerOptions o;
  o.listen = listen;
  http::Server server(o, [](http::Request&&) { return http::Response{}; });
  return server.start();
}

}  // namespace

TEST_CASE("http server: a listen port out of range or not a number is refused, never wrapped") {
  // 99999 cut to 16 bits would be 34463: listened on, silently.
  for (const char* listen : {"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:80x",
                             "127.0.0.1:", "127.0.0.1: 80"}) {
    CAPTURE(listen);
    auto started = start_on(listen);
    REQUIRE_FALSE(started.ok());
    CHECK(started.error().code == "bad_listen");
  }
  // 0 is any free port.
  auto any = start_on("127.0.0.1:0");
  REQUIRE(any.ok());
  CHECK(*any != 0);
}
