// The inbox's group commit and the webhook handler's answers that depend on
// the store: a store that refuses writes, a full submission queue, copies
// and conflicting reuses of a webhook-id submitted together.
#include "ingress/inbox.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "common/webhook_signature.h"
#include "ingress/webhook_handler.h"
#include "opgate.pb.h"
#include "world.h"

using namespace opgate;
using namespace opgate::testing;
namespace json = boost::json;

namespace {

const std::string kRawKey = "0123456789abcdef0123456789abcdef";

http::Request signed_request(const std::string& id, const std::string& body, int64_t now_s) {
  http::Request r;
  r.method = "POST";
  r.target = "/v1/webhooks/agents";
  r.body = body;
  r.headers = {{"Content-Type", "application/json"},
               {"webhook-id", id},
               {"webhook-timestamp", std::to_string(now_s)},
               {"webhook-signature", webhooks::sign(kRawKey, id, now_s, body)}};
  return r;
}

std::string action_required(const std::string& session) {
  return json::serialize(json::object{{"id", "evt_1"},
                                      {"created_at", 1800000000},
                                      {"object", "event"},
                                      {"type", "agent.session.action_required"},
                                      {"data", json::object{{"id", session}}}});
}

ingress::IngressConfig config() { return {{{"agents", {kRawKey}}}, 300, 100000}; }

std::string error_code(const http::Response& r) {
  return std::string(json::parse(r.body).at("error").at("code").as_string());
}

bool stored(store::Storage& storage, const std::string& id) {
  auto v = storage.reader().event("agents", id);
  return v.ok() && v->has_value();
}

}  // namespace

TEST_CASE("a store that refuses writes: 503 storage_unavailable with Retry-After, nothing kept") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("opgate-unit-ro-" + crypto::random_hex(6));
  ManualClock clock{1'800'000'000'000};
  REQUIRE(store::rocks::RocksStorage::open(dir.string(), {}, clock).ok());  // create, close
  store::rocks::OpenOptions read_only;
  read_only.read_only = true;
  auto opened = store::rocks::RocksStorage::open(dir.string(), read_only, clock);
  REQUIRE(opened.ok());
  Metrics metrics;
  {
    auto opened_inbox = ingress::Inbox::open(**opened, clock);
    REQUIRE(opened_inbox.ok());
    auto& inbox = **opened_inbox;
    ingress::WebhookHandler handler(config(), inbox, clock, metrics);
    auto res = handler.handle(signed_request("msg_ro", action_required("sess_1"), clock.now_s()),
                              "agents");
    CHECK(res.status == 503);
    CHECK(error_code(res) == "storage_unavailable");
    CHECK(res.headers.count("Retry-After") == 1);
    CHECK(res.body.find(kRawKey) == std::string::npos);
    CHECK(inbox.backlog() == 0);
    CHECK(inbox.group_commits() == 0);
  }
  CHECK(metrics.counter_value("opgate_webhooks_rejected_total",
                              {{"source", "agents"}, {"reason", "storage_unavailable"}}) == 1);
  opened->reset();
  auto writable = store::rocks::RocksStorage::open(dir.string(), {}, clock);
  REQUIRE(writable.ok());
  CHECK_FALSE(stored(**writable, "msg_ro"));
  writable->reset();
  std::filesystem::remove_all(dir);
}

TEST_CASE("past the bound on waiting submissions the answer is 503 overloaded at once") {
  World w;
  auto full = ingress::Inbox::open(*w.storage, w.clock, ingress::InboxOptions{.max_pending = 0});
  REQUIRE(full.ok());
  ingress::WebhookHandler handler(config(), **full, w.clock, w.metrics);
  auto res = handler.handle(signed_request("msg_full", action_required("sess_1"), w.clock.now_s()),
                            "agents");
  CHECK(res.status == 503);
  CHECK(error_code(res) == "overloaded");
  CHECK(res.headers.count("Retry-After") == 1);
  CHECK_FALSE(stored(*w.storage, "msg_full"));
}

