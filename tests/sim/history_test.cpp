// The benchmark's history (opgate-sim history) is what the daemon would
// have left: settled refunds with their ledger rows and a verifying audit
// chain, a few operations in outcome_unknown, and nothing left to deliver.
#include "sim/history.h"

#include <doctest/doctest.h>

#include "operations/audit.h"
#include "store/rocksdb/rocks_storage.h"
#include "tests/unit/world.h"

using namespace opgate;

TEST_CASE("the benchmark's history is settled refunds the daemon would have left") {
  testing::World w;
  sim::HistoryOptions options;
  options.settled = 23;
  options.outcome_unknown = 2;
  options.per_transaction = 10;  // several transactions, the last one short
  size_t reported = 0;
  REQUIRE(sim::fill_history(*w.storage, w.clock, options, [&](size_t n) { reported = n; }).ok());
  CHECK(reported == 25);

  auto& reader = w.storage->reader();
  auto counts = reader.counts();
  REQUIRE(counts.ok());
  CHECK(counts->operations[pb::STATE_SETTLED] == 23);
  CHECK(counts->operations[pb::STATE_OUTCOME_UNKNOWN] == 2);
  CHECK(counts->settled[pb::OUTCOME_SUCCEEDED] == 23);
  auto ledger = reader.ledger({});
  REQUIRE(ledger.ok());
  CHECK(ledger->size() == 23);
  auto op = reader.operation("owner-7:H7:full-refund:v1");
  REQUIRE(op.ok());
  REQUIRE(op->has_value());
  CHECK((*op)->provider_object_id() == "re_hist_7");
  CHECK((*op)->calls_size() == 1);
  auto audit = operations::verify_audit(*w.storage);
  REQUIRE(audit.ok());
  CHECK(audit->chain.ok);
  CHECK(audit->chain.records == 25 * 4);  // propose, approve, claim, the provider's answer
  CHECK(audit->operations_checked == 25);
  for (auto queue : {store::Queue::work, store::Queue::notifications}) {
    auto due = reader.due(queue, INT64_MAX, 10, {});
    REQUIRE(due.ok());
    CHECK(due->empty());
  }
}
