// Tool-result delivery verdicts, with a scripted Agents API and an injected
// clock over a real store.
#include <doctest/doctest.h>

#include <filesystem>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/metrics.h"
#include "outbox/drainer.h"
#include "store_world.h"
#include "worker/tools.h"

using namespace opgate;

namespace {

class NoProvider final : public adapters::PaymentProvider {
 public:
  adapters::PaymentResult execute(const adapters::PaymentRequest&) override { return {}; }
  adapters::LookupResult find(const adapters::PaymentRequest&) override { return {}; }
};

struct World : testing::StoreWorld {
  NoProvider provider;
  outbox::Drainer drainer{*journal, *outbox, provider, agents, metrics, [] { return 0.0; }};

  World() {
    REQUIRE(journal
                ->run([&](store::Txn& txn) {
                  pb::ToolCall call;
                  call.set_session_id("sess_1");
                  call.set_turn_id("turn_1");
                  call.set_call_id("call_1");
                  outbox->stage_result(txn, call, worker::failure_result("No such order."));
                  return Status::Ok();
                })
                .ok());
  }

  std::string delivery() {
    auto c = store->get_message<pb::ToolCall>(store::Cf::calls,
                                              outbox::call_key("sess_1", "turn_1", "call_1"));
    return (*c)->delivery();
  }
};

}  // namespace

TEST_CASE("a call the session no longer waits for is recorded as stale, not retried") {
  World w;
  w.agents.verdict = adapters::SubmitVerdict::unknown_call;
  CHECK(w.drainer.run_once() == 1);
  CHECK(w.delivery() == "stale");
  CHECK(w.outbox->due(w.clock.now_ms() + 3'600'000, 10)->empty());
}

TEST_CASE("a conflicting result is flagged, never overwritten or retried") {
  World w;
  w.agents.verdict = adapters::SubmitVerdict::conflict;
  w.drainer.run_once();
  CHECK(w.delivery() == "conflict");
  CHECK(w.outbox->due(w.clock.now_ms() + 3'600'000, 10)->empty());
  CHECK(w.agents.idempotency_keys.size() == 1);
}

TEST_CASE("a retryable failure waits for Retry-After and resends under the same key") {
  World w;
  Error busy = make_error("agents_unavailable", "agents API answered 429");
  busy.retry_after_ms = 7000;
  w.agents.verdict = busy;
  w.drainer.run_once();
  CHECK(w.delivery() == "pending");
  CHECK(w.outbox->due(w.clock.now_ms() + 6999, 10)->empty());
  REQUIRE(w.outbox->due(w.clock.now_ms() + 7000, 10)->size() == 1);
  w.clock.advance_ms(7000);
  w.agents.verdict = adapters::SubmitVerdict::accepted;
  w.drainer.run_once();
  CHECK(w.delivery() == "delivered");
  REQUIRE(w.agents.idempotency_keys.size() == 2);
  CHECK(w.agents.idempotency_keys[0] == w.agents.idempotency_keys[1]);
}

TEST_CASE("an outcome_unknown operation needs attention after enough attempts or time") {
  outbox::AttentionPolicy policy{3, 60'000};
  pb::Operation op;
  op.set_state("outcome_unknown");
  op.set_unknown_since_ms(1'000'000);
  op.set_attempts(2);
  CHECK_FALSE(outbox::needs_attention(op, 1'000'000 + 59'999, policy));
  CHECK(outbox::needs_attention(op, 1'000'000 + 60'000, policy));
  op.set_attempts(3);
  CHECK(outbox::needs_attention(op, 1'000'000, policy));
  op.set_state("settled");
  CHECK_FALSE(outbox::needs_attention(op, 1'000'000 + 600'000, policy));
}
