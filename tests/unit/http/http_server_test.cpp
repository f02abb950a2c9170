// The HTTP server: the addresses it listens on, header fields, its threads
// and connections, drain and stop.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "becomes_true.h"
#include "common/crypto.h"
#include "http/client.h"
#include "http/server.h"

using namespace opgate;
using testing::becomes_true;

namespace {

Result<uint16_t> start_on(const std::string& listen) {
  http::ServerOptions o;
  o.listen = listen;
  http::Server server(o, [](http::Request&&) { return http::Response{}; });
  return server.start();
}

// A server (on two threads unless told) whose handler for /block waits
// until released; any other path is answered at once. Requests go each on a
// thread of its own: the client keeps a thread's connections open for
// reuse, and closes them when the thread ends.
struct BlockingServer {
  explicit BlockingServer(int threads = 2, size_t max_connections = 1024)
      : server(
            [threads, max_connections] {
              http::ServerOptions o;
              o.listen = "127.0.0.1:0";
              o.threads = threads;
              o.max_connections = max_connections;
              // Longer than any wait below: an idle connection is closed by
              // the server's doing, never by its header deadline.
              o.header_timeout = std::chrono::seconds(60);
              return o;
            }(),
            [this](http::Request&& r) {
              if (r.target == "/block") {
                started.set_value();
                released.wait();
              }
              return http::json_response(200, "{}");
            }),
        port(server.start()) {}

  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  http::Server server;
  Result<uint16_t> port;

  // A failed check must not leave the handler waiting: the server's
  // destructor joins its threads.
  ~BlockingServer() {
    try {
      release.set_value();
    } catch (const std::future_error&) {  // released already
    }
  }

  std::future<Result<http::Response>> request(const std::string& path,
                                              std::chrono::seconds timeout) {
    return std::async(std::launch::async, [this, path, timeout] {
      http::ClientRequest req;
      req.url = "http://127.0.0.1:" + std::to_string(*port) + path;
      req.timeout = timeout;
      return http::send(req);
    });
  }
};

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

TEST_CASE("http server: requests in turn on one connection each see their own header fields") {
  http::ServerOptions o;
  o.listen = "127.0.0.1:0";
  // Each answer names the fields its request carried, in a line per field.
  http::Server server(o, [](http::Request&& r) {
    std::string seen;
    for (const auto& [name, value] : r.headers)
      if (name.starts_with("X-")) seen += name + "=" + value + "\n";
    return http::json_response(200, seen);
  });
  auto port = server.start();
  REQUIRE(port.ok());
  auto send = [&](const http::Headers& headers) {
    http::ClientRequest req;
    req.url = "http://127.0.0.1:" + std::to_string(*port) + "/";
    req.headers = headers;
    auto res = http::send(req);
    REQUIRE(res.ok());
    CHECK(res->status == 200);
    return res->body;
  };
  // More fields than the connection keeps room for, then few, then many
  // again: the kept connection gives each request only its own.
  http::Headers many, few{{"X-Only", "one"}};
  std::string expected_many;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "X-Field-" + std::to_string(100 + i);
    many[name] = std::string(100, static_cast<char>('a' + i % 26));
  }
  for (const auto& [name, value] : many) expected_many += name + "=" + value + "\n";
  for (int round = 0; round < 2; ++round) {
    CHECK(send(many) == expected_many);
    CHECK(send(few) == "X-Only=one\n");
  }
}

TEST_CASE("http server: a request with more than 100 header fields is refused before any handler") {
  http::ServerOptions o;
  o.listen = "127.0.0.1:0";
  int handled = 0;
  http::Server server(o, [&handled](http::Request&&) {
    ++handled;
    return http::json_response(200, "{}");
  });
  auto port = server.start();
  REQUIRE(port.ok());
  auto send = [&](int fields) {
    http::ClientRequest req;
    req.url = "http://127.0.0.1:" + std::to_string(*port) + "/";
    for (int i = 0; i < fields; ++i) req.headers["X-F" + std::to_string(i)] = "v";
    auto res = http::send(req);
    REQUIRE(res.ok());
    return res->status;
  };
  // The client adds a few of its own (Host among them).
  CHECK(send(90) == 200);
  CHECK(send(101) == 431);
  CHECK(handled == 1);
}

