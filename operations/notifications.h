// Outbound notifications, as the domain raises them: each state change that
// people must hear about becomes a notification event, queued in the same
// transaction as the change (so a crash can neither lose nor invent one),
// with the operation as it is now and the audit chain's head. The outbox's
// notifier fans each event out to the configured endpoints and delivers it.
// Call inside Storage::transact.
#pragma once

#include <string_view>
#include <vector>

#include "common/result.h"
#include "operations/state_machine.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

namespace notify {
inline constexpr std::string_view proposed = "operation.proposed";
inline constexpr std::string_view approved = "operation.approved";
inline constexpr std::string_view denied = "operation.denied";
inline constexpr std::string_view expired = "operation.expired";
inline constexpr std::string_view settled = "operation.settled";
inline constexpr std::string_view outcome_unknown = "operation.outcome_unknown";
inline constexpr std::string_view needs_attention = "operation.needs_attention";
inline constexpr std::string_view reminder = "operation.reminder";
inline constexpr std::string_view escalated = "operation.escalated";
// Every event type, in the order above.
const std::vector<std::string_view>& all_events();
}  // namespace notify

// The events a transition raises: approve -> approved; deny -> denied and
// settled; expire -> expired and settled; any other settling event ->
// settled; into outcome_unknown -> outcome_unknown.
std::vector<std::string_view> events_of(State from, Event event, Target to);

// Keeps the event for the operation for replay and, while the storage fans
// out notifications (some endpoint is configured), queues it for the
// notifier (after the audit record of its change, whose head the event
// carries). `order_in_change`:
// its place among the events of the same change, which reach an endpoint in
// that order.
void emit(store::Transaction& txn, const pb::Operation& operation, std::string_view type,
          int order_in_change = 0);

// True if notification `a` comes before `b` of the same operation: an
// earlier change, or an earlier event of the same change.
bool notified_before(const pb::Notification& a, const pb::Notification& b);

}  // namespace opgate::operations
