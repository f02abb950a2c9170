// Replies to customers the agent drafted (draft_customer_reply): kept by
// order for a person to read and send, with an audit record under the
// draft's id. opgate never sends them. Call record_draft inside
// Storage::transact.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

// The draft a call made: "draft:{session}:{call}".
std::string draft_id(const pb::ToolCall& call);

// Stores and audits the draft made by `call` (whose result the caller
// stages). `principal`: "system" for a session's call, "agent:{id}" for an
// agent token's.
void record_draft(store::Transaction& txn, const pb::ToolCall& call, const std::string& owner,
                  const std::string& order_id, const std::string& text,
                  const std::string& principal);

struct DraftPage {
  std::vector<pb::Draft> drafts;
  std::string next_after;  // "" when there are no more
};

// Drafts for one order (or every order: ""), by order then oldest first,
// after the cursor `after` (a next_after; "" from the start): at most
// `limit` that `accept` takes. The cursor is always a draft `accept` took.
Result<DraftPage> drafts(store::Reader& reader, const std::string& order_id,
                         const std::string& after, size_t limit,
                         const std::function<bool(const pb::Draft&)>& accept);

// The newest `limit` drafts of one order, newest first.
Result<std::vector<pb::Draft>> latest_drafts(store::Reader& reader, const std::string& order_id,
                                             size_t limit);

}  // namespace opgate::operations
