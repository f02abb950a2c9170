// The Agents API adapter against a real HTTP server on loopback: only a 404
// whose error body says the platform has no such session closes a
// session's events; a 404 from a wrong base_url, a proxy's page or an error
// about some other session is a retryable failure.
#include <doctest/doctest.h>

#include <mutex>
#include <string>

#include "adapters/agents/agents_http_client.h"
#include "http/server.h"

using namespace opgate;

namespace {

struct Platform {
  std::mutex mu;
  int status = 200;
  std::string body;
  std::string path;
  http::Server server{{}, [this](http::Request&& r) {
                        std::lock_guard lock(mu);
                        path = r.target;
                        http::Response res;
                        res.status = status;
                        res.body = body;
                        res.headers["Content-Type"] = "application/json";
                        return res;
                      }};
  std::unique_ptr<operations::AgentPlatform> client;

  Platform() {
    auto port = server.start();
    REQUIRE(port.ok());
    client = adapters::make_agents_http_client(
        {"http://127.0.0.1:" + std::to_string(*port) + "/v1", "sk-test", 5000, ""});
  }
  void answer(int s, std::string b) {
    std::lock_guard lock(mu);
    status = s;
    body = std::move(b);
  }
};

}  // namespace

TEST_CASE("agents adapter: a 404 closes a session only when the platform says it has none") {
  Platform p;
  p.answer(404, R"({"error":{"code":"not_found","message":"No session found with id 'sess_1'."}})");
  auto missing = p.client->get_session("sess_1");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().is(errc::session_not_found));

  // A wrong base_url or a proxy: a page that is not the platform's error.
  p.answer(404, "<html><body>404 Not Found</body></html>");
  auto page = p.client->get_session("sess_1");
  REQUIRE_FALSE(page.ok());
  CHECK(page.error().is(errc::agents_unavailable));

  p.answer(404, "");
  CHECK(p.client->get_session("sess_1").error().is(errc::agents_unavailable));

  // The platform's error, but about another id (a routing mistake upstream).
  p.answer(404, R"({"error":{"code":"not_found","message":"No session found with id 'sess_2'."}})");
  CHECK(p.client->get_session("sess_1").error().is(errc::agents_unavailable));

  // Another code, or a message that is not text.
  p.answer(404, R"({"error":{"code":"route_not_found","message":"'sess_1'"}})");
  CHECK(p.client->get_session("sess_1").error().is(errc::agents_unavailable));
  p.answer(404, R"({"error":{"code":"not_found","message":7}})");
  CHECK(p.client->get_session("sess_1").error().is(errc::agents_unavailable));

  // A result for a session the platform says it has no more: final, not
  // retried; the same 404 that is not the platform's word: retried.
  pb::CallRef ref;
  ref.set_session_id("sess_1");
  ref.set_turn_id("turn_1");
  ref.set_call_id("call_1");
  pb::ToolResult result;
  result.set_success(true);
  result.set_output("{}");
  p.answer(404, R"({"error":{"code":"not_found","message":"No session found with id 'sess_1'."}})");
  auto gone = p.client->submit_result("sess_1", ref, result, "key-1");
  REQUIRE(gone.ok());
  CHECK(*gone == operations::SubmitVerdict::session_gone);
  p.answer(404, "<html><body>404 Not Found</body></html>");
  CHECK_FALSE(p.client->submit_result("sess_1", ref, result, "key-1").ok());

  // The session as the platform shows it.
  p.answer(200, R"({"id":"sess_1","status":"requires_action","required_actions":[)"
                R"({"type":"function_call","call_id":"call_1","turn_id":"turn_1",)"
                R"("name":"lookup_order","arguments":{"order_id":"ORDER-100"}}]})");
  auto view = p.client->get_session("sess_1");
  REQUIRE(view.ok());
  CHECK(view->status == "requires_action");
  REQUIRE(view->required_actions.size() == 1);
  CHECK(view->required_actions[0].arguments_json == R"({"order_id":"ORDER-100"})");
  std::lock_guard lock(p.mu);
  CHECK(p.path == "/v1/agents/sessions/sess_1");
}
