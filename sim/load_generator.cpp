#include "sim/load_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/mutex.h"
#include "common/webhook_signature.h"
#include "sim/percentile.h"

namespace opgate::sim {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

std::string LoadReport::to_json() const {
  boost::json::object refused_by_status;
  for (const auto& [status, n] : refused) refused_by_status[std::to_string(status)] = n;
  return boost::json::serialize(boost::json::object{{"requests", requests},
                                                    {"accepted", accepted},
                                                    {"duplicates", duplicates},
                                                    {"failed_calls", failed_calls},
                                                    {"refused", refused_by_status},
                                                    {"errors", errors},
                                                    {"seconds", seconds},
                                                    {"p50_ms", p50_ms},
                                                    {"p99_ms", p99_ms},
                                                    {"p999_ms", p999_ms}});
}

namespace {

struct Shared {
  const LoadOptions& o;
  std::string key;     // raw signing key
  std::string prefix;  // unique per run
  std::string pad;
  SteadyClock::time_point deadline;
  std::atomic<uint64_t> next_n{0};  // MCP: the "{n}" of the next call
  Mutex mu;
  LoadReport report GUARDED_BY(mu);
  std::vector<uint32_t> latencies_us GUARDED_BY(mu);
};

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One keep-alive connection sending request after request until the
// deadline; callbacks on its own strand (clang 14 cannot compile coroutines
// with sanitizer coverage, which the CI build uses). The strand's type is
// concrete: no type-erased executor is copied per operation.
using Strand = net::strand<net::io_context::executor_type>;
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(net::io_context& ioc, Shared& s, int index)
      : s_(s), index_(index), resolver_(net::make_strand(ioc)), stream_(resolver_.get_executor()) {
    latencies_.reserve(65536);
    buffer_.reserve(4096);
  }
  ~Connection() {
    MutexLock lock(s_.mu);
    s_.report.requests += mine_.requests;
    s_.report.accepted += mine_.accepted;
    s_.report.duplicates += mine_.duplicates;
    s_.report.failed_calls += mine_.failed_calls;
    s_.report.errors += mine_.errors;
    for (const auto& [status, n] : mine_.refused) s_.report.refused[status] += n;
    s_.latencies_us.insert(s_.latencies_us.end(), latencies_.begin(), latencies_.end());
  }
  void start() { next(); }