TEST_CASE("http server: a handler that blocks holds up no connection on another thread") {
  BlockingServer b;
  REQUIRE(b.port.ok());
  auto blocked = b.request("/block", std::chrono::seconds(5));
  b.started.get_future().wait();
  // The second connection goes to the thread without one, and is answered
  // while the first thread's handler still waits.
  auto quick = b.request("/quick", std::chrono::seconds(5)).get();
  b.release.set_value();
  REQUIRE(quick.ok());
  CHECK(quick->status == 200);
  auto first = blocked.get();
  REQUIRE(first.ok());
  CHECK(first->status == 200);
}

TEST_CASE(
    "http server: a connection goes to the thread with the fewest connections when it arrives") {
  // One thread blocked, and another connection came and went on the other:
  // the next goes to the free thread, whatever turn it would have had.
  BlockingServer b;
  REQUIRE(b.port.ok());
  auto blocked = b.request("/block", std::chrono::seconds(10));
  b.started.get_future().wait();
  auto second = b.request("/quick", std::chrono::seconds(2)).get();
  // Waits for the server to see the second connection closed (an event,
  // not a time: the bound only keeps a failure from hanging).
  becomes_true([&] { return b.server.open_connections() <= 1; }, std::chrono::seconds(3));
  const size_t open = b.server.open_connections();
  auto third = b.request("/quick", std::chrono::seconds(2)).get();
  b.release.set_value();
  CHECK(second.ok());
  CHECK(open == 1);
  REQUIRE(third.ok());
  CHECK(third->status == 200);
  CHECK(blocked.get().ok());
}

TEST_CASE("http server: work posted after stop that holds connections of every thread is dropped") {
  // A batch's answers are posted to any thread and may hold connections that
  // live on others; a stopped server drops them unrun when it is destroyed,
  // which must destroy each connection while every thread's loop exists.
  http::ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.threads = 2;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<http::Respond> held;
  std::vector<std::future<Result<http::Response>>> clients;
  {
    http::Server server(o, [&](http::Request&&, http::Respond respond) {
      std::lock_guard lock(mu);
      held.push_back(std::move(respond));
      cv.notify_all();
    });
    auto port = server.start();
    REQUIRE(port.ok());
    for (int i = 0; i < 2; ++i)
      clients.push_back(std::async(std::launch::async, [port = *port] {
        http::ClientRequest req;
        req.url = "http://127.0.0.1:" + std::to_string(port) + "/";
        req.timeout = std::chrono::seconds(5);
        return http::send(req);
      }));
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return held.size() == 2; });
    }
    CHECK(server.open_connections() == 2);
    server.stop();
    for (int i = 0; i < 2; ++i)  // one to each thread, each holding both
      server.post([held] { FAIL("work posted after stop ran"); });
    held.clear();
  }
  // The stopped server closed both connections unanswered.
  for (auto& c : clients) CHECK_FALSE(c.get().ok());
}

