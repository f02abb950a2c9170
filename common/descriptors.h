// File descriptors: every connection, table file and outbound call needs
// one, and a process that runs out spins on accept and starves the store.
// At start the daemon raises its soft limit to the hard one and splits what
// it has: a share for RocksDB's table files, headroom for the WAL, logs,
// outbound calls and the listeners' event loops, the rest for the
// listeners' connections. Pure apart
// from raise_open_files_limit(); thread-safe.
#pragma once

#include <cstddef>

namespace opgate {

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit
// now in force.
size_t raise_open_files_limit();

struct DescriptorPlan {
  int rocksdb_max_open_files = 0;
  size_t ingress_connections = 0;
  size_t operator_connections = 0;
  size_t mcp_connections = 0;  // 0 without an MCP listener
  bool capped = false;         // a listener got fewer than it asked for
  // The fewest descriptors the daemon can run with: the store's least
  // share, the WAL, manifest and logs, the event loops and a few
  // connections. Below it the daemon would run out, so it does not start.
  size_t needed = 0;
};

// What each listener asks for (`mcp` 0: no MCP listener).
struct ConnectionsWanted {
  size_t ingress = 0;
  size_t operator_api = 0;
  size_t mcp = 0;
};

// How `limit` descriptors are shared out, given what each listener asks for
// and what the listeners' event loops hold (`event_loops`, kept apart).
// Every listener gets a share of its own: together they never hold more
// than the budget.
DescriptorPlan plan_descriptors(size_t limit, ConnectionsWanted wanted, size_t event_loops);

}  // namespace opgate
