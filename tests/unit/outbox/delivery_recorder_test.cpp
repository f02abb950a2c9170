// Recording delivered tool results: fenced like every outbox write, and
// many deliveries in one transaction when they end while a record commits.
// Real RocksDB store; the storage is wrapped only to hold a commit open and
// to fail one on purpose.
#include "outbox/delivery_recorder.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "becomes_true.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "delegating_storage.h"
#include "store/rocksdb/rocks_storage.h"

using namespace opgate;

namespace {

struct TempDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("opgate-test-" + crypto::random_hex(8));
  ~TempDir() { std::filesystem::remove_all(path); }
};

pb::CallRef call_ref(int n) {
  pb::CallRef ref;
  ref.set_session_id("sess_1");
  ref.set_turn_id("turn_1");
  ref.set_call_id("call_" + std::to_string(n));
  return ref;
}

outbox::Delivered delivered(const store::OutboxEntry& entry) {
  return {entry, pb::DELIVERY_DELIVERED, ""};
}

// The real store, with a gate that holds transactions at their start and
// failures to hand out, both counted.
class GatedStorage final : public testing::DelegatingStorage {
 public:
  using DelegatingStorage::DelegatingStorage;

  Status transact(const std::function<Status(store::Transaction&)>& fn) override {
    {
      std::unique_lock lock(mu);
      const int n = ++started;
      cv.notify_all();
      cv.wait(lock, [&] { return !held; });
      for (int f : fail_at)
        if (f == n) return make_error(errc::storage_unavailable, "the store is away");
    }
    return inner_.transact(fn);
  }
  void hold() {
    std::lock_guard lock(mu);
    held = true;
  }
  void release() {
    std::lock_guard lock(mu);
    held = false;
    cv.notify_all();
  }
  int transactions_started() {
    std::lock_guard lock(mu);
    return started;
  }
  void wait_started(int n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return started >= n; });
  }

  std::mutex mu;
  std::condition_variable cv;
  bool held = false;
  int started = 0;
  std::vector<int> fail_at;  // transactions (counted from 1) that fail
};

struct Stage {
  TempDir dir;
  ManualClock clock{1'000'000};
  std::unique_ptr<store::rocks::RocksStorage> storage;

  Stage() {
    auto s = store::rocks::RocksStorage::open(dir.path.string(), {}, clock);
    REQUIRE_MESSAGE(s.ok(), s.error().message);
    storage = std::move(*s);
  }

  // `n` calls waiting for their results' delivery, each with its item.
  std::vector<store::OutboxEntry> waiting_calls(int n) {
    Status s = storage->transact([&](store::Transaction& txn) -> Status {
      for (int i = 0; i < n; ++i) {
        pb::ToolCall call;
        call.set_session_id("sess_1");
        call.set_turn_id("turn_1");
        call.set_call_id(call_ref(i).call_id());
        call.set_delivery(pb::DELIVERY_PENDING);
        txn.put_call(call);
        pb::OutboxItem item;
        item.set_kind(pb::OUTBOX_DELIVER_RESULT);
        *item.mutable_call() = call_ref(i);
        txn.enqueue(item);
      }
      return Status::Ok();
    });
    REQUIRE(s.ok());
    auto due = storage->reader().due(store::Queue::work, clock.now_ms(), 1000, {});
    REQUIRE(due.ok());
    REQUIRE(due->size() == static_cast<size_t>(n));
    return *due;
  }

  pb::Delivery delivery_of(int n) {
    auto call = storage->reader().call(call_ref(n));
    REQUIRE(call.ok());
    REQUIRE(call->has_value());
    return (*call)->delivery();
  }

  size_t items_left() {
    auto due = storage->reader().due(store::Queue::work, clock.now_ms() + 1'000'000, 1000, {});
    REQUIRE(due.ok());
    return due->size();
  }
};

// `n` calls waiting for their delivery, recorded through the gate.
struct Recording {
  Stage stage;
  std::vector<store::OutboxEntry> items;
  GatedStorage gated;
  outbox::DeliveryRecorder recorder;
  explicit Recording(int n)
      : items(stage.waiting_calls(n)), gated(*stage.storage), recorder(gated) {}
};

