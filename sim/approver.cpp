#include "sim/approver.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <sstream>
#include <thread>

#include "common/mutex.h"
#include "http/client.h"
#include "sim/percentile.h"

namespace opgate::sim {

namespace json = boost::json;

Result<std::vector<ApprovalJob>> parse_approval_jobs(const std::string& ndjson) {
  std::vector<ApprovalJob> jobs;
  std::istringstream in(ndjson);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json::error_code ec;
    auto v = json::parse(line, ec);
    const json::object* o = !ec && v.is_object() ? &v.as_object() : nullptr;
    const json::value* key = o ? o->if_contains("key") : nullptr;
    const json::value* amount = o ? o->if_contains("amount_minor") : nullptr;
    const json::value* currency = o ? o->if_contains("currency") : nullptr;
    const json::value* fingerprint = o ? o->if_contains("fingerprint") : nullptr;
    if (!key || !key->is_string() || !amount || !amount->is_int64() || !currency ||
        !currency->is_string() || !fingerprint || !fingerprint->is_string())
      return make_error(errc::bad_request,
                        fmt::format("line {}: want {{\"key\", \"amount_minor\", \"currency\", "
                                    "\"fingerprint\"}}",
                                    n));
    jobs.push_back({std::string(key->as_string()), amount->as_int64(),
                    std::string(currency->as_string()), std::string(fingerprint->as_string())});
  }
  return jobs;
}

std::string ApprovalReport::to_json() const {
  json::object by_status;
  for (const auto& [status, n] : statuses) by_status[std::to_string(status)] = n;
  return json::serialize(json::object{{"sent", sent},
                                      {"statuses", std::move(by_status)},
                                      {"errors", errors},
                                      {"seconds", seconds},
                                      {"p50_ms", p50_ms},
                                      {"p99_ms", p99_ms}});
}

Result<ApprovalReport> run_approvals(const ApproverOptions& options,
                                     const std::vector<ApprovalJob>& jobs) {
  if (options.connections < 1 || options.connections > 1024)
    return make_error(errc::bad_request, "connections: 1 to 1024");
  std::atomic<size_t> next{0};
  Mutex mu;
  ApprovalReport report;
  std::vector<uint32_t> latencies;  // microseconds
  latencies.reserve(jobs.size());
  const auto start = std::chrono::steady_clock::now();
  auto work = [&] {
    std::map<int, uint64_t> statuses;
    uint64_t errors = 0;
    std::vector<uint32_t> mine;
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      const ApprovalJob& job = jobs[i];
      http::ClientRequest req;
      req.method = "POST";
      req.url = fmt::format("http://{}:{}/v1/operations/{}/approve", options.host, options.port,
                            http::url_component(job.key));
      req.timeout = std::chrono::milliseconds(options.timeout_ms);
      req.headers["Authorization"] = "Bearer " + options.token;
      req.headers["Content-Type"] = "application/json";
      req.body = json::serialize(json::object{{"amount_minor", job.amount_minor},
                                              {"currency", job.currency},
                                              {"fingerprint", job.fingerprint}});
      const auto sent = std::chrono::steady_clock::now();
      auto res = http::send(req);
      mine.push_back(static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                               std::chrono::steady_clock::now() - sent)
                                               .count()));
      if (res)
        ++statuses[res->status];
      else
        ++errors;
    }
    MutexLock lock(mu);
    for (const auto& [status, n] : statuses) report.statuses[status] += n;
    report.errors += errors;
    latencies.insert(latencies.end(), mine.begin(), mine.end());
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < options.connections; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.sent = latencies.size();
  std::sort(latencies.begin(), latencies.end());
  report.p50_ms = percentile_ms(latencies, 0.50);
  report.p99_ms = percentile_ms(latencies, 0.99);
  return report;
}

}  // namespace opgate::sim
