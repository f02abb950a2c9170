// The MCP front door's group commit: calls queued while a transaction syncs
// go into the next one together, each is answered only once durable, the
// same refund asked for by many calls at once is one operation, and the
// queue's bound and stop() refuse plainly and store nothing.
#include "mcp/call_committer.h"

#include <doctest/doctest.h>

#include <future>
#include <mutex>
#include <set>
#include <vector>

#include "fault_fs.h"
#include "mcp/protocol.h"
#include "operations/agent_tokens.h"
#include "operations/decisions.h"
#include "operations/proposals.h"
#include "operations/tool_calls.h"
#include "world.h"

namespace opgate {
namespace {

operations::AgentCall agent_call(const std::string& call_id, const std::string& tool,
                                 const std::string& order_id) {
  operations::AgentCall c;
  c.ref.set_session_id("mcp:agent-1");
  c.ref.set_turn_id("call");
  c.ref.set_call_id(call_id);
  c.name = tool;
  c.arguments_json = R"({"order_id":")" + order_id +
                     (tool == "request_refund" ? R"(","reason":"late"})" : R"("})");
  c.owner = "demo-user";
  c.principal = "agent:agent-1";
  c.mcp = true;
  return c;
}

// What the committer answered, by call id. Thread-safe.
struct Answers {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Result<mcp::CallAnswer>> by_call;
  mcp::CallAnswered to(const std::string& call_id) {
    return [this, call_id](Result<mcp::CallAnswer> a) {
      std::lock_guard lock(mu);
      by_call.emplace(call_id, std::move(a));
      cv.notify_all();
    };
  }
  void wait_for(size_t n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return by_call.size() >= n; });
  }
  size_t size() {
    std::lock_guard lock(mu);
    return by_call.size();
  }
};

std::shared_ptr<const operations::PolicyConfig> default_policy() {
  return std::make_shared<const operations::PolicyConfig>();
}

}  // namespace

TEST_CASE(
    "calls queued while a transaction syncs are stored together, each answered once durable") {
  auto control = std::make_shared<testing::SyncControl>();
  auto o = testing::with_faults(control);
  testing::World w(o);
  w.seed_order("ORDER-100");
  mcp::CallCommitterOptions options;
  options.committers = 1;
  mcp::CallCommitter committer(*w.storage, options);
  Answers answers;

  control->set_hold(true);
  committer.submit(agent_call("c0", "lookup_order", "ORDER-100"), default_policy(), std::nullopt,
                   answers.to("c0"));
  control->wait_until_held();
  for (int i = 1; i <= 10; ++i) {
    const std::string id = "c" + std::to_string(i);
    committer.submit(agent_call(id, "lookup_order", "ORDER-100"), default_policy(), std::nullopt,
                     answers.to(id));
  }
  // Nothing is answered while its transaction is on its way to the disk.
  CHECK(answers.size() == 0);
  CHECK_FALSE(w.call("mcp:agent-1", "call", "c0").has_value());
  control->set_hold(false);
  answers.wait_for(11);
  CHECK(committer.calls() == 11);
  CHECK(committer.batches() == 2);  // the ten queued behind the first went in one
  for (int i = 0; i <= 10; ++i) {
    const std::string id = "c" + std::to_string(i);
    const auto& a = answers.by_call.at(id);
    REQUIRE(a.ok());
    CHECK(a->answered.outcome == "ok");
    auto stored = w.call("mcp:agent-1", "call", id);
    REQUIRE(stored.has_value());
    CHECK(stored->result_saved());
    CHECK(stored->result().SerializeAsString() == a->answered.call.result().SerializeAsString());
  }
}

