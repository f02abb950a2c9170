#include "http/server.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_name.h"

namespace opgate::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
namespace ssl = net::ssl;

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void close_if_idle() = 0;
  // Closes the socket at once; only once no thread runs the io_context.
  virtual void close_stopped() = 0;
};

// Connections refer to the Impl by plain pointer: the Impl outlives them,
// because ~Impl shuts every loop down, destroying each handler that keeps a
// connection alive, before any member goes.
struct Server::Impl {
  ServerOptions options;
  AsyncHandler handler;
  std::atomic<bool> draining{false};
  std::atomic<size_t> connections{0};
  uint16_t port = 0;
  Mutex mu;
  std::unordered_map<uint64_t, std::weak_ptr<ConnectionBase>> live GUARDED_BY(mu);
  // The TLS context new connections use (none: plain HTTP); replaced as a
  // whole when the certificate is reloaded.
  std::shared_ptr<ssl::context> tls GUARDED_BY(mu);
  uint64_t next_id GUARDED_BY(mu) = 0;
  bool stopped GUARDED_BY(mu) = false;
  std::vector<std::thread> threads;
  std::atomic<uint64_t> accept_failures{0};
  std::atomic<uint64_t> closed_unanswered{0};
  // An io_context per thread, run by that thread alone (hint 1). Each
  // connection lives on one, the one with the fewest connections when it
  // arrives: its handlers run one at a time without a strand, the threads
  // share no queue, and a handler that blocks holds up only the connections
  // of its own thread (none other while there are no more connections than
  // threads). Their guards keep them running while they have no connection.
  //
  // A handler on one loop may hold a connection that lives on another (a
  // batch's answers, posted to any loop), so ~Impl shuts every loop down,
  // destroying their handlers, before any loop is destroyed.
  struct Loop : net::io_context {
    Loop() : net::io_context(1) {}
    void shut_down() { shutdown(); }
    std::atomic<size_t> connections{0};
    // Its event queue (epoll, eventfd and timerfd: three descriptors) is
    // made with the loop, as this timer's service needs it. Made at the
    // loop's first connection instead, it failed when that connection came
    // with the descriptors used up, and Asio throws that failure: the
    // accepting thread ended the process.
    net::steady_timer queue_made_now{*this};
  };
  std::vector<std::unique_ptr<Loop>> loops;  // made with the Impl, never resized
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  size_t next_loop = 0;              // where the search for the least busy starts
  std::atomic<size_t> next_post{0};  // Server::post's round robin
  // Accepting has a thread of its own, which no handler can hold up.
  net::io_context accept_ioc{1};
  tcp::acceptor acceptor{accept_ioc};
  // Waits after a failed accept (out of descriptors), so the acceptor does
  // not spin while connections close.
  net::steady_timer accept_pause{accept_ioc};

  ~Impl() {
    for (auto& loop : loops) loop->shut_down();
  }

  void accept();
  // Moves an accepted connection to its loop and starts it there.
  void place(tcp::socket accepted);
  tcp protocol = tcp::v4();  // the listening socket's
  // The loop the next connection lives on (on the accepting thread).
  size_t least_busy() {
    size_t best = next_loop++ % loops.size();
    for (size_t i = 0; i < loops.size(); ++i)
      if (loops[i]->connections.load() < loops[best]->connections.load()) best = i;
    return best;
  }
};

// Room each connection's read buffer starts with, and the most it may
// hold: a header (at most 16 KiB) or a chunk's size line and trailer, which
// Beast's parser looks through for their ends without a limit of its own;
// body bytes move out of the buffer as they come.
constexpr size_t kReadBuffer = 8 * 1024;
constexpr size_t kMaxBuffered = 64 * 1024;
// How long a connection closing on a refused request reads what still comes.
constexpr std::chrono::seconds kLinger{2};
// Connections past the limit that may wait for their 503 at once.
constexpr size_t kRefusingAtOnce = 8;

