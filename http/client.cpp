#include "http/client.h"

#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/url/parse.hpp>
#include <map>

#include "common/mutex.h"

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

Result<std::shared_ptr<ssl::context>> tls_context(const std::string& ca_file) {
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

struct Exchange {
  const ClientRequest& request;
  std::string host, port;
  bhttp::request<bhttp::string_body> req;
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  std::optional<Error> failure;
  std::chrono::steady_clock::time_point deadline;

  std::chrono::milliseconds remaining() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  }

  void fail(beast::error_code ec, bool after_send) {
    if (ec == beast::error::timeout)
      failure = make_error(errc::timeout, "no answer from " + host + ":" + port + " in time");
    else if (after_send)
      failure = make_error(errc::connection_lost,
                           "connection to " + host + ":" + port + " lost: " + ec.message());
    else
      failure = make_error(errc::connect_failed,
                           "cannot connect to " + host + ":" + port + ": " + ec.message());
  }

  // Write the request and read the answer on a connected (and, for TLS,
  // handshaken) stream.
  template <typename Stream>
  void write_and_read(Stream& stream) {
    beast::get_lowest_layer(stream).expires_after(remaining());
    bhttp::async_write(stream, req, [this, &stream](beast::error_code ec, size_t) {
      if (ec) return fail(ec, true);
      beast::get_lowest_layer(stream).expires_after(remaining());
      bhttp::async_read(stream, buffer, parser, [this](beast::error_code ec, size_t) {
        if (ec) fail(ec, true);
      });
    });
  }
};

}  // namespace

Result<Response> send(const ClientRequest& request) {
  auto url = boost::urls::parse_uri(request.url);
  if (!url) return make_error(errc::bad_url, "not a valid URL: " + request.url);
  const bool tls = url->scheme() == "https";
  if (!tls && url->scheme() != "http")
    return make_error(errc::unsupported_scheme, "only http:// and https:// URLs: " + request.url);
  Exchange x{request,
             std::string(url->host()),
             url->has_port() ? std::string(url->port()) : (tls ? "443" : "80"),
             {},
             {},
             {},
             {},
             std::chrono::steady_clock::now() + request.timeout};
  std::string target(url->encoded_target());
  if (target.empty()) target = "/";

  x.req.method_string(request.method);
  x.req.target(target);
  x.req.version(11);
  x.req.set(bhttp::field::host, x.host + ":" + x.port);
  x.req.set(bhttp::field::user_agent, "opgate/1");
  for (const auto& [k, v] : request.headers) x.req.set(k, v);
  x.req.body() = request.body;
  x.req.keep_alive(false);
  x.req.prepare_payload();
  x.parser.body_limit(64 * 1024 * 1024);

  // One event loop per calling thread, reused: creating one per request
  // costs several system calls (epoll, eventfd, timerfd) every time.
  thread_local net::io_context ioc;
  ioc.restart();
  tcp::resolver resolver(ioc);
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  std::shared_ptr<ssl::context> ctx;
  if (tls) {
    auto c = tls_context(request.ca_file);
    if (!c) return c.error();
    ctx = *c;
    secure.emplace(ioc, *ctx);
    // SNI, and the certificate must name the host we asked for.
    if (!SSL_set_tlsext_host_name(secure->native_handle(), x.host.c_str()))
      return make_error(errc::tls_setup, "cannot set the TLS server name");
    secure->set_verify_callback(ssl::host_name_verification(x.host));
  } else {
    plain.emplace(ioc);
  }
  beast::tcp_stream& lowest = tls ? beast::get_lowest_layer(*secure) : *plain;

  auto on_resolved = [&](beast::error_code ec, tcp::resolver::results_type eps) {
    if (ec) return x.fail(ec, false);
    lowest.expires_after(x.remaining());
    lowest.async_connect(eps, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return x.fail(ec, false);
      if (!tls) return x.write_and_read(*plain);
      lowest.expires_after(x.remaining());
      secure->async_handshake(ssl::stream_base::client, [&](beast::error_code ec) {
        if (ec) {
          if (ec == beast::error::timeout) return x.fail(ec, false);
          x.failure = make_error(errc::tls_failed,
                                 "TLS handshake with " + x.host + " failed: " + ec.message());
          return;
        }
        x.write_and_read(*secure);
      });
    });
  };
  // A numeric address needs no resolver (whose lookup runs on a thread of
  // its own for every request).
  std::string literal = x.host;
  if (literal.size() > 2 && literal.front() == '[') literal = literal.substr(1, literal.size() - 2);
  beast::error_code parse_ec;
  auto address = net::ip::make_address(literal, parse_ec);
  if (!parse_ec) {
    uint16_t port_number = 0;
    try {
      port_number = static_cast<uint16_t>(std::stoi(x.port));
    } catch (...) {
      return make_error(errc::bad_url, "not a valid port: " + request.url);
    }
    net::post(ioc, [&, address, port_number] {
      on_resolved({}, tcp::resolver::results_type::create(tcp::endpoint(address, port_number),
                                                          x.host, x.port));
    });
  } else {
    resolver.async_resolve(x.host, x.port, on_resolved);
  }
  ioc.run();
  if (x.failure) return *x.failure;

  auto& msg = x.parser.get();
  Response out;
  out.status = static_cast<int>(msg.result_int());
  for (const auto& field : msg)
    out.headers[std::string(field.name_string())] = std::string(field.value());
  out.body = std::move(msg.body());
  beast::error_code ignore;
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignore);
  return out;
}

}  // namespace opgate::http
