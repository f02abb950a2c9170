// A blocking HTTP/1.1 client over TCP or verified TLS for the adapters and the
// CLI: one request per call, one overall deadline, the host name's lookup
// included (a lookup still waiting at the deadline is "connect_failed": the
// request never left; name_lookup.h). Each calling thread keeps
// a few connections open for a few seconds after their answers and reuses
// them for the same origin, so a worker pays the TCP (and TLS) set-up once,
// not per call. Errors are classified, because the caller must know whether
// the request may have reached the peer: "connect_failed" means it never
// left; "timeout" and "connection_lost" mean it may have been processed. A
// kept connection the peer had closed is retried once on a new one only for
// a request it may see twice (GET, HEAD, or one with an Idempotency-Key).
// Thread-safe: threads share nothing but the TLS contexts.
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
  // The most of an answer's body read; a longer one is a failed call.
  size_t max_body_bytes = 64 << 20;
};

// Error codes: "bad_url", "unsupported_scheme", "connect_failed", "tls_setup",
// "tls_failed", "timeout", "connection_lost".
Result<Response> send(const ClientRequest& request);

// True if a failed send may have been processed by the peer.
bool may_have_reached_peer(const Error& error);

}  // namespace opgate::http