// Room each connection keeps for a request's header fields.
constexpr size_t kFieldsBuffer = 2 * 1024;
// Most header fields a request may carry. Browsers and webhook senders send
// a few dozen at most; the bound keeps the request's field list (searched
// end to end for each repeat) cheap whatever a sender puts in 16 KiB.
constexpr size_t kMaxFields = 100;

// Header fields are carved from the connection's own buffer.
using FieldsAllocator = std::pmr::polymorphic_allocator<char>;
using RequestParser = bhttp::request_parser<bhttp::string_body, FieldsAllocator>;

// Each connection runs on its loop's executor, named by its concrete type:
// with Beast's tcp_stream (a type-erased executor) every operation copied
// and destroyed an any_io_executor, 3% of the daemon at full ingest.
using Executor = net::io_context::executor_type;
using TcpStream = beast::basic_stream<tcp, Executor, beast::unlimited_rate_policy>;
using Socket = tcp::socket::rebind_executor<Executor>::other;

// Plain TCP (TcpStream) or TLS over it (beast::ssl_stream).
template <typename Stream>
class Connection final : public ConnectionBase,
                         public std::enable_shared_from_this<Connection<Stream>> {
 public:
  using std::enable_shared_from_this<Connection<Stream>>::shared_from_this;

  Connection(Socket socket, Server::Impl* server, size_t loop,
             uint64_t id) requires std::is_same_v<Stream, TcpStream>
      : stream_(std::move(socket)), server_(server), loop_(loop), id_(id) {}
  Connection(Socket socket, std::shared_ptr<ssl::context> tls, Server::Impl* server, size_t loop,
             uint64_t id) requires(!std::is_same_v<Stream, TcpStream>)
      : tls_(std::move(tls)),
        stream_(std::move(socket), *tls_),
        server_(server),
        loop_(loop),
        id_(id) {}

  ~Connection() {
    server_->connections--;
    server_->loops[loop_]->connections--;
    MutexLock lock(server_->mu);
    server_->live.erase(id_);
  }

  void run() {
    beast::error_code ec;
    const auto peer = tcp_layer().socket().remote_endpoint(ec);
    if (!ec) remote_address_ = peer.address().to_string();
    // Beast reads max(512, free capacity) bytes at a time: from an empty
    // buffer a 1 KiB webhook took three recvmsg calls. With room for a whole
    // typical request it takes one.
    buffer_.reserve(kReadBuffer);
    buffer_.max_size(kMaxBuffered);
    if constexpr (std::is_same_v<Stream, TcpStream>) {
      net::dispatch(stream_.get_executor(),
                    beast::bind_front_handler(&Connection::read_header, shared_from_this()));
    } else {
      handshake([self = shared_from_this()] { self->read_header(); });
    }
  }

  // The 503 goes out over TLS too, after the handshake.
  void refuse_overloaded() {
    auto refuse = [self = shared_from_this()] {
      Response r = error_response(errc::overloaded, "Too many connections; retry later.");
      r.headers["Retry-After"] = "1";
      r.close = true;
      self->write(std::move(r));
    };
    if constexpr (std::is_same_v<Stream, TcpStream>)
      refuse();
    else
      handshake(std::move(refuse));
  }

  void close_stopped() override { close(); }

  // Called on drain from any thread: close if waiting for a new request. At
  // most one such check waits in the loop's queue per connection, however
  // long a handler holds up the loop.
  void close_if_idle() override {
    if (idle_check_queued_.exchange(true)) return;
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->idle_check_queued_ = false;
      // A connection cooling down after a refused request is not waited for.
      if ((self->idle_ && !self->has_pending_bytes()) || self->cooling_) {
        self->cooldown_.cancel();
        beast::error_code ec;
        self->tcp_layer().socket().shutdown(tcp::socket::shutdown_both, ec);
        self->tcp_layer().socket().close(ec);
      }
    });
  }

 private:
  TcpStream& tcp_layer() { return beast::get_lowest_layer(stream_); }

  // The TLS handshake, then `next`; it counts against the first request's
  // header deadline, which starts at the accept.
  template <typename Next>
  void handshake(Next next) {
    first_deadline_ = std::chrono::steady_clock::now() + server_->options.header_timeout;
    tcp_layer().expires_at(*first_deadline_);
    stream_.async_handshake(
        ssl::stream_base::server,
        [self = shared_from_this(), next = std::move(next)](beast::error_code ec) mutable {
          if (ec) return self->close();
          next();
        });
  }

  // Bytes received but not yet parsed, here or still in the kernel: a request
  // in flight, to be read and answered (with Connection: close) on drain.
  bool has_pending_bytes() {
    beast::error_code ec;
    const size_t in_kernel = tcp_layer().socket().available(ec);
    return buffer_.size() > 0 || (!ec && in_kernel > 0);
  }

  void read_header() {
    // The last request's fields go back to the connection's buffer whole:
    // no allocation or free per field.
    parser_.reset();
    fields_.release();
    parser_.emplace(std::piecewise_construct, std::make_tuple(),
                    std::make_tuple(FieldsAllocator(&fields_)));
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(16 * 1024);
    idle_ = true;
    if (server_->draining && !has_pending_bytes()) return close();
    // One deadline for the whole header, idle keep-alive time included: a
    // sender that trickles bytes cannot extend it.
    if (first_deadline_)
      tcp_layer().expires_at(*std::exchange(first_deadline_, std::nullopt));
    else
      tcp_layer().expires_after(server_->options.header_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             beast::bind_front_handler(&Connection::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, size_t) {
    idle_ = false;
    if (ec) return fail_read(ec);
    const auto& header = parser_->get();
    // A body framed by a transfer coding other than chunked would be read
    // as no body, and its bytes as the next request (RFC 9112 6.3).
    if (header.count(bhttp::field::transfer_encoding) > 0 && !parser_->chunked())
      return refuse(errc::bad_request, "Only the chunked transfer coding is accepted.");
    // RFC 9112 3.2: one Host, in every HTTP/1.1 request.
    if (header.version() == 11 && header.count(bhttp::field::host) != 1)
      return refuse(errc::bad_request, "An HTTP/1.1 request needs one Host header field.");
    if (static_cast<size_t>(std::distance(header.begin(), header.end())) > kMaxFields)
      return refuse(errc::header_too_large, "The request has too many header fields.");
    auto length = parser_->content_length();
    if (length && *length > server_->options.max_body_bytes) return too_large();
    // A client that waits to be asked for its body (curl's large uploads)
    // is asked, rather than left to send it after its own pause.
    if (header.version() == 11 && !parser_->is_done() &&
        beast::iequals(header[bhttp::field::expect], "100-continue")) {
      wire_ = "HTTP/1.1 100 Continue\r\n\r\n";
      tcp_layer().expires_after(server_->options.write_timeout);
      return net::async_write(stream_, net::buffer(wire_),
                              [self = shared_from_this()](beast::error_code ec, size_t) {
                                if (ec) return self->close();
                                self->read_body();
                              });
    }
    read_body();
  }

  void read_body() {
    tcp_layer().expires_after(server_->options.body_timeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Connection::on_body, shared_from_this()));
  }

  void fail_read(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) return too_large();
    if (ec == bhttp::error::header_limit)
      return refuse(errc::header_too_large, "The request's header is over 16 KiB.");
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == ssl::error::stream_truncated)
      return close();
    // Anything else is a malformed request (a chunk's size line or trailer
    // past kMaxBuffered among them): say so once, then close.
    refuse(errc::bad_request, "The HTTP request is malformed.");
  }

  void too_large() { refuse(errc::too_large, "The request body is over the limit."); }

  // Answers a request refused before its handler, and closes, reading
  // what the client still sends meanwhile (linger_close).
  void refuse(const ErrorCode& code, std::string_view message) {
    Response r = error_response(code, std::string(message));
    r.close = true;
    linger_ = true;
    write(std::move(r));
  }

  void on_body(beast::error_code ec, size_t) {
    if (ec) return fail_read(ec);
    auto& msg = parser_->get();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.headers.reserve(8);
    for (const auto& field : msg) {  // at most kMaxFields (on_header)
      req.headers.add(std::string_view(field.name_string().data(), field.name_string().size()),
                      std::string_view(field.value().data(), field.value().size()));
    }
    req.body = std::move(msg.body());
    req.remote_address = remote_address_;
    const bool keep_alive = msg.keep_alive();
    const bool head = msg.method() == bhttp::verb::head;
    // Requests on a connection are answered in turn, so the one before this
    // is answered already: the first call for this request moves the count
    // from the one before to this one, and any other call finds it moved.
    const uint64_t request = ++requests_;
    Respond respond = [self = shared_from_this(), keep_alive, head, request](Response res) {
      uint64_t before = request - 1;
      if (!self->answered_.compare_exchange_strong(before, request)) return;  // answered already
      // Inline when already on this connection's thread, else queued to it.
      net::dispatch(self->stream_.get_executor(),
                    [self, keep_alive, head, res = std::move(res)]() mutable {
                      self->answer(std::move(res), keep_alive, head);
                    });
    };
    try {
      server_->handler(std::move(req), respond);
    } catch (const std::exception&) {
      respond(error_response(errc::internal, "Internal error."));
    }
  }

  void answer(Response res, bool keep_alive, bool head) {
    if (res.drop) return close();
    if (!keep_alive || server_->draining) res.close = true;
    write(std::move(res), head);
  }

  // The response's bytes go out in one buffer (Beast's serializer walked a
  // chain of buffer views per write: 7% of an ingress thread).
  // `head`: the answer to a HEAD request, its header alone.
  void write(Response r, bool head = false) {
    const bool close = r.close;
    const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(r.status));
    wire_ = serialize(r, std::string_view(reason.data(), reason.size()), !close, head);
    tcp_layer().expires_after(server_->options.write_timeout);
    net::async_write(
        stream_, net::buffer(wire_),
        [self = shared_from_this(), close, cooldown = r.cooldown](beast::error_code ec, size_t) {
          if (ec) return self->close();
          if (close) return self->linger_ ? self->linger_close() : self->close();
          if (cooldown.count() <= 0) return self->read_header();
          self->cooling_ = true;
          self->cooldown_.expires_after(cooldown);
          self->cooldown_.async_wait([self](beast::error_code ec) {
            self->cooling_ = false;
            if (ec) return self->close();
            self->read_header();
          });
        });
  }

  void close() {
    beast::error_code ec;
    tcp_layer().socket().shutdown(tcp::socket::shutdown_send, ec);
    tcp_layer().socket().close(ec);
  }

  // After refusing a request whose body the client is still sending: the
  // answer is ended (FIN), and what arrives is read and dropped for a
  // while before the close. Closed with unread bytes, the connection would
  // be reset, and a client still writing would see the reset, not the 413.
  void linger_close() {
    beast::error_code ec;
    tcp_layer().socket().shutdown(tcp::socket::shutdown_send, ec);
    tcp_layer().expires_after(kLinger);
    discard();
  }
  void discard() {
    buffer_.clear();
    tcp_layer().async_read_some(buffer_.prepare(kReadBuffer),
                                [self = shared_from_this()](beast::error_code ec, size_t) {
                                  if (ec) return self->close();
                                  self->discard();
                                });
  }

  std::shared_ptr<ssl::context> tls_;  // kept alive for the connection (TLS only)
  Stream stream_;
  net::steady_timer cooldown_{stream_.get_executor()};
  beast::flat_buffer buffer_;
  std::string wire_;  // the response being written
  // The first request's header deadline, set at the TLS handshake.
  std::optional<std::chrono::steady_clock::time_point> first_deadline_;
  std::string remote_address_;  // the peer, for requests (limits per address)
  alignas(std::max_align_t) std::array<std::byte, kFieldsBuffer> fields_buffer_;
  // Falls back to the heap for a request with more fields than fit.
  std::pmr::monotonic_buffer_resource fields_{fields_buffer_.data(), fields_buffer_.size()};
  std::optional<RequestParser> parser_;  // declared after the fields it holds
  Server::Impl* server_;
  size_t loop_;  // the loop it lives on (Impl::loops)
  uint64_t id_;
  bool idle_ = true;
  bool cooling_ = false;
  bool linger_ = false;                // the answer being written refuses a request not read whole
  uint64_t requests_ = 0;              // requests read, on its thread
  std::atomic<uint64_t> answered_{0};  // requests answered, from any thread
  std::atomic<bool> idle_check_queued_{false};  // close_if_idle's, on drain
};

