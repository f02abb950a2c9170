// An operation's evidence pack: one JSON document that proves, offline, what
// was proposed, what the agent saw, who decided what under which policy,
// what the provider or executor was asked and answered, and the result the
// agent was given. Its "body" is hashed; the export is itself an audit
// record carrying that hash; and the pack holds the key's audit records
// with a proof of inclusion up to the audit head at export: the digests of
// the records between them (hash_version 2 lets a proof pass over a record
// by its digest, revealing nothing of it). A changed byte anywhere fails
// verification. Export reads and appends one audit record; verification is
// pure. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "operations/audit.h"
#include "operations/authority.h"
#include "operations/policy.h"
#include "store/port.h"

namespace opgate::operations {

inline constexpr std::string_view kEvidenceFormat = "opgate-evidence/1";

// The pack for `key` as `principal` may see it (owner patterns apply), as
// the exact text to hand over (compact JSON and a newline). Appends the
// "evidence_exported" audit record. Errors: not_found (no such operation,
// or another owner's); conflict when the proof would pass over records
// written before hash_version 2 of operations this principal may not see.
Result<std::string> export_evidence(store::Storage& storage, const std::string& key,
                                    const Principal& principal, const PolicyConfig& policy);

struct EvidenceCheck {
  bool ok = false;
  std::string problem;        // when not ok: the first problem found
  std::string operation_key;  // when the pack parsed
  size_t records = 0;         // the key's audit records in the pack
  store::AuditHead head;      // the head the proof reaches
  bool witness_checked = false;
};

// Verifies a pack with nothing but its text, and, if given, a head a
// witness saw (a notification's audit_head), which the proof must pass
// through with the same hash.
EvidenceCheck verify_evidence(std::string_view text,
                              const std::optional<WitnessedHead>& witness = std::nullopt);

}  // namespace opgate::operations
