#include "http/client.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/url/parse.hpp>
#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "http/name_lookup.h"

namespace opgate::http {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

bool may_have_reached_peer(const Error& error) {
  return error.code == "timeout" || error.code == "connection_lost";
}

namespace {

// One verifying TLS context per trust store, built once: loading the system
// store for every request would dominate the cost of a call.
Mutex tls_contexts_mu;
std::map<std::string, std::shared_ptr<ssl::context>> tls_contexts GUARDED_BY(tls_contexts_mu);

Result<std::shared_ptr<ssl::context>> tls_context(const std::string& ca_file)
    EXCLUDES(tls_contexts_mu) {
  MutexLock lock(tls_contexts_mu);
  if (auto it = tls_contexts.find(ca_file); it != tls_contexts.end()) return it->second;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  beast::error_code ec;
  if (ca_file.empty())
    ctx->set_default_verify_paths(ec);
  else
    ctx->load_verify_file(ca_file, ec);
  if (ec) return make_error(errc::tls_setup, "cannot load trusted certificates: " + ec.message());
  ctx->set_verify_mode(ssl::verify_peer);
  tls_contexts[ca_file] = ctx;
  return ctx;
}

// A connection kept open after an answer, for the next request to the same
// origin from the same thread. Each thread that sends keeps at most
// kIdlePerThread of them, for at most kIdleReuse: well under the idle time
// servers allow (ours: header_timeout, 10 s), so a kept connection is rarely
// one the peer is closing.
struct Connection {
  std::string origin;  // scheme://host:port plus the trust store
  std::shared_ptr<ssl::context> ctx;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  std::chrono::steady_clock::time_point idle_since;

  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
};

constexpr size_t kIdlePerThread = 4;
constexpr auto kIdleReuse = std::chrono::seconds(4);

// The event loop and the kept connections of one calling thread. The
// connections are declared after the loop they are bound to, so they are
// destroyed first.
struct ThreadState {
  net::io_context ioc;
  std::vector<std::unique_ptr<Connection>> idle;
};

ThreadState& thread_state() {
  // One event loop per calling thread, reused: creating one per request
  // costs several system calls (epoll, eventfd, timerfd) every time.
  thread_local ThreadState state;
  return state;
}

// A kept connection is usable when the peer has neither closed it nor sent
// anything unasked: a readable socket is one of the two, and is dropped.
bool still_open(Connection& c) {
  auto& socket = c.lowest().socket();
  if (!socket.is_open()) return false;
  char probe;
  const ssize_t n = ::recv(socket.native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

std::unique_ptr<Connection> take_idle(const std::string& origin) {
  auto& idle = thread_state().idle;
  const auto now = std::chrono::steady_clock::now();
  std::unique_ptr<Connection> found;
  // Newest first; every stale or closed connection is dropped on the way,
  // so none lingers half-closed for long on a thread that keeps sending.
  for (size_t i = idle.size(); i-- > 0;) {
    const bool usable = now - idle[i]->idle_since <= kIdleReuse && still_open(*idle[i]);
    if (usable && !found && idle[i]->origin == origin)
      found = std::move(idle[i]);
    else if (usable)
      continue;
    idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return found;
}

void keep_idle(std::unique_ptr<Connection> c) {
  auto& idle = thread_state().idle;
  c->lowest().expires_never();
  c->idle_since = std::chrono::steady_clock::now();
  if (idle.size() >= kIdlePerThread) idle.erase(idle.begin());  // the oldest goes
  idle.push_back(std::move(c));
}

struct Exchange {
  const ClientRequest& request;
  std::string host, port;
  bhttp::request<bhttp::string_body> req;
  // At most 1 MiB unparsed (set in send): a header, or a chunk's size line
  // and trailer, which Beast's parser looks through without a limit of its
  // own.
  beast::flat_buffer buffer;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser;
  std::optional<Error> failure;
  std::chrono::steady_clock::time_point deadline;
  // Set when the connection was kept from an earlier request and failed
  // before any byte of the answer arrived: the peer had closed it, most
  // likely without reading this request.
  bool stale = false;

  std::chrono::milliseconds remaining() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  }

  // `after_send`: the request was being written or its answer read. Before
  // that (connecting, the TLS handshake), the deadline passing too means
  // nothing was sent.
  void fail(beast::error_code ec, bool after_send) {
    if (!after_send)
      failure =
          make_error(errc::connect_failed,
                     "cannot connect to " + host + ":" + port + ": " +
                         (ec == beast::error::timeout ? "no connection in time" : ec.message()));
    else if (ec == beast::error::timeout)
      failure = make_error(errc::timeout, "no answer from " + host + ":" + port + " in time");
    else
      failure = make_error(errc::connection_lost,
                           "connection to " + host + ":" + port + " lost: " + ec.message());
  }

  // Write the request and read the answer on a connected (and, for TLS,
  // handshaken) stream.
  template <typename Stream>
  void write_and_read(Stream& stream, bool reused) {
    buffer.clear();
    beast::get_lowest_layer(stream).expires_after(remaining());
    bhttp::async_write(stream, req, [this, &stream, reused](beast::error_code ec, size_t) {
      if (ec) {
        stale = reused && ec != beast::error::timeout;
        return fail(ec, true);
      }
      read_answer(stream, reused);
    });
  }

  // Reads the final answer: an interim one (100 Continue, 103 Early Hints)
  // is passed over.
  template <typename Stream>
  void read_answer(Stream& stream, bool reused) {
    parser.emplace();
    if (request.method == "HEAD") parser->skip(true);  // no body follows, whatever the length
    parser->body_limit(request.max_body_bytes);
    beast::get_lowest_layer(stream).expires_after(remaining());
    bhttp::async_read(
        stream, buffer, *parser, [this, &stream, reused](beast::error_code ec, size_t) {
          if (!ec) {
            const unsigned status = parser->get().result_int();
            if (status / 100 == 1 && status != 101) read_answer(stream, false);
            return;
          }
          stale =
              reused && ec != beast::error::timeout && !parser->got_some() && buffer.size() == 0;
          fail(ec, true);
        });
  }
};

// A request that may be sent again after a kept connection turned out to be
// closed: one that changes nothing, or one the peer deduplicates by its key.
bool may_resend(const ClientRequest& request) {
  if (request.method == "GET" || request.method == "HEAD") return true;
  auto key = request.headers.find("Idempotency-Key");  // names compare case-insensitively
  return key != request.headers.end() && !key->second.empty();
}

}  // namespace

namespace {

// The request as it goes on the wire: the caller's headers over ours.
void prepare(Exchange& x, const std::string& target) {
  const ClientRequest& request = x.request;
  x.req.method_string(request.method);
  x.req.target(target);
  x.req.version(11);
  x.req.set(bhttp::field::host, x.host + ":" + x.port);
  x.req.set(bhttp::field::user_agent, "opgate/1");
  x.req.keep_alive(true);  // a caller's own Connection header still wins
  for (const auto& [k, v] : request.headers) x.req.set(k, v);
  x.req.body() = request.body;
  x.req.prepare_payload();
}

// Sends on a connection kept from an earlier request; true if answered.
bool exchange_on_kept(Exchange& x, Connection& conn, bool tls) {
  net::io_context& ioc = thread_state().ioc;
  ioc.restart();
  if (tls)
    x.write_and_read(*conn.secure, true);
  else
    x.write_and_read(*conn.plain, true);
  ioc.run();
  return !x.failure;
}

// A new connection to the origin (TLS with SNI and the host's name
// verified), not yet connected.
Result<std::unique_ptr<Connection>> new_connection(const Exchange& x, const std::string& origin,
                                                   bool tls) {
  auto conn = std::make_unique<Connection>();
  conn->origin = origin;
  net::io_context& ioc = thread_state().ioc;
  // Asio throws what it cannot report on an operation: a thread's first
  // connection makes its event queue, three descriptors, and with the
  // descriptors used up that fails. Nothing has run yet, so nothing is left
  // behind on the thread's loop.
  try {
    if (!tls) {
      conn->plain.emplace(ioc);
      return conn;
    }
    OPGATE_ASSIGN_OR_RETURN(conn->ctx, tls_context(x.request.ca_file));
    conn->secure.emplace(ioc, *conn->ctx);
  } catch (const std::exception& e) {
    return make_error(errc::connect_failed, std::string("cannot make a connection: ") + e.what());
  }
  // The name the certificate must hold: an address literal without its
  // brackets, checked as an address and sent without SNI (RFC 6066 3).
  const std::string name = x.host.starts_with('[') && x.host.ends_with(']')
                               ? x.host.substr(1, x.host.size() - 2)
                               : x.host;
  boost::system::error_code not_address;
  net::ip::make_address(name, not_address);
  if (not_address && !SSL_set_tlsext_host_name(conn->secure->native_handle(), name.c_str()))
    return make_error(errc::tls_setup, "cannot set the TLS server name");
  conn->secure->set_verify_callback(ssl::host_name_verification(name));
  return conn;
}

// Connects (resolving the host unless it is a numeric address), shakes
// hands under TLS, then writes the request and reads the answer; a failure
// is left in x.failure.
Status connect_and_exchange(Exchange& x, Connection& c, bool tls) {
  net::io_context& ioc = thread_state().ioc;
  beast::tcp_stream& lowest = c.lowest();
  ioc.restart();
  auto on_resolved = [&](tcp::resolver::results_type eps) {
    lowest.expires_after(x.remaining());
    lowest.async_connect(eps, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return x.fail(ec, false);
      if (!tls) return x.write_and_read(*c.plain, false);
      lowest.expires_after(x.remaining());
      c.secure->async_handshake(ssl::stream_base::client, [&](beast::error_code ec) {
        if (ec) {
          if (ec == beast::error::timeout) return x.fail(ec, false);
          x.failure = make_error(errc::tls_failed,
                                 "TLS handshake with " + x.host + " failed: " + ec.message());
          return;
        }
        x.write_and_read(*c.secure, false);
      });
    });
  };
  // A numeric address needs no lookup; a name is looked up within the
  // request's time (name_lookup.h), before anything is sent.
  std::string literal = x.host;
  if (literal.size() > 2 && literal.front() == '[') literal = literal.substr(1, literal.size() - 2);
  beast::error_code parse_ec;
  auto address = net::ip::make_address(literal, parse_ec);
  tcp::resolver::results_type endpoints;
  if (!parse_ec) {
    const uint16_t port = *port_number(x.port);  // checked by send()
    endpoints = tcp::resolver::results_type::create(tcp::endpoint(address, port), x.host, x.port);
  } else {
    auto found =
        look_up_within(x.host, x.port, std::max(x.remaining(), std::chrono::milliseconds(0)));
    if (!found) {
      x.failure = found.error();
      return Status::Ok();
    }
    endpoints = std::move(*found);
  }
  net::post(ioc, [&, endpoints] { on_resolved(endpoints); });
  ioc.run();
  return Status::Ok();
}

// The answer read, and the connection kept for the next request only if
// the peer keeps it too and nothing of another answer is already waiting.
Response take_answer(Exchange& x, std::unique_ptr<Connection> conn) {
  auto& msg = x.parser->get();
  Response out;
  out.status = static_cast<int>(msg.result_int());
  for (const auto& field : msg)
    out.headers[std::string(field.name_string())] = std::string(field.value());
  out.body = std::move(msg.body());
  if (x.parser->keep_alive() && x.req.keep_alive() && x.parser->is_done() && x.buffer.size() == 0) {
    keep_idle(std::move(conn));
  } else {
    beast::error_code ignore;
    conn->lowest().socket().shutdown(tcp::socket::shutdown_both, ignore);
  }
  return out;
}

}  // namespace

Result<Response> send(const ClientRequest& request) {
  auto url = boost::urls::parse_uri(request.url);
  // The URL is never repeated in an error: its path or query may be a
  // secret (a Slack webhook's), and errors reach logs and API answers.
  if (!url) return make_error(errc::bad_url, "not a valid URL");
  const bool tls = url->scheme() == "https";
  if (!tls && url->scheme() != "http")
    return make_error(errc::unsupported_scheme, "only http:// and https:// URLs");
  // A port out of range is refused, never cut to 16 bits (onto another);
  // so is a path that does not start at the root, which Boost.URL reads out
  // of "host:80x/y" as port 80 and path "x/y".
  const bool ported = url->has_port() && !url->port().empty();
  if (ported && port_number(url->port()).value_or(0) == 0)
    return make_error(errc::bad_url, "not a valid port: " + std::string(url->port()));
  if (!url->encoded_path().empty() && !url->encoded_path().starts_with('/'))
    return make_error(errc::bad_url, "not a valid URL");
  Exchange x{request,
             std::string(url->host()),
             ported ? std::string(url->port()) : (tls ? "443" : "80"),
             {},
             {},
             {},
             {},
             std::chrono::steady_clock::now() + request.timeout};
  x.buffer.max_size(1 << 20);
  std::string target(url->encoded_target());
  prepare(x, target.empty() ? "/" : target);
  const std::string origin =
      std::string(url->scheme()) + "://" + x.host + ":" + x.port + "|" + request.ca_file;

  std::unique_ptr<Connection> conn = take_idle(origin);
  if (conn && exchange_on_kept(x, *conn, tls)) return take_answer(x, std::move(conn));
  // The peer closed the kept connection. A request it may safely see twice
  // goes again on a new one; any other stays "may have reached the peer".
  const bool resent = conn != nullptr;
  if (resent) {
    if (!x.stale || !may_resend(request) || x.remaining().count() <= 0) return *x.failure;
    x.failure.reset();
    x.stale = false;
  }
  // Once a first attempt went out, whatever befalls the second, the request
  // may have reached the peer.
  auto failed = [&](Error e) -> Error {
    if (!resent || may_have_reached_peer(e)) return e;
    return make_error(errc::connection_lost, "connection to " + x.host + ":" + x.port +
                                                 " lost, and sending again failed: " + e.message);
  };
  auto fresh = new_connection(x, origin, tls);
  if (!fresh) return failed(fresh.error());
  if (Status s = connect_and_exchange(x, **fresh, tls); !s) return s.error();
  if (x.failure) return failed(*x.failure);
  return take_answer(x, std::move(*fresh));
}

}  // namespace opgate::http
