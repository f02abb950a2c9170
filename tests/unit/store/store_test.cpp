// The RocksDB backend's transactions: read-your-writes, nothing visible
// outside a transaction before it is durable, a failed sync leaving
// nothing behind, the audit chain, and the data directory's guards.
#include <doctest/doctest.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "common/clock.h"
#include "common/crypto.h"
#include "fault_fs.h"
#include "operations/audit.h"
#include "operations/transitions.h"
#include "store/audit_chain.h"
#include "store/rocksdb/keys.h"
#include "store/rocksdb/rocks_storage.h"
#include "store/rocksdb/upgrade.h"

using namespace opgate;
using store::rocks::RocksStorage;

namespace {
struct TempDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("opgate-test-" + crypto::random_hex(8));
  ~TempDir() { std::filesystem::remove_all(path); }
};

pb::Operation new_op(const std::string& key) {
  pb::Operation op;
  op.set_key(key);
  op.mutable_proposal()->set_order_id("O1");
  op.mutable_proposal()->set_amount_minor(2500);
  op.mutable_proposal()->set_currency("USD");
  op.set_fingerprint("fp");
  op.set_expires_at_ms(5'000'000);
  return op;
}

Status propose(store::Storage& storage, const std::string& key) {
  return storage.transact([&](store::Transaction& txn) {
    auto op = new_op(key);
    return operations::create(txn, op, "system", "{}");
  });
}

std::unique_ptr<RocksStorage> open(const TempDir& dir, const Clock& clock,
                                   store::rocks::OpenOptions o = {}) {
  auto s = RocksStorage::open(dir.path.string(), o, clock);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  return std::move(*s);
}
}  // namespace

TEST_CASE("a transaction reads its own writes, by key and in scans") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto storage = open(dir, clock);
  Status s = storage->transact([&](store::Transaction& txn) -> Status {
    auto a = new_op("u:O1:full-refund:v1");
    OPGATE_TRY(operations::create(txn, a, "system", "{}"));
    auto b = new_op("u:O1:account-credit:v1");
    OPGATE_TRY(operations::create(txn, b, "system", "{}"));
    OPGATE_ASSIGN_OR_RETURN(auto read, txn.operation("u:O1:full-refund:v1"));
    CHECK(read.has_value());
    OPGATE_ASSIGN_OR_RETURN(auto of_order, txn.operations_of_order("O1"));
    CHECK(of_order.size() == 2);
    OPGATE_ASSIGN_OR_RETURN(auto counts, txn.counts());
    CHECK(counts.operations[pb::STATE_PENDING] == 2);
    OPGATE_ASSIGN_OR_RETURN(auto head, txn.audit_head());
    CHECK(head.seq == 2);
    return Status::Ok();
  });
  REQUIRE(s.ok());
  auto page = storage->reader().operations({pb::STATE_PENDING, "", 10, {}});
  REQUIRE(page.ok());
  CHECK(page->operations.size() == 2);
}

TEST_CASE("outside a transaction, a commit is visible only once it is durable") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto control = std::make_shared<testing::SyncControl>();
  auto storage = open(dir, clock, testing::with_faults(control));
  REQUIRE(propose(*storage, "u:O1:full-refund:v1").ok());
  control->set_hold(true);
  auto committing = std::async(std::launch::async, [&] {
    return storage->transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation("u:O1:full-refund:v1"));
      return operations::apply(txn, *op, operations::Event::deny, "alice", "{}");
    });
  });
  control->wait_until_held();
  // The denial is on its way to the disk: a reader (the drainer, the API)
  // must not see it yet, a transaction (serialised after it) must.
  auto durable = storage->reader().operation("u:O1:full-refund:v1");
  CHECK((*durable)->state() == pb::STATE_PENDING);
  std::atomic<bool> saw_settled{false};
  auto later = std::async(std::launch::async, [&] {
    return storage->transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation("u:O1:full-refund:v1"));
      saw_settled = op->state() == pb::STATE_SETTLED;
      return Status::Ok();
    });
  });
  control->set_hold(false);
  REQUIRE(committing.get().ok());
  CHECK(later.get().ok());  // a read-only transaction returns once what it read is durable
  CHECK(saw_settled);
  CHECK((*storage->reader().operation("u:O1:full-refund:v1"))->state() == pb::STATE_SETTLED);
}