 private:
  void next() {
    if (SteadyClock::now() >= s_.deadline) return;
    if (!connected_) return connect();
    send();
  }
  void connect() {
    resolver_.async_resolve(
        s_.o.host, std::to_string(s_.o.port),
        [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type results) {
          if (ec) return self->failed();
          self->stream_.expires_after(std::chrono::seconds(10));
          self->stream_.async_connect(results, [self](beast::error_code ec, auto) {
            if (ec) return self->failed();
            self->connected_ = true;
            self->buffer_.clear();
            self->phase_ = self->s_.o.mcp ? Phase::initialize : Phase::calls;
            self->session_id_.clear();
            self->send();
          });
        });
  }
  void send() {
    if (s_.o.mcp)
      mcp_request();
    else
      webhook_request();
    started_ = SteadyClock::now();
    stream_.expires_after(std::chrono::seconds(30));
    net::async_write(stream_, net::buffer(wire_),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->failed();
                       self->res_ = {};
                       bhttp::async_read(self->stream_, self->buffer_, self->res_,
                                         [self](beast::error_code ec, size_t) {
                                           if (ec) return self->failed();
                                           self->answered();
                                         });
                     });
  }
  void webhook_request() {
    const std::string id = fmt::format("{}_{}_{}", s_.prefix, index_, seq_++);
    const int64_t ts = unix_now();
    const std::string body = fmt::format(
        R"({{"id":"evt_{}","object":"event","created_at":{},"type":"{}","data":{{"id":"resp_{}","pad":"{}"}}}})",
        id, ts, s_.o.event_type, id, s_.pad);
    // The request's bytes, written at once: the generator should cost the
    // machine as little as a lean client (pgbench, wrk) would, so that what
    // is measured is the daemon.
    wire_.clear();
    fmt::format_to(std::back_inserter(wire_),
                   "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n"
                   "webhook-id: {}\r\nwebhook-timestamp: {}\r\nwebhook-signature: {}\r\n"
                   "Content-Length: {}\r\n\r\n",
                   s_.o.path, s_.o.host, id, ts, webhooks::sign(s_.key, id, ts, body), body.size());
    wire_ += body;
  }
  // initialize, notifications/initialized, then tools/call after tools/call.
  void mcp_request() {
    const McpLoad& m = *s_.o.mcp;
    std::string body;
    if (phase_ == Phase::initialize) {
      body =
          R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"opgate-sim","version":"1"}}})";
    } else if (phase_ == Phase::initialized) {
      body = R"({"jsonrpc":"2.0","method":"notifications/initialized"})";
    } else {
      std::string arguments = m.arguments;
      if (const auto at = arguments.find("{n}"); at != std::string::npos)
        arguments.replace(at, 3, std::to_string(m.first_n + s_.next_n.fetch_add(1)));
      body = fmt::format(
          R"({{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{}","arguments":{}}}}})",
          ++seq_, m.tool, arguments);
    }
    wire_.clear();
    fmt::format_to(std::back_inserter(wire_),
                   "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n"
                   "Accept: application/json, text/event-stream\r\n",
                   m.path, s_.o.host, s_.o.port);
    if (!m.bearer.empty())
      fmt::format_to(std::back_inserter(wire_), "Authorization: Bearer {}\r\n", m.bearer);
    if (!session_id_.empty())
      fmt::format_to(std::back_inserter(wire_),
                     "Mcp-Session-Id: {}\r\nMCP-Protocol-Version: 2025-06-18\r\n", session_id_);
    fmt::format_to(std::back_inserter(wire_), "Content-Length: {}\r\n\r\n", body.size());
    wire_ += body;
  }
  // The session's set-up is not timed; a failed one counts as refused.
  bool handshake_answered() {
    const int status = res_.result_int();
    if (phase_ == Phase::initialize && status == 200) {
      session_id_ = std::string(res_["Mcp-Session-Id"]);
      phase_ = Phase::initialized;
    } else if (phase_ == Phase::initialized && status >= 200 && status < 300) {
      phase_ = Phase::calls;
    } else {
      ++mine_.refused[status];
      return false;
    }
    return true;
  }
  void answered() {
    if (phase_ != Phase::calls) {
      if (!handshake_answered() || !res_.keep_alive()) close();
      return next();
    }
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - started_);
    latencies_.push_back(static_cast<uint32_t>(std::min<int64_t>(us.count(), UINT32_MAX)));
    ++mine_.requests;
    const int status = res_.result_int();
    if (s_.o.mcp && status == 200) {
      const auto& body = res_.body();
      if (body.find("\"result\"") == std::string::npos ||
          body.find("\"isError\":true") != std::string::npos)
        ++mine_.failed_calls;
      else
        ++mine_.accepted;
    } else if (status >= 200 && status < 300) {
      if (res_.body().find("\"duplicate\":true") != std::string::npos)
        ++mine_.duplicates;
      else
        ++mine_.accepted;
    } else {
      ++mine_.refused[status];
    }
    if (!res_.keep_alive()) close();
    next();
  }
  void failed() {
    ++mine_.errors;
    close();
    next();
  }
  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    connected_ = false;
  }

  enum class Phase { initialize, initialized, calls };

  Shared& s_;
  int index_;
  Phase phase_ = Phase::calls;
  std::string session_id_;  // MCP
  net::ip::basic_resolver<tcp, Strand> resolver_;
  beast::basic_stream<tcp, Strand> stream_;
  beast::flat_buffer buffer_;
  std::string wire_;  // the request being sent
  bhttp::response<bhttp::string_body> res_;
  SteadyClock::time_point started_;
  bool connected_ = false;
  uint64_t seq_ = 0;
  LoadReport mine_;
  std::vector<uint32_t> latencies_;
};

}  // namespace

Result<LoadReport> run_load(const LoadOptions& o) {
  auto key = o.mcp ? Result<std::string>(std::string()) : webhooks::decode_secret(o.secret);
  if (!key) return key.error();
  Shared s{o,
           o.bad_signatures ? std::string(key->size(), 'x') : *key,
           "load_" + crypto::random_hex(6),
           std::string(o.body_bytes > 200 ? o.body_bytes - 200 : 0, 'x'),
           SteadyClock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.seconds * 1000)),
           {0},
           {},
           {},
           {}};
  net::io_context ioc;
  const auto started = SteadyClock::now();
  for (int i = 0; i < o.connections; ++i) std::make_shared<Connection>(ioc, s, i)->start();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, o.threads); ++i) threads.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : threads) t.join();
  // Every connection is gone and every thread joined: the lock is uncontended,
  // and taken so that the analysis sees the reads below under it.
  MutexLock lock(s.mu);
  LoadReport r = s.report;
  r.seconds = std::chrono::duration<double>(SteadyClock::now() - started).count();
  std::sort(s.latencies_us.begin(), s.latencies_us.end());
  r.p50_ms = percentile_ms(s.latencies_us, 0.50);
  r.p99_ms = percentile_ms(s.latencies_us, 0.99);
  r.p999_ms = percentile_ms(s.latencies_us, 0.999);
  return r;
}

}  // namespace opgate::sim
