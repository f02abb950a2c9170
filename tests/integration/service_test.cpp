// The version the real executables report.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <stdio.h>

#include <regex>
#include <string>

#include "cluster.h"
#include "common/version.h"

using namespace opgate;
using namespace opgate::testing;

namespace {

std::pair<int, std::string> run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("opgate --version prints the version and the git revision") {
  auto [rc, out] = run(std::string(OPGATE_BIN_DIR) + "/opgate --version");
  CHECK(rc == 0);
  CHECK(out == std::string(kVersionLine) + "\n");
  CHECK(std::regex_match(out, std::regex(R"(opgate \d+\.\d+\.\d+ \([0-9A-Za-z._-]+\)\n)")));
}

TEST_CASE("the daemon's /metrics names its version and revision") {
  Cluster c;
  auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find("# HELP opgate_build_info ") != std::string::npos);
  CHECK(metrics.find("# TYPE opgate_build_info gauge\n") != std::string::npos);
  CHECK(metrics.find(fmt::format("\nopgate_build_info{{version=\"{}\",revision=\"{}\"}} 1\n",
                                 kVersion, kRevision)) != std::string::npos);
}
