// The one gate every operation change passes: the state machine's check,
// the record written through the storage port (which keeps its indexes in
// step) and the audit record, in the same transaction. Call inside
// Storage::transact; thread-safety comes from the transaction.
#pragma once

#include <string>

#include "common/result.h"
#include "operations/state_machine.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// Writes a new pending operation with its "propose" audit record.
Status create(store::Transaction& txn, pb::Operation& operation, const std::string& principal,
              const std::string& details_json);

// Applies `event` (a refused transition is an error and stages nothing),
// writes the record and stages its audit record.
Status apply(store::Transaction& txn, pb::Operation& operation, Event event,
             const std::string& principal, const std::string& details_json);

// Saves a change that is not a state transition (one approval of two, a
// linked call) with an audit record naming the action.
Status save_with_audit(store::Transaction& txn, pb::Operation& operation, const std::string& action,
                       const std::string& principal, const std::string& details_json);

// Saves bookkeeping only (attempt counters, last error): no audit record.
Status save(store::Transaction& txn, pb::Operation& operation);

// After the proposal changed in place (re-tiered, escalated, lowered by an
// approver): its fingerprint is computed again and the approvals given for
// the old one are discarded. Returns who had approved ("alice,bob"), for the
// change's audit record. Writes nothing.
std::string proposal_changed(pb::Operation& operation);

// A JSON object of string fields, for audit details.
std::string details(std::initializer_list<std::pair<std::string_view, std::string>> fields);

}  // namespace opgate::operations
