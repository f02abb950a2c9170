// Tool calls that propose an operation: the server-computed proposal
// becomes a pending operation under its key, or the call is linked to the
// operation already proposed for it, or it is answered at once. Every call
// linked to an operation receives exactly one result once it settles. Call
// inside Storage::transact (calls of one step see each other's writes).
#pragma once

#include <optional>
#include <string>

#include "common/result.h"
#include "operations/policy.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// The customer-visible effect of a proposal, for the approver: what moves
// where, and, once an approver lowered the amount, from what.
std::string effect_text(const pb::Proposal& proposal);

// Calls linked to one operation, at most. Past it a call is answered at
// once: with the outcome once settled, else told to read the operation.
inline constexpr int kMaxLinkedCalls = 100;

// The newest version of (owner, order, kind), if any was ever proposed.
Result<std::optional<pb::Operation>> latest_operation(store::Reader& reader,
                                                      const std::string& owner,
                                                      const std::string& order_id,
                                                      std::string_view kind);

// Turns the proposal into an operation for the call:
// - none yet: a new pending operation (v1);
// - the newest is undecided with the same fingerprint: the call is linked;
// - the newest is undecided with another proposal: the call is answered with
//   a refusal (a second proposal never replaces the first);
// - the newest is settled with the same fingerprint: linked, and answered
//   with its recorded outcome (nothing is asked again);
// - the newest is settled with another proposal: the next version, up to
//   kMaxVersions; past it, a refusal.
// `principal` proposes, in the audit: "system" for a session's call, or
// "agent:{id}" for an agent token's.
inline constexpr int kMaxVersions = 1000;  // operations per owner, order and kind

Status propose(store::Transaction& txn, pb::ToolCall& call, const pb::Proposal& proposal,
               const PolicyConfig& policy, const std::string& principal = "system");

// request_refund for an order whose newest refund is undecided, or settled
// with a decision that stands (not rejected or expired): links the call to it
// and returns true. A settled refund answers from its record, before the
// policy (which would refuse a refunded order) is asked.
Result<bool> link_to_refund(store::Transaction& txn, pb::ToolCall& call, const std::string& owner,
                            const std::string& order_id, const std::string& principal = "system");

// Any other proposing tool: links the call to the newest operation of
// `kind` for the order when the call that proposed it had the same
// arguments (as JSON values) and it was not rejected or expired, and returns
// true: the same call made again hears that operation, even where the
// policy, asked again, would refuse it now (a credit's money already spent).
Result<bool> link_to_same_call(store::Transaction& txn, pb::ToolCall& call,
                               const std::string& owner, const std::string& order_id,
                               std::string_view kind, const std::string& principal);

}  // namespace opgate::operations