// Records every item's delivery, each from a thread of its own: the first
// while its transaction is held open at its start, the others meanwhile
// (they wait for it, none starts a transaction); then lets it go. Returns
// each record's status, the first first.
std::vector<Status> record_behind_held_commit(GatedStorage& gated,
                                              outbox::DeliveryRecorder& recorder,
                                              const std::vector<store::OutboxEntry>& items) {
  gated.hold();
  std::vector<std::future<Status>> records;
  auto record = [&](size_t i) {
    records.push_back(
        std::async(std::launch::async, [&, i] { return recorder.record(delivered(items[i])); }));
  };
  record(0);
  gated.wait_started(1);
  for (size_t i = 1; i < items.size(); ++i) record(i);
  CHECK(testing::becomes_true([&] { return recorder.waiting() >= items.size() - 1; },
                              std::chrono::seconds(10)));  // released below either way
  CHECK(gated.transactions_started() == 1);
  gated.release();
  std::vector<Status> out;
  for (auto& r : records) out.push_back(r.get());
  return out;
}

}  // namespace

TEST_CASE("deliveries recorded together: each on its call, each item removed, fenced") {
  Stage stage;
  auto items = stage.waiting_calls(3);
  // Another process took the second item over (its lease token changed).
  store::OutboxEntry taken = items[1];
  taken.item.set_lease_token("another-process");
  REQUIRE(stage.storage->transact([&](store::Transaction& txn) {
    txn.update_outbox(taken);
    return Status::Ok();
  }));

  std::vector<outbox::Delivered> batch{
      {items[2], pb::DELIVERY_STALE, "the session no longer waits for this call"},
      {items[0], pb::DELIVERY_DELIVERED, ""},
      {items[1], pb::DELIVERY_DELIVERED, ""},
  };
  REQUIRE(outbox::record_deliveries(*stage.storage, {&batch[0], &batch[1], &batch[2]}));

  CHECK(stage.delivery_of(0) == pb::DELIVERY_DELIVERED);
  CHECK(stage.delivery_of(2) == pb::DELIVERY_STALE);
  auto stale = stage.storage->reader().call(call_ref(2));
  CHECK((*stale)->delivery_error() == "the session no longer waits for this call");
  CHECK((*stale)->delivered_at_ms() == stage.clock.now_ms());
  // The item taken over, and its call, are left to the process that has it.
  CHECK(stage.delivery_of(1) == pb::DELIVERY_PENDING);
  auto left = stage.storage->reader().outbox_item(items[1].id);
  REQUIRE(left.ok());
  REQUIRE(left->has_value());
  CHECK((*left)->lease_token() == "another-process");
  CHECK(stage.items_left() == 1);
}

TEST_CASE("deliveries that end while a record commits are recorded in the next transaction") {
  Recording r(5);
  auto& [stage, items, gated, recorder] = r;
  for (const Status& s : record_behind_held_commit(gated, recorder, items)) CHECK(s.ok());
  // One transaction for the first, one for the four.
  CHECK(gated.transactions_started() == 2);
  CHECK(recorder.transactions() == 2);
  CHECK(recorder.recorded() == 5);
  for (int i = 0; i < 5; ++i) CHECK(stage.delivery_of(i) == pb::DELIVERY_DELIVERED);
  CHECK(stage.items_left() == 0);
}

TEST_CASE("a batch that cannot commit is recorded one by one: one failure is no other's") {
  Recording r(4);
  auto& [stage, items, gated, recorder] = r;
  // The first transaction (the first delivery alone) holds; the second (the
  // other three together) fails, and so does the third (the first of them
  // alone); the last two commit.
  gated.fail_at = {2, 3};
  auto records = record_behind_held_commit(gated, recorder, items);
  CHECK(records[0].ok());
  CHECK(std::count_if(records.begin(), records.end(), [](const Status& s) { return !s.ok(); }) ==
        1);
  CHECK(gated.transactions_started() == 5);
  CHECK(recorder.transactions() == 5);
  CHECK(recorder.recorded() == 3);
  int delivered = 0;
  for (int i = 0; i < 4; ++i)
    if (stage.delivery_of(i) == pb::DELIVERY_DELIVERED) ++delivered;
  CHECK(delivered == 3);
  // The one not recorded keeps its item: it is delivered again later.
  CHECK(stage.items_left() == 1);
}
