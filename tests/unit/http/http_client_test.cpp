// The adapters' HTTP client keeps a connection open for the next request to
// the same origin, and never turns a closed kept connection into a second
// delivery of a request the peer cannot deduplicate. A scripted server on
// loopback plays each connection: it answers, closes, or reads and vanishes.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/client.h"

using namespace opgate;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// What the server does with one request on a connection.
// read_and_stop also stops listening: nothing connects to it again.
enum class Act { answer, answer_and_close, read_and_vanish, read_and_stop };

// Accepts connections one after another and plays the script on each; every
// request read is recorded with the number of the connection it came on.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<Act(int connection, int request)> script)
      : script_(std::move(script)),
        acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    stopping_ = true;
    boost::system::error_code ec;
    {
      // Wake a blocking read on the connection in play (the client keeps it
      // open), then the blocking accept with one last connection.
      std::lock_guard lock(mu_);
      if (active_fd_ >= 0) ::shutdown(active_fd_, SHUT_RDWR);
    }
    tcp::socket poke(ioc_);
    poke.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), ec);
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  uint16_t port() const { return port_; }
  int connections() const { return accepted_; }
  // Closes the connection in play from the server's side, and waits until
  // the server is back in accept.
  void drop_connection() {
    {
      std::lock_guard lock(mu_);
      if (active_fd_ >= 0) ::shutdown(active_fd_, SHUT_RDWR);
    }
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (active_fd_ < 0) return;
      }
      std::this_thread::yield();
    }
  }
  std::vector<std::pair<int, std::string>> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void serve() {
    for (int connection = 1;; ++connection) {
      tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stopping_) return;
      accepted_ = connection;
      {
        std::lock_guard lock(mu_);
        active_fd_ = socket.native_handle();
      }
      std::string buffer;
      for (int request = 1;; ++request) {
        const size_t header_end =
            net::read_until(socket, net::dynamic_buffer(buffer), "\r\n\r\n", ec);
        if (ec) break;
        std::string head = buffer.substr(0, header_end);
        size_t length = 0;
        if (auto at = head.find("Content-Length: "); at != std::string::npos)
          length = std::stoul(head.substr(at + 16));
        if (buffer.size() < header_end + length)
          net::read(socket, net::dynamic_buffer(buffer),
                    net::transfer_exactly(header_end + length - buffer.size()), ec);
        if (ec) break;
        {
          std::lock_guard lock(mu_);
          requests_.emplace_back(connection, head.substr(0, head.find("\r\n")));
        }
        buffer.erase(0, header_end + length);
        Act act = script_(connection, request);
        if (head.find("Connection: close") != std::string::npos && act == Act::answer)
          act = Act::answer_and_close;
        if (act == Act::read_and_stop) stopped_ = true;
        if (act == Act::read_and_vanish || act == Act::read_and_stop) break;
        const std::string body = "ok " + std::to_string(connection);
        std::string answer =
            "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
            (act == Act::answer_and_close ? "Connection: close\r\n" : "") + "\r\n" + body;
        net::write(socket, net::buffer(answer), ec);
        if (ec || act == Act::answer_and_close) break;
      }
      std::lock_guard lock(mu_);
      active_fd_ = -1;
      socket.close(ec);
      if (stopped_) {
        acceptor_.close(ec);
        return;
      }
    }
  }

  std::function<Act(int, int)> script_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::vector<std::pair<int, std::string>> requests_;
  int active_fd_ = -1;  // the connection in play, for the destructor to wake
  bool stopped_ = false;
};

http::ClientRequest get(const ScriptedServer& server, const std::string& path) {
  http::ClientRequest req;
  req.url = server.url(path);
  req.timeout = std::chrono::milliseconds(5'000);
  return req;
}

http::ClientRequest post(const ScriptedServer& server, const std::string& path,
                         const std::string& idempotency_key) {
  http::ClientRequest req = get(server, path);
  req.method = "POST";
  req.body = "amount=1";
  if (!idempotency_key.empty()) req.headers["Idempotency-Key"] = idempotency_key;
  return req;
}

}  // namespace

TEST_CASE("http client: requests to one origin share a kept connection") {
  ScriptedServer server([](int, int) { return Act::answer; });
  for (int i = 0; i < 5; ++i) {
    auto res = http::send(get(server, "/n/" + std::to_string(i)));
    REQUIRE(res);
    CHECK(res->body == "ok 1");
  }
  CHECK(server.connections() == 1);
  CHECK(server.requests().size() == 5);
}

