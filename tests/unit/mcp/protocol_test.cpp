#include "mcp/protocol.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <set>

#include "operations/state_machine.h"

using namespace opgate;
namespace json = boost::json;

namespace {

constexpr int64_t kNowMs = 1796200000123;  // 2026-12-02T08:26:40.123Z

pb::AgentToken token(std::string id, std::string sha) {
  pb::AgentToken t;
  t.set_id(std::move(id));
  t.set_token_sha256(std::move(sha));
  t.set_owner("demo-user");
  return t;
}

mcp::RpcError error_of(std::string_view body) {
  auto parsed = mcp::parse_message(body);
  REQUIRE(std::holds_alternative<mcp::RpcError>(parsed));
  return std::get<mcp::RpcError>(parsed);
}

mcp::Message message_of(std::string_view body) {
  auto parsed = mcp::parse_message(body);
  REQUIRE(std::holds_alternative<mcp::Message>(parsed));
  return std::get<mcp::Message>(parsed);
}

pb::Operation operation(operations::State state,
                        operations::Outcome outcome = operations::Outcome::none) {
  pb::Operation op;
  op.set_key("demo-user:ORDER-100:full-refund:v1");
  op.set_fingerprint("5a3a404bb0bf");
  op.mutable_proposal()->set_amount_minor(2500);
  op.mutable_proposal()->set_currency("USD");
  op.set_expires_at_ms(kNowMs + 3600'000);
  op.set_updated_at_ms(kNowMs + 5000);
  operations::set_target(op, {state, outcome});
  return op;
}

pb::ToolCall call(bool answered) {
  pb::ToolCall c;
  c.set_call_id("call_1");
  c.set_created_at_ms(kNowMs);
  if (answered) {
    c.set_result_saved(true);
    c.mutable_result()->set_saved_at_ms(kNowMs + 9000);
  }
  return c;
}

}  // namespace

TEST_CASE("protocol versions: the newest is offered for one the server does not speak") {
  CHECK(mcp::negotiate("2025-06-18") == "2025-06-18");
  CHECK(mcp::negotiate("2025-11-25") == "2025-11-25");
  CHECK(mcp::negotiate("2024-11-05") == "2025-11-25");
  CHECK(mcp::negotiate("") == "2025-11-25");
  CHECK_FALSE(mcp::known_version("2026-07-28"));
}

TEST_CASE("JSON-RPC messages are parsed strictly") {
  SUBCASE("a request, a notification and a response") {
    auto request = message_of(
        R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup_order"}})");
    CHECK(request.is_request());
    CHECK(request.id == json::value(7));
    CHECK(request.params.at("name") == "lookup_order");
    auto notification = message_of(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
    CHECK_FALSE(notification.has_id);
    CHECK_FALSE(notification.is_request());
    auto response = message_of(R"({"jsonrpc":"2.0","id":"s-1","result":{}})");
    CHECK(response.has_id);
    CHECK(response.method.empty());
  }
  SUBCASE("what is refused, and with which code") {
    CHECK(error_of("{").code == mcp::rpc::parse_error);
    CHECK(error_of("[]").code == mcp::rpc::invalid_request);
    CHECK(error_of(R"("ping")").code == mcp::rpc::invalid_request);
    CHECK(error_of(R"({"id":1,"method":"ping"})").message == "jsonrpc must be 2.0.");
    CHECK(error_of(R"({"jsonrpc":"1.0","id":1,"method":"ping"})").code ==
          mcp::rpc::invalid_request);
    CHECK(error_of(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})").message ==
          "An id is a string or an integer.");
    CHECK(error_of(R"({"jsonrpc":"2.0","id":null,"method":"ping"})").code ==
          mcp::rpc::invalid_request);
    CHECK(error_of(R"({"jsonrpc":"2.0","id":1,"method":""})").code == mcp::rpc::invalid_request);
    CHECK(error_of(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})").message ==
          "params must be an object.");
    CHECK(error_of(R"({"jsonrpc":"2.0"})").code == mcp::rpc::invalid_request);
    CHECK(error_of(R"({"jsonrpc":"2.0","id":1})").message ==
          "A response carries a result or an error.");
    const std::string long_method(129, 'm');
    CHECK(error_of(R"({"jsonrpc":"2.0","id":1,"method":")" + long_method + R"("})").code ==
          mcp::rpc::invalid_request);
  }
}