TEST_CASE(
    "http server: a drain closes an idle connection that shares its thread with a blocked "
    "handler") {
  // One thread. The idle connection is waiting for a request before the
  // handler blocks the thread, so only the drain's check can close it, and
  // that check waits behind the handler; the drain, which asks again every
  // few milliseconds meanwhile, ends with both connections gone once the
  // handler returns.
  BlockingServer b(1);
  REQUIRE(b.port.ok());
  namespace net = boost::asio;
  const net::ip::tcp::endpoint at(net::ip::make_address("127.0.0.1"), *b.port);
  net::io_context ioc;
  net::ip::tcp::socket idle(ioc);
  idle.connect(at);
  // Counted means its start is queued on the one thread, ahead of the
  // blocked request's: by the time the handler blocks, it waits to read.
  becomes_true([&] { return b.server.open_connections() >= 1; }, std::chrono::seconds(3));
  REQUIRE(b.server.open_connections() == 1);
  auto blocked = b.request("/block", std::chrono::seconds(10));
  b.started.get_future().wait();
  auto drained = std::async(std::launch::async, [&] { b.server.drain(std::chrono::seconds(10)); });
  // The handler is released once the drain has begun.
  REQUIRE(becomes_true([&] { return b.server.draining(); }, std::chrono::seconds(3)));
  b.release.set_value();
  drained.get();
  REQUIRE(b.server.open_connections() == 0);
  auto first = blocked.get();
  REQUIRE(first.ok());
  CHECK(first->status == 200);
  // The idle connection was closed by the server, unanswered.
  char byte;
  boost::system::error_code ec;
  CHECK(net::read(idle, net::buffer(&byte, 1), ec) == 0);
  CHECK(ec == net::error::eof);
}

namespace {

namespace net = boost::asio;

// A started server that answers 200 and has one connection, idle.
struct ServerWithOneHeld {
  explicit ServerWithOneHeld(http::ServerOptions o)
      : server(o, [](http::Request&&) { return http::json_response(200, "{}"); }) {
    auto port = server.start();
    REQUIRE(port.ok());
    at = net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), *port);
    holder.connect(at);
    REQUIRE(becomes_true([&] { return server.open_connections() == 1; }, std::chrono::seconds(3)));
  }

  http::Server server;
  net::io_context ioc;
  net::ip::tcp::endpoint at;
  net::ip::tcp::socket holder{ioc};
};

// Every descriptor of the process in use until it goes: the soft limit
// lowered to at most 512 and the rest opened on /dev/null.
class DescriptorsUsedUp {
 public:
  DescriptorsUsedUp() {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit low = saved_;
    low.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, 512);
    ::setrlimit(RLIMIT_NOFILE, &low);
    for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) held_.push_back(fd);
    failed_with_ = errno;
  }
  ~DescriptorsUsedUp() {
    for (int fd : held_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }
  bool used_up() const { return failed_with_ == EMFILE; }
  // Gives `n` descriptors back.
  void free(size_t n) {
    for (; n > 0 && !held_.empty(); --n) {
      ::close(held_.back());
      held_.pop_back();
    }
  }

 private:
  rlimit saved_{};
  std::vector<int> held_;
  int failed_with_ = 0;
};

}  // namespace

TEST_CASE("http server: a connection past the limit reads its 503 whole") {
  http::ServerOptions o;
  o.max_connections = 1;
  ServerWithOneHeld h(o);
  // Its request is never read: the answer and the end of the connection
  // come all the same.
  const std::string request =
      "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4096\r\n\r\n" + std::string(4096, 'x');
  for (int i = 0; i < 50; ++i) {
    net::ip::tcp::socket s(h.ioc);
    s.connect(h.at);
    net::write(s, net::buffer(request));
    std::string got;
    boost::system::error_code ec;
    char buf[4096];
    while (!ec) got.append(buf, s.read_some(net::buffer(buf), ec));
    CHECK(got.starts_with("HTTP/1.1 503"));
    CHECK(got.find("Retry-After: 1") != std::string::npos);
    CHECK(ec == net::error::eof);
  }
  // The refused ones are gone; the one held stays.
  CHECK(becomes_true([&] { return h.server.open_connections() == 1; }, std::chrono::seconds(3)));
}

