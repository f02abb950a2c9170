#include "store/journal.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "common/clock.h"
#include "common/crypto.h"
#include "operations/repository.h"

using namespace opgate;

namespace {
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("opgate-test-" + crypto::random_hex(8));
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

pb::Operation new_op(const std::string& key) {
  pb::Operation op;
  op.set_key(key);
  op.mutable_proposal()->set_amount_minor(2500);
  op.mutable_proposal()->set_currency("USD");
  op.set_fingerprint("fp");
  return op;
}

// Stores a new pending operation through the journal, as the worker would.
void propose(store::Journal& journal, const std::string& key) {
  REQUIRE(journal
              .run([&](store::Txn& txn) {
                auto op = new_op(key);
                operations::create(txn, op, "system", "{}");
                return Status::Ok();
              })
              .ok());
}
}  // namespace

TEST_CASE("transitions write the record, the state index and a chained audit record") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto store = store::Store::open(dir.path.string(), {});
  REQUIRE(store.ok());
  auto journal = store::Journal::open(**store, clock);
  REQUIRE(journal.ok());
  propose(**journal, "u:O1:full-refund:v1");
  REQUIRE((*journal)
              ->run([&](store::Txn& txn) -> Status {
                auto op = operations::load(txn.store(), "u:O1:full-refund:v1");
                return operations::apply(txn, **op, operations::Event::approve, "alice", "{}");
              })
              .ok());
  auto pending = operations::keys_in_state(**store, operations::State::pending, 10);
  auto approved = operations::keys_in_state(**store, operations::State::approved, 10);
  CHECK(pending->empty());
  REQUIRE(approved->size() == 1);
  auto v = store::verify_audit(**store);
  REQUIRE(v.ok());
  CHECK(v->ok);
  CHECK(v->records == 2);
}

TEST_CASE("a refused transition stages nothing and writes nothing") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto store = store::Store::open(dir.path.string(), {});
  auto journal = store::Journal::open(**store, clock);
  propose(**journal, "u:O1:full-refund:v1");
  const auto writes = (*store)->synced_writes();
  auto s = (*journal)->run([&](store::Txn& txn) -> Status {
    auto op = operations::load(txn.store(), "u:O1:full-refund:v1");
    return operations::apply(txn, **op, operations::Event::claim, "system", "{}");
  });
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == "invalid_transition");
  CHECK((*store)->synced_writes() == writes);
  CHECK((*operations::load(**store, "u:O1:full-refund:v1"))->state() == "pending");
}

TEST_CASE("altering one stored audit record is named by verification, also after reopening") {
  TempDir dir;
  ManualClock clock(1'000'000);
  {
    auto store = store::Store::open(dir.path.string(), {});
    auto journal = store::Journal::open(**store, clock);
    for (int i = 0; i < 5; ++i) propose(**journal, "u:O" + std::to_string(i) + ":full-refund:v1");
  }
  {
    // The chain continues across a restart.
    auto store = store::Store::open(dir.path.string(), {});
    auto journal = store::Journal::open(**store, clock);
    propose(**journal, "u:O9:full-refund:v1");
    auto v = store::verify_audit(**store);
    CHECK(v->ok);
    CHECK(v->records == 6);
    // Tamper with record 3: change the principal, keep the stored hash.
    auto raw = (*store)->get_message<pb::AuditRecord>(store::Cf::audit, store::audit_key(3));
    auto rec = **raw;
    rec.set_principal("mallory");
    store::Batch b;
    b.put(store::Cf::audit, store::audit_key(3), rec);
    REQUIRE((*store)->commit(b).ok());
  }
  store::OpenOptions ro;
  ro.read_only = true;
  auto store = store::Store::open(dir.path.string(), ro);
  REQUIRE(store.ok());
  auto v = store::verify_audit(**store);
  REQUIRE(v.ok());
  CHECK_FALSE(v->ok);
  CHECK(v->first_bad_seq == 3);
  CHECK(v->problem.find("record 3") != std::string::npos);
}

TEST_CASE("a data directory readable by others is refused") {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  std::filesystem::permissions(
      dir.path, std::filesystem::perms::owner_all | std::filesystem::perms::others_read);
  auto store = store::Store::open(dir.path.string(), {});
  REQUIRE_FALSE(store.ok());
  CHECK(store.error().code == "data_dir_permissions");
}