TEST_CASE("http client: a host by name is looked up, then reached") {
  ScriptedServer server([](int, int) { return Act::answer; });
  http::ClientRequest req = get(server, "/named");
  const auto at = req.url.find("127.0.0.1");
  REQUIRE(at != std::string::npos);
  req.url.replace(at, 9, "localhost");  // /etc/hosts
  auto res = http::send(req);
  REQUIRE(res);
  CHECK(res->body == "ok 1");
}

TEST_CASE("http client: a peer that closes after its answer gets a new connection next time") {
  ScriptedServer server([](int, int) { return Act::answer_and_close; });
  auto first = http::send(get(server, "/a"));
  REQUIRE(first);
  CHECK(first->body == "ok 1");
  auto second = http::send(get(server, "/b"));
  REQUIRE(second);
  CHECK(second->body == "ok 2");
  CHECK(server.requests().size() == 2);
}

TEST_CASE("http client: a kept connection the peer dropped unanswered") {
  // The first request on every connection is answered; the second is read
  // and the connection dropped without an answer, as a peer closing an idle
  // connection at the moment a request arrives would.
  ScriptedServer server(
      [](int, int request) { return request == 1 ? Act::answer : Act::read_and_vanish; });
  REQUIRE(http::send(post(server, "/v1/refunds", "key-1")));

  SUBCASE("a keyed request goes again on a new connection, once") {
    auto res = http::send(post(server, "/v1/refunds", "key-2"));
    REQUIRE(res);
    CHECK(res->body == "ok 2");
    auto seen = server.requests();
    REQUIRE(seen.size() == 3);
    CHECK(seen[1].first == 1);
    CHECK(seen[2].first == 2);
  }
  SUBCASE("a request without a key is not sent twice: it may have reached the peer") {
    auto res = http::send(post(server, "/v1/notes", ""));
    REQUIRE_FALSE(res);
    CHECK(res.error().code == "connection_lost");
    CHECK(http::may_have_reached_peer(res.error()));
    CHECK(server.requests().size() == 2);
    CHECK(server.connections() == 1);
  }
}

TEST_CASE("http client: a request that asks to close its connection is not kept") {
  ScriptedServer server([](int, int) { return Act::answer; });
  for (int i = 0; i < 2; ++i) {
    auto req = get(server, "/once");
    req.headers["Connection"] = "close";
    auto res = http::send(req);
    REQUIRE(res);
    CHECK(res->body == "ok " + std::to_string(i + 1));
  }
  CHECK(server.connections() == 2);
}

TEST_CASE("http client: a resend that cannot connect still says the first may have arrived") {
  ScriptedServer server(
      [](int, int request) { return request == 1 ? Act::answer : Act::read_and_stop; });
  REQUIRE(http::send(post(server, "/v1/refunds", "key-1")));
  auto res = http::send(post(server, "/v1/refunds", "key-2"));
  REQUIRE_FALSE(res);
  // Without the first attempt this would be connect_failed: never left.
  CHECK(res.error().code == "connection_lost");
  CHECK(http::may_have_reached_peer(res.error()));
  CHECK(server.requests().size() == 2);
}

TEST_CASE("http client: a kept connection the peer closed while idle is not used") {
  // The first answer keeps the connection; the server then closes it
  // before the next request, which goes on a new one without an error even
  // for a request that may not be sent twice.
  ScriptedServer server([](int, int) { return Act::answer; });
  REQUIRE(http::send(get(server, "/first")));
  server.drop_connection();
  auto res = http::send(post(server, "/v1/notes", ""));
  REQUIRE(res);
  CHECK(res->body == "ok 2");
  CHECK(server.connections() == 2);
}

TEST_CASE("http client: a port out of range is refused, never wrapped onto another port") {
  // 65536 above a listening port would land on it if cut to 16 bits; a
  // port followed by more than digits is no port either.
  ScriptedServer server([](int, int) { return Act::answer; });
  for (const std::string& port : {std::to_string(server.port() + 65536), std::string("0"),
                                  std::string("4294967296"), std::string("080x")}) {
    CAPTURE(port);
    http::ClientRequest r = get(server, "/");
    r.url = "http://127.0.0.1:" + port + "/x";
    auto res = http::send(r);
    REQUIRE_FALSE(res.ok());
    CHECK(res.error().code == "bad_url");
  }
  CHECK(server.connections() == 0);
  // One in range still goes.
  CHECK(http::send(get(server, "/")).ok());
}

