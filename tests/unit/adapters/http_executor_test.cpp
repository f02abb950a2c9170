// A declared operation's executor over HTTP (adapters/executors): a lookup's
// 404 proves the operation never ran only when it is the executor's own
// answer, and an operation sent already is reconciled and executed again
// where it was sent, whatever a reload has made the declaration's URL since.
#include "adapters/executors/http_executor.h"

#include <doctest/doctest.h>

#include <mutex>
#include <vector>

#include "common/crypto.h"
#include "http/server.h"
#include "world.h"

using namespace opgate;

namespace {

// An executor (or whatever answers in its place) on loopback: answers as
// scripted, and keeps what it was asked.
struct Executor {
  std::mutex mu;
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::string> asked;  // "METHOD target"
  http::Server server{{}, [this](http::Request&& r) {
                        std::lock_guard lock(mu);
                        asked.push_back(r.method + " " + r.target);
                        http::Response res;
                        res.status = status;
                        res.body = body;
                        res.headers["Content-Type"] = content_type;
                        return res;
                      }};
  std::string url;

  explicit Executor(const std::string& path) {
    auto port = server.start();
    REQUIRE(port.ok());
    url = "http://127.0.0.1:" + std::to_string(*port) + path;
  }
  void answer(int s, std::string b, std::string type = "application/json") {
    std::lock_guard lock(mu);
    status = s;
    body = std::move(b);
    content_type = std::move(type);
  }
  std::vector<std::string> requests() {
    std::lock_guard lock(mu);
    return asked;
  }
};

operations::PolicyConfig declaring(const std::string& url, const std::string& token = "tok") {
  operations::PolicyConfig policy;
  operations::DeclaredOperation op;
  op.name = "waive_fee";
  op.executor.url = url;
  op.executor.token = token;
  op.executor.timeout_ms = 5'000;
  policy.declared.push_back(op);
  return policy;
}

// As the drainer asks: for an operation sent already, the executor it was
// sent to and the digest of the token it was sent with.
operations::PaymentRequest waive_fee(std::string executor_url = "",
                                     const std::string& sent_with = "tok") {
  operations::PaymentRequest r;
  r.kind = operations::PaymentRequest::Kind::declared;
  r.operation_key = "demo-user:ORDER-1:waive_fee:v1";
  r.operation = "waive_fee";
  r.owner = "demo-user";
  r.order_id = "ORDER-1";
  r.arguments_json = R"({"order_id":"ORDER-1"})";
  if (!executor_url.empty()) r.executor_token_sha256 = crypto::sha256_hex(sent_with);
  r.executor_url = std::move(executor_url);
  return r;
}

}  // namespace

constexpr const char* kAbsent =
    R"({"operation_key":"demo-user:ORDER-1:waive_fee:v1","error":{"code":"not_found"}})";

TEST_CASE("a lookup's 404 proves absence only as the executor's own answer, naming the key") {
  Executor executor("/waive");
  Live<operations::PolicyConfig> policy(declaring(executor.url));
  testing::FakeProvider underneath;
  auto executors = adapters::make_declared_executors(underneath, policy, 5'000);

  executor.answer(404, kAbsent);
  auto found = executors->find(waive_fee());
  CHECK(found.lookup == operations::Lookup::absent);

  // A gateway's page, an empty 404, or a gateway's own JSON: the request
  // found no route, which says nothing of whether the executor ran it.
  for (const char* body :
       {"<html><body>Not Found</body></html>", "", R"({"message":"no Route matched"})",
        R"({"status":404,"error":"Not Found","path":"/waive/x"})",
        R"({"operation_key":"demo-user:ORDER-1:waive_fee:v2"})"}) {
    CAPTURE(body);
    executor.answer(404, body, "text/html");
    found = executors->find(waive_fee());
    CHECK(found.lookup == operations::Lookup::unreachable);
    CHECK(found.error.find("not taken as proof") != std::string::npos);
  }
  CHECK(executor.requests().size() == 6);
  CHECK(underneath.looked_up.empty());
}

TEST_CASE("an executor's long failure text is cut between characters") {
  Executor executor("/waive");
  Live<operations::PolicyConfig> policy(declaring(executor.url));
  testing::FakeProvider underneath;
  auto executors = adapters::make_declared_executors(underneath, policy, 5'000);
  std::string text;
  for (int i = 0; i < 170; ++i) text += "\xe6\x97\xa5";  // 日: 510 bytes
  executor.answer(200, R"({"id":"x1","status":"failed","detail":")" + text + "\"}");
  auto failed = executors->execute(waive_fee());
  CHECK(failed.verdict == operations::Verdict::refused);
  CHECK(failed.error == text.substr(0, 498));
  executor.answer(200, R"({"id":"x1","status":")" + text + "\"}");
  auto odd = executors->execute(waive_fee());
  CHECK(odd.verdict == operations::Verdict::indeterminate);
  CHECK(odd.error == "the executor answered status '" + text.substr(0, 63) + "'");
}

TEST_CASE("an operation sent already is asked for, and sent again, where it was first sent") {
  Executor first("/waive"), second("/v2/waive");
  Live<operations::PolicyConfig> policy(declaring(first.url));
  testing::FakeProvider underneath;
  auto executors = adapters::make_declared_executors(underneath, policy, 5'000);
  // A reload moves the declaration to another executor after the operation
  // was sent to the first.
  policy.set(declaring(second.url));
  first.answer(404, kAbsent);
  CHECK(executors->find(waive_fee(first.url)).lookup == operations::Lookup::absent);
  first.answer(200, R"({"status":"succeeded","id":"w_1"})");
  CHECK(executors->execute(waive_fee(first.url)).verdict == operations::Verdict::succeeded);
  CHECK(first.requests() ==
        std::vector<std::string>{"GET /waive/demo-user:ORDER-1:waive_fee:v1", "POST /waive"});
  CHECK(second.requests().empty());
  // One never sent goes where the declaration now says.
  second.answer(200, R"({"status":"succeeded","id":"w_2"})");
  CHECK(executors->execute(waive_fee()).verdict == operations::Verdict::succeeded);
  CHECK(second.requests() == std::vector<std::string>{"POST /v2/waive"});
}

TEST_CASE("a reload's new token is never sent to the executor an operation was sent to before") {
  Executor first("/waive"), second("/v2/waive");
  Live<operations::PolicyConfig> policy(declaring(first.url, "tok-old"));
  testing::FakeProvider underneath;
  auto executors = adapters::make_declared_executors(underneath, policy, 5'000);
  // Sent to the first with the old token; a reload moves the declaration
  // to another executor with another token.
  policy.set(declaring(second.url, "tok-new"));
  auto found = executors->find(waive_fee(first.url, "tok-old"));
  CHECK(found.lookup == operations::Lookup::unreachable);
  CHECK(found.error.find("restore the token it was sent with") != std::string::npos);
  auto again = executors->execute(waive_fee(first.url, "tok-old"));
  CHECK(again.verdict == operations::Verdict::indeterminate);
  CHECK(first.requests().empty());  // neither token went there
  CHECK(second.requests().empty());
  // The old token restored: asked there again.
  policy.set(declaring(second.url, "tok-old"));
  first.answer(200, R"({"status":"succeeded","id":"w_1"})");
  CHECK(executors->find(waive_fee(first.url, "tok-old")).lookup == operations::Lookup::found);
  CHECK(first.requests().size() == 1);
}