TEST_CASE("answers are JSON-RPC 2.0 with the request's id") {
  auto ok = json::parse(mcp::result_body(json::value("a"), json::object{{"x", 1}})).as_object();
  CHECK(ok.at("jsonrpc") == "2.0");
  CHECK(ok.at("id") == "a");
  CHECK(ok.at("result").at("x") == 1);
  auto err = json::parse(mcp::error_body(nullptr, mcp::rpc::method_not_found, "no such method"))
                 .as_object();
  CHECK(err.at("id").is_null());
  CHECK(err.at("error").at("code") == mcp::rpc::method_not_found);
  CHECK(err.at("error").at("message") == "no such method");
}

TEST_CASE("a session id is checkable by any node, and only for the token it was given to") {
  const auto mine = token("at_1", std::string(32, 'a'));
  const auto other = token("at_2", std::string(32, 'b'));
  const std::string id = mcp::mint_session(mine, "2025-06-18", kNowMs);
  CHECK(id.starts_with("mcps.at_1.2025-06-18."));
  CHECK(mcp::session_version(id, mine) == std::optional<std::string>("2025-06-18"));
  // Another token, even one with the same id but another secret, gets nothing.
  CHECK_FALSE(mcp::session_version(id, other));
  CHECK_FALSE(mcp::session_version(id, token("at_1", std::string(32, 'c'))));
  // Any change to the id breaks its MAC.
  std::string tampered = id;
  tampered.replace(tampered.find("2025-06-18"), 10, "2025-11-25");
  CHECK_FALSE(mcp::session_version(tampered, mine));
  std::string flipped = id;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  CHECK_FALSE(mcp::session_version(flipped, mine));
  CHECK_FALSE(mcp::session_version("", mine));
  CHECK_FALSE(mcp::session_version("mcps.", mine));
  CHECK_FALSE(mcp::session_version(std::string(300, 'x'), mine));
}

TEST_CASE("tools/list: the enabled tools with strict schemas, and get_operation") {
  operations::PolicyConfig policy;
  auto list = mcp::tools(policy);
  std::set<std::string> names;
  for (const auto& t : list) {
    const auto& tool = t.as_object();
    const std::string name(tool.at("name").as_string());
    names.insert(name);
    CAPTURE(name);
    CHECK_FALSE(tool.at("description").as_string().empty());
    const auto& schema = tool.at("inputSchema").as_object();
    CHECK(schema.at("type") == "object");
    CHECK(schema.at("additionalProperties") == false);
    // No owner, amount or key is ever the model's to give.
    const auto& properties = schema.at("properties").as_object();
    CHECK_FALSE(properties.contains("owner"));
    CHECK_FALSE(properties.contains("idempotency_key"));
    const bool proposes = operations::proposing_tool(name);
    CHECK(tool.at("execution").at("taskSupport") == (proposes ? "optional" : "forbidden"));
    CHECK(tool.at("annotations").at("destructiveHint") == proposes);
  }
  CHECK(names.count("lookup_order") == 1);
  CHECK(names.count("request_refund") == 1);
  CHECK(names.count(std::string(mcp::kGetOperation)) == 1);

  SUBCASE("a tool the policy turns off is not listed") {
    policy.tools.at("request_refund").enabled = false;
    for (const auto& t : mcp::tools(policy)) CHECK(t.at("name") != "request_refund");
  }
}

TEST_CASE("a tool result is an error unless the operation it proposed succeeded") {
  pb::ToolResult succeeded;
  succeeded.set_success(true);
  succeeded.set_output(R"({"status":"succeeded","operation_key":"k"})");
  auto r = mcp::call_tool_result(succeeded, true);
  CHECK(r.at("isError") == false);
  CHECK(r.at("structuredContent").at("status") == "succeeded");
  CHECK(r.at("content").at(0).at("text").as_string() == succeeded.output());

  for (const char* status : {"denied", "expired", "rejected", "cancelled"}) {
    CAPTURE(status);
    pb::ToolResult ended;
    ended.set_success(true);
    ended.set_output(fmt::format(R"({{"status":"{}"}})", status));
    CHECK(mcp::call_tool_result(ended, true).at("isError") == true);
    // The same output from a call that proposed nothing is plain data.
    CHECK(mcp::call_tool_result(ended, false).at("isError") == false);
  }

  pb::ToolResult refused;
  refused.set_success(false);
  refused.set_error("order not found");
  auto e = mcp::call_tool_result(refused, false);
  CHECK(e.at("isError") == true);
  CHECK(e.at("content").at(0).at("text") == "order not found");
  CHECK_FALSE(e.contains("structuredContent"));

  pb::ToolResult text;
  text.set_success(true);
  text.set_output("not JSON");
  CHECK_FALSE(mcp::call_tool_result(text, false).contains("structuredContent"));
}

