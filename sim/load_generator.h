// `opgate-sim load`: a webhook sender for benchmarks. Each of N keep-alive
// connections sends Standard Webhooks requests back to back for a fixed
// time, each signed when it is sent (a fresh webhook-id and timestamp, as a
// real sender does), and records every answer's latency. Ids are unique
// within a run (a random prefix), so every 2xx is a new event unless the
// daemon says it is a duplicate, which is counted apart.
//
// With `mcp` set it is an MCP client instead: each connection initializes a
// session (initialize, then notifications/initialized, not timed) and then
// sends tools/call requests back to back; an answer counts as accepted when
// it is a result that is not an error.
// Thread-safety: run() is called once.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/result.h"

namespace opgate::sim {

struct McpLoad {
  std::string path = "/mcp";
  std::string bearer;  // the Authorization bearer token; none when empty
  std::string tool;
  // The call's arguments (a JSON object); "{n}" in it becomes a number
  // unique within the run, counting from `first_n`.
  std::string arguments = "{}";
  uint64_t first_n = 0;
};

struct LoadOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string path = "/v1/webhooks/agents";
  std::string secret;           // whsec_...; the requests are signed with it
  bool bad_signatures = false;  // sign with another key (a flood of forgeries)
  int connections = 16;
  double seconds = 5;
  size_t body_bytes = 1024;
  std::string event_type = "response.completed";
  int threads = 2;
  std::optional<McpLoad> mcp;
};

struct LoadReport {
  uint64_t requests = 0;            // answered
  uint64_t accepted = 0;            // 2xx, new events
  uint64_t duplicates = 0;          // 2xx with "duplicate":true
  uint64_t failed_calls = 0;        // MCP: 200 with an error or isError
  std::map<int, uint64_t> refused;  // non-2xx by status
  uint64_t errors = 0;              // connection failures
  double seconds = 0;
  double p50_ms = 0, p99_ms = 0, p999_ms = 0;
  std::string to_json() const;
};

Result<LoadReport> run_load(const LoadOptions& options);

}  // namespace opgate::sim
