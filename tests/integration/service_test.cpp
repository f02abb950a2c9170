// `opgate serve` under a service manager: the version it reports, and the
// sd_notify messages a Type=notify unit waits for, sent by the real daemon
// to a socket the test announces in NOTIFY_SOCKET.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <stdio.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cluster.h"
#include "common/version.h"
#include "tests/unit/notify_socket.h"

using namespace opgate;
using namespace opgate::testing;

namespace {

std::string random_suffix() { return std::to_string(::getpid()) + "-" + std::to_string(::rand()); }

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

// The test clusters restart the daemon on the ports it had; tests running
// side by side may take one of them meanwhile (a client's ephemeral port).
TEST_CASE("a daemon restarted after another process took its port comes up on fresh ones") {
  Cluster c;
  c.signal_daemon(SIGKILL);
  (void)c.wait_daemon_exit();
  const uint16_t was = c.operator_port();
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor taken(io, {boost::asio::ip::make_address("127.0.0.1"), was});
  c.start_daemon();
  CHECK(c.operator_port() != was);
  CHECK(c.op("GET", "/v1/operations").status == 200);
}

// The test clusters give the daemon its secrets in its own environment:
// the test process's stays as it was (clusters start side by side, and
// setenv from several threads at once corrupts it).
TEST_CASE("starting a cluster leaves the test process's environment as it was") {
  REQUIRE(std::getenv("OPGATE_EVAL_AGENT_KEY") == nullptr);
  Cluster c;
  CHECK(c.op("GET", "/v1/operations").status == 200);
  CHECK(std::getenv("OPGATE_EVAL_AGENT_KEY") == nullptr);
  CHECK(std::getenv("OPGATE_EVAL_PAYMENTS_KEY") == nullptr);
}

TEST_CASE("opgate --version prints the version and the git revision") {
  auto [rc, out] = run(std::string(OPGATE_BIN_DIR) + "/opgate --version");
  CHECK(rc == 0);
  CHECK(out == std::string(kVersionLine) + "\n");
  CHECK(std::regex_match(out, std::regex(R"(opgate \d+\.\d+\.\d+ \([0-9A-Za-z._-]+\)\n)")));
}

TEST_CASE("a configuration the daemon refuses is one JSON log line naming the key, no secret") {
  const auto dir = std::filesystem::temp_directory_path() / ("opgate-badconf-" + random_suffix());
  std::filesystem::create_directories(dir);
  const auto path = dir / "opgate.toml";
  // A type error on the line that holds a webhook secret.
  std::ofstream(path) << "[[ingress.sources]]\nname = \"agents\"\n"
                         "secrets = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
  const auto ran =
      run(std::string(OPGATE_BIN_DIR) + "/opgate serve --config " + path.string() + " 2>&1");
  const int rc = ran.first;
  const std::string out = ran.second;  // clang 14: no structured binding in doctest messages
  std::filesystem::remove_all(dir);
  CHECK(rc == 2);
  CHECK(out.find("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == std::string::npos);
  auto line = out.substr(0, out.find('\n'));
  json::error_code ec;
  auto v = json::parse(line, ec);
  REQUIRE_MESSAGE(!ec, out);
  CHECK(v.at("event").as_string() == "config.invalid");
  CHECK(v.at("level").as_string() == "critical");
  CHECK(std::string(v.at("reason").as_string()).find("ingress.sources") != std::string::npos);
}

TEST_CASE("the daemon tells the service manager: ready, alive, stopping") {
  NotifySocket socket;
  socket.enable_watchdog(200'000);  // a ping every 100 ms
  Cluster c;

  // READY=1 comes once both listeners answer.
  auto ready = socket.receive_starting_with("READY=1");
  REQUIRE(ready);
  CHECK(ready->find(fmt::format("STATUS=webhooks on port {}, operator API on port ",
                                c.ingress_port())) != std::string::npos);
  CHECK(c.op("GET", "/readyz").status == 200);
  // The watchdog pings while /healthz answers.
  CHECK(socket.receive_starting_with("WATCHDOG=1"));

  auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find("# HELP opgate_build_info ") != std::string::npos);
  CHECK(metrics.find("# TYPE opgate_build_info gauge\n") != std::string::npos);
  CHECK(metrics.find(fmt::format("\nopgate_build_info{{version=\"{}\",revision=\"{}\"}} 1\n",
                                 kVersion, kRevision)) != std::string::npos);

  int exit_code = -1;
  c.stop_daemon_gracefully(&exit_code);
  CHECK(exit_code == 0);
  CHECK(socket.receive_starting_with("STOPPING=1") == "STOPPING=1\nSTATUS=draining");
}