void Server::Impl::accept() {
  acceptor.async_accept([self = this](beast::error_code ec, tcp::socket accepted) {
    if (ec) {
      if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
      // Out of descriptors (EMFILE, ENFILE) or another transient failure:
      // the pending connection stays in the backlog; try again shortly.
      if (self->accept_failures++ % 1000 == 0)
        spdlog::warn("{}: accept failed ({}); pausing accepts", self->options.name, ec.message());
      self->accept_pause.expires_after(std::chrono::milliseconds(50));
      self->accept_pause.async_wait([self](beast::error_code) {
        if (self->acceptor.is_open()) self->accept();
      });
      return;
    }
    if (self->draining) return;
    self->place(std::move(accepted));
    self->accept();
  });
}

void Server::Impl::place(tcp::socket accepted) {
  // The loop is chosen now that the connection has arrived, and the socket
  // moves to it.
  const size_t loop = least_busy();
  beast::error_code ec;
  // Past the limit, a connection is told to come back (a 503), a few at a
  // time: beyond that it is closed unanswered at once. A flood would
  // otherwise hold a descriptor for each one waiting for its answer, and
  // use up those the store and the other listeners need.
  if (connections.load() >= options.max_connections + kRefusingAtOnce) {
    if (closed_unanswered++ % 1000 == 0)
      spdlog::warn("{}: over its connection limit; closing new connections unanswered",
                   options.name);
    accepted.close(ec);
    return;
  }
  const auto fd = accepted.release(ec);
  if (ec) return;  // closed with `accepted`
  Socket s(*loops[loop]);
  s.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  const bool over = connections.load() >= options.max_connections;
  std::shared_ptr<ssl::context> context;
  uint64_t id = 0;
  {
    MutexLock lock(mu);
    context = tls;
    id = next_id++;
  }
  // Counted once it exists (its destructor uncounts it), and started on its
  // own loop, where everything else it does runs.
  auto started = [&](auto conn) {
    connections++;
    loops[loop]->connections++;
    {
      MutexLock lock(mu);
      live[id] = conn;
    }
    net::post(*loops[loop], [conn, over] {
      if (over)
        conn->refuse_overloaded();
      else
        conn->run();
    });
  };
  try {
    if (context)
      started(std::make_shared<Connection<beast::ssl_stream<TcpStream>>>(std::move(s), context,
                                                                         this, loop, id));
    else
      started(std::make_shared<Connection<TcpStream>>(std::move(s), this, loop, id));
  } catch (const std::exception& e) {  // e.g. OpenSSL out of memory
    spdlog::warn("{}: cannot set up a connection: {}", options.name, e.what());
  }
}

