// Verifying the audit trail as a whole: the chain links (store's own check),
// every operation agrees with the last audit record of its change (the
// head recorded on it), and, when a witness gives one, the chain still
// contains a head it saw (a notification receiver keeps the audit_head of
// each delivery: a chain cut back below it is caught). Reads only;
// thread-safe.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>

#include "common/result.h"
#include "store/port.h"

namespace opgate::operations {

struct WitnessedHead {
  uint64_t seq = 0;
  std::string hash;  // raw bytes
};

// "SEQ:HEX" as `opgate audit verify --expect-head` takes it.
Result<WitnessedHead> parse_head(const std::string& text);

struct AuditReport {
  store::AuditVerification chain;
  uint64_t operations_checked = 0;
};

// {"ok", "records", "operations_checked", "head": {"seq", "hash"}} and, when
// not ok, "first_bad_seq" and "problem": the API's and the CLI's answer.
boost::json::object to_json(const AuditReport& report);

// ok is false, with the first problem, if any check fails.
Result<AuditReport> verify_audit(store::Storage& storage,
                                 const std::optional<WitnessedHead>& expect = std::nullopt);

}  // namespace opgate::operations
