// The HTTP server's framing, byte by byte over a raw socket: what it
// refuses before any handler (an endless chunk-size line, a transfer coding
// other than chunked, too many or too long header fields) and the answer
// to a HEAD, which carries no body.
#include <doctest/doctest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include "http/server.h"

using namespace opgate;
namespace net = boost::asio;

namespace {

struct Framing {
  Framing()
      : server(
            [] {
              http::ServerOptions o;
              o.listen = "127.0.0.1:0";
              o.threads = 1;
              // A guard against a hang should a check below fail: a request
              // the server goes on reading ends here, not after 30 s.
              o.body_timeout = std::chrono::seconds(3);
              return o;
            }(),
            [this](http::Request&& r) {
              ++handled;
              return http::json_response(200, R"({"path":")" + std::string(r.path()) + "\"}");
            }),
        port(server.start()) {
    REQUIRE(port.ok());
  }

  net::ip::tcp::socket connect() {
    net::ip::tcp::socket s(ioc);
    s.connect({net::ip::make_address("127.0.0.1"), *port});
    return s;
  }

  // Sends `bytes`, then reads until the server closes the connection.
  std::string exchange(const std::string& bytes) {
    auto s = connect();
    net::write(s, net::buffer(bytes));
    return read_to_end(s);
  }

  static std::string read_to_end(net::ip::tcp::socket& s) {
    std::string got;
    boost::system::error_code ec;
    char buf[4096];
    while (!ec) got.append(buf, s.read_some(net::buffer(buf), ec));
    return got;
  }

  net::io_context ioc;
  std::atomic<int> handled{0};
  http::Server server;
  Result<uint16_t> port;
};

}  // namespace

TEST_CASE("http framing: a chunk-size line that never ends is refused, not buffered") {
  Framing f;
  auto s = f.connect();
  net::write(s, net::buffer(std::string("POST /x HTTP/1.1\r\nHost: a\r\n"
                                        "Transfer-Encoding: chunked\r\n\r\n1;")));
  // 8 MiB of a chunk extension without its line's end: refused once 64 KiB
  // are buffered (what comes after is read and dropped until the close).
  // Buffered, the request would wait for the end of its line until the body
  // deadline, and end unanswered.
  const std::string piece(16 * 1024, 'a');
  boost::system::error_code ec;
  for (size_t sent = 0; !ec && sent < (8u << 20);) sent += net::write(s, net::buffer(piece), ec);
  const auto got = Framing::read_to_end(s);
  CHECK(got.starts_with("HTTP/1.1 400"));
  CHECK(f.handled == 0);
}

TEST_CASE("http framing: a transfer coding other than chunked is refused, never read as no body") {
  Framing f;
  // The "body" is a request of its own: answered as one, it would be a
  // second response to a single request.
  const std::string inner = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
  for (const char* coding : {"gzip", "chunked, gzip"}) {
    CAPTURE(coding);
    auto got = f.exchange(std::string("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ") +
                          coding + "\r\n\r\n" + inner);
    CHECK(got.starts_with("HTTP/1.1 400"));
    CHECK(got.find("chunked") != std::string::npos);
    CHECK(got.find("smuggled") == std::string::npos);
  }
  CHECK(f.handled == 0);
}

TEST_CASE("http framing: too many header fields, or too long a header, get 431 before the body") {
  Framing f;
  // The body is announced and never sent: the answer comes without it.
  std::string many = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n";
  for (int i = 0; i < 120; ++i) many += "X-F" + std::to_string(i) + ": v\r\n";
  auto got = f.exchange(many + "\r\n");
  CHECK(got.starts_with("HTTP/1.1 431"));
  CHECK(got.find("too many header fields") != std::string::npos);
  got = f.exchange("GET /x HTTP/1.1\r\nHost: a\r\nX-Long: " + std::string(17 * 1024, 'v') +
                   "\r\n\r\n");
  CHECK(got.starts_with("HTTP/1.1 431"));
  CHECK(f.handled == 0);
}

TEST_CASE("http framing: a HEAD is answered as its GET, without the body") {
  Framing f;
  // A HEAD, then a GET on the same connection: the GET's answer follows
  // the HEAD's header at once, so the client reads two whole answers.
  auto got = f.exchange(
      "HEAD /one HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /two HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  const auto second = got.find("HTTP/1.1 200", 1);
  REQUIRE(got.starts_with("HTTP/1.1 200"));
  REQUIRE(second != std::string::npos);
  const std::string head = got.substr(0, second);
  CHECK(head.find("Content-Length: 15") != std::string::npos);  // {"path":"/one"}
  CHECK(head.ends_with("\r\n\r\n"));
  CHECK(head.find("/one") == std::string::npos);
  CHECK(got.ends_with(R"({"path":"/two"})"));
  CHECK(f.handled == 2);
}

TEST_CASE("http framing: bodies far larger than the read buffer's bound pass whole") {
  Framing f;
  const std::string body(900 * 1024, 'b');
  auto got = f.exchange("POST /sized HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body);
  CHECK(got.starts_with("HTTP/1.1 200"));
  std::string chunked =
      "POST /chunked HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 50; ++i) chunked += "1000\r\n" + std::string(0x1000, 'c') + "\r\n";
  got = f.exchange(chunked + "0\r\n\r\n");
  CHECK(got.starts_with("HTTP/1.1 200"));
  CHECK(f.handled == 2);
}

TEST_CASE("http framing: a client that expects 100-continue is asked for its body") {
  Framing f;
  auto s = f.connect();
  net::write(s, net::buffer(std::string("POST /upload HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
                                        "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")));
  std::string interim;
  boost::system::error_code ec;
  net::read_until(s, net::dynamic_buffer(interim), "\r\n\r\n", ec);
  CHECK(interim == "HTTP/1.1 100 Continue\r\n\r\n");
  net::write(s, net::buffer(std::string("hello")));
  const auto got = Framing::read_to_end(s);
  CHECK(got.starts_with("HTTP/1.1 200"));
  CHECK(f.handled == 1);
}

TEST_CASE("http framing: a client still sending a refused body reads the refusal, not a reset") {
  Framing f;
  auto s = f.connect();
  const std::string body(4 << 20, 'b');  // over the 1 MiB limit
  boost::system::error_code ec;
  net::write(s,
             net::buffer("POST /big HTTP/1.1\r\nHost: a\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n"),
             ec);
  net::write(s, net::buffer(body), ec);
  CHECK_FALSE(ec);  // read (and dropped) by the server, not reset
  const auto got = Framing::read_to_end(s);
  CHECK(got.starts_with("HTTP/1.1 413"));
  CHECK(f.handled == 0);
}

TEST_CASE("http framing: an HTTP/1.1 request without one Host is refused") {
  Framing f;
  CHECK(f.exchange("GET /x HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400"));
  CHECK(f.exchange("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").starts_with("HTTP/1.1 400"));
  CHECK(f.exchange("GET /x HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
  CHECK(f.handled == 1);
}