Server::Server(ServerOptions options, Handler handler)
    : Server(std::move(options),
             AsyncHandler([handler = std::move(handler)](Request&& request, Respond respond) {
               respond(handler(std::move(request)));
             })) {}

Server::Server(ServerOptions options, AsyncHandler handler) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i) {
    impl_->loops.push_back(std::make_unique<Impl::Loop>());
    impl_->guards.push_back(net::make_work_guard(*impl_->loops.back()));
  }
}

Server::~Server() { stop(); }

namespace {
Result<std::shared_ptr<ssl::context>> server_context(const TlsFiles& files) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  beast::error_code ec;
  ctx->use_certificate_chain_file(files.cert_file, ec);
  if (ec)
    return make_error(errc::tls_setup,
                      "cannot load the certificate " + files.cert_file + ": " + ec.message());
  ctx->use_private_key_file(files.key_file, ssl::context::pem, ec);
  if (ec)
    return make_error(errc::tls_setup,
                      "cannot load the private key " + files.key_file + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    return make_error(errc::tls_setup, "the private key " + files.key_file +
                                           " does not match the certificate " + files.cert_file);
  return ctx;
}
}  // namespace

struct LoadedTls {
  std::shared_ptr<ssl::context> context;
};

Status check_tls_files(const TlsFiles& files) {
  OPGATE_TRY(server_context(files));
  return Status::Ok();
}

