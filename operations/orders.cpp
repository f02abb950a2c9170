#include "operations/orders.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <boost/json.hpp>
#include <fstream>
#include <set>

#include "common/text.h"
#include "operations/keys.h"

namespace opgate::operations {

namespace json = boost::json;

namespace {

constexpr size_t kMaxDeliveryEvents = 100;

Result<std::vector<pb::DeliveryEvent>> parse_deliveries(const json::value& v) {
  if (!v.is_array())
    return make_error(errc::bad_order, "Order field 'delivery' must be a list of events.");
  if (v.as_array().size() > kMaxDeliveryEvents)
    return make_error(errc::bad_order,
                      fmt::format("An order has at most {} delivery events.", kMaxDeliveryEvents));
  std::vector<pb::DeliveryEvent> out;
  for (const auto& item : v.as_array()) {
    const auto* e = item.if_object();
    if (!e)
      return make_error(errc::bad_order,
                        "A delivery event must be an object with at, status and detail.");
    for (const auto& [k, _] : *e)
      if (k != "at" && k != "status" && k != "detail")
        return make_error(errc::bad_order,
                          fmt::format("Unknown delivery event field '{}'.", utf8_prefix(k, 64)));
    const auto* at = e->if_contains("at");
    const auto* status = e->if_contains("status");
    const auto* detail = e->if_contains("detail");
    if (!at || !(at->is_int64() || (at->is_uint64() && at->as_uint64() <= INT64_MAX)))
      return make_error(errc::bad_order, "A delivery event's 'at' must be an integer (Unix s).");
    if (!status || !status->is_string() || !valid_delivery_status(status->as_string()))
      return make_error(errc::bad_order,
                        fmt::format("A delivery event's 'status' must be one of {}.",
                                    fmt::join(kDeliveryStatuses, ", ")));
    if (detail && (!detail->is_string() || detail->as_string().size() > 1000))
      return make_error(errc::bad_order,
                        "A delivery event's 'detail' must be text of at most 1000 characters.");
    pb::DeliveryEvent event;
    event.set_at(at->to_number<int64_t>());
    event.set_status(std::string(status->as_string()));
    if (detail) event.set_detail(std::string(detail->as_string()));
    out.push_back(std::move(event));
  }
  return out;
}

}  // namespace

bool valid_delivery_status(std::string_view status) {
  return std::find(kDeliveryStatuses.begin(), kDeliveryStatuses.end(), status) !=
         kDeliveryStatuses.end();
}

bool delivered(const pb::Order& order) {
  for (const auto& e : order.deliveries())
    if (e.status() == "delivered") return true;
  return false;
}

json::array deliveries_json(const pb::Order& order) {
  json::array out;
  for (const auto& e : order.deliveries())
    out.push_back(json::object{{"at", e.at()}, {"status", e.status()}, {"detail", e.detail()}});
  return out;
}

Result<pb::Order> parse_order(std::string_view text) {
  json::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object()) return make_error(errc::bad_order, "An order must be a JSON object.");
  auto& o = v.as_object();
  static const std::set<std::string> known = {
      "order_id",       "owner",          "amount_minor", "currency",  "payment_intent",
      "customer",       "payment_method", "status",       "placed_at", "note",
      "refunded_minor", "delivery",       "deliveries"};
  for (const auto& [k, _] : o)
    if (!known.count(std::string(k)))
      return make_error(errc::bad_order,
                        fmt::format("Unknown order field '{}'.", utf8_prefix(k, 64)));
  auto str = [&](const char* k, bool required, std::string& out) -> std::optional<Error> {
    auto* p = o.if_contains(k);
    if (!p) {
      if (required)
        return make_error(errc::bad_order, fmt::format("Order field '{}' is required.", k));
      return std::nullopt;
    }
    if (!p->is_string())
      return make_error(errc::bad_order, fmt::format("Order field '{}' must be a string.", k));
    out = std::string(p->as_string());
    return std::nullopt;
  };
  auto num = [&](const char* k, bool required, int64_t& out) -> std::optional<Error> {
    auto* p = o.if_contains(k);
    if (!p) {
      if (required)
        return make_error(errc::bad_order, fmt::format("Order field '{}' is required.", k));
      return std::nullopt;
    }
    if (!p->is_int64() && !(p->is_uint64() && p->as_uint64() <= INT64_MAX))
      return make_error(errc::bad_order, fmt::format("Order field '{}' must be an integer.", k));
    out = p->to_number<int64_t>();
    return std::nullopt;
  };
  std::string order_id, owner, currency, pi, customer, method, status, note;
  int64_t amount = 0, placed_at = 0, refunded = 0;
  for (auto e :
       {str("order_id", true, order_id), str("owner", true, owner), str("currency", true, currency),
        str("payment_intent", true, pi), str("customer", true, customer),
        str("payment_method", true, method), str("status", true, status), str("note", false, note),
        num("amount_minor", true, amount), num("placed_at", true, placed_at),
        num("refunded_minor", false, refunded)})
    if (e) return *e;
  if (!operations::valid_identifier(order_id) || !operations::valid_identifier(owner))
    return make_error(errc::bad_order,
                      "order_id and owner must be 1-64 characters from A-Z, a-z, "
                      "0-9, '.', '_' and '-'.");
  if (currency.size() != 3 || !std::all_of(currency.begin(), currency.end(), ::isupper))
    return make_error(errc::bad_order, "currency must be a three-letter upper-case code.");
  pb::OrderStatus parsed_status = pb::ORDER_STATUS_UNSPECIFIED;
  for (auto st : {pb::ORDER_PAID, pb::ORDER_REFUNDED, pb::ORDER_CANCELLED})
    if (order_status_text(st) == status) parsed_status = st;
  if (parsed_status == pb::ORDER_STATUS_UNSPECIFIED)
    return make_error(errc::bad_order, "status must be paid, refunded or cancelled.");
  if (amount <= 0) return make_error(errc::bad_order, "amount_minor must be positive.");
  if (refunded < 0 || refunded > amount)
    return make_error(errc::bad_order, "refunded_minor must be between 0 and amount_minor.");
  if (pi.empty() || pi.size() > 255 || customer.empty() || customer.size() > 255 ||
      method.size() > 255 || note.size() > 4096)
    return make_error(errc::bad_order, "An order field is empty or too long.");
  pb::Order order;
  // "delivery" is the field's name; "deliveries" is read too, from seed
  // files written before the name was fixed.
  if (o.contains("delivery") && o.contains("deliveries"))
    return make_error(errc::bad_order, "An order has one 'delivery' list, not two.");
  const json::value* d = o.if_contains("delivery");
  if (!d) d = o.if_contains("deliveries");
  if (d) {
    auto parsed = parse_deliveries(*d);
    if (!parsed) return parsed.error();
    *order.mutable_deliveries() = {parsed->begin(), parsed->end()};
  }
  order.set_order_id(order_id);
  order.set_owner(owner);
  order.set_amount_minor(amount);
  order.set_currency(currency);
  order.set_payment_intent(pi);
  order.set_customer(customer);
  order.set_payment_method(method);
  order.set_status(parsed_status);
  order.set_placed_at(placed_at);
  order.set_note(note);
  order.set_refunded_minor(refunded);
  return order;
}

