#include "worker/orders.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <fstream>
#include <set>

#include "operations/proposal.h"

namespace opgate::worker {

namespace json = boost::json;

Result<pb::Order> parse_order(std::string_view text) {
  json::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object()) return make_error("bad_order", "An order must be a JSON object.");
  auto& o = v.as_object();
  static const std::set<std::string> known = {
      "order_id",       "owner",  "amount_minor", "currency", "payment_intent", "customer",
      "payment_method", "status", "placed_at",    "note",     "refunded_minor"};
  for (const auto& [k, _] : o)
    if (!known.count(std::string(k)))
      return make_error("bad_order",
                        fmt::format("Unknown order field '{}'.", std::string(k).substr(0, 64)));
  auto str = [&](const char* k, bool required, std::string& out) -> std::optional<Error> {
    auto* p = o.if_contains(k);
    if (!p) {
      if (required) return make_error("bad_order", fmt::format("Order field '{}' is required.", k));
      return std::nullopt;
    }
    if (!p->is_string())
      return make_error("bad_order", fmt::format("Order field '{}' must be a string.", k));
    out = std::string(p->as_string());
    return std::nullopt;
  };
  auto num = [&](const char* k, bool required, int64_t& out) -> std::optional<Error> {
    auto* p = o.if_contains(k);
    if (!p) {
      if (required) return make_error("bad_order", fmt::format("Order field '{}' is required.", k));
      return std::nullopt;
    }
    if (!p->is_int64() && !(p->is_uint64() && p->as_uint64() <= INT64_MAX))
      return make_error("bad_order", fmt::format("Order field '{}' must be an integer.", k));
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
    return make_error("bad_order",
                      "order_id and owner must be 1-64 characters from A-Z, a-z, "
                      "0-9, '.', '_' and '-'.");
  if (currency.size() != 3 || !std::all_of(currency.begin(), currency.end(), ::isupper))
    return make_error("bad_order", "currency must be a three-letter upper-case code.");
  if (status != "paid" && status != "refunded" && status != "cancelled")
    return make_error("bad_order", "status must be paid, refunded or cancelled.");
  if (amount <= 0) return make_error("bad_order", "amount_minor must be positive.");
  if (refunded < 0 || refunded > amount)
    return make_error("bad_order", "refunded_minor must be between 0 and amount_minor.");
  if (pi.empty() || pi.size() > 255 || customer.empty() || customer.size() > 255 ||
      method.size() > 255 || note.size() > 4096)
    return make_error("bad_order", "An order field is empty or too long.");
  pb::Order order;
  order.set_order_id(order_id);
  order.set_owner(owner);
  order.set_amount_minor(amount);
  order.set_currency(currency);
  order.set_payment_intent(pi);
  order.set_customer(customer);
  order.set_payment_method(method);
  order.set_status(status);
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
                                      {"status", o.status()},
                                      {"placed_at", o.placed_at()},
                                      {"note", o.note()},
                                      {"refunded_minor", o.refunded_minor()}});
}

Result<std::vector<pb::Order>> read_orders_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error("orders_file", "cannot read orders file " + path);
  std::vector<pb::Order> orders;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto order = parse_order(line);
    if (!order)
      return make_error("orders_file",
                        fmt::format("{} line {}: {}", path, line_no, order.error().message));
    orders.push_back(std::move(*order));
  }
  return orders;
}

Result<size_t> import_orders_file(store::Store& store, const std::string& path, int64_t now_ms) {
  auto orders = read_orders_file(path);
  if (!orders) return orders.error();
  store::Batch batch;
  for (auto& order : *orders) {
    // Refunds opgate has executed stay recorded: a re-seed must not make a
    // refunded order refundable again.
    auto stored = store.get_message<pb::Order>(store::Cf::orders, order.order_id());
    if (!stored) return stored.error();
    if (stored->has_value() && (*stored)->refunded_minor() > order.refunded_minor() &&
        (*stored)->amount_minor() == order.amount_minor()) {
      order.set_refunded_minor((*stored)->refunded_minor());
      if (order.refunded_minor() >= order.amount_minor()) order.set_status("refunded");
    }
    order.set_updated_at_ms(now_ms);
    batch.put(store::Cf::orders, order.order_id(), order);
  }
  if (Status s = store.commit(batch); !s) return s.error();
  return orders->size();
}

}  // namespace opgate::worker
