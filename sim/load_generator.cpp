#include "sim/load_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "ingress/signature.h"

namespace opgate::sim {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string LoadReport::to_json() const {
  boost::json::object refused_by_status;
  for (const auto& [status, n] : refused) refused_by_status[std::to_string(status)] = n;
  return boost::json::serialize(boost::json::object{{"requests", requests},
                                                    {"accepted", accepted},
                                                    {"duplicates", duplicates},
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
  Clock::time_point deadline;
  std::mutex mu;
  LoadReport report;                   // guarded by mu
  std::vector<uint32_t> latencies_us;  // guarded by mu
};

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

net::awaitable<void> connection(Shared& s, int index) {
  auto executor = co_await net::this_coro::executor;
  LoadReport mine;
  std::vector<uint32_t> latencies;
  latencies.reserve(65536);
  tcp::resolver resolver(executor);
  beast::tcp_stream stream(executor);
  bool connected = false;
  uint64_t seq = 0;
  beast::flat_buffer buffer;
  while (Clock::now() < s.deadline) {
    try {
      if (!connected) {
        auto endpoints =
            co_await resolver.async_resolve(s.o.host, std::to_string(s.o.port), net::use_awaitable);
        stream.expires_after(std::chrono::seconds(10));
        co_await stream.async_connect(endpoints, net::use_awaitable);
        connected = true;
        buffer.clear();
      }
      const std::string id = fmt::format("{}_{}_{}", s.prefix, index, seq++);
      const int64_t ts = unix_now();
      const std::string body = fmt::format(
          R"({{"id":"evt_{}","object":"event","created_at":{},"type":"{}","data":{{"id":"resp_{}","pad":"{}"}}}})",
          id, ts, s.o.event_type, id, s.pad);
      bhttp::request<bhttp::string_body> req{bhttp::verb::post, s.o.path, 11};
      req.set(bhttp::field::host, s.o.host);
      req.set(bhttp::field::content_type, "application/json");
      req.set("webhook-id", id);
      req.set("webhook-timestamp", std::to_string(ts));
      req.set("webhook-signature", ingress::sign(s.key, id, ts, body));
      req.keep_alive(true);
      req.body() = body;
      req.prepare_payload();
      const auto started = Clock::now();
      stream.expires_after(std::chrono::seconds(30));
      co_await bhttp::async_write(stream, req, net::use_awaitable);
      bhttp::response<bhttp::string_body> res;
      co_await bhttp::async_read(stream, buffer, res, net::use_awaitable);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
      latencies.push_back(static_cast<uint32_t>(std::min<int64_t>(us.count(), UINT32_MAX)));
      ++mine.requests;
      const int status = res.result_int();
      if (status >= 200 && status < 300) {
        if (res.body().find("\"duplicate\":true") != std::string::npos)
          ++mine.duplicates;
        else
          ++mine.accepted;
      } else {
        ++mine.refused[status];
      }
      if (!res.keep_alive()) {
        beast::error_code ec;
        stream.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream.close();
        connected = false;
      }
    } catch (const std::exception&) {
      ++mine.errors;
      beast::error_code ec;
      stream.socket().close(ec);
      connected = false;
    }
  }
  std::lock_guard lock(s.mu);
  s.report.requests += mine.requests;
  s.report.accepted += mine.accepted;
  s.report.duplicates += mine.duplicates;
  s.report.errors += mine.errors;
  for (const auto& [status, n] : mine.refused) s.report.refused[status] += n;
  s.latencies_us.insert(s.latencies_us.end(), latencies.begin(), latencies.end());
}

double percentile_ms(std::vector<uint32_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[i] / 1000.0;
}

}  // namespace

Result<LoadReport> run_load(const LoadOptions& o) {
  auto key = ingress::decode_secret(o.secret);
  if (!key) return key.error();
  Shared s{o,
           o.bad_signatures ? std::string(key->size(), 'x') : *key,
           "load_" + crypto::random_hex(6),
           std::string(o.body_bytes > 200 ? o.body_bytes - 200 : 0, 'x'),
           Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.seconds * 1000)),
           {},
           {},
           {}};
  net::io_context ioc;
  const auto started = Clock::now();
  for (int i = 0; i < o.connections; ++i)
    net::co_spawn(net::make_strand(ioc), connection(s, i), net::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, o.threads); ++i) threads.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : threads) t.join();
  LoadReport r = s.report;
  r.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  std::sort(s.latencies_us.begin(), s.latencies_us.end());
  r.p50_ms = percentile_ms(s.latencies_us, 0.50);
  r.p99_ms = percentile_ms(s.latencies_us, 0.99);
  r.p999_ms = percentile_ms(s.latencies_us, 0.999);
  return r;
}

}  // namespace opgate::sim