TEST_CASE("copies submitted together: one stored per id, copies are duplicates, other bodies 409") {
  World w;
  const ingress::Envelope envelope{"evt", std::string(ingress::kActionRequired), "sess_1"};
  std::vector<std::future<Result<ingress::Accepted>>> results;
  std::vector<std::string> expected;  // "new", "dup" or "conflict" per submission
  std::map<std::string, int> seen;
  for (int round = 0; round < 4; ++round)
    for (int i = 0; i < 10; ++i) {
      const std::string id = "msg_" + std::to_string(i);
      // msg_9's later copies carry another body.
      const std::string body = (i == 9 && round > 0) ? "{\"other\":1}" : "{\"n\":" + id + "}";
      auto promise = std::make_shared<std::promise<Result<ingress::Accepted>>>();
      results.push_back(promise->get_future());
      w.inbox->submit({"agents", id, body, envelope},
                      [promise](Result<ingress::Accepted> r) { promise->set_value(std::move(r)); });
      expected.push_back(seen[id]++ == 0 ? "new" : (i == 9 ? "conflict" : "dup"));
    }
  for (size_t i = 0; i < results.size(); ++i) {
    auto r = results[i].get();
    CAPTURE(i);
    if (expected[i] == "conflict") {
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == "conflict");
    } else {
      REQUIRE(r.ok());
      CHECK(r->duplicate == (expected[i] == "dup"));
    }
  }
  CHECK(w.inbox->committed_events() == 10);
  CHECK(w.inbox->group_commits() >= 1);
  CHECK(w.inbox->group_commits() <= 10);
  CHECK(w.inbox->backlog() == 10);
  CHECK(*w.storage->reader().queued_count() == 10);
}

TEST_CASE("an event with no work for the worker is stored processed and never queued") {
  World w;
  REQUIRE(w.inbox->accept("agents", "msg_done", "{}", {"evt_1", "response.completed", ""}).ok());
  REQUIRE(
      w.inbox
          ->accept("agents", "msg_work", "{}", {"evt_2", "agent.session.action_required", "sess_1"})
          .ok());
  CHECK(w.inbox->backlog() == 1);
  auto done = w.storage->reader().event("agents", "msg_done");
  REQUIRE(done.ok());
  REQUIRE(done->has_value());
  CHECK((*done)->processed());
  auto work = w.storage->reader().event("agents", "msg_work");
  REQUIRE(work.ok());
  REQUIRE(work->has_value());
  CHECK_FALSE((*work)->processed());
}

TEST_CASE(
    "answer_with: each batch's answers run where the runner sends them, not on the committer") {
  World w;
  Mutex mu;
  std::set<std::thread::id> committers;  // threads that handed answers over
  std::set<std::thread::id> runners;     // threads the runner started for them
  std::vector<std::thread> started;
  w.inbox->answer_with([&](std::function<void()> answers) {
    MutexLock lock(mu);
    committers.insert(std::this_thread::get_id());
    started.emplace_back(std::move(answers));
    runners.insert(started.back().get_id());
  });
  const ingress::Envelope envelope{"evt", std::string(ingress::kActionRequired), "sess_1"};
  struct Answer {
    std::promise<Result<ingress::Accepted>> result;
    std::thread::id thread;
  };
  std::vector<std::unique_ptr<Answer>> answers;
  for (const char* id : {"msg_a", "msg_b", "msg_a"}) {
    answers.push_back(std::make_unique<Answer>());
    w.inbox->submit({"agents", id, "{}", envelope}, [a = answers.back().get()](auto r) {
      a->thread = std::this_thread::get_id();
      a->result.set_value(std::move(r));
    });
  }
  std::vector<Result<ingress::Accepted>> results;
  for (auto& a : answers) results.push_back(a->result.get_future().get());
  w.inbox->stop();
  {
    MutexLock lock(mu);
    for (auto& t : started) t.join();
    REQUIRE_FALSE(committers.empty());
    for (const auto& a : answers) {
      CHECK(runners.count(a->thread) == 1);
      CHECK(committers.count(a->thread) == 0);
    }
  }
  REQUIRE(results[0].ok());
  CHECK_FALSE(results[0]->duplicate);
  REQUIRE(results[1].ok());
  CHECK_FALSE(results[1]->duplicate);
  REQUIRE(results[2].ok());
  CHECK(results[2]->duplicate);
  CHECK(stored(*w.storage, "msg_a"));
  CHECK(stored(*w.storage, "msg_b"));
}
