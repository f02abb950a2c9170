#include "common/logging.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

using opgate::log_line;
namespace json = boost::json;

namespace {
// The keys of one line in the order written.
std::vector<std::string> keys_of(const std::string& line) {
  std::vector<std::string> keys;
  const json::value parsed = json::parse(line);
  for (const auto& [k, v] : parsed.as_object()) keys.emplace_back(k);
  return keys;
}
}  // namespace

TEST_CASE("an event's line is ts and level, then the event's own fields in their order") {
  const std::string payload =
      "\x1e"
      R"({"msg":"k: approved -> executing","event":"operation.claim",)"
      R"("operation_key":"k","state":"executing"})";
  const std::string line = log_line("2026-12-02T10:00:00.000Z", "info", payload);
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);  // one line
  const auto v = json::parse(line);
  CHECK(v.at("ts").as_string() == "2026-12-02T10:00:00.000Z");
  CHECK(v.at("level").as_string() == "info");
  CHECK(v.at("event").as_string() == "operation.claim");
  CHECK(v.at("state").as_string() == "executing");
  CHECK(keys_of(line) ==
        std::vector<std::string>{"ts", "level", "msg", "event", "operation_key", "state"});
}

TEST_CASE("a plain message becomes msg, escaped so any text stays one valid JSON line") {
  const std::string text = "order \"A\\1\"\nnext line\ttab \x01 end";
  const std::string line = log_line("t", "warning", text);
  CHECK(line.find('\n') == line.size() - 1);
  const auto v = json::parse(line);
  CHECK(v.at("msg").as_string() == text);
  CHECK(keys_of(line) == std::vector<std::string>{"ts", "level", "msg"});
  // Text that only looks like an event is still a message.
  CHECK(json::parse(log_line("t", "info", "\x1e{")).at("msg").as_string() == "\x1e{");
  CHECK(json::parse(log_line("t", "info", "")).at("msg").as_string() == "");
}
