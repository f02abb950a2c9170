// The audit chain, independent of any backend: each record's hash is
// SHA-256 over its predecessor's hash and its own canonical fields, so
// editing, reordering or removing a record inside the chain breaks every
// later link. Pure; thread-compatible (a ChainVerifier is used by one thread).
#pragma once

#include <cstdint>
#include <string>

#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::store {

// The chain hash of a record given its predecessor's hash (raw bytes), by
// the record's hash_version.
std::string audit_hash(const pb::AuditRecord& record, const std::string& prev_hash);

// Version 2 (every record written now): hash = SHA-256 over the tag, the
// predecessor's hash and the digest of the record's own fields, so that a
// proof of inclusion can pass over a record by its digest alone, revealing
// nothing of it (operations/evidence.h).
inline constexpr std::string_view kAuditHashV2 = "opgate-audit-v2";
std::string audit_fields_digest(const pb::AuditRecord& record);
std::string audit_link(const std::string& prev_hash, const std::string& fields_digest);

// Fills seq, at_ms, prev_hash and hash so `record` follows `head`, and
// advances `head` to it.
void chain_audit(pb::AuditRecord& record, int64_t at_ms, AuditHead& head);

// Feeds records in stored order; stops at the first bad one.
class ChainVerifier {
 public:
  // False once the chain is broken (the result names the first bad record).
  bool add(const pb::AuditRecord& record);
  // `stored_key_seq`: the position the backend stored the record under.
  bool add(const pb::AuditRecord& record, uint64_t stored_key_seq);
  // Marks a record the backend could not parse at this position.
  void unreadable(uint64_t position);
  const AuditVerification& result() const { return v_; }

 private:
  bool fail(uint64_t seq, std::string problem);
  AuditVerification v_;
};

}  // namespace opgate::store
