// Orders are server-owned business data: parsed and validated strictly from
// JSON (seed file, PUT /v1/orders/{id}) and stored through the storage port.
// What opgate itself moved for an order (OrderFunds) is kept apart, so no
// order update can make a refunded order refundable again. Every accepted
// change is an audit record naming who made it. Parsing is pure;
// thread-safe.
#pragma once

#include <array>
#include <boost/json/array.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "common/result.h"
#include "operations/order_service.h"
#include "operations/policy.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::operations {

Result<pb::Order> parse_order(std::string_view json_text);

// Who changes the store's copy of an order read from the business's order
// service (orders.source = "http"), in the audit chain.
inline constexpr const char* kOrderServicePrincipal = "order-service";

// The words a delivery event's status may be. Policy reads these (and the
// event times), never an event's free-text detail.
inline constexpr std::array<std::string_view, 8> kDeliveryStatuses = {
    "label_created", "in_transit",     "out_for_delivery", "delivered",
    "delayed",       "failed_attempt", "returned",         "lost"};
bool valid_delivery_status(std::string_view status);
// Whether any delivery event says the order was delivered.
bool delivered(const pb::Order& order);
// The events as JSON: [{"at", "status", "detail"}], oldest first.
boost::json::array deliveries_json(const pb::Order& order);

std::string order_to_json(const pb::Order& order);
std::string_view order_status_text(pb::OrderStatus status);

// Every order of an NDJSON file (blank lines skipped); a bad line is an
// error naming the file and its line number.
Result<std::vector<pb::Order>> read_orders_file(const std::string& path);

// Inserts or replaces an order, with an audit record of the change by
// `principal`. Unchanged orders write nothing.
Status upsert_order(store::Transaction& txn, pb::Order order, const std::string& principal);

// The business's order service's answer for one order, read just before a
// decision or an execution (orders.source = "http"): the order, or nothing
// when the service has no such order.
struct SourcedOrder {
  std::optional<pb::Order> order;
};

// The order as the order service reads it now, for a decision or an
// execution about to re-check it: read before the transaction (no network
// call is made inside one). Nothing without a service (embedded orders:
// the store's copy is the order); orders_unavailable when the service
// cannot say, so nothing goes ahead on stale data. Counts each read in
// opgate_order_service_reads_total.
Result<std::optional<SourcedOrder>> source_order(OrderService* service, const std::string& order_id,
                                                 Metrics& metrics);

// Whether the proposal may still go ahead, read at a decision or a claim:
// the order (as `sourced`, or the store's copy; the store's copy is first
// brought up to date with the service's answer) and what opgate moved for
// it, checked against the policy in force. `refusal` is the reason it
// must be rejected, if any; `order_changed` whether the order itself moved
// (or vanished) since the proposal.
struct Recheck {
  std::optional<std::string> refusal;
  bool order_changed = false;
};
Result<Recheck> recheck_now(store::Transaction& txn, const pb::Proposal& proposal,
                            const PolicyConfig& policy, const std::optional<SourcedOrder>& sourced);

// Upserts every order in one transaction.
Result<size_t> import_orders(store::Storage& storage, std::vector<pb::Order> orders,
                             const std::string& principal);

}  // namespace opgate::operations