TEST_CASE("http client: an error never repeats the URL, whose path or query may be a secret") {
  for (const std::string url : {"https://hooks.slack.test/services/T0/B0/XXXXSECRETXXXX ",
                                "gopher://hooks.slack.test/XXXXSECRETXXXX",
                                "http://127.0.0.1:99999/XXXXSECRETXXXX?token=XXXXSECRETXXXX"}) {
    http::ClientRequest r;
    r.method = "POST";
    r.url = url;
    r.timeout = std::chrono::milliseconds(500);
    r.headers["Idempotency-Key"] = "k";
    auto res = http::send(r);
    REQUIRE_FALSE(res.ok());
    CHECK_MESSAGE(res.error().message.find("SECRET") == std::string::npos, res.error().message);
  }
}

namespace {
// One connection accepted on loopback and handed to `play` on a thread.
struct OneConnection {
  explicit OneConnection(std::function<void(tcp::socket&)> play)
      : acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)),
        thread([this, play = std::move(play)] {
          tcp::socket s(ioc);
          boost::system::error_code ec;
          acceptor.accept(s, ec);
          if (!ec) play(s);
        }) {}
  ~OneConnection() {
    if (thread.joinable()) thread.join();
  }
  uint16_t port() const { return acceptor.local_endpoint().port(); }
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::thread thread;
};
}  // namespace

TEST_CASE("http client: a TLS handshake never answered is a connect failure: nothing was sent") {
  std::promise<void> done;
  auto finished = done.get_future().share();
  OneConnection peer([finished](tcp::socket&) { finished.wait(); });
  http::ClientRequest req;
  req.method = "POST";
  req.url = "https://127.0.0.1:" + std::to_string(peer.port()) + "/v1/refunds";
  req.timeout = std::chrono::milliseconds(300);
  auto res = http::send(req);
  done.set_value();
  REQUIRE_FALSE(res.ok());
  CHECK(res.error().code == "connect_failed");
  CHECK(res.error().message.find("no connection in time") != std::string::npos);
  CHECK_FALSE(http::may_have_reached_peer(res.error()));
}

TEST_CASE("http client: a chunk-size line that never ends is refused, not buffered") {
  std::atomic<size_t> written{0};
  OneConnection peer([&written](tcp::socket& s) {
    std::string head;
    boost::system::error_code ec;
    net::read_until(s, net::dynamic_buffer(head), "\r\n\r\n", ec);
    written += net::write(
        s, net::buffer(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;")), ec);
    const std::string piece(64 * 1024, 'a');
    while (!ec && written < (64u << 20)) written += net::write(s, net::buffer(piece), ec);
  });
  http::ClientRequest req;
  req.url = "http://127.0.0.1:" + std::to_string(peer.port()) + "/";
  req.timeout = std::chrono::milliseconds(20'000);
  auto res = http::send(req);
  REQUIRE_FALSE(res.ok());
  CHECK(res.error().code == "connection_lost");
  peer.thread.join();
  CHECK(written < (32u << 20));  // read no further than the buffer's bound, and closed
}

TEST_CASE("http client: an interim answer (103 Early Hints) is passed over for the final one") {
  OneConnection peer([](tcp::socket& s) {
    std::string head;
    boost::system::error_code ec;
    net::read_until(s, net::dynamic_buffer(head), "\r\n\r\n", ec);
    net::write(s,
               net::buffer(std::string("HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
                                       "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")),
               ec);
  });
  http::ClientRequest req;
  req.url = "http://127.0.0.1:" + std::to_string(peer.port()) + "/";
  auto res = http::send(req);
  REQUIRE_MESSAGE(res.ok(), res.error().message);
  CHECK(res->status == 200);
  CHECK(res->body == "ok");
}

TEST_CASE("http client: an answer's body past the request's bound is a failed call") {
  OneConnection peer([](tcp::socket& s) {
    std::string head;
    boost::system::error_code ec;
    net::read_until(s, net::dynamic_buffer(head), "\r\n\r\n", ec);
    net::write(
        s, net::buffer("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'x')),
        ec);
  });
  http::ClientRequest req;
  req.url = "http://127.0.0.1:" + std::to_string(peer.port()) + "/";
  req.max_body_bytes = 10;
  auto res = http::send(req);
  REQUIRE_FALSE(res.ok());
  CHECK(res.error().code == "connection_lost");
}
