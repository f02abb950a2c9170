#include "sim/agent_session.h"

#include <doctest/doctest.h>

#include <boost/json/parse.hpp>
#include <memory>

using namespace opgate::sim;

namespace {

AgentSession make_session() {
  auto counter = std::make_shared<int>(0);
  return AgentSession("sess_1", 100, [counter](std::string_view prefix) {
    return std::string(prefix) + std::to_string(++*counter);
  });
}

std::string pending_call(const AgentSession& s) {
  auto json = s.session_json();
  auto& actions = json.at("required_actions").as_array();
  REQUIRE(actions.size() == 1);
  return std::string(actions[0].as_object().at("call_id").as_string());
}

}  // namespace

TEST_CASE("sim agent: default script names the order from the input") {
  auto steps = default_script("please refund ORDER-A7x, thanks (not ORDER-2)");
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].calls.at(0).name == "lookup_order");
  CHECK(steps[1].calls.at(0).name == "request_refund");
  CHECK(steps[1].calls.at(0).arguments.at("order_id").as_string() == "ORDER-A7x");
  CHECK(default_script("hello ORDER- x")[0].calls.at(0).arguments.at("order_id").as_string() ==
        "ORDER-100");
  CHECK_FALSE(parse_script(boost::json::parse(R"([{"arguments":{}}])")).ok());
  CHECK_FALSE(parse_script(boost::json::parse(R"([{"name":"x","extra":1}])")).ok());
  CHECK(parse_script(boost::json::parse(R"([{"fail":true}])")).ok());
  CHECK_FALSE(parse_script(boost::json::parse(R"([{"calls":[]}])")).ok());
  CHECK_FALSE(parse_script(boost::json::parse(R"([{"calls":[{"name":"x"}],"name":"y"}])")).ok());
  CHECK_FALSE(parse_script(boost::json::parse(R"([{"calls":[{"arguments":{}}]}])")).ok());
}

TEST_CASE("sim agent: several calls in one step, each answered, and references to earlier calls") {
  AgentSession s = make_session();
  auto script = parse_script(boost::json::parse(
      R"([{"name":"lookup_order","arguments":{"order_id":"ORDER-1"}},)"
      R"({"calls":[{"name":"request_refund","arguments":{"order_id":"ORDER-1"}},)"
      R"({"name":"add_internal_note","arguments":{"evidence":["$call:0"]}}]}])"));
  REQUIRE(script.ok());
  auto turn = s.start_turn("refund ORDER-1", *script, 100);
  REQUIRE(turn.ok());
  REQUIRE(s.advance(101));
  const std::string lookup = pending_call(s);
  s.record({*turn, lookup, true, "{}", ""});
  REQUIRE(s.advance(102));
  auto actions = s.session_json().at("required_actions").as_array();
  REQUIRE(actions.size() == 2);
  const std::string refund(actions[0].at("call_id").as_string());
  const std::string note(actions[1].at("call_id").as_string());
  CHECK(actions[1].at("arguments").at("evidence").as_array()[0].as_string() == lookup);
  // One answered: the other still waits, and the model does not move on.
  s.record({*turn, note, true, R"({"status":"noted"})", ""});
  CHECK(s.status() == "requires_action");
  CHECK_FALSE(s.wants_advance());
  CHECK(s.session_json().at("required_actions").as_array().size() == 1);
  s.record({*turn, refund, true, R"({"status":"denied"})", ""});
  CHECK(s.wants_advance());
  CHECK_FALSE(s.advance(103));
  CHECK(s.status() == "idle");
  // A reference to a call that never came fails the turn.
  auto bad = parse_script(boost::json::parse(R"([{"name":"x","arguments":{"e":"$call:3"}}])"));
  REQUIRE(bad.ok());
  REQUIRE(s.start_turn("again", *bad, 104).ok());
  CHECK_FALSE(s.advance(105));
  CHECK(s.status() == "failed");
}

TEST_CASE("sim agent: one call at a time, resend safe, conflicts refused, then a closing message") {
  AgentSession s = make_session();
  auto turn = s.start_turn("refund ORDER-1", default_script("refund ORDER-1"), 100);
  REQUIRE(turn.ok());
  CHECK(s.status() == "in_progress");
  CHECK(s.wants_advance());
  CHECK(s.advance(101));
  CHECK(s.status() == "requires_action");
  const std::string call1 = pending_call(s);
  CHECK(s.turns_json()[0].as_object().at("status").as_string() == "waiting");

  ToolResult r1{turn.value(), call1, true, R"({"order_id":"ORDER-1"})", ""};
  ToolResult wrong_turn = r1;
  wrong_turn.turn_id = "turn_other";
  CHECK(s.check(wrong_turn) == ResultCheck::kUnknown);
  CHECK(s.check(ToolResult{turn.value(), "call_never", true, "x", ""}) == ResultCheck::kUnknown);
  CHECK(s.check(r1) == ResultCheck::kAccept);
  s.record(r1);
  CHECK(s.check(r1) == ResultCheck::kDuplicate);
  ToolResult different = r1;
  different.output = "other";
  CHECK(s.check(different) == ResultCheck::kConflict);
  CHECK(s.status() == "in_progress");

  CHECK(s.advance(102));
  const std::string call2 = pending_call(s);
  CHECK(call2 != call1);
  ToolResult r2{turn.value(), call2, true,
                R"({"status":"succeeded","operation_key":"u:ORDER-1:full-refund:v1"})", ""};
  s.record(r2);
  CHECK_FALSE(s.advance(103));
  CHECK(s.status() == "idle");
  CHECK(s.session_json().at("required_actions").as_array().empty());
  CHECK(s.turns_json()[0].as_object().at("status").as_string() == "completed");
  const auto& last = s.items().back();
  CHECK(last.at("role").as_string() == "assistant");
  std::string text(last.at("content").as_string());
  CHECK(text.find("succeeded") != std::string::npos);
  CHECK(text.find("u:ORDER-1:full-refund:v1") != std::string::npos);
  CHECK(text.find("ORDER-1") != std::string::npos);
  // user message, 2 calls, 2 outputs, 1 answer
  CHECK(s.items().size() == 6);
  // A late resend of an answered call is still safe.
  CHECK(s.check(r1) == ResultCheck::kDuplicate);
}

TEST_CASE("sim agent: closing messages") {
  boost::json::object args{{"order_id", "ORDER-9"}};
  CHECK(closing_message("request_refund", args, {"t", "c", false, "", "Order not found."}) ==
        "I could not complete that: Order not found.");
  CHECK(closing_message("lookup_order", args, {"t", "c", true, "plain", ""}).find("plain") !=
        std::string::npos);
  CHECK(closing_message("issue_account_credit", args,
                        {"t", "c", true, R"({"status":"denied"})", ""}) ==
        "Account credit for ORDER-9 — status: denied.");
}

TEST_CASE("sim agent: a failing step fails the turn; a busy session refuses a new turn") {
  AgentSession s = make_session();
  std::vector<ScriptStep> script{ScriptStep{{}, true}};
  REQUIRE(s.start_turn("hi", script, 1).ok());
  CHECK_FALSE(s.start_turn("again", script, 1).ok());
  CHECK_FALSE(s.advance(2));
  CHECK(s.status() == "failed");
  CHECK(s.turns_json()[0].as_object().at("status").as_string() == "failed");
  CHECK(s.start_turn("again", {}, 3).ok());
  CHECK_FALSE(s.advance(4));
  CHECK(s.status() == "idle");
}
