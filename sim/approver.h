// `opgate-sim approve`: an approver for benchmarks. It approves each
// operation of a list exactly as shown (amount, currency, fingerprint)
// through the operator API, from N threads at once, each on its own kept
// connection, and records every answer's status and latency. A benchmark's
// approvals come from here rather than from a script, so that the driver is
// not what bounds the rate measured behind them.
// Thread-safety: run_approvals() may be called from one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace opgate::sim {

// One approval to send: what the operation showed.
struct ApprovalJob {
  std::string key;
  int64_t amount_minor = 0;
  std::string currency;
  std::string fingerprint;
};

struct ApproverOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;  // the operator's bearer token
  int connections = 64;
  int timeout_ms = 30'000;
};

struct ApprovalReport {
  uint64_t sent = 0;
  std::map<int, uint64_t> statuses;  // by HTTP status
  uint64_t errors = 0;               // no answer
  double seconds = 0;
  double p50_ms = 0, p99_ms = 0;
  std::string to_json() const;
};

// One job per line: {"key", "amount_minor", "currency", "fingerprint"}.
Result<std::vector<ApprovalJob>> parse_approval_jobs(const std::string& ndjson);

Result<ApprovalReport> run_approvals(const ApproverOptions& options,
                                     const std::vector<ApprovalJob>& jobs);

}  // namespace opgate::sim
