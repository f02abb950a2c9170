#include "http/client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/url/parse.hpp>

namespace opgate::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

bool may_have_reached_peer(const Error& error) {
  return error.code == "timeout" || error.code == "connection_lost";
}

Result<Response> send(const ClientRequest& request) {
  auto url = boost::urls::parse_uri(request.url);
  if (!url) return make_error("bad_url", "not a valid URL: " + request.url);
  if (url->scheme() != "http")
    return make_error("unsupported_scheme", "only http:// URLs are supported: " + request.url);
  std::string host(url->host());
  std::string port = url->has_port() ? std::string(url->port()) : "80";
  std::string target(url->encoded_target());
  if (target.empty()) target = "/";

  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  tcp::resolver resolver(ioc);
  const auto deadline = std::chrono::steady_clock::now() + request.timeout;
  auto remaining = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  };

  bhttp::request<bhttp::string_body> req;
  req.method_string(request.method);
  req.target(target);
  req.version(11);
  req.set(bhttp::field::host, host + ":" + port);
  req.set(bhttp::field::user_agent, "opgate/1");
  for (const auto& [k, v] : request.headers) req.set(k, v);
  req.body() = request.body;
  req.keep_alive(false);
  req.prepare_payload();

  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  std::optional<Error> failure;

  auto fail = [&](beast::error_code ec, bool after_send) {
    if (ec == beast::error::timeout)
      failure = make_error("timeout", "no answer from " + host + ":" + port + " in time");
    else if (after_send)
      failure = make_error("connection_lost", "connection to " + host + ":" + port +
                                                  " lost: " + ec.message());
    else
      failure = make_error("connect_failed",
                           "cannot connect to " + host + ":" + port + ": " + ec.message());
  };

  resolver.async_resolve(host, port, [&](beast::error_code ec, tcp::resolver::results_type eps) {
    if (ec) return fail(ec, false);
    stream.expires_after(remaining());
    stream.async_connect(eps, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return fail(ec, false);
      stream.expires_after(remaining());
      bhttp::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) return fail(ec, true);
        stream.expires_after(remaining());
        bhttp::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) {
          if (ec) return fail(ec, true);
        });
      });
    });
  });
  ioc.run();
  if (failure) return *failure;

  auto& msg = parser.get();
  Response out;
  out.status = static_cast<int>(msg.result_int());
  for (const auto& field : msg)
    out.headers[std::string(field.name_string())] = std::string(field.value());
  out.body = std::move(msg.body());
  beast::error_code ignore;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignore);
  return out;
}

}  // namespace opgate::http
