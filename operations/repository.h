// Operations in the store: the record under "o/{key}" and a state index
// under "s/{state}/{key}" kept in step, and the one gate through which every
// state change passes (state machine check + audit record, same batch).
// Call inside Journal::run; thread-safety comes from the journal lock.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "operations/state_machine.h"
#include "opgate.pb.h"
#include "store/journal.h"

namespace opgate::operations {

Result<std::optional<pb::Operation>> load(const store::Store& store, const std::string& key);

// Keys of operations in a state, in key order, at most `limit`.
Result<std::vector<std::string>> keys_in_state(const store::Store& store, State state, size_t limit,
                                               const std::string& after = {});

// How many operations are in a state (a scan of the state index).
Result<size_t> count_in_state(const store::Store& store, State state);

// Keys of pending operations whose approval TTL has passed at now_ms.
Result<std::vector<std::string>> keys_expired_by(const store::Store& store, int64_t now_ms,
                                                 size_t limit);

// Writes a new pending operation with its "propose" audit record.
void create(store::Txn& txn, pb::Operation& operation, const std::string& principal,
            const std::string& details_json);

// Applies `event` to `operation` (refused transitions are errors and stage
// nothing), updates the record and index, and stages the audit record.
Status apply(store::Txn& txn, pb::Operation& operation, Event event, const std::string& principal,
             const std::string& details_json);

// Saves a change that is not a state transition (e.g. one approval of two),
// with an audit record naming the action.
void save_with_audit(store::Txn& txn, const pb::Operation& operation, const std::string& action,
                     const std::string& principal, const std::string& details_json);
// Saves bookkeeping only (attempt counters, next attempt time): no audit.
void save(store::Txn& txn, const pb::Operation& operation);

std::string record_key(const std::string& operation_key);

}  // namespace opgate::operations
