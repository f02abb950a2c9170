// Approval expiry with an injected clock, over a real RocksDB store: nothing
// waits for time to pass.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <filesystem>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/metrics.h"
#include "ingress/inbox.h"
#include "operations/repository.h"
#include "outbox/outbox.h"
#include "store_world.h"
#include "worker/session_sync.h"

using namespace opgate;

namespace {

struct World : testing::StoreWorld {
  std::unique_ptr<worker::SessionSync> sync;

  World() {
    worker::PolicyConfig policy;
    policy.approval_ttl_s = 3600;
    sync = std::make_unique<worker::SessionSync>(*journal, *inbox, *outbox, agents, policy, metrics,
                                                 [] { return 0.5; });
  }

  void propose(const std::string& key) {
    REQUIRE(journal
                ->run([&](store::Txn& txn) {
                  pb::ToolCall call;
                  call.set_session_id("sess_1");
                  call.set_turn_id("turn_1");
                  call.set_call_id("call_" + key);
                  call.set_operation_key(key);
                  txn.batch().put(store::Cf::calls,
                                  outbox::call_key("sess_1", "turn_1", call.call_id()), call);
                  pb::Operation op;
                  op.set_key(key);
                  op.set_expires_at_ms(txn.now_ms() + 3600 * 1000);
                  auto* ref = op.add_calls();
                  ref->set_session_id("sess_1");
                  ref->set_turn_id("turn_1");
                  ref->set_call_id(call.call_id());
                  operations::create(txn, op, "system", "{}");
                  return Status::Ok();
                })
                .ok());
  }
  std::string state(const std::string& key) {
    auto op = operations::load(*store, key);
    return (*op)->state() + "/" + (*op)->outcome();
  }
};

}  // namespace

TEST_CASE("a pending operation expires only once its approval TTL has passed") {
  World w;
  w.propose("u:O1:full-refund:v1");
  w.clock.advance_ms(3600 * 1000 - 1);
  CHECK(w.sync->expire_pending() == 0);
  CHECK(w.state("u:O1:full-refund:v1") == "pending/");
  w.clock.advance_ms(1);
  CHECK(w.sync->expire_pending() == 1);
  CHECK(w.state("u:O1:full-refund:v1") == "settled/expired");
  CHECK(w.sync->expire_pending() == 0);
}

TEST_CASE("an expired operation's result is saved for its call and queued for delivery") {
  World w;
  w.propose("u:O1:full-refund:v1");
  w.clock.advance_ms(3600 * 1000);
  REQUIRE(w.sync->expire_pending() == 1);
  auto call = w.store->get_message<pb::ToolCall>(
      store::Cf::calls, outbox::call_key("sess_1", "turn_1", "call_u:O1:full-refund:v1"));
  REQUIRE(call.ok());
  REQUIRE(call->has_value());
  CHECK((*call)->result_saved());
  CHECK((*call)->delivery() == "pending");
  auto output = boost::json::parse((*call)->result().output());
  CHECK(output.at("status").as_string() == "expired");
  auto due = w.outbox->due(w.clock.now_ms(), 10);
  REQUIRE(due->size() == 1);
  CHECK((*due)[0].item.kind() == "deliver_result");
  auto audit = store::verify_audit(*w.store);
  CHECK(audit->ok);
  CHECK(audit->records == 2);  // propose, expire
}
