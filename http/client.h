// A blocking HTTP/1.1 client over TCP or verified TLS for the adapters and the CLI: one request per
// call, one connection per request, one overall deadline. Errors are
// classified, because the caller must know whether the request may have
// reached the peer: "connect_failed" means it never left; "timeout" and
// "connection_lost" mean it may have been processed. Thread-safe: calls
// share nothing.
#pragma once

#include <chrono>
#include <string>

#include "common/result.h"
#include "http/message.h"

namespace opgate::http {

struct ClientRequest {
  std::string method = "GET";
  std::string url;  // http://host:port/path?query
  Headers headers;
  std::string body;
  std::chrono::milliseconds timeout{10'000};
  // https: the trusted CA certificates (PEM); empty means the system store.
  // The peer's certificate is always verified, host name included.
  std::string ca_file;
};

// Error codes: "bad_url", "unsupported_scheme", "connect_failed", "tls_setup",
// "tls_failed", "timeout", "connection_lost".
Result<Response> send(const ClientRequest& request);

// True if a failed send may have been processed by the peer.
bool may_have_reached_peer(const Error& error);

}  // namespace opgate::http