Result<std::shared_ptr<const LoadedTls>> load_tls_files(const TlsFiles& files) {
  OPGATE_ASSIGN_OR_RETURN(auto ctx, server_context(files));
  return std::shared_ptr<const LoadedTls>(std::make_shared<LoadedTls>(LoadedTls{std::move(ctx)}));
}

Status Server::load_tls(const TlsFiles& files) {
  OPGATE_ASSIGN_OR_RETURN(auto loaded, load_tls_files(files));
  use_tls(std::move(loaded));
  return Status::Ok();
}

void Server::use_tls(std::shared_ptr<const LoadedTls> tls) {
  MutexLock lock(impl_->mu);
  impl_->tls = tls->context;
}

Result<uint16_t> Server::start() {
  auto& o = impl_->options;
  if (!o.tls.cert_file.empty()) OPGATE_TRY(load_tls(o.tls));
  auto colon = o.listen.rfind(':');
  if (colon == std::string::npos)
    return make_error(errc::bad_listen, "listen address must be host:port: " + o.listen);
  std::string host = o.listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  beast::error_code ec;
  auto address = net::ip::make_address(host, ec);
  if (ec) return make_error(errc::bad_listen, "listen host must be an IP address: " + host);
  // 0: any free port.
  auto port = port_number(std::string_view(o.listen).substr(colon + 1));
  if (!port) return make_error(errc::bad_listen, "listen port must be 0 to 65535: " + o.listen);
  tcp::endpoint ep(address, *port);
  auto& acc = impl_->acceptor;
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(errc::listen_failed, "cannot listen on " + o.listen + ": " + ec.message());
  impl_->port = acc.local_endpoint().port();
  impl_->protocol = ep.protocol();
  impl_->accept();
  for (auto& loop : impl_->loops)
    impl_->threads.emplace_back([impl = impl_.get(), ioc = loop.get()] {
      name_this_thread(impl->options.name);
      ioc->run();
    });
  impl_->threads.emplace_back([impl = impl_.get()] {
    name_this_thread(impl->options.name);
    impl->accept_ioc.run();
  });
  return impl_->port;
}