TEST_CASE("text cut to fit the store is cut between characters, so the stored call reads back") {
  testing::World w;
  w.seed_order("ORDER-100");
  mcp::CallCommitter committer(*w.storage, {});
  Answers answers;
  // An unknown argument whose name has an 'é' across the 64th byte, which
  // the refusal quotes; arguments past the limit whose last byte kept falls
  // inside an 'é' (refused, and kept cut as far as the limit);
  // a tool name with one across the 128th.
  auto unknown = agent_call("long-name", "lookup_order", "ORDER-100");
  unknown.arguments_json = R"({"order_id":"ORDER-100",")" + std::string(63, 'a') + "\u00e9\":1}";
  auto large = agent_call("large", "lookup_order", "ORDER-100");
  large.arguments_json = R"({"order_id":"ORDER-100","x":")";
  large.arguments_json +=
      std::string(operations::kMaxArgumentBytes - 1 - large.arguments_json.size(), 'b') +
      "\u00e9\"}";
  auto named = agent_call("tool-name", std::string(127, 't') + "\u00e9", "ORDER-100");
  for (auto* c : {&unknown, &large, &named})
    committer.submit(*c, default_policy(), std::nullopt, answers.to(c->ref.call_id()));
  answers.wait_for(3);
  for (const char* id : {"long-name", "large", "tool-name"}) {
    CAPTURE(id);
    REQUIRE(answers.by_call.at(id).ok());
    auto stored = w.call("mcp:agent-1", "call", id);  // a read that fails is a failed REQUIRE
    REQUIRE(stored.has_value());
    CHECK(stored->result_saved());
    CHECK_FALSE(stored->result().success());
  }
  CHECK(w.call("mcp:agent-1", "call", "long-name")->result().error().find(std::string(63, 'a')) !=
        std::string::npos);
  CHECK(w.call("mcp:agent-1", "call", "large")->arguments_json().size() ==
        operations::kMaxArgumentBytes - 1);
  CHECK(w.call("mcp:agent-1", "call", "tool-name")->name() == std::string(127, 't'));
}

TEST_CASE("many calls for one refund at once: one operation, every call linked to it") {
  testing::World w;
  w.seed_order("ORDER-100");
  mcp::CallCommitter committer(*w.storage);
  Answers answers;
  constexpr int kCalls = 64;
  std::vector<std::future<void>> submitters;
  for (int t = 0; t < 4; ++t)
    submitters.push_back(std::async(std::launch::async, [&, t] {
      for (int i = t; i < kCalls; i += 4) {
        const std::string id = "r" + std::to_string(i);
        committer.submit(agent_call(id, "request_refund", "ORDER-100"), default_policy(),
                         std::nullopt, answers.to(id));
      }
    }));
  for (auto& s : submitters) s.get();
  answers.wait_for(kCalls);
  std::set<std::string> keys;
  for (const auto& [id, a] : answers.by_call) {
    REQUIRE(a.ok());
    CHECK(a->answered.outcome == "proposal");
    REQUIRE(a->operation.has_value());
    keys.insert(a->operation->key());
    CHECK(w.call("mcp:agent-1", "call", id)->operation_key() == a->operation->key());
  }
  CHECK(keys.size() == 1);
  auto pending = w.storage->reader().operations({pb::STATE_PENDING, "", 100, {}});
  REQUIRE(pending.ok());
  CHECK(pending->operations.size() == 1);
  CHECK(committer.calls() == kCalls);
}

TEST_CASE("an operation keeps a bounded number of linked calls; past it a call is told to read") {
  testing::World w;
  w.seed_order("ORDER-100");
  mcp::CallCommitter committer(*w.storage);
  Answers answers;
  const int calls = operations::kMaxLinkedCalls + 5;
  for (int i = 0; i < calls; ++i) {
    const std::string id = "r" + std::to_string(i);
    committer.submit(agent_call(id, "request_refund", "ORDER-100"), default_policy(), std::nullopt,
                     answers.to(id));
  }
  answers.wait_for(calls);
  int linked = 0, told = 0;
  for (const auto& [id, a] : answers.by_call) {
    REQUIRE(a.ok());
    if (!a->answered.call.operation_key().empty()) {
      ++linked;
    } else {
      ++told;
      CHECK(a->answered.call.result().error().find("get_operation") != std::string::npos);
    }
  }
  CHECK(linked == operations::kMaxLinkedCalls);
  CHECK(told == 5);
  auto pending = w.storage->reader().operations({pb::STATE_PENDING, "", 10, {}});
  REQUIRE(pending.ok());
  REQUIRE(pending->operations.size() == 1);
  CHECK(pending->operations[0].calls_size() == operations::kMaxLinkedCalls);
  // Denied, it answers a call past the bound with its outcome: linked to
  // it, though not kept on it, so that the answer is an error.
  const std::string key = pending->operations[0].key();
  operations::Principal alice;
  alice.name = "alice";
  alice.scopes = {"operations:approve"};
  alice.owners = {"*"};
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                return operations::deny(txn, key, alice, "not this one");
              })
              .ok());
  committer.submit(agent_call("late", "request_refund", "ORDER-100"), default_policy(),
                   std::nullopt, answers.to("late"));
  answers.wait_for(calls + 1);
  const auto& late = answers.by_call.at("late");
  REQUIRE(late.ok());
  CHECK(late->answered.call.operation_key() == key);
  CHECK(late->answered.call.result().output().find("denied") != std::string::npos);
  CHECK(mcp::call_tool_result(late->answered.call.result(),
                              !late->answered.call.operation_key().empty())
            .at("isError") == true);
  CHECK(w.operation(key).calls_size() == operations::kMaxLinkedCalls);
}

