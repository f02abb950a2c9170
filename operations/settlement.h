// What settling an operation owes, staged in the settling transaction:
// the state change and its audit record, for a success the ledger row and
// the order's funds (refunded or credited), for anything else the release
// of the amount held at the claim, and the result for every tool call
// linked to the operation, queued for delivery. Also the holding of that
// amount when the drainer claims an operation. Call inside
// Storage::transact.
#pragma once

#include <string>

#include "common/result.h"
#include "operations/state_machine.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// The result a settled operation reports to every call linked to it. Never
// carries on-call's evidence.
pb::ToolResult settled_result(const pb::Operation& operation);
pb::ToolResult failure_result(std::string error);

// Saves `result` on the call and queues its delivery to the session (a
// call made over MCP is read by its agent instead).
void stage_result(store::Transaction& txn, pb::ToolCall& call, const pb::ToolResult& result);

// Applies an event that settles the operation, then stages what settling
// owes (see above). `recorded_by` names who recorded a success in the
// ledger (the principal if empty).
Status settle(store::Transaction& txn, pb::Operation& operation, Event event,
              const std::string& principal, const std::string& details_json,
              const std::string& recorded_by = "");

// Holds the operation's amount against the order's remaining value, so no
// other operation can use it while this one may be paying out.
Status reserve_funds(store::Transaction& txn, pb::Operation& operation);

}  // namespace opgate::operations
