#include "operations/notes.h"

#include <boost/json.hpp>

#include "operations/views.h"

namespace opgate::operations {

namespace json = boost::json;

std::string note_key(const pb::ToolCall& call) {
  return "note:" + call.session_id() + ":" + call.call_id();
}

void record_note(store::Transaction& txn, const pb::ToolCall& call, const std::string& owner,
                 const std::string& order_id, const std::string& text,
                 const std::vector<std::string>& evidence) {
  json::array cited;
  for (const auto& e : evidence) cited.push_back(json::string(e));
  pb::AuditRecord record;
  record.set_principal("agent");
  record.set_operation_key(note_key(call));
  record.set_action("internal_note");
  record.set_details_json(json::serialize(json::object{{"session_id", call.session_id()},
                                                       {"turn_id", call.turn_id()},
                                                       {"call_id", call.call_id()},
                                                       {"owner", owner},
                                                       {"order_id", order_id},
                                                       {"text", text},
                                                       {"evidence", cited}}));
  txn.append_audit(std::move(record));
}

Result<json::array> notes_json(store::Reader& reader, const std::vector<pb::ToolCall>& calls) {
  json::array out;
  for (const auto& c : calls) {
    if (c.name() != "add_internal_note") continue;
    OPGATE_ASSIGN_OR_RETURN(auto records, reader.audit_of(note_key(c)));
    for (const auto& r : records) {
      if (r.action() != "internal_note") continue;
      json::error_code ec;
      auto details = json::parse(r.details_json(), ec);
      if (ec || !details.is_object()) continue;
      const auto& d = details.as_object();
      out.push_back(json::object{{"call_id", c.call_id()},
                                 {"order_id", d.at("order_id")},
                                 {"text", d.at("text")},
                                 {"evidence", d.at("evidence")},
                                 {"at_ms", r.at_ms()},
                                 {"audit", audit_json(r)}});
    }
  }
  return out;
}

}  // namespace opgate::operations
