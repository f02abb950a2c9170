// The MCP front door against the real daemon and simulators, spoken to as
// JSON-RPC over HTTP: agent tokens minted and revoked through the operator
// API, the session and protocol-version rules, DNS-rebinding checks, tools
// that propose exactly as sessions do, and tasks that follow an operation
// to its verified end, across a restart. (tests/mcp/ drives the same front
// door with the official TypeScript SDK.)
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <future>
#include <set>

#include "cluster.h"

using namespace opgate::testing;

namespace {

const std::string kRefund = "demo-user:ORDER-100:full-refund:v1";

// An MCP client over raw HTTP: one session, one request at a time.
class Agent {
 public:
  Agent(Cluster& c, std::string token) : c_(c), token_(std::move(token)) {}

  Reply post(const json::object& message, opgate::http::Headers extra = {}) {
    opgate::http::Headers h{{"Accept", "application/json, text/event-stream"},
                            {"Content-Type", "application/json"}};
    if (!session_.empty()) {
      h["Mcp-Session-Id"] = session_;
      h["MCP-Protocol-Version"] = "2025-11-25";
    }
    for (auto& [k, v] : extra) h[k] = v;
    return c_.mcp("POST", "/mcp/" + token_, json::serialize(message), h);
  }

  void initialize() {
    auto r = post(json::object{
        {"jsonrpc", "2.0"},
        {"id", 0},
        {"method", "initialize"},
        {"params", json::object{{"protocolVersion", "2025-11-25"},
                                {"capabilities", json::object{}},
                                {"clientInfo", json::object{{"name", "t"}, {"version", "1"}}}}}});
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    REQUIRE(r.headers.count("Mcp-Session-Id"));
    session_ = r.headers.at("Mcp-Session-Id");
    auto initialized =
        post(json::object{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
    CHECK(initialized.status == 202);
  }

  // The result of a request that must succeed at the JSON-RPC level.
  json::object call(const std::string& method, json::object params = {}) {
    auto r = post(json::object{
        {"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", std::move(params)}});
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    REQUIRE_MESSAGE(r.body.as_object().contains("result"), r.raw);
    return r.body.at("result").as_object();
  }
  // The error of a request that must fail at the JSON-RPC level.
  json::object error(const std::string& method, json::object params = {}) {
    auto r = post(json::object{
        {"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", std::move(params)}});
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    REQUIRE_MESSAGE(r.body.as_object().contains("error"), r.raw);
    return r.body.at("error").as_object();
  }
  json::object tool(const std::string& name, json::object arguments, bool as_task = false) {
    json::object params{{"name", name}, {"arguments", std::move(arguments)}};
    if (as_task) params["task"] = json::object{{"ttl", 60000}};
    return call("tools/call", std::move(params));
  }

  const std::string& session() const { return session_; }
  const std::string& token() const { return token_; }

 private:
  Cluster& c_;
  std::string token_;
  std::string session_;
  int64_t id_ = 0;
};

json::object mint(Cluster& c, const std::string& owner, const std::string& token = kAdminToken) {
  auto r = c.op("POST", "/v1/agent-tokens",
                json::serialize(json::object{{"owner", owner}, {"label", "test agent"}}), token);
  REQUIRE_MESSAGE(r.status == 201, r.raw);
  return r.body.as_object();
}

// ORDER-100's refund asked as a task: its id.
std::string refund_task(Agent& a) {
  auto task = a.tool("request_refund", json::object{{"order_id", "ORDER-100"}}, true);
  return str(task.at("task"), "taskId");
}

// A tasks/result for the task sent on a connection of its own, not read:
// the connection, to read its answer from.
boost::asio::ip::tcp::socket ask_result_raw(Cluster& c, Agent& a, boost::asio::io_context& ioc,
                                            const std::string& task_id) {
  const std::string body =
      json::serialize(json::object{{"jsonrpc", "2.0"},
                                   {"id", 7},
                                   {"method", "tasks/result"},
                                   {"params", json::object{{"taskId", task_id}}}});
  const std::string request = fmt::format(
      "POST /mcp/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n"
      "Accept: application/json, text/event-stream\r\nMcp-Session-Id: {}\r\n"
      "MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{}",
      a.token(), c.mcp_port(), a.session(), body.size(), body);
  boost::asio::ip::tcp::socket s(ioc);
  s.connect({boost::asio::ip::make_address("127.0.0.1"), c.mcp_port()});
  boost::asio::write(s, boost::asio::buffer(request));
  return s;
}

// The status line and header of the answer on a connection.
std::string answer_head(boost::asio::ip::tcp::socket& s) {
  boost::asio::streambuf answer;
  boost::asio::read_until(s, answer, "\r\n\r\n");
  return std::string(boost::asio::buffers_begin(answer.data()),
                     boost::asio::buffers_end(answer.data()));
}

// How many tasks/result wait, by the daemon's metrics, becomes `n`.
bool waiting_becomes(Cluster& c, int n) {
  return eventually([&] {
    return c.op("GET", "/metrics")
               .raw.find(fmt::format(
                   R"(opgate_mcp_requests_total{{method="tasks/result",result="waiting"}} {})",
                   n)) != std::string::npos;
  });
}

json::object structured(const json::object& result) {
  REQUIRE_MESSAGE(result.contains("structuredContent"), json::serialize(result));
  return result.at("structuredContent").as_object();
}

}  // namespace

TEST_CASE("an agent token's refund waits as a task for the approval, then yields the result") {
  Cluster c;
  auto minted = mint(c, "demo-user");
  const std::string token = str(minted, "token");
  CHECK(str(minted, "mcp_url") == fmt::format("http://127.0.0.1:{}/mcp/{}", c.mcp_port(), token));
  Agent a(c, token);
  a.initialize();
  CHECK(a.call("ping").empty());
  auto tools = a.call("tools/list").at("tools").as_array();
  std::map<std::string, json::object> by_name;
  for (const auto& t : tools) by_name[str(t, "name")] = t.as_object();
  REQUIRE(by_name.count("request_refund"));
  REQUIRE(by_name.count("lookup_order"));
  REQUIRE(by_name.count("get_operation"));
  CHECK(str(by_name["request_refund"].at("execution"), "taskSupport") == "optional");
  CHECK(str(by_name["lookup_order"].at("execution"), "taskSupport") == "forbidden");
  CHECK(by_name["lookup_order"].at("annotations").at("readOnlyHint").as_bool());
  CHECK(by_name["request_refund"].at("annotations").at("destructiveHint").as_bool());
  CHECK_FALSE(by_name["request_refund"].at("inputSchema").at("additionalProperties").as_bool());

  auto created = a.tool("request_refund", json::object{{"order_id", "ORDER-100"}}, true);
  const auto task = created.at("task").as_object();
  const std::string task_id = str(task, "taskId");
  CHECK(str(task, "status") == "working");
  CHECK(str(task, "statusMessage") == "waiting for approval (0 of 1)");
  CHECK(task.at("ttl").is_null());
  auto op = c.wait_operation(kRefund, [](auto& o) { return str(o, "state") == "pending"; });
  CHECK(str(op, "owner") == "demo-user");
  CHECK(str(op, "session_id") == "mcp:" + str(minted, "id"));
  // Proposed by the agent, in the audit.
  auto audit = c.op("GET", "/v1/audit?operation=" + kRefund).body.at("audit").as_array();
  REQUIRE_FALSE(audit.empty());
  CHECK(str(audit[0], "principal") == "agent:" + str(minted, "id"));

  // tasks/result waits for the end; the operator approves meanwhile.
  auto waiting = std::async(std::launch::async, [&] {
    Agent other(c, token);  // another session of the same token
    other.initialize();
    return other.call("tasks/result", json::object{{"taskId", task_id}});
  });
  CHECK(waiting.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  CHECK(str(a.call("tasks/get", json::object{{"taskId", task_id}}), "status") == "working");
  c.approve(kRefund, kAliceToken);
  auto result = waiting.get();
  CHECK_FALSE(result.at("isError").as_bool());
  auto verified = structured(result);
  CHECK(str(verified, "status") == "succeeded");
  CHECK(str(verified, "operation_key") == kRefund);
  CHECK(verified.at("amount_minor").as_int64() == 2500);
  CHECK(str(result.at("_meta").at("io.modelcontextprotocol/related-task"), "taskId") == task_id);
  auto refunds = provider_refunds_for(c, kRefund);
  REQUIRE(refunds.size() == 1);
  CHECK(str(verified, "provider_object_id") == str(refunds[0], "id"));
  auto done = a.call("tasks/get", json::object{{"taskId", task_id}});
  CHECK(str(done, "status") == "completed");
  auto listed = a.call("tasks/list").at("tasks").as_array();
  REQUIRE(listed.size() == 1);
  CHECK(str(listed[0], "taskId") == task_id);
  // get_operation reads the same verified result.
  auto read = structured(a.tool("get_operation", json::object{{"operation_key", kRefund}}));
  CHECK(str(read, "state") == "settled");
  CHECK(str(read.at("result"), "status") == "succeeded");
}

TEST_CASE("tasks/list pages through the token's tasks, 100 a page, and only its tasks") {
  Cluster c;
  Agent a(c, str(mint(c, "demo-user"), "token"));
  a.initialize();
  std::set<std::string> made;
  for (int i = 0; i < 103; ++i) made.insert(refund_task(a));
  a.tool("lookup_order", json::object{{"order_id", "ORDER-100"}});  // a call, not a task
  auto first = a.call("tasks/list");
  REQUIRE(first.at("tasks").as_array().size() == 100);
  REQUIRE(first.contains("nextCursor"));
  auto second = a.call("tasks/list", json::object{{"cursor", str(first, "nextCursor")}});
  CHECK(second.at("tasks").as_array().size() == 3);
  CHECK_FALSE(second.contains("nextCursor"));
  std::vector<std::string> listed;
  for (const auto* page : {&first, &second})
    for (const auto& t : page->at("tasks").as_array()) listed.push_back(str(t, "taskId"));
  CHECK(std::is_sorted(listed.begin(), listed.end()));
  CHECK(std::set<std::string>(listed.begin(), listed.end()) == made);
  // A cursor or task id this server did not give names nothing, whatever
  // its characters.
  CHECK(a.error("tasks/list", json::object{{"cursor", std::string("a\0b", 3)}})
            .at("code")
            .as_int64() == -32602);
  CHECK(a.error("tasks/get", json::object{{"taskId", "mcp_/../x"}}).at("code").as_int64() ==
        -32602);
}

TEST_CASE("a plain call answers with the exact pending proposal; the same call again links to it") {
  Cluster c;
  Agent a(c, str(mint(c, "demo-user"), "token"));
  a.initialize();
  auto first = a.tool("request_refund", json::object{{"order_id", "ORDER-100"}});
  CHECK_FALSE(first.at("isError").as_bool());
  auto pending = structured(first);
  CHECK(str(pending, "status") == "pending_approval");
  CHECK(str(pending, "operation_key") == kRefund);
  CHECK(pending.at("amount_minor").as_int64() == 2500);
  CHECK(str(pending, "currency") == "USD");
  auto op = c.operation(kRefund);
  CHECK(str(pending, "fingerprint") == str(op, "fingerprint"));
  auto again = structured(a.tool("request_refund", json::object{{"order_id", "ORDER-100"}}));
  CHECK(str(again, "operation_key") == kRefund);
  auto ops = c.op("GET", "/v1/operations").body.at("operations").as_array();
  CHECK(ops.size() == 1);
  CHECK(c.operation(kRefund).at("calls").as_array().size() == 2);
  // Denied: never shown as success, to either call.
  CHECK(c.op("POST", "/v1/operations/" + kRefund + "/deny", R"({"reason":"not eligible"})",
             kAliceToken)
            .status == 200);
  auto read = a.tool("get_operation", json::object{{"operation_key", kRefund}});
  CHECK(str(structured(read).at("result"), "status") == "denied");
}

TEST_CASE("a credit asked again once paid answers with that credit, not the policy's refusal") {
  Cluster c;
  Agent a(c, str(mint(c, "demo-user"), "token"));
  a.initialize();
  // 20.00 of ORDER-100's 25.00: a second one would exceed what remains.
  const json::object args{{"order_id", "ORDER-100"},
                          {"amount_minor", 2000},
                          {"currency", "USD"},
                          {"reason_code", "GOODWILL"}};
  const std::string key = str(structured(a.tool("issue_account_credit", args)), "operation_key");
  c.approve(key, kAliceToken);
  auto paid = c.wait_operation(key, [](auto& o) { return str(o, "state") == "settled"; });
  REQUIRE(str(paid, "outcome") == "succeeded");
  auto again = a.tool("issue_account_credit", args);
  CHECK_FALSE(again.at("isError").as_bool());
  CHECK(str(structured(again), "status") == "succeeded");
  CHECK(c.operation(key).at("calls").as_array().size() == 2);
  CHECK(c.op("GET", "/v1/operations").body.at("operations").as_array().size() == 1);
  // Another amount is a new call, and the policy answers it.
  auto other = args;
  other["amount_minor"] = 1000;
  CHECK(a.tool("issue_account_credit", other).at("isError").as_bool());
}

TEST_CASE("the token is the binding: no owner argument, another customer's order is not found") {
  Cluster c;
  Agent a(c, str(mint(c, "demo-user"), "token"));
  a.initialize();
  // An owner smuggled into the arguments is refused by the strict schema.
  auto smuggled =
      a.tool("request_refund", json::object{{"order_id", "ORDER-100"}, {"owner", "other-user"}});
  CHECK(smuggled.at("isError").as_bool());
  // ORDER-200 belongs to other-user: the same "not found" as a missing one.
  auto other = a.tool("lookup_order", json::object{{"order_id", "ORDER-200"}});
  auto missing = a.tool("lookup_order", json::object{{"order_id", "ORDER-999"}});
  CHECK(other.at("isError").as_bool());
  CHECK(json::serialize(other.at("content")) == json::serialize(missing.at("content")));
  CHECK(c.op("GET", "/v1/operations").body.at("operations").as_array().empty());
  // A lookup answers at once, with the injected note as data.
  auto own = a.tool("lookup_order", json::object{{"order_id", "ORDER-500"}});
  CHECK_FALSE(own.at("isError").as_bool());
  CHECK(str(structured(own).at("order"), "order_id") == "ORDER-500");
  // Its call id, which a note cites as evidence.
  const std::string lookup_id = str(structured(own), "call_id");
  auto note = a.tool("add_internal_note", json::object{{"order_id", "ORDER-500"},
                                                       {"text", "customer asked twice"},
                                                       {"evidence", json::array{lookup_id}}});
  CHECK_FALSE(note.at("isError").as_bool());
  auto forged = a.tool("add_internal_note", json::object{{"order_id", "ORDER-500"},
                                                         {"text", "made up"},
                                                         {"evidence", json::array{"call_x"}}});
  CHECK(forged.at("isError").as_bool());
  // Unknown tools and lookups as tasks are protocol errors.
  CHECK(a.error("tools/call", json::object{{"name", "delete_account"}}).at("code").as_int64() ==
        -32602);
  CHECK(a.error("tools/call", json::object{{"name", "lookup_order"},
                                           {"arguments", json::object{{"order_id", "ORDER-100"}}},
                                           {"task", json::object{}}})
            .at("code")
            .as_int64() == -32601);
  // A token may only be minted for owners the operator may act for.
  auto outside = c.op("POST", "/v1/agent-tokens", R"({"owner":"demo-user"})", kOutsiderToken);
  CHECK(outside.status == 403);
}

TEST_CASE("a revoked token is refused at once; what it proposed lives on and settles") {
  Cluster c;
  auto minted = mint(c, "demo-user");
  Agent a(c, str(minted, "token"));
  a.initialize();
  auto created = a.tool("request_refund", json::object{{"order_id", "ORDER-100"}}, true);
  const std::string task_id = str(created.at("task"), "taskId");
  // A tasks/result that waits from before the token is revoked.
  boost::asio::io_context ioc;
  auto parked = ask_result_raw(c, a, ioc, task_id);
  REQUIRE(waiting_becomes(c, 1));
  auto revoked = c.op("DELETE", "/v1/agent-tokens/" + str(minted, "id"), "");
  CHECK(revoked.status == 200);
  CHECK(str(revoked.body, "state") == "revoked");
  auto refused = a.post(json::object{{"jsonrpc", "2.0"}, {"id", 9}, {"method", "ping"}});
  CHECK(refused.status == 401);
  CHECK(refused.headers.count("WWW-Authenticate"));
  auto list = c.op("GET", "/v1/agent-tokens").body.at("agent_tokens").as_array();
  REQUIRE(list.size() == 1);
  CHECK(str(list[0], "state") == "revoked");
  CHECK_FALSE(list[0].as_object().contains("token_sha256"));
  // Listed a page at a time; another owner's token neither fills a page nor
  // names its cursor.
  auto second = mint(c, "demo-user");
  auto page = c.op("GET", "/v1/agent-tokens?limit=1").body;
  REQUIRE(page.at("agent_tokens").as_array().size() == 1);
  const std::string first_id = str(page.at("agent_tokens").as_array()[0], "id");
  CHECK(str(page, "next_cursor") == first_id);
  auto rest = c.op("GET", "/v1/agent-tokens?limit=1&cursor=" + first_id).body;
  REQUIRE(rest.at("agent_tokens").as_array().size() == 1);
  CHECK(str(rest.at("agent_tokens").as_array()[0], "id") != first_id);
  CHECK(c.op("GET", "/v1/agent-tokens", "", kOutsiderToken)
            .body.at("agent_tokens")
            .as_array()
            .empty());
  CHECK(c.op("GET", "/v1/agent-tokens?limit=0").status == 400);
  CHECK(c.op("DELETE", "/v1/agent-tokens/" + str(second, "id"), "", kOutsiderToken).status == 404);
  c.approve(kRefund, kAliceToken);
  auto op = c.wait_operation(kRefund, [](auto& o) { return str(o, "state") == "settled"; });
  CHECK(str(op, "outcome") == "succeeded");
  // What waited is not given the result: the token no longer authenticates.
  CHECK(answer_head(parked).starts_with("HTTP/1.1 401"));
  // The task record is kept: a new token of the same owner does not see
  // another token's tasks, but the operator's records hold it.
  auto calls = op.at("calls").as_array();
  REQUIRE(calls.size() == 1);
  CHECK(str(calls[0], "call_id") == task_id);
}

TEST_CASE("one agent cannot take every place to wait for a task's result") {
  Cluster c;
  Agent a(c, str(mint(c, "demo-user"), "token"));
  a.initialize();
  const std::string task_id = refund_task(a);
  // 64 tasks/result requests wait on the pending proposal, each on its own
  // connection, sent and not read.
  boost::asio::io_context ioc;
  std::vector<boost::asio::ip::tcp::socket> waiting;
  for (int i = 0; i < 64; ++i) waiting.push_back(ask_result_raw(c, a, ioc, task_id));
  CHECK(waiting_becomes(c, 64));
  // The 65th of this agent is told to poll, at once.
  auto refused = a.error("tasks/result", json::object{{"taskId", task_id}});
  CHECK(refused.at("code").as_int64() == -32000);
  CHECK(str(refused, "message").find("poll tasks/get") != std::string::npos);
  // What waits is answered when the task ends.
  c.approve(kRefund, kAliceToken);
  for (auto& s : waiting) CHECK(answer_head(s).starts_with("HTTP/1.1 200"));
}

TEST_CASE("who minted an agent token cannot approve what the token proposed") {
  Cluster c;
  Agent a(c, str(mint(c, "demo-user", kAdminToken), "token"));
  a.initialize();
  a.tool("request_refund", json::object{{"order_id", "ORDER-100"}}, true);
  c.wait_operation(kRefund, [](auto& o) { return str(o, "state") == "pending"; });
  auto self = c.approve(kRefund, kAdminToken, 403);
  CHECK(json::serialize(self).find("self_approval") != std::string::npos);
  CHECK(str(c.operation(kRefund), "state") == "pending");
  CHECK(c.operation(kRefund).at("approvals").as_array().empty());
  // Another approver may.
  c.approve(kRefund, kAliceToken);
  auto op = c.wait_operation(kRefund, [](auto& o) { return str(o, "state") == "settled"; });
  CHECK(str(op, "outcome") == "succeeded");
}

TEST_CASE("sessions, versions, methods and DNS rebinding are checked before anything else") {
  Cluster c;
  const std::string token = str(mint(c, "demo-user"), "token");
  Agent a(c, token);
  const std::string ping = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  const opgate::http::Headers json_headers{{"Content-Type", "application/json"},
                                           {"Accept", "application/json, text/event-stream"}};
  // No session yet: 400; a made-up one: 404.
  CHECK(c.mcp("POST", "/mcp/" + token, ping, json_headers).status == 400);
  auto h = json_headers;
  h["Mcp-Session-Id"] = "mcps.at_0000.2025-11-25.1.deadbeef";
  CHECK(c.mcp("POST", "/mcp/" + token, ping, h).status == 404);
  a.initialize();
  // Another token's session is not this token's.
  Agent b(c, str(mint(c, "demo-user"), "token"));
  b.initialize();
  h["Mcp-Session-Id"] = b.session();
  CHECK(c.mcp("POST", "/mcp/" + token, ping, h).status == 404);
  // An unsupported protocol version: 400.
  h["Mcp-Session-Id"] = a.session();
  h["MCP-Protocol-Version"] = "2026-07-28";
  CHECK(c.mcp("POST", "/mcp/" + token, ping, h).status == 400);
  // A version the server speaks, but not the one this session agreed: 400.
  h["MCP-Protocol-Version"] = "2025-06-18";
  auto other = c.mcp("POST", "/mcp/" + token, ping, h);
  CHECK(other.status == 400);
  CHECK(other.raw.find("not the version this session agreed (2025-11-25)") != std::string::npos);
  // Without the header, the session's own version is assumed.
  h.erase("MCP-Protocol-Version");
  CHECK(c.mcp("POST", "/mcp/" + token, ping, h).status == 200);
  // The bearer header works as the path does.
  h["MCP-Protocol-Version"] = "2025-11-25";
  h["Authorization"] = "Bearer " + token;
  CHECK(c.mcp("POST", "/mcp", ping, h).status == 200);
  // No stream, no session to delete.
  CHECK(c.mcp("GET", "/mcp/" + token, "", {}).status == 405);
  CHECK(c.mcp("DELETE", "/mcp/" + token, "", {}).status == 405);
  // DNS rebinding: a foreign Host or Origin is refused; the listener's own
  // origin is not.
  auto rebound = json_headers;
  rebound["Host"] = "evil.example.com";
  CHECK(c.mcp("POST", "/mcp/" + token, ping, rebound).status == 403);
  auto foreign = json_headers;
  foreign["Origin"] = "http://evil.example.com";
  CHECK(c.mcp("POST", "/mcp/" + token, ping, foreign).status == 403);
  auto same = h;
  same["Origin"] = fmt::format("http://127.0.0.1:{}", c.mcp_port());
  CHECK(c.mcp("POST", "/mcp/" + token, ping, same).status == 200);
  // Bad input: not JSON, a batch, a wrong media type.
  CHECK(c.mcp("POST", "/mcp/" + token, "{", h).status == 400);
  CHECK(c.mcp("POST", "/mcp/" + token, "[" + ping + "]", h).status == 400);
  auto text = h;
  text["Content-Type"] = "text/plain";
  CHECK(c.mcp("POST", "/mcp/" + token, ping, text).status == 415);
  // An unknown token: 401, whatever the session.
  CHECK(c.mcp("POST", "/mcp/ogat_" + std::string(64, '0'), ping, h).status == 401);
}

TEST_CASE("tasks/cancel withdraws a pending proposal; a task survives a kill -9 of the daemon") {
  Cluster c;
  const std::string token = str(mint(c, "demo-user"), "token");
  Agent a(c, token);
  a.initialize();
  const std::string withdrawn = refund_task(a);
  // Another agent of the same owner asks the same refund: its task waits on
  // the operation, and cancelling that task does not withdraw it.
  Agent other(c, str(mint(c, "demo-user"), "token"));
  other.initialize();
  auto linked = other.tool("request_refund", json::object{{"order_id", "ORDER-100"}}, true);
  const std::string linked_id = str(linked.at("task"), "taskId");
  CHECK(other.error("tasks/cancel", json::object{{"taskId", linked_id}}).at("code").as_int64() ==
        -32602);
  CHECK(str(c.wait_operation(kRefund, [](auto&) { return true; }), "state") == "pending");
  auto cancelled = a.call("tasks/cancel", json::object{{"taskId", withdrawn}});
  CHECK(str(cancelled, "status") == "cancelled");
  auto op = c.wait_operation(kRefund, [](auto& o) { return str(o, "state") == "settled"; });
  CHECK(str(op, "outcome") == "denied");
  CHECK(str(op, "decision_reason") == "withdrawn by the agent");
  auto result = a.call("tasks/result", json::object{{"taskId", withdrawn}});
  CHECK(result.at("isError").as_bool());
  CHECK(a.error("tasks/cancel", json::object{{"taskId", withdrawn}}).at("code").as_int64() ==
        -32602);

  // A credit asked as a task, then the daemon is killed.
  auto credit = a.tool("issue_account_credit",
                       json::object{{"order_id", "ORDER-300"},
                                    {"amount_minor", 1500},
                                    {"currency", "USD"},
                                    {"reason_code", "GOODWILL"}},
                       true);
  const std::string task_id = str(credit.at("task"), "taskId");
  c.restart_daemon(true);
  Agent again(c, token);  // a new session after the restart
  again.initialize();
  auto task = again.call("tasks/get", json::object{{"taskId", task_id}});
  CHECK(str(task, "status") == "working");
  const std::string key = "demo-user:ORDER-300:account-credit:v1";
  c.approve(key, kAliceToken);
  CHECK(eventually([&] {
    return str(again.call("tasks/get", json::object{{"taskId", task_id}}), "status") == "completed";
  }));
  auto done = again.call("tasks/result", json::object{{"taskId", task_id}});
  CHECK_FALSE(done.at("isError").as_bool());
  CHECK(str(structured(done), "status") == "succeeded");
}

TEST_CASE("a declared operation over MCP: published with its schema, a task until settled") {
  ClusterOptions o;
  o.declared_operations = true;
  Cluster c(o);
  Agent a(c, str(mint(c, "demo-user"), "token"));
  a.initialize();
  std::map<std::string, json::object> by_name;
  const auto listed = a.call("tools/list");
  for (const auto& t : listed.at("tools").as_array()) by_name[str(t, "name")] = t.as_object();
  REQUIRE(by_name.count("waive_fee"));
  const auto& waive = by_name["waive_fee"];
  CHECK(str(waive.at("execution"), "taskSupport") == "optional");
  CHECK(waive.at("annotations").at("destructiveHint").as_bool());
  CHECK(waive.at("inputSchema").at("properties").at("amount_minor").at("maximum").as_int64() ==
        5000);
  CHECK_FALSE(waive.at("inputSchema").at("additionalProperties").as_bool());
  // An owner smuggled into the arguments is refused; nothing is created.
  auto smuggled = a.tool("waive_fee", json::object{{"order_id", "ORDER-100"},
                                                   {"fee", "late_fee"},
                                                   {"amount_minor", 500},
                                                   {"owner", "other-user"}});
  CHECK(smuggled.at("isError").as_bool());
  CHECK(c.op("GET", "/v1/operations").body.at("operations").as_array().empty());

  const std::string key = "demo-user:ORDER-100:waive_fee:v1";
  auto created = a.tool(
      "waive_fee",
      json::object{{"order_id", "ORDER-100"}, {"fee", "late_fee"}, {"amount_minor", 500}}, true);
  const std::string task_id = str(created.at("task"), "taskId");
  auto op = c.wait_operation(key, [](auto& o) { return str(o, "state") == "pending"; });
  CHECK(str(op.at("proposal"), "money") == "credit");
  CHECK(str(op.at("proposal"), "effect") ==
        "5.00 USD of the late_fee on order ORDER-100 is credited to the customer's account.");
  CHECK(str(op.at("proposal").at("arguments"), "fee") == "late_fee");
  c.approve(key, kSupportToken);
  auto result = a.call("tasks/result", json::object{{"taskId", task_id}});
  CHECK_FALSE(result.at("isError").as_bool());
  auto verified = structured(result);
  CHECK(str(verified, "status") == "succeeded");
  CHECK(verified.at("amount_minor").as_int64() == 500);
  // Carried out once, by the executor, with the approved arguments and key.
  const auto executions =
      c.executor_admin("GET", "/_sim/executions").body.at("executions").as_array();
  REQUIRE(executions.size() == 1);
  CHECK(str(executions[0], "operation_key") == key);
  CHECK(str(executions[0].at("request"), "owner") == "demo-user");
  CHECK(executions[0].at("request").at("arguments") == op.at("proposal").at("arguments"));
  CHECK(str(verified, "provider_object_id") == str(executions[0].at("answer"), "id"));
  // The credit counts against the order: a full refund is now 2000.
  auto refund = a.tool("request_refund", json::object{{"order_id", "ORDER-100"}});
  CHECK(structured(refund).at("amount_minor").as_int64() == 2000);

  // The CLI shows the declared tools: the definitions and the policy.
  auto [trc, definitions] = c.cli({"tools", "--config", c.config_file().string()});
  CHECK(trc == 0);
  CHECK(definitions.find(R"("name":"reship_order")") != std::string::npos);
  CHECK(definitions.find("tok-executor-eval") == std::string::npos);
  auto [rc, out] = c.cli({"policy", "show"}, kReaderToken);
  CHECK(rc == 0);
  CHECK(out.find("waive_fee              yes      support") != std::string::npos);
  CHECK(out.find("executor http://127.0.0.1:") != std::string::npos);
  CHECK(out.find("tok-executor-eval") == std::string::npos);
}
