// Outbox items that several processes may see (a store they share): a
// process writes for an item only while the item is exactly as it read or
// leased it. Read inside the transaction that then writes, so the answer
// holds until it commits; otherwise another process has taken the work over
// (or finished it) and this one writes nothing for it. Pure over the port.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/port.h"

namespace opgate::outbox {

// Whether the item as stored now (none: gone) is the entry as read.
inline bool same(const std::optional<pb::OutboxItem>& current, const store::OutboxEntry& entry) {
  return current && current->SerializeAsString() == entry.item.SerializeAsString();
}

inline Result<bool> unchanged(store::Transaction& txn, const store::OutboxEntry& entry) {
  OPGATE_ASSIGN_OR_RETURN(auto current, txn.outbox_item(entry.id));
  return same(current, entry);
}

// unchanged() for several entries, read together: whether each is.
inline Result<std::vector<bool>> unchanged(store::Transaction& txn,
                                           const std::vector<store::OutboxEntry>& entries) {
  std::vector<std::string> ids;
  ids.reserve(entries.size());
  for (const auto& e : entries) ids.push_back(e.id);
  OPGATE_ASSIGN_OR_RETURN(auto current, txn.outbox_items(ids));
  std::vector<bool> out;
  out.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) out.push_back(same(current[i], entries[i]));
  return out;
}

// The entry held until `until_ms` (other processes see it due only then),
// stamped with a fresh token that fences what its holder writes later.
inline store::OutboxEntry leased(const store::OutboxEntry& entry, int64_t until_ms,
                                 const std::string& token) {
  store::OutboxEntry out = entry;
  out.item.set_not_before_ms(until_ms);
  out.item.set_lease_token(token);
  return out;
}

}  // namespace opgate::outbox
