#include "common/descriptors.h"

#include <sys/resource.h>

#include <algorithm>

namespace opgate {

size_t raise_open_files_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return static_cast<size_t>(rl.rlim_cur);
}

DescriptorPlan plan_descriptors(size_t limit, ConnectionsWanted wanted, size_t event_loops) {
  DescriptorPlan p;
  // RocksDB: a quarter of the limit for table files, within [32, 4096].
  p.rocksdb_max_open_files = static_cast<int>(std::clamp<size_t>(limit / 4, 32, 4096));
  // The WAL, the manifest, logs, the lanes' outbound calls, the store's
  // connections, the connections each listener refuses at once (8): fixed
  // headroom; and the listeners' event loops.
  const size_t headroom = 96 + std::min<size_t>(limit / 16, 512) + event_loops;
  const size_t reserved = static_cast<size_t>(p.rocksdb_max_open_files) + headroom;
  // The floor: the store's least share, the WAL, manifest and logs, the
  // event loops, and a few connections.
  p.needed = 32 + 64 + event_loops + 16;
  const size_t budget = limit > reserved + 16 ? limit - reserved : 16;
  // The operator API and MCP an eighth each at most (four at least), the
  // webhooks the rest.
  const size_t eighth = std::max<size_t>(4, budget / 8);
  p.operator_connections = std::min(wanted.operator_api, eighth);
  p.mcp_connections = std::min(wanted.mcp, eighth);
  const size_t others = p.operator_connections + p.mcp_connections;
  p.ingress_connections = std::min(wanted.ingress, budget - std::min(budget, others));
  p.ingress_connections = std::max<size_t>(p.ingress_connections, 4);
  p.capped = p.ingress_connections < wanted.ingress ||
             p.operator_connections < wanted.operator_api || p.mcp_connections < wanted.mcp;
  return p;
}

}  // namespace opgate
