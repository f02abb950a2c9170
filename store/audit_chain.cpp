#include "store/audit_chain.h"

#include <fmt/format.h>

#include "common/crypto.h"

namespace opgate::store {

namespace {

// "length:value\n" for each value: no value can forge a boundary.
void add_field(std::string& canonical, std::string_view value) {
  canonical += std::to_string(value.size());
  canonical += ':';
  canonical += value;
  canonical += '\n';
}

void add_fields(std::string& canonical, const pb::AuditRecord& r) {
  add_field(canonical, std::to_string(r.seq()));
  add_field(canonical, std::to_string(r.at_ms()));
  add_field(canonical, r.principal());
  add_field(canonical, r.operation_key());
  add_field(canonical, r.action());
  add_field(canonical, r.from_state());
  add_field(canonical, r.to_state());
  add_field(canonical, r.fingerprint());
  add_field(canonical, r.details_json());
}

}  // namespace

std::string audit_fields_digest(const pb::AuditRecord& r) {
  std::string canonical;
  add_fields(canonical, r);
  return crypto::sha256(canonical);
}

std::string audit_link(const std::string& prev_hash, const std::string& fields_digest) {
  std::string canonical;
  add_field(canonical, kAuditHashV2);
  add_field(canonical, prev_hash);
  add_field(canonical, fields_digest);
  return crypto::sha256(canonical);
}

std::string audit_hash(const pb::AuditRecord& r, const std::string& prev_hash) {
  if (r.hash_version() == 2) return audit_link(prev_hash, audit_fields_digest(r));
  std::string canonical;
  add_field(canonical, prev_hash);
  add_fields(canonical, r);
  return crypto::sha256(canonical);
}

void chain_audit(pb::AuditRecord& record, int64_t at_ms, AuditHead& head) {
  record.set_seq(head.seq + 1);
  record.set_at_ms(at_ms);
  record.set_prev_hash(head.hash);
  record.set_hash_version(2);
  record.set_hash(audit_hash(record, head.hash));
  head.seq = record.seq();
  head.hash = record.hash();
}

bool ChainVerifier::fail(uint64_t seq, std::string problem) {
  v_.ok = false;
  v_.first_bad_seq = seq;
  v_.problem = std::move(problem);
  return false;
}

void ChainVerifier::unreadable(uint64_t position) {
  if (!v_.ok) return;
  v_.records++;
  fail(v_.head.seq + 1, fmt::format("record {} does not parse", position));
}

bool ChainVerifier::add(const pb::AuditRecord& r) { return add(r, r.seq()); }

bool ChainVerifier::add(const pb::AuditRecord& r, uint64_t stored_key_seq) {
  if (!v_.ok) return false;
  v_.records++;
  const uint64_t expected = v_.head.seq + 1;
  if (r.seq() != expected || stored_key_seq != r.seq())
    return fail(expected, fmt::format("record {} is missing or out of order", expected));
  if (r.prev_hash() != v_.head.hash)
    return fail(r.seq(), fmt::format("record {} does not link to record {}", r.seq(), r.seq() - 1));
  if (audit_hash(r, v_.head.hash) != r.hash())
    return fail(r.seq(),
                fmt::format("record {} was altered: its hash does not match its content", r.seq()));
  v_.head.seq = r.seq();
  v_.head.hash = r.hash();
  return true;
}

}  // namespace opgate::store