void Server::drain(std::chrono::milliseconds deadline) {
  impl_->draining = true;
  net::post(impl_->accept_ioc, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
  });
  auto until = std::chrono::steady_clock::now() + deadline;
  while (impl_->connections.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::vector<std::shared_ptr<ConnectionBase>> conns;
    {
      MutexLock lock(impl_->mu);
      for (auto& [id, weak] : impl_->live)
        if (auto c = weak.lock()) conns.push_back(std::move(c));
    }
    for (auto& c : conns) c->close_if_idle();
    conns.clear();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Server::post(std::function<void()> work) {
  // Round robin over the threads, like the connections.
  net::post(*impl_->loops[impl_->next_post++ % impl_->loops.size()], std::move(work));
}

void Server::stop() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  impl_->draining = true;
  impl_->accept_ioc.stop();
  for (auto& loop : impl_->loops) loop->stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->threads.clear();
  // With no thread left on the context its sockets are ours to close: a
  // stopped server refuses new connections and ends kept ones, instead of
  // holding them unanswered until the client's timeout.
  beast::error_code ec;
  impl_->acceptor.close(ec);
  std::vector<std::shared_ptr<ConnectionBase>> conns;
  {
    MutexLock lock(impl_->mu);
    for (auto& [id, weak] : impl_->live)
      if (auto c = weak.lock()) conns.push_back(std::move(c));
  }
  for (auto& c : conns) c->close_stopped();
}

uint16_t Server::port() const { return impl_->port; }
size_t Server::open_connections() const { return impl_->connections.load(); }
bool Server::draining() const { return impl_->draining.load(); }
uint64_t Server::accept_failures() const { return impl_->accept_failures.load(); }

}  // namespace opgate::http