TEST_CASE("a failed sync refuses the transaction and leaves nothing of it visible") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto control = std::make_shared<testing::SyncControl>();
  auto storage = open(dir, clock, testing::with_faults(control));
  REQUIRE(propose(*storage, "u:O1:full-refund:v1").ok());
  control->set_fail(true);
  Status s = storage->transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation("u:O1:full-refund:v1"));
    return operations::apply(txn, *op, operations::Event::deny, "alice", "{}");
  });
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().is(errc::storage_unavailable));
  CHECK((*storage->reader().operation("u:O1:full-refund:v1"))->state() == pb::STATE_PENDING);
  Status seen = storage->transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation("u:O1:full-refund:v1"));
    CHECK(op->state() == pb::STATE_PENDING);
    OPGATE_ASSIGN_OR_RETURN(auto head, txn.audit_head());
    CHECK(head.seq == 1);  // the failed record is not in the chain
    return Status::Ok();
  });
  CHECK(seen.ok());
  CHECK_FALSE(storage->check_writable().ok());
}

TEST_CASE("transitions write the record, the state index and a chained audit record") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto storage = open(dir, clock);
  REQUIRE(propose(*storage, "u:O1:full-refund:v1").ok());
  REQUIRE(storage
              ->transact([&](store::Transaction& txn) -> Status {
                OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation("u:O1:full-refund:v1"));
                return operations::apply(txn, *op, operations::Event::approve, "alice", "{}");
              })
              .ok());
  auto& r = storage->reader();
  CHECK(r.operations({pb::STATE_PENDING, "", 10, {}})->operations.empty());
  CHECK(r.operations({pb::STATE_APPROVED, "", 10, {}})->operations.size() == 1);
  CHECK(r.counts()->operations.at(pb::STATE_APPROVED) == 1);
  CHECK(r.counts()->operations.at(pb::STATE_PENDING) == 0);
  CHECK(r.expired_by(10'000'000, 10)->empty());  // no longer pending: not in the expiry index
  auto v = storage->verify_audit();
  REQUIRE(v.ok());
  CHECK(v->ok);
  CHECK(v->records == 2);
  CHECK(r.audit_of("u:O1:full-refund:v1")->size() == 2);
}

TEST_CASE("a refused transition stages nothing and writes nothing") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto storage = open(dir, clock);
  REQUIRE(propose(*storage, "u:O1:full-refund:v1").ok());
  const auto writes = storage->stats().synced_writes;
  auto s = storage->transact([&](store::Transaction& txn) -> Status {
    OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation("u:O1:full-refund:v1"));
    return operations::apply(txn, *op, operations::Event::claim, "system", "{}");
  });
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == "invalid_transition");
  CHECK(storage->stats().synced_writes == writes);
  CHECK((*storage->reader().operation("u:O1:full-refund:v1"))->state() == pb::STATE_PENDING);
}

TEST_CASE("altering one stored audit record is named by verification, also after reopening") {
  TempDir dir;
  ManualClock clock(1'000'000);
  {
    auto storage = open(dir, clock);
    for (int i = 0; i < 5; ++i)
      REQUIRE(propose(*storage, "u:O" + std::to_string(i) + ":full-refund:v1").ok());
  }
  {
    // The chain continues across a restart.
    auto storage = open(dir, clock);
    REQUIRE(propose(*storage, "u:O9:full-refund:v1").ok());
    auto v = storage->verify_audit();
    CHECK(v->ok);
    CHECK(v->records == 6);
    CHECK(v->head.seq == 6);
    // Tamper with record 3: change the principal, keep the stored hash.
    auto& db = storage->db();
    auto raw = db.get(store::rocks::Cf::audit, store::rocks::keys::audit(3));
    pb::AuditRecord rec;
    REQUIRE(rec.ParseFromString(**raw));
    rec.set_principal("mallory");
    store::rocks::WriteSet w;
    w.put(store::rocks::Cf::audit, store::rocks::keys::audit(3), rec.SerializeAsString());
    REQUIRE(db.write(w, true).ok());
  }
  store::rocks::OpenOptions ro;
  ro.read_only = true;
  auto storage = open(dir, clock, ro);
  auto v = storage->verify_audit();
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
  ManualClock clock(0);
  auto s = RocksStorage::open(dir.path.string(), {}, clock);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == "data_dir_permissions");
}

