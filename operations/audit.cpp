#include "operations/audit.h"

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/text.h"
#include "operations/state_machine.h"

namespace opgate::operations {

boost::json::object to_json(const AuditReport& report) {
  const auto& v = report.chain;
  boost::json::object o{
      {"ok", v.ok},
      {"records", v.records},
      {"operations_checked", report.operations_checked},
      {"head", boost::json::object{{"seq", v.head.seq}, {"hash", crypto::to_hex(v.head.hash)}}}};
  if (!v.ok) {
    o["first_bad_seq"] = v.first_bad_seq;
    o["problem"] = v.problem;
  }
  return o;
}

Result<WitnessedHead> parse_head(const std::string& text) {
  const auto colon = text.find(':');
  WitnessedHead head;
  // SEQ is digits only (no sign, no space) and names a record: 1 or more.
  const auto seq = colon == std::string::npos
                       ? std::nullopt
                       : whole_number(std::string_view(text).substr(0, colon));
  if (!seq || *seq == 0)
    return make_error(errc::bad_request, "A head is SEQ:HASH, e.g. 42:3fa9... (SEQ from 1)");
  head.seq = static_cast<uint64_t>(*seq);
  auto raw = crypto::from_hex(text.substr(colon + 1));
  if (!raw || raw->size() != 32)
    return make_error(errc::bad_request, "The head's hash must be 64 hex digits.");
  head.hash = *raw;
  return head;
}

Result<AuditReport> verify_audit(store::Storage& storage,
                                 const std::optional<WitnessedHead>& expect) {
  AuditReport report;
  OPGATE_ASSIGN_OR_RETURN(report.chain, storage.verify_audit());
  auto& v = report.chain;
  auto fail = [&](uint64_t seq, std::string problem) {
    if (!v.ok) return;
    v.ok = false;
    v.first_bad_seq = seq;
    v.problem = std::move(problem);
  };
  auto& reader = storage.reader();
  if (v.ok && expect) {
    OPGATE_ASSIGN_OR_RETURN(auto at, reader.audit(expect->seq - 1, 1));
    if (at.empty() || at.front().seq() != expect->seq)
      fail(expect->seq, fmt::format("the chain ends at record {}, before the witnessed head {}: "
                                    "records were removed",
                                    v.head.seq, expect->seq));
    else if (at.front().hash() != expect->hash)
      fail(expect->seq,
           fmt::format("record {} is not the one a witness saw: its hash differs", expect->seq));
  }
  if (!v.ok) return report;
  // Every operation against the record of its latest change.
  store::OperationQuery q;
  q.limit = 1000;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, reader.operations(q));
    for (const auto& op : page.operations) {
      ++report.operations_checked;
      if (op.audit_seq() == 0) continue;  // written before heads were recorded
      OPGATE_ASSIGN_OR_RETURN(auto at, reader.audit(op.audit_seq() - 1, 1));
      const bool found = !at.empty() && at.front().seq() == op.audit_seq();
      if (!found || at.front().hash() != op.audit_hash() ||
          at.front().operation_key() != op.key() || at.front().to_state() != state_text(op)) {
        fail(op.audit_seq(),
             fmt::format("operation {} is {} but its last audit record #{} {}", op.key(),
                         state_text(op), op.audit_seq(), found ? "says otherwise" : "is missing"));
        return report;
      }
    }
    if (page.next_after.empty()) return report;
    q.after = page.next_after;
  }
}

}  // namespace opgate::operations