std::string order_to_json(const pb::Order& o) {
  return json::serialize(json::object{{"order_id", o.order_id()},
                                      {"owner", o.owner()},
                                      {"amount_minor", o.amount_minor()},
                                      {"currency", o.currency()},
                                      {"payment_intent", o.payment_intent()},
                                      {"customer", o.customer()},
                                      {"payment_method", o.payment_method()},
                                      {"status", order_status_text(o.status())},
                                      {"placed_at", o.placed_at()},
                                      {"note", o.note()},
                                      {"refunded_minor", o.refunded_minor()},
                                      {"delivery", deliveries_json(o)}});
}

Result<std::vector<pb::Order>> read_orders_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(errc::orders_file, "cannot read orders file " + path);
  std::vector<pb::Order> orders;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto order = parse_order(line);
    if (!order)
      return make_error(errc::orders_file,
                        fmt::format("{} line {}: {}", path, line_no, order.error().message));
    orders.push_back(std::move(*order));
  }
  return orders;
}

Status upsert_order(store::Transaction& txn, pb::Order order, const std::string& principal) {
  OPGATE_ASSIGN_OR_RETURN(auto stored, txn.order(order.order_id()));
  if (stored) {
    pb::Order same = *stored;
    same.set_updated_at_ms(order.updated_at_ms());
    if (same.SerializeAsString() == order.SerializeAsString()) return Status::Ok();
  }
  order.set_updated_at_ms(txn.now_ms());
  txn.put_order(order);
  pb::AuditRecord record;
  record.set_principal(principal);
  record.set_action(stored ? "order_update" : "order_create");
  record.set_details_json(json::serialize(json::object{
      {"order_id", order.order_id()},
      {"owner", order.owner()},
      {"amount_minor", order.amount_minor()},
      {"currency", order.currency()},
      {"status", order_status_text(order.status())},
      {"refunded_minor", order.refunded_minor()},
      {"previous", stored ? json::value(json::parse(order_to_json(*stored))) : json::value()}}));
  txn.append_audit(std::move(record));
  return Status::Ok();
}

Result<std::optional<SourcedOrder>> source_order(OrderService* service, const std::string& order_id,
                                                 Metrics& metrics) {
  using Sourced = std::optional<SourcedOrder>;
  if (!service) return Sourced();
  auto fetched = service->get(order_id);
  metrics.inc("opgate_order_service_reads_total",
              {{"result", std::string(read_name(fetched.read))}});
  if (fetched.read == OrderRead::unavailable)
    return make_error(errc::orders_unavailable,
                      "The order service cannot be read (" + fetched.error +
                          "), so the order cannot be re-checked; nothing goes ahead until it can. "
                          "Try again shortly.");
  if (fetched.read == OrderRead::absent) return Sourced(SourcedOrder{});
  return Sourced(SourcedOrder{std::move(fetched.order)});
}

Result<Recheck> recheck_now(store::Transaction& txn, const pb::Proposal& p,
                            const PolicyConfig& policy,
                            const std::optional<SourcedOrder>& sourced) {
  if (sourced) {
    if (!sourced->order) return Recheck{"The order no longer exists.", true};
    OPGATE_TRY(upsert_order(txn, *sourced->order, kOrderServicePrincipal));
  }
  OPGATE_ASSIGN_OR_RETURN(auto order, txn.order(p.order_id()));
  if (!order) return Recheck{"The order no longer exists.", true};
  OPGATE_ASSIGN_OR_RETURN(auto funds, txn.funds(p.order_id()));
  return Recheck{recheck(p, *order, funds, policy, txn.now_ms() / 1000), order_changed(p, *order)};
}

Result<size_t> import_orders(store::Storage& storage, std::vector<pb::Order> orders,
                             const std::string& principal) {
  OPGATE_TRY(storage.transact([&](store::Transaction& txn) -> Status {
    for (const auto& order : orders) OPGATE_TRY(upsert_order(txn, order, principal));
    return Status::Ok();
  }));
  return orders.size();
}

std::string_view order_status_text(pb::OrderStatus status) {
  switch (status) {
    case pb::ORDER_PAID:
      return "paid";
    case pb::ORDER_REFUNDED:
      return "refunded";
    case pb::ORDER_CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

}  // namespace opgate::operations
