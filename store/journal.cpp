#include "store/journal.h"

#include <fmt/format.h>

#include "common/crypto.h"

namespace opgate::store {

std::string audit_key(uint64_t seq) { return fmt::format("{:020}", seq); }

std::string audit_index_key(const std::string& operation_key, uint64_t seq) {
  return fmt::format("h/{}/{:020}", operation_key, seq);
}

Result<std::vector<pb::AuditRecord>> audit_records_for(const Store& store,
                                                       const std::string& operation_key) {
  std::vector<pb::AuditRecord> out;
  const std::string prefix = "h/" + operation_key + "/";
  std::vector<std::string> seqs;
  Status s = store.scan(Cf::operations, prefix, [&](std::string_view k, std::string_view) {
    seqs.emplace_back(k.substr(prefix.size()));
    return true;
  });
  if (!s) return s.error();
  for (const auto& seq : seqs) {
    auto r = store.get_message<pb::AuditRecord>(Cf::audit, seq);
    if (!r) return r.error();
    if (r->has_value()) out.push_back(std::move(**r));
  }
  return out;
}

std::string audit_hash(const pb::AuditRecord& r, const std::string& prev_hash) {
  std::string canonical;
  auto add = [&](std::string_view value) {
    canonical += std::to_string(value.size());
    canonical += ':';
    canonical += value;
    canonical += '\n';
  };
  add(prev_hash);
  add(std::to_string(r.seq()));
  add(std::to_string(r.at_ms()));
  add(r.principal());
  add(r.operation_key());
  add(r.action());
  add(r.from_state());
  add(r.to_state());
  add(r.fingerprint());
  add(r.details_json());
  return crypto::sha256(canonical);
}

Result<std::unique_ptr<Journal>> Journal::open(Store& store, const Clock& clock) {
  std::unique_ptr<Journal> j(new Journal(store, clock));
  auto last = store.last_key(Cf::audit, "");
  if (!last) return last.error();
  if (last->has_value()) {
    auto rec = store.get_message<pb::AuditRecord>(Cf::audit, **last);
    if (!rec) return rec.error();
    if (!rec->has_value()) return make_error("corrupt_record", "audit head vanished");
    j->next_seq_ = (*rec)->seq() + 1;
    j->head_hash_ = (*rec)->hash();
  }
  return j;
}

Status Journal::run(const std::function<Status(Txn&)>& fn) {
  uint64_t mine = 0;
  {
    std::lock_guard lock(mu_);
    Txn txn(store_, clock_.now_ms());
    if (Status s = fn(txn); !s) return s;
    if (txn.batch_.count() == 0 && txn.audits_.empty()) return Status::Ok();
    uint64_t seq = next_seq_;
    std::string head = head_hash_;
    for (auto& record : txn.audits_) {
      record.set_seq(seq);
      record.set_at_ms(txn.now_ms_);
      record.set_prev_hash(head);
      record.set_hash(audit_hash(record, head));
      head = record.hash();
      txn.batch_.put(Cf::audit, audit_key(seq), record);
      if (!record.operation_key().empty())
        txn.batch_.put(Cf::operations, audit_index_key(record.operation_key(), seq), "");
      ++seq;
    }
    if (Status s = store_.write_unsynced(txn.batch_); !s) return s;
    next_seq_ = seq;
    head_hash_ = head;
    mine = ++written_;
  }
  return sync_through(mine);
}

Status Journal::sync_through(uint64_t write_number) {
  std::unique_lock lock(sync_mu_);
  while (synced_ < write_number) {
    if (syncing_) {
      synced_cv_.wait(lock);
      continue;
    }
    // Lead one sync for every batch written so far, ours included.
    syncing_ = true;
    const uint64_t target = written_.load();
    lock.unlock();
    Status s = store_.sync_wal();
    lock.lock();
    syncing_ = false;
    if (s) synced_ = std::max(synced_, target);
    synced_cv_.notify_all();
    if (!s) return s;
  }
  return Status::Ok();
}

Result<AuditVerification> verify_audit(const Store& store) {
  AuditVerification v;
  std::string prev;
  uint64_t expected_seq = 1;
  Status s = store.scan(Cf::audit, "", [&](std::string_view key, std::string_view value) {
    pb::AuditRecord r;
    v.records++;
    auto fail = [&](uint64_t seq, std::string problem) {
      v.ok = false;
      v.first_bad_seq = seq;
      v.problem = std::move(problem);
      return false;
    };
    if (!r.ParseFromString(std::string(value)))
      return fail(expected_seq, fmt::format("record {} does not parse", key));
    if (r.seq() != expected_seq || key != audit_key(r.seq()))
      return fail(expected_seq, fmt::format("record {} is missing or out of order", expected_seq));
    if (r.prev_hash() != prev)
      return fail(r.seq(),
                  fmt::format("record {} does not link to record {}", r.seq(), r.seq() - 1));
    if (audit_hash(r, prev) != r.hash())
      return fail(r.seq(), fmt::format("record {} was altered: its hash does not match its "
                                       "content",
                                       r.seq()));
    prev = r.hash();
    expected_seq++;
    return true;
  });
  if (!s) return s.error();
  return v;
}

}  // namespace opgate::store