TEST_CASE("a call whose agent token was revoked before it is stored makes nothing") {
  testing::World w;
  w.seed_order("ORDER-100");
  std::optional<operations::MintedToken> minted;
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                OPGATE_ASSIGN_OR_RETURN(minted, operations::mint_agent_token(
                                                    txn, "demo-user", "test agent", 0, "admin"));
                return Status::Ok();
              })
              .ok());
  auto call = [&](const std::string& id) {
    auto c = agent_call(id, "request_refund", "ORDER-100");
    c.agent_token_sha256 = minted->record.token_sha256();
    return c;
  };
  mcp::CallCommitter committer(*w.storage);
  Answers answers;
  committer.submit(call("before"), default_policy(), std::nullopt, answers.to("before"));
  answers.wait_for(1);
  REQUIRE(answers.by_call.at("before").ok());
  // Authenticated at the front door, then revoked while the call waited.
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                OPGATE_TRY(operations::revoke_agent_token(txn, minted->record.id(), "admin"));
                return Status::Ok();
              })
              .ok());
  committer.submit(call("raced"), default_policy(), std::nullopt, answers.to("raced"));
  answers.wait_for(2);
  REQUIRE_FALSE(answers.by_call.at("raced").ok());
  CHECK(answers.by_call.at("raced").error().is(errc::unauthorized));
  CHECK(w.call("mcp:agent-1", "call", "before").has_value());
  CHECK_FALSE(w.call("mcp:agent-1", "call", "raced").has_value());
  auto pending = w.storage->reader().operations({pb::STATE_PENDING, "", 10, {}});
  REQUIRE(pending.ok());
  REQUIRE(pending->operations.size() == 1);
  CHECK(pending->operations[0].calls_size() == 1);  // the raced call linked nothing
}

TEST_CASE("a full queue and a stopped committer refuse at once and store nothing") {
  testing::World w;
  w.seed_order("ORDER-100");
  Answers answers;
  {
    mcp::CallCommitterOptions options;
    options.max_pending = 0;
    mcp::CallCommitter full(*w.storage, options);
    full.submit(agent_call("over", "request_refund", "ORDER-100"), default_policy(), std::nullopt,
                answers.to("over"));
  }
  {
    mcp::CallCommitter stopped(*w.storage);
    stopped.stop();
    stopped.submit(agent_call("late", "request_refund", "ORDER-100"), default_policy(),
                   std::nullopt, answers.to("late"));
  }
  REQUIRE(answers.size() == 2);
  CHECK(answers.by_call.at("over").error().is(errc::overloaded));
  CHECK(answers.by_call.at("late").error().is(errc::shutting_down));
  CHECK_FALSE(w.call("mcp:agent-1", "call", "over").has_value());
  CHECK_FALSE(w.call("mcp:agent-1", "call", "late").has_value());
  CHECK(w.storage->reader().operations({pb::STATE_PENDING, "", 10, {}})->operations.empty());
}

TEST_CASE("stop answers every call submitted before it, stored") {
  auto control = std::make_shared<testing::SyncControl>();
  auto o = testing::with_faults(control);
  testing::World w(o);
  w.seed_order("ORDER-100");
  Answers answers;
  mcp::CallCommitterOptions options;
  options.committers = 1;
  mcp::CallCommitter committer(*w.storage, options);
  control->set_hold(true);
  committer.submit(agent_call("first", "lookup_order", "ORDER-100"), default_policy(), std::nullopt,
                   answers.to("first"));
  control->wait_until_held();
  committer.submit(agent_call("queued", "lookup_order", "ORDER-100"), default_policy(),
                   std::nullopt, answers.to("queued"));
  auto stopping = std::async(std::launch::async, [&] { committer.stop(); });
  control->set_hold(false);
  stopping.get();
  REQUIRE(answers.size() == 2);
  CHECK(answers.by_call.at("first").ok());
  CHECK(answers.by_call.at("queued").ok());
  CHECK(w.call("mcp:agent-1", "call", "queued")->result_saved());
}

}  // namespace opgate
