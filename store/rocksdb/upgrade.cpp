#include "store/rocksdb/upgrade.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "opgate.pb.h"
#include "store/rocksdb/keys.h"

namespace opgate::store::rocks {

namespace {

constexpr size_t kBatch = 1000;
// Written with each batch: the last event moved, and the number the next
// one takes (not read back from `events`, where retention may already have
// dropped the newest of them).
constexpr std::string_view kCursorKey = "upgrade/inbox";
constexpr std::string_view kNextSeqKey = "upgrade/inbox_seq";

Error corrupt_event(std::string_view key) {
  return make_error(errc::corrupt_record,
                    "the inbox event under " + std::string(key) + " does not parse");
}

// The number the next event moved takes: 1 on a fresh start.
Result<uint64_t> next_seq(const Db& db) {
  OPGATE_ASSIGN_OR_RETURN(auto stored, db.get(Cf::meta, kNextSeqKey));
  if (!stored) return uint64_t{1};
  auto seq = keys::parse_hex(*stored);
  if (!seq)
    return make_error(errc::corrupt_record, "the upgrade's next sequence number does not parse");
  return *seq;
}

// Moves the events under e/ into `events`, kBatch per commit; counts them
// into `moved`.
Status move_events(Db& db, size_t& moved, const std::function<void(size_t)>& progress,
                   size_t every) {
  size_t told = 0;
  OPGATE_ASSIGN_OR_RETURN(auto cursor, db.get(Cf::meta, kCursorKey));
  std::string start = cursor ? *cursor + '\0' : std::string();
  OPGATE_ASSIGN_OR_RETURN(uint64_t seq, next_seq(db));
  for (;;) {
    std::vector<std::pair<std::string, std::string>> batch;
    OPGATE_TRY(db.scan(
        Cf::inbox, "e/",
        [&](std::string_view k, std::string_view v) {
          batch.emplace_back(k, v);
          return batch.size() < kBatch;
        },
        start));
    if (batch.empty()) return Status::Ok();
    WriteSet w;
    for (auto& [key, value] : batch) {
      pb::InboxEvent event;
      if (!event.ParseFromString(value)) return corrupt_event(key);
      w.put(Cf::inbox, key, keys::event_index(event, seq).SerializeAsString());
      w.put(Cf::events, keys::event_record(seq++), std::move(value));
    }
    start = batch.back().first + '\0';
    w.put(Cf::meta, std::string(kCursorKey), batch.back().first);
    w.put(Cf::meta, std::string(kNextSeqKey), keys::hex16(seq));
    OPGATE_TRY(db.write(w, true));
    moved += batch.size();
    if (progress && moved - told >= every) progress(told = moved);
  }
}

// Points the queue and parked entries under `prefix` that still name an
// event by its webhook-id at the event's new key ("" if it is gone); tells
// `progress` after each batch.
Status repoint(Db& db, std::string_view prefix, size_t moved,
               const std::function<void(size_t)>& progress) {
  std::string start;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> batch;  // entry, old event key
    OPGATE_TRY(db.scan(
        Cf::inbox, prefix,
        [&](std::string_view k, std::string_view v) {
          start = std::string(k) + '\0';
          if (v.starts_with("e/")) batch.emplace_back(k, v);
          return batch.size() < kBatch;
        },
        start));
    if (batch.empty()) return Status::Ok();
    WriteSet w;
    for (auto& [entry, event_key] : batch) {
      OPGATE_ASSIGN_OR_RETURN(auto raw, db.get(Cf::inbox, event_key));
      std::string now_at;
      if (raw) {
        pb::InboxIndex index;
        if (!index.ParseFromString(*raw)) return corrupt_event(event_key);
        now_at = keys::event_record(index.seq());
      }
      w.put(Cf::inbox, entry, std::move(now_at));
    }
    OPGATE_TRY(db.write(w, true));
    if (progress) progress(moved);
  }
}

}  // namespace

Status upgrade_inbox(Db& db, const std::function<void(size_t)>& progress, size_t every) {
  if (db.format_version() >= 2) return Status::Ok();
  spdlog::warn(
      "data directory {} holds data format 1: upgrading it to 2 (inbox events move "
      "into arrival order)",
      db.dir());
  size_t moved = 0;
  if (progress) progress(moved);
  OPGATE_TRY(move_events(db, moved, progress, every));
  OPGATE_TRY(repoint(db, keys::kQueuePrefix, moved, progress));
  OPGATE_TRY(repoint(db, "w/", moved, progress));
  // The cursor goes in the write that records the format: a directory
  // still at 1 always has its cursor, so nothing is moved twice.
  WriteSet w;
  w.del(Cf::meta, std::string(kCursorKey));
  w.del(Cf::meta, std::string(kNextSeqKey));
  OPGATE_TRY(db.set_format_version(2, std::move(w)));
  spdlog::warn("data directory {} upgraded to data format 2 ({} inbox events moved)", db.dir(),
               moved);
  return Status::Ok();
}

}  // namespace opgate::store::rocks