TEST_CASE("a pending result shows the exact proposal, in text and structured") {
  auto r = mcp::pending_result(operation(operations::State::pending));
  const auto& s = r.at("structuredContent").as_object();
  CHECK(s.at("status") == "pending_approval");
  CHECK(s.at("operation_key") == "demo-user:ORDER-100:full-refund:v1");
  CHECK(s.at("amount_minor") == 2500);
  CHECK(s.at("currency") == "USD");
  CHECK(s.at("fingerprint") == "5a3a404bb0bf");
  CHECK(s.at("expires_at").as_string() == mcp::iso8601(kNowMs + 3600'000));
  CHECK(json::parse(r.at("content").at(0).at("text").as_string()) == r.at("structuredContent"));
  CHECK(r.at("isError") == false);
}

TEST_CASE("a task works until its operation settles and its result is recorded") {
  using operations::Outcome;
  using operations::State;
  operations::PolicyConfig policy;
  SUBCASE("each state before the result") {
    for (auto state : {State::pending, State::approved, State::executing, State::outcome_unknown,
                       State::settled}) {
      auto op = operation(state, state == State::settled ? Outcome::succeeded : Outcome::none);
      auto t = mcp::task_state(call(false), op, policy);
      CAPTURE(operations::to_string(state));
      CHECK(t.status == "working");
      CHECK_FALSE(t.terminal);
      CHECK_FALSE(t.message.empty());
    }
    CHECK(mcp::task_state(call(false), operation(State::pending), policy).message ==
          "waiting for approval (0 of 1)");
    CHECK(mcp::task_state(call(false), std::nullopt, policy).status == "working");
  }
  SUBCASE("completed whatever the outcome, which the message names") {
    auto denied = operation(State::settled, Outcome::denied);
    auto t = mcp::task_state(call(true), denied, policy);
    CHECK(t.status == "completed");
    CHECK(t.terminal);
    CHECK(t.message == "settled: denied");
  }
  SUBCASE("cancelled when its agent withdrew it") {
    auto withdrawn = operation(State::settled, Outcome::denied);
    withdrawn.set_decided_by("agent:at_1");
    withdrawn.set_decision_reason(std::string(mcp::kWithdrawnReason));
    auto t = mcp::task_state(call(true), withdrawn, policy);
    CHECK(t.status == "cancelled");
    CHECK(t.terminal);
    // A person denying it with the same words is a denial, not a cancel.
    withdrawn.set_decided_by("alice");
    CHECK(mcp::task_state(call(true), withdrawn, policy).status == "completed");
  }
  SUBCASE("the task's JSON: times in UTC, a poll interval only while working") {
    auto working =
        mcp::task_json(call(false), operation(State::pending),
                       mcp::task_state(call(false), operation(State::pending), policy), 1000);
    CHECK(working.at("taskId") == "call_1");
    CHECK(working.at("createdAt").as_string() == mcp::iso8601(kNowMs));
    CHECK(working.at("lastUpdatedAt").as_string() == mcp::iso8601(kNowMs + 5000));
    CHECK(working.at("pollInterval") == 1000);
    CHECK(working.at("ttl").is_null());
    auto done_op = operation(State::settled, Outcome::succeeded);
    auto done =
        mcp::task_json(call(true), done_op, mcp::task_state(call(true), done_op, policy), 1000);
    CHECK(done.at("status") == "completed");
    CHECK(done.at("lastUpdatedAt").as_string() == mcp::iso8601(kNowMs + 9000));
    CHECK_FALSE(done.contains("pollInterval"));
  }
}

TEST_CASE("times are ISO 8601 UTC with milliseconds") {
  CHECK(mcp::iso8601(0) == "1970-01-01T00:00:00.000Z");
  CHECK(mcp::iso8601(1796200000123) == "2026-12-02T08:26:40.123Z");
}
