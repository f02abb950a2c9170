#include "operations/drafts.h"

#include <fmt/format.h>

#include "common/crypto.h"
#include "operations/transitions.h"

namespace opgate::operations {

namespace {

constexpr std::string_view kDrafts = "draft";

// Kept by order, then time: one order's drafts are listed together. The
// draft's id (session and call ids) is in the record; the key carries a
// short hash of it, so that it stays within the store's 200 characters.
std::string record_key(const pb::Draft& d) {
  return fmt::format("{}/{:016d}/{}", d.order_id(), d.created_at_ms(),
                     crypto::sha256_hex(d.id()).substr(0, 16));
}

}  // namespace

std::string draft_id(const pb::ToolCall& call) {
  return "draft:" + call.session_id() + ":" + call.call_id();
}

void record_draft(store::Transaction& txn, const pb::ToolCall& call, const std::string& owner,
                  const std::string& order_id, const std::string& text,
                  const std::string& principal) {
  pb::Draft d;
  d.set_id(draft_id(call));
  d.set_owner(owner);
  d.set_order_id(order_id);
  d.set_text(text);
  d.set_session_id(call.session_id());
  d.set_call_id(call.call_id());
  d.set_created_at_ms(txn.now_ms());
  d.set_principal(principal);
  txn.keep(kDrafts, record_key(d), d.SerializeAsString());
  pb::AuditRecord record;
  record.set_principal(principal);
  record.set_operation_key(d.id());
  record.set_action("customer_reply_drafted");
  record.set_details_json(details({{"owner", owner}, {"order_id", order_id}, {"text", text}}));
  txn.append_audit(std::move(record));
}

Result<DraftPage> drafts(store::Reader& reader, const std::string& order_id,
                         const std::string& after, size_t limit,
                         const std::function<bool(const pb::Draft&)>& accept) {
  const std::string prefix = order_id.empty() ? "" : order_id + "/";
  DraftPage out;
  std::string cursor = after.empty() || !after.starts_with(prefix) ? prefix : after;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(auto page, reader.kept_all(kDrafts, cursor, 200));
    for (const auto& [key, value] : page) {
      if (!key.starts_with(prefix)) return out;
      pb::Draft d;
      if (!d.ParseFromString(value))
        return make_error(errc::corrupt_record, "a stored draft does not parse");
      if (!accept(d)) continue;
      out.drafts.push_back(std::move(d));
      // The cursor is a draft the caller sees: one it may not see would
      // name its order.
      if (out.drafts.size() >= limit) {
        out.next_after = key;
        return out;
      }
    }
    if (page.size() < 200) return out;
    cursor = page.back().first;
  }
}

Result<std::vector<pb::Draft>> latest_drafts(store::Reader& reader, const std::string& order_id,
                                             size_t limit) {
  std::vector<pb::Draft> all;
  std::string after;
  for (;;) {
    OPGATE_ASSIGN_OR_RETURN(
        auto page, drafts(reader, order_id, after, 1000, [](const pb::Draft&) { return true; }));
    for (auto& d : page.drafts) all.push_back(std::move(d));
    if (all.size() > limit) all.erase(all.begin(), all.end() - limit);
    if (page.next_after.empty()) break;
    after = page.next_after;
  }
  return std::vector<pb::Draft>(all.rbegin(), all.rend());
}

}  // namespace opgate::operations