TEST_CASE("a data directory of a newer format is refused with a clear message") {
  TempDir dir;
  ManualClock clock(0);
  {
    auto storage = open(dir, clock);
    store::rocks::WriteSet w;
    w.put(store::rocks::Cf::meta, "format_version", "99");
    REQUIRE(storage->db().write(w, true).ok());
  }
  auto s = RocksStorage::open(dir.path.string(), {}, clock);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == "data_format");
  CHECK(s.error().message.find("newer") != std::string::npos);
}

TEST_CASE("a read-only open refuses a data directory that records no format version") {
  TempDir dir;
  ManualClock clock(0);
  {
    auto storage = open(dir, clock);
    store::rocks::WriteSet w;
    w.del(store::rocks::Cf::meta, "format_version");
    REQUIRE(storage->db().write(w, true).ok());
  }
  store::rocks::OpenOptions read_only;
  read_only.read_only = true;
  auto s = RocksStorage::open(dir.path.string(), read_only, clock);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == "data_format");
  CHECK(s.error().message.find("no format version") != std::string::npos);
}

TEST_CASE("a restore compares the manifest with the copy and refuses a mismatch") {
  TempDir dir, restored;
  ManualClock clock(1'000);
  const std::string backup = dir.path.string() + "-backup";
  {
    auto storage = open(dir, clock);
    REQUIRE(propose(*storage, "k1").ok());
    REQUIRE(propose(*storage, "k2").ok());
    auto info = storage->backup_to(backup);
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->audit_head.seq == 2);
  }
  const auto manifest = std::filesystem::path(backup) / "opgate-backup.json";
  std::string original;
  {
    std::ifstream in(manifest);
    std::getline(in, original, '\0');
  }
  auto with = [&](std::string text) {
    std::ofstream(manifest, std::ios::trunc) << text;
    return RocksStorage::restore(backup, restored.path.string(), clock);
  };
  auto replaced = [&](std::string_view from, std::string_view to) {
    std::string text = original;
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  SUBCASE("another format version") {
    auto r = with(replaced(fmt::format("\"format_version\":{}", store::rocks::kFormatVersion),
                           "\"format_version\":1"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "data_format");
  }
  SUBCASE("another audit head") {
    auto r = with(replaced("\"seq\":2", "\"seq\":3"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "corrupt_record");
    CHECK(r.error().message.find("#3") != std::string::npos);
  }
  SUBCASE("a negative audit head") {
    auto r = with(replaced("\"seq\":2", "\"seq\":-1"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "data_format");
  }
  SUBCASE("a manifest that does not parse") {
    auto r = with("{\"format_version\":");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "data_format");
  }
  SUBCASE("the manifest as written") {
    // What a restore cut short left beside the data directory goes.
    const auto staging = restored.path.string() + ".restoring";
    std::filesystem::create_directories(staging);
    std::ofstream(staging + "/CURRENT") << "half a copy";
    auto r = with(original);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    CHECK(r->audit_head.seq == 2);
    CHECK(r->format_version == store::rocks::kFormatVersion);
    CHECK_FALSE(std::filesystem::exists(staging));
    auto reopened = open(restored, clock);
    CHECK(reopened->reader().operation("k2")->has_value());
  }
  CHECK(std::filesystem::exists(restored.path) == (original == [&] {
          std::ifstream in(manifest);
          std::string now;
          std::getline(in, now, '\0');
          return now;
        }()));
  std::filesystem::remove_all(backup);
}

TEST_CASE("queue and outbox ids stay monotonic across a restart") {
  TempDir dir;
  ManualClock clock(1'000'000);
  std::string first;
  {
    auto storage = open(dir, clock);
    REQUIRE(storage
                ->transact([&](store::Transaction& txn) {
                  pb::OutboxItem item;
                  item.set_kind(pb::OUTBOX_RECONCILE);
                  txn.enqueue(item);
                  return Status::Ok();
                })
                .ok());
    first = storage->reader().due(store::Queue::work, 0, 10, {})->at(0).id;
  }
  auto storage = open(dir, clock);
  REQUIRE(storage
              ->transact([&](store::Transaction& txn) {
                pb::OutboxItem item;
                item.set_kind(pb::OUTBOX_RECONCILE);
                txn.enqueue(item);
                return Status::Ok();
              })
              .ok());
  auto due = storage->reader().due(store::Queue::work, 0, 10, {});
  REQUIRE(due->size() == 2);
  CHECK(due->at(1).id > first);
}

TEST_CASE("a chain cut back below a witnessed head fails verification with --expect-head") {
  TempDir dir;
  ManualClock clock(1'000'000);
  auto storage = open(dir, clock);
  for (int i = 0; i < 3; ++i)
    REQUIRE(propose(*storage, "u:O" + std::to_string(i) + ":full-refund:v1").ok());
  const auto head = storage->verify_audit()->head;
  REQUIRE(head.seq == 3);
  const operations::WitnessedHead witnessed{head.seq, head.hash};
  auto before = operations::verify_audit(*storage, witnessed);
  REQUIRE(before.ok());
  CHECK(before->chain.ok);
  CHECK(before->operations_checked == 3);

  // Remove the last record and the operation it describes: what is left
  // links up and every operation agrees with its record.
  store::rocks::WriteSet w;
  w.del(store::rocks::Cf::audit, store::rocks::keys::audit(3));
  w.del(store::rocks::Cf::operations, store::rocks::keys::operation("u:O2:full-refund:v1"));
  REQUIRE(storage->db().write(w, true).ok());
  storage.reset();
  store::rocks::OpenOptions ro;
  ro.read_only = true;
  storage = open(dir, clock, ro);
  auto blind = operations::verify_audit(*storage);
  REQUIRE(blind.ok());
  CHECK(blind->chain.ok);  // nothing inside the directory remembers the tail
  auto witnessed_check = operations::verify_audit(*storage, witnessed);
  REQUIRE(witnessed_check.ok());
  CHECK_FALSE(witnessed_check->chain.ok);
  CHECK(witnessed_check->chain.first_bad_seq == 3);
  CHECK(witnessed_check->chain.problem.find("records were removed") != std::string::npos);

  // A witness that saw a different record 2 is not satisfied either.
  auto forged = witnessed;
  forged.seq = 2;
  auto other = operations::verify_audit(*storage, forged);
  CHECK_FALSE(other->chain.ok);
  CHECK(other->chain.problem.find("hash differs") != std::string::npos);
}

TEST_CASE("an operation whose state disagrees with its last audit record fails verification") {
  TempDir dir;
  ManualClock clock(1'000'000);
  {
    auto storage = open(dir, clock);
    REQUIRE(propose(*storage, "u:O1:full-refund:v1").ok());
    auto raw = storage->db().get(store::rocks::Cf::operations,
                                 store::rocks::keys::operation("u:O1:full-refund:v1"));
    pb::Operation op;
    REQUIRE(op.ParseFromString(**raw));
    CHECK(op.audit_seq() == 1);
    op.set_state(pb::STATE_APPROVED);  // edited outside opgate: no audit record says so
    store::rocks::WriteSet w;
    w.put(store::rocks::Cf::operations, store::rocks::keys::operation(op.key()),
          op.SerializeAsString());
    REQUIRE(storage->db().write(w, true).ok());
  }
  auto storage = open(dir, clock);
  auto report = operations::verify_audit(*storage);
  REQUIRE(report.ok());
  CHECK(report->chain.ok == false);
  CHECK(report->chain.first_bad_seq == 1);
  CHECK(report->chain.problem.find("u:O1:full-refund:v1 is approved") != std::string::npos);
}

TEST_CASE("a witnessed head is SEQ:HASH with a 64-digit hash") {
  const std::string hash(64, 'a');
  auto ok = operations::parse_head("12:" + hash);
  REQUIRE(ok.ok());
  CHECK(ok->seq == 12);
  CHECK(ok->hash.size() == 32);
  for (const std::string& bad : std::vector<std::string>{
           "", "12", ":" + hash, "x:" + hash, "12:abc", "12:" + hash + "00", "1 2:" + hash,
           "12:" + std::string(64, 'z'), "0:" + hash, "-1:" + hash, "+12:" + hash, " 12:" + hash,
           "99999999999999999999:" + hash})
    CHECK_MESSAGE(!operations::parse_head(bad).ok(), bad);
}

namespace {
pb::InboxEvent inbox_event(const std::string& id, bool processed, const std::string& session = "") {
  pb::InboxEvent e;
  e.set_source("agents");
  e.set_webhook_id(id);
  e.set_body("{\"id\":\"" + id + "\"}");
  e.set_body_sha256(crypto::sha256(e.body()));
  e.set_received_at_ms(500);
  e.set_type(session.empty() ? "response.completed" : "session.action_required");
  e.set_session_id(session);
  e.set_processed(processed);
  if (processed) e.set_processed_at_ms(600);
  return e;
}

// A data directory recording format 1, holding `writes`; open.
std::unique_ptr<store::rocks::Db> format_1(const TempDir& dir,
                                           const store::rocks::WriteSet& writes) {
  auto db = store::rocks::Db::open(dir.path.string(), store::rocks::OpenOptions{});
  REQUIRE(db.ok());
  REQUIRE((*db)->write(writes, true).ok());
  REQUIRE((*db)->set_format_version(1).ok());
  return std::move(*db);
}
}  // namespace

TEST_CASE("a format-1 directory is upgraded at its first writable open, resuming a cut-short one") {
  namespace keys = store::rocks::keys;
  using store::rocks::Cf;
  TempDir dir;
  ManualClock clock(1'000'000);
  {
    // The older layout, as an upgrade cut short by a crash left it: msg_a
    // already moved (seq 1, the cursor on it), the rest still under their
    // webhook-ids, with queue and parked entries naming those.
    store::rocks::WriteSet w;
    const auto a = inbox_event("msg_a", true);
    pb::InboxIndex a_index;
    a_index.set_seq(1);
    a_index.set_body_sha256(a.body_sha256());
    a_index.set_processed(true);
    a_index.set_processed_at_ms(600);
    w.put(Cf::events, keys::event_record(1), a.SerializeAsString());
    w.put(Cf::inbox, keys::event("agents", "msg_a"), a_index.SerializeAsString());
    w.put(Cf::meta, "upgrade/inbox", keys::event("agents", "msg_a"));
    w.put(Cf::meta, "upgrade/inbox_seq", keys::hex16(2));
    w.put(Cf::inbox, keys::event("agents", "msg_b"),
          inbox_event("msg_b", false, "sess_1").SerializeAsString());
    w.put(Cf::inbox, keys::event("agents", "msg_c"),
          inbox_event("msg_c", false, "sess_2").SerializeAsString());
    w.put(Cf::inbox, keys::queue(5), keys::event("agents", "msg_b"));
    w.put(Cf::inbox, keys::waiting("sess_2", 6), keys::event("agents", "msg_c"));
    w.put(Cf::inbox, keys::queue(7), keys::event("agents", "msg_gone"));
    format_1(dir, w);
  }
  auto storage = open(dir, clock);
  CHECK(storage->db().format_version() == 2);
  for (const char* key : {"upgrade/inbox", "upgrade/inbox_seq"}) {
    auto left = storage->db().get(Cf::meta, key);
    REQUIRE(left.ok());
    CHECK_FALSE(left->has_value());
  }
  // Each event once, numbered on from the one moved before.
  std::vector<std::pair<std::string, std::string>> moved;
  REQUIRE(storage->db()
              .scan(Cf::events, "",
                    [&](std::string_view k, std::string_view v) {
                      pb::InboxEvent e;
                      REQUIRE(e.ParseFromArray(v.data(), static_cast<int>(v.size())));
                      moved.emplace_back(k, e.webhook_id());
                      return true;
                    })
              .ok());
  CHECK(moved ==
        std::vector<std::pair<std::string, std::string>>{{keys::event_record(1), "msg_a"},
                                                         {keys::event_record(2), "msg_b"},
                                                         {keys::event_record(3), "msg_c"}});
  for (const char* id : {"msg_a", "msg_b", "msg_c"}) {
    auto ev = storage->reader().event("agents", id);
    REQUIRE(ev.ok());
    REQUIRE(ev->has_value());
    CHECK((*ev)->webhook_id() == id);
  }
  // The queue finds its event, and the entry whose event was gone stays
  // with none, as before.
  auto queued = storage->reader().queued("", 10);
  REQUIRE(queued.ok());
  REQUIRE(queued->size() == 2);
  CHECK((*queued)[0].event.webhook_id() == "msg_b");
  CHECK((*queued)[1].event.source().empty());
  // The parked event comes back when its session is released.
  REQUIRE(storage
              ->transact([&](store::Transaction& txn) -> Status {
                OPGATE_ASSIGN_OR_RETURN(auto n, txn.release_parked("sess_2"));
                CHECK(n == 1);
                return Status::Ok();
              })
              .ok());
  queued = storage->reader().queued("", 10);
  REQUIRE(queued.ok());
  REQUIRE(queued->size() == 3);
  CHECK((*queued)[2].event.webhook_id() == "msg_c");
  // Finishing one marks the event processed, in its record and its index.
  REQUIRE(storage
              ->transact([&](store::Transaction& txn) -> Status {
                txn.finish_event((*queued)[0]);
                return Status::Ok();
              })
              .ok());
  auto b = storage->reader().event("agents", "msg_b");
  REQUIRE(b.ok());
  REQUIRE(b->has_value());
  CHECK((*b)->processed());
  auto b_index = storage->db().get(Cf::inbox, keys::event("agents", "msg_b"));
  REQUIRE(b_index.ok());
  pb::InboxIndex index;
  REQUIRE(index.ParseFromString(**b_index));
  CHECK(index.seq() == 2);
  CHECK(index.processed());
  // Duplicates are found through the moved index; a new event is numbered
  // above everything moved.
  std::vector<store::NewEvent> batch(3);
  batch[0].event = inbox_event("msg_a", false);
  batch[1].event = inbox_event("msg_a", false);
  batch[1].event.set_body_sha256(crypto::sha256("another body"));
  batch[2].event = inbox_event("msg_new", false);
  auto appended = storage->append_events(batch);
  REQUIRE(appended.ok());
  CHECK((*appended)[0] == store::Appended::duplicate);
  CHECK((*appended)[1] == store::Appended::conflict);
  CHECK((*appended)[2] == store::Appended::stored);
  auto last = storage->db().last_key(Cf::events, "");
  REQUIRE(last.ok());
  REQUIRE(last->has_value());
  CHECK(**last > keys::event_record(3));
}

TEST_CASE("an upgrade tells its progress in whole batches, and a second call has nothing to do") {
  using store::rocks::Cf;
  TempDir dir;
  store::rocks::WriteSet w;
  for (int i = 0; i < 2500; ++i) {
    const auto e = inbox_event(fmt::format("msg_{:04}", i), true);
    w.put(Cf::inbox, store::rocks::keys::event("agents", e.webhook_id()), e.SerializeAsString());
  }
  auto db = format_1(dir, w);
  std::vector<size_t> told;
  auto progress = [&](size_t moved) { told.push_back(moved); };
  REQUIRE(store::rocks::upgrade_inbox(*db, progress, 1000).ok());
  CHECK(told == std::vector<size_t>{0, 1000, 2000});
  CHECK(db->format_version() == 2);
  told.clear();
  REQUIRE(store::rocks::upgrade_inbox(*db, progress, 1000).ok());
  CHECK(told.empty());
  size_t events = 0;
  REQUIRE(db->scan(Cf::events, "", [&](std::string_view, std::string_view) {
              ++events;
              return true;
            }).ok());
  CHECK(events == 2500);
}

TEST_CASE(
    "a format-1 directory, without the events family, opens read-only with its inbox refused") {
  using store::rocks::Cf;
  TempDir dir;
  ManualClock clock(1'000'000);
  {
    store::rocks::WriteSet w;
    w.put(Cf::inbox, store::rocks::keys::event("agents", "msg_a"),
          inbox_event("msg_a", true).SerializeAsString());
    format_1(dir, w);
  }
  {
    // As an older opgate left it: no `events` column family.
    std::vector<std::string> names;
    REQUIRE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir.path.string(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (const auto& n : names) cfs.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(rocksdb::DBOptions(), dir.path.string(), cfs, &handles, &raw).ok());
    for (auto* h : handles)
      if (h->GetName() == "events") REQUIRE(raw->DropColumnFamily(h).ok());
    for (auto* h : handles) REQUIRE(raw->DestroyColumnFamilyHandle(h).ok());
    delete raw;
  }
  {
    store::rocks::OpenOptions ro;
    ro.read_only = true;
    ro.create_if_missing = false;
    auto old = open(dir, clock, ro);
    CHECK(old->db().format_version() == 1);
    auto ev = old->reader().event("agents", "msg_a");
    REQUIRE_FALSE(ev.ok());
    CHECK(ev.error().code == "data_format");
    auto counts = old->reader().counts();
    CHECK(counts.ok());
    CHECK(old->verify_audit().ok());
  }
  auto storage = open(dir, clock);
  CHECK(storage->db().format_version() == 2);
  auto ev = storage->reader().event("agents", "msg_a");
  REQUIRE(ev.ok());
  REQUIRE(ev->has_value());
  CHECK((*ev)->processed());
}

TEST_CASE("a stored record that does not parse is an error of every scan that meets it") {
  namespace keys = store::rocks::keys;
  using store::rocks::Cf;
  TempDir dir;
  ManualClock clock(1'000'000);
  {
    auto storage = open(dir, clock);
    REQUIRE(propose(*storage, "k1").ok());
  }
  {
    auto db = store::rocks::Db::open(dir.path.string(), store::rocks::OpenOptions{});
    REQUIRE(db.ok());
    store::rocks::WriteSet w;
    const std::string garbage = "\xff\xff\xff\xff";
    w.put(Cf::operations, keys::operation("k0"), garbage);
    w.put(Cf::ledger, "k0", garbage);
    w.put(Cf::calls, keys::call("sess_1", "turn_1", "call_1"), garbage);
    w.put(Cf::meta, keys::state_count(pb::STATE_APPROVED), "12abc");  // once read as 12
    REQUIRE((*db)->write(w, true).ok());
  }
  auto storage = open(dir, clock);
  auto& reader = storage->reader();
  auto page = reader.operations({});
  REQUIRE_FALSE(page.ok());
  CHECK(page.error().code == "corrupt_record");
  CHECK(page.error().message == "a stored operation does not parse");
  int visited = 0;
  auto visit = reader.visit_operations([&](const pb::Operation&) { return ++visited, true; });
  REQUIRE_FALSE(visit.ok());
  CHECK(visit.error().message == "a stored operation does not parse");
  CHECK(visited == 0);  // "k0" comes first, and stops the scan
  auto ledger = reader.ledger({});
  REQUIRE_FALSE(ledger.ok());
  CHECK(ledger.error().message == "a stored ledger row does not parse");
  auto calls = reader.calls_of("sess_1");
  REQUIRE_FALSE(calls.ok());
  CHECK(calls.error().message == "a stored tool call does not parse");
  auto counts = reader.counts();
  REQUIRE_FALSE(counts.ok());
  CHECK(counts.error().message == "a stored count does not parse");
  // The records that parse are still read by key.
  auto k1 = reader.operation("k1");
  REQUIRE(k1.ok());
  CHECK(k1->has_value());
}

TEST_CASE("a first start cut short before its format version was written starts again as new") {
  TempDir dir;
  ManualClock clock(0);
  {
    // What the cut-short start left: RocksDB's files, and no record at all.
    auto db = store::rocks::Db::open(dir.path.string(), store::rocks::OpenOptions{});
    REQUIRE(db.ok());
    store::rocks::WriteSet w;
    w.del(store::rocks::Cf::meta, "format_version");
    REQUIRE((*db)->write(w, true).ok());
  }
  {
    auto storage = RocksStorage::open(dir.path.string(), {}, clock);
    REQUIRE_MESSAGE(storage.ok(), storage.error().message);
    REQUIRE(propose(**storage, "k1").ok());
  }
  // A directory that holds records and no version is still refused.
  {
    auto db = store::rocks::Db::open(dir.path.string(), store::rocks::OpenOptions{});
    REQUIRE(db.ok());
    store::rocks::WriteSet w;
    w.del(store::rocks::Cf::meta, "format_version");
    REQUIRE((*db)->write(w, true).ok());
  }
  auto refused = RocksStorage::open(dir.path.string(), {}, clock);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("no format version") != std::string::npos);
}
