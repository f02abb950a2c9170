// Internal notes: what the agent wrote about an order for the support
// team, kept with the evidence the server checked (worker/tools.h). A note
// is the tool call that made it plus an audit record under its own key
// ("note:{session}:{call}"), so it is stored, shown and chained through the
// existing records. Never executed anywhere. Call inside Storage::transact.
#pragma once

#include <boost/json/array.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// The audit key of the note a call made.
std::string note_key(const pb::ToolCall& call);

// Audits the note made by `call` (whose result the caller stages).
void record_note(store::Transaction& txn, const pb::ToolCall& call, const std::string& owner,
                 const std::string& order_id, const std::string& text,
                 const std::vector<std::string>& evidence);

// The notes among a session's calls: {"call_id", "order_id", "text",
// "evidence", "at_ms", "audit"} each, oldest first.
Result<boost::json::array> notes_json(store::Reader& reader,
                                      const std::vector<pb::ToolCall>& calls);

}  // namespace opgate::operations