TEST_CASE("http server: over TLS, a connection past the limit gets its 503 after the handshake") {
  const auto dir = std::filesystem::temp_directory_path() / ("opgate-tls-" + crypto::random_hex(6));
  std::filesystem::create_directories(dir);
  const auto cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  const std::string make_cert = fmt::format(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 -keyout {} -out {} 2>/dev/null",
      key, cert);
  REQUIRE(std::system(make_cert.c_str()) == 0);
  http::ServerOptions o;
  o.max_connections = 1;
  o.tls = {cert, key};
  {
    ServerWithOneHeld h(o);
    http::ClientRequest req;
    req.url = fmt::format("https://127.0.0.1:{}/", h.at.port());
    req.ca_file = cert;
    auto res = http::send(req);
    REQUIRE_MESSAGE(res.ok(), res.error().message);
    CHECK(res->status == 503);
    CHECK(res->headers.at("Retry-After") == "1");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("http server: a loop's first connection, with descriptors used up, is served") {
  // Two loops; the first holds a connection, so the next goes to the
  // second, which has had none. Two descriptors are left: the client's
  // socket and the server's end of it. Nothing else may be needed.
  ServerWithOneHeld h(http::ServerOptions{});
  std::string got;
  boost::system::error_code ec;
  {
    DescriptorsUsedUp exhausted;
    REQUIRE(exhausted.used_up());
    exhausted.free(2);
    net::ip::tcp::socket s(h.ioc);
    s.connect(h.at, ec);
    REQUIRE_FALSE(ec);
    net::write(s, net::buffer(std::string_view("GET / HTTP/1.1\r\nHost: a\r\n\r\n")), ec);
    char buf[1024];
    while (!ec && got.find("{}") == std::string::npos)
      got.append(buf, s.read_some(net::buffer(buf), ec));
  }
  CHECK_FALSE(ec);
  CHECK(got.starts_with("HTTP/1.1 200"));
}

TEST_CASE("http client: with descriptors used up, a send fails with an error, never a throw") {
  // On a thread of its own, whose event queue is not made yet.
  http::ClientRequest req;
  req.url = "http://127.0.0.1:9/";
  Result<http::Response> sent = make_error(errc::internal, "not sent");
  {
    DescriptorsUsedUp exhausted;
    REQUIRE(exhausted.used_up());
    std::thread([&] { sent = http::send(req); }).join();
  }
  REQUIRE_FALSE(sent.ok());
  CHECK(sent.error().message.find("Too many open files") != std::string::npos);
}

TEST_CASE("http server: past the limit, 8 wait for their 503 and more are closed at once") {
  // One loop, held by a handler; its connection is the one allowed. Those
  // past the limit cannot be answered while the loop is held.
  BlockingServer b(1, 1);
  REQUIRE(b.port.ok());
  auto blocked = b.request("/block", std::chrono::seconds(10));
  b.started.get_future().wait();
  const net::ip::tcp::endpoint at(net::ip::make_address("127.0.0.1"), *b.port);
  net::io_context ioc;
  std::vector<net::ip::tcp::socket> past;
  for (int i = 0; i < 20; ++i) {
    net::ip::tcp::socket s(ioc);
    s.connect(at);
    s.non_blocking(true);
    past.push_back(std::move(s));
  }
  // 12 are closed unanswered at once; 8 wait, each holding a descriptor.
  auto closed = [&] {
    size_t n = 0;
    for (auto& s : past) {
      char byte;
      boost::system::error_code ec;
      s.read_some(net::buffer(&byte, 1), ec);
      if (ec && ec != net::error::would_block) ++n;
    }
    return n;
  };
  CHECK(becomes_true([&] { return closed() == 12; }, std::chrono::seconds(5)));
  CHECK(b.server.open_connections() == 9);
  // Let go, the loop answers the 8 that waited.
  b.release.set_value();
  REQUIRE(blocked.get().ok());
  size_t told = 0;
  for (auto& s : past) {
    s.non_blocking(false);
    std::string got;
    boost::system::error_code ec;
    char buf[1024];
    while (!ec) got.append(buf, s.read_some(net::buffer(buf), ec));
    if (got.starts_with("HTTP/1.1 503")) ++told;
  }
  CHECK(told == 8);
}
