#include "operations/notifications.h"

#include <boost/json.hpp>

#include "operations/views.h"

namespace opgate::operations {

const std::vector<std::string_view>& notify::all_events() {
  static const std::vector<std::string_view> all = {proposed,        approved, denied,
                                                    expired,         settled,  outcome_unknown,
                                                    needs_attention, reminder, escalated};
  return all;
}

std::vector<std::string_view> events_of(State from, Event event, Target to) {
  std::vector<std::string_view> out;
  if (event == Event::approve) out.push_back(notify::approved);
  if (event == Event::deny) out.push_back(notify::denied);
  if (event == Event::expire) out.push_back(notify::expired);
  if (to.state == State::settled) out.push_back(notify::settled);
  if (to.state == State::outcome_unknown && from != State::outcome_unknown)
    out.push_back(notify::outcome_unknown);
  return out;
}

bool notified_before(const pb::Notification& a, const pb::Notification& b) {
  return a.audit_seq() < b.audit_seq() ||
         (a.audit_seq() == b.audit_seq() && a.order_in_change() < b.order_in_change());
}

void emit(store::Transaction& txn, const pb::Operation& op, std::string_view type,
          int order_in_change) {
  pb::OutboxItem item;
  item.set_kind(pb::OUTBOX_NOTIFY_EVENT);
  item.set_operation_key(op.key());
  auto& n = *item.mutable_notification();
  n.set_type(std::string(type));
  // One change raises each type at most once: the change's audit sequence
  // number and the type name the event.
  n.set_event_id("evt_" + std::to_string(op.audit_seq()) + "_" +
                 std::string(type.substr(type.find('.') + 1)));
  n.set_created_at_ms(txn.now_ms());
  n.set_operation_json(boost::json::serialize(operation_json(op, false)));
  n.set_audit_seq(op.audit_seq());
  n.set_audit_hash(op.audit_hash());
  n.set_order_in_change(order_in_change);
  txn.keep_notification(n);
  // With no endpoint to deliver to there is nothing to fan out; an endpoint
  // configured later gets past events by replay.
  if (txn.fans_out_notifications()) txn.enqueue(std::move(item));
}

}  // namespace opgate::operations
