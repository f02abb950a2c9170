// File descriptors: the soft limit is raised to the hard one at start, and
// what the process has is shared out so that connections can never take the
// descriptors the store and the outbound calls need.
#include "common/descriptors.h"

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <initializer_list>

using namespace opgate;

TEST_CASE("descriptors: the soft limit is raised to the hard limit") {
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &before) == 0);
  if (before.rlim_max == RLIM_INFINITY || before.rlim_max < 512) return;  // nothing to show
  rlimit lowered = before;
  lowered.rlim_cur = 256;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  CHECK(raise_open_files_limit() == before.rlim_max);
  rlimit after{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &after) == 0);
  CHECK(after.rlim_cur == before.rlim_max);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &before) == 0);
}

TEST_CASE("descriptors: listeners get what is left after the store and the headroom") {
  // Plenty: everyone gets what they asked for.
  auto roomy = plan_descriptors(1 << 20, {.ingress = 4096, .operator_api = 64, .mcp = 32}, 120);
  CHECK(roomy.ingress_connections == 4096);
  CHECK(roomy.operator_connections == 64);
  CHECK(roomy.mcp_connections == 32);
  CHECK_FALSE(roomy.capped);
  CHECK(roomy.rocksdb_max_open_files == 4096);

  // A small limit: connections are capped below it, leaving the store its
  // share and headroom for the WAL, logs and outbound calls.
  for (size_t limit : {256u, 1024u, 4096u}) {
    auto p = plan_descriptors(limit, {.ingress = 100000, .operator_api = 1000, .mcp = 1000}, 0);
    CHECK(p.capped);
    CHECK(p.rocksdb_max_open_files >= 32);
    CHECK(static_cast<size_t>(p.rocksdb_max_open_files) + p.ingress_connections +
              p.operator_connections + p.mcp_connections + 96 <=
          limit);
    CHECK(p.ingress_connections >= 4);
    CHECK(p.operator_connections >= 4);
    CHECK(p.mcp_connections >= 4);
  }
  // Below the floor the daemon cannot run with, the plan says so (it does
  // not start rather than run out); the event loops raise the floor.
  const ConnectionsWanted many{.ingress = 100000, .operator_api = 1000, .mcp = 1000};
  for (size_t limit : {32u, 64u, 100u}) CHECK(plan_descriptors(limit, many, 10).needed > limit);
  CHECK(plan_descriptors(256, many, 10).needed <= 256);
  CHECK(plan_descriptors(256, many, 207).needed > 256);
  // Asking for less than there is caps nothing.
  auto modest = plan_descriptors(4096, {.ingress = 256, .operator_api = 16}, 120);
  CHECK_FALSE(modest.capped);
  CHECK(modest.ingress_connections == 256);
  CHECK(modest.mcp_connections == 0);  // no MCP listener
}

TEST_CASE("descriptors: the MCP listener has a share of its own, not the operator API's") {
  // Without MCP the webhooks get what MCP would have had; with it, the three
  // shares together still fit the same budget.
  const ConnectionsWanted without_mcp{.ingress = 100000, .operator_api = 1000};
  ConnectionsWanted with_mcp = without_mcp;
  with_mcp.mcp = 1000;
  auto without = plan_descriptors(1024, without_mcp, 0);
  auto with = plan_descriptors(1024, with_mcp, 0);
  CHECK(without.mcp_connections == 0);
  CHECK(with.mcp_connections > 0);
  CHECK(with.operator_connections == without.operator_connections);
  CHECK(with.ingress_connections + with.mcp_connections == without.ingress_connections);
}

TEST_CASE("descriptors: the listeners' event loops are kept apart from their connections") {
  // 207 descriptors of event loops (two cores, MCP on the order service):
  // the connections get that many fewer, and all of it still fits.
  auto without = plan_descriptors(1024, {.ingress = 100000, .operator_api = 1000}, 0);
  auto with = plan_descriptors(1024, {.ingress = 100000, .operator_api = 1000}, 207);
  CHECK(with.rocksdb_max_open_files == without.rocksdb_max_open_files);
  CHECK(with.ingress_connections + with.operator_connections + 207 ==
        without.ingress_connections + without.operator_connections);
  CHECK(static_cast<size_t>(with.rocksdb_max_open_files) + with.ingress_connections +
            with.operator_connections + 207 + 96 <=
        1024);
}
