// An HTTP/1.1 server on Beast, plain or over TLS: keep-alive requests, a header
// and a body timeout per request, a body limit, a connection limit, and a
// graceful drain. The handler is either a plain function from Request to
// Response, run on one of the server's threads, or an asynchronous one that
// answers later through a Respond callback from any thread (the webhook
// ingress answers after the group commit that holds its event). A connection
// reads its next request only after answering the current one, so each holds
// at most one request in flight. Each thread runs an event loop of its own,
// and a connection stays on the loop that had the fewest connections when it
// arrived: a handler that blocks holds up only its own thread's other
// connections, none while there are no more connections than threads;
// accepting has a thread of its own.
// Thread-safe: start/drain/stop from any one controlling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "http/message.h"

namespace opgate::http {

// A certificate chain and its private key (PEM files).
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  bool enabled() const { return !cert_file.empty(); }
  bool operator==(const TlsFiles&) const = default;
};

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  std::string name = "http";           // its threads' name
  int threads = 2;
  // Connections past this get one 503 and are closed; past this and 8
  // waiting for their 503, closed unanswered at once.
  size_t max_connections = 1024;
  // Larger bodies get 413 and the connection is closed.
  size_t max_body_bytes = 1 << 20;
  // A sender that has not delivered the headers (resp. the body) in time is
  // disconnected, so a slow sender cannot hold a connection. The header
  // deadline also bounds how long a keep-alive connection may sit idle.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds write_timeout{10'000};
  // TLS on every connection when cert_file is set.
  TlsFiles tls;
};

using Handler = std::function<Response(Request&&)>;
using AsyncHandler = std::function<void(Request&&, Respond)>;

// Ok if the certificate and key load and match (nothing is changed).
Status check_tls_files(const TlsFiles& files);

// A certificate and key loaded and checked, ready for Server::use_tls: a
// reload loads every listener's files before it changes any listener.
struct LoadedTls;
Result<std::shared_ptr<const LoadedTls>> load_tls_files(const TlsFiles& files);

class Server {
 public:
  Server(ServerOptions options, Handler handler);
  Server(ServerOptions options, AsyncHandler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving; returns the bound port.
  Result<uint16_t> start();
  // Loads a certificate and key for the connections accepted from now on
  // (a reload); connections already open keep theirs. An error changes
  // nothing.
  Status load_tls(const TlsFiles& files);
  // The same with files already loaded; cannot fail.
  void use_tls(std::shared_ptr<const LoadedTls> tls);
  // Stops accepting; idle connections close; requests in flight are answered
  // with "Connection: close". Returns when all connections are gone or the
  // deadline passes.
  void drain(std::chrono::milliseconds deadline);
  // Runs `work` on one of the server's threads (answers made elsewhere, to
  // be sent from here). After stop() it is dropped unrun.
  void post(std::function<void()> work);
  // Stops the threads. Safe to call twice.
  void stop();
  uint16_t port() const;
  size_t open_connections() const;
  // True once drain() or stop() has begun.
  bool draining() const;
  // Accepts that failed (e.g. out of descriptors) and were paused.
  uint64_t accept_failures() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace opgate::http
