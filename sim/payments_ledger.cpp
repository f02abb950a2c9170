#include "sim/payments_ledger.h"

#include <algorithm>
#include <cctype>

#include "sim/ids.h"

namespace opgate::sim {
namespace json = boost::json;

namespace {

constexpr int64_t kMaxAmount = 99'999'999;  // Stripe's limit for eight-digit amounts
constexpr size_t kMaxIdLength = 255;
constexpr size_t kMaxMetadataKeys = 50;
constexpr size_t kMaxMetadataKeyLength = 40;
constexpr size_t kMaxMetadataValueLength = 500;
constexpr size_t kMaxDescriptionLength = 350;

StripeError invalid(std::string code, std::string message, std::string param = {}) {
  StripeError e;
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

StripeError not_found(std::string_view kind, std::string_view id, std::string param, int status) {
  StripeError e =
      invalid("resource_missing", "No such " + std::string(kind) + ": '" + std::string(id) + "'",
              std::move(param));
  e.status = status;
  return e;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool valid_currency(std::string_view c) {
  return c.size() == 3 &&
         std::all_of(c.begin(), c.end(), [](char ch) { return std::isalpha((unsigned char)ch); });
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

json::value optional_json(const std::optional<std::string>& s) {
  return s ? json::value(*s) : json::value(nullptr);
}

json::object metadata_json(const Metadata& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

// Splits the parameters into plain names and metadata[...] entries, and
// refuses names outside `allowed` (expand[...] is accepted and ignored).
std::optional<StripeError> split_params(const FormParams& params,
                                        std::initializer_list<std::string_view> allowed,
                                        Metadata& metadata) {
  for (const auto& [name, value] : params) {
    if (name.starts_with("metadata[")) {
      if (name.back() != ']' || name.size() <= 10)
        return invalid("parameter_unknown", "Invalid metadata parameter: " + name, name);
      std::string key = name.substr(9, name.size() - 10);
      if (key.find_first_of("[]") != std::string::npos)
        return invalid("parameter_unknown", "Invalid metadata parameter: " + name, name);
      if (key.size() > kMaxMetadataKeyLength)
        return invalid("parameter_invalid_string", "Metadata keys can have at most 40 characters.",
                       name);
      if (value.size() > kMaxMetadataValueLength)
        return invalid("parameter_invalid_string",
                       "Metadata values can have at most 500 characters.", name);
      if (!value.empty()) metadata[key] = value;  // an empty value unsets, as in Stripe
      continue;
    }
    if (name.starts_with("expand[")) continue;
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      return invalid("parameter_unknown", "Received unknown parameter: " + name, name);
  }
  if (metadata.size() > kMaxMetadataKeys)
    return invalid("parameter_invalid_string", "Metadata can have at most 50 keys.", "metadata");
  return std::nullopt;
}

const std::string* find(const FormParams& params, std::string_view name) {
  auto it = params.find(std::string(name));
  return it == params.end() ? nullptr : &it->second;
}

StripeError invalid_integer(std::string_view value) {
  return invalid("parameter_invalid_integer",
                 "Invalid integer: " + std::string(value.substr(0, 64)), "amount");
}

// Newest-first page over `ids` (oldest first), keeping those `keep` accepts.
template <typename Keep, typename ToJson>
StripeResult<ListPage> paginate(const std::vector<std::string>& ids, const ListQuery& q,
                                std::string_view kind, Keep keep, ToJson to_json_fn) {
  std::vector<const std::string*> list;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it)
    if (keep(*it)) list.push_back(&*it);
  auto position = [&](const std::string& id) -> std::optional<size_t> {
    for (size_t i = 0; i < list.size(); ++i)
      if (*list[i] == id) return i;
    return std::nullopt;
  };
  size_t begin = 0;
  size_t end = list.size();
  const size_t limit = static_cast<size_t>(q.limit);
  ListPage page;
  if (q.starting_after) {
    auto pos = position(*q.starting_after);
    if (!pos) return not_found(kind, *q.starting_after, "starting_after", 400);
    begin = *pos + 1;
    page.has_more = end - begin > limit;
    end = std::min(end, begin + limit);
  } else if (q.ending_before) {
    auto pos = position(*q.ending_before);
    if (!pos) return not_found(kind, *q.ending_before, "ending_before", 400);
    end = *pos;
    page.has_more = end > limit;
    begin = end > limit ? end - limit : 0;
  } else {
    page.has_more = end > limit;
    end = std::min(end, limit);
  }
  for (size_t i = begin; i < end; ++i) page.data.push_back(to_json_fn(*list[i]));
  return page;
}

// 503 once the simulator's object bound is reached: an api_error on the
// Stripe-shaped endpoints, code "full" on the admin ones.
StripeError too_many_objects(bool from_api) {
  StripeError e = invalid(from_api ? "" : "full", "The simulator holds too many objects.");
  if (from_api) e.type = "api_error";
  e.status = 503;
  return e;
}

}  // namespace

json::object stripe_error_json(const StripeError& error) {
  json::object e;
  e["type"] = error.type;
  if (!error.code.empty()) e["code"] = error.code;
  if (!error.decline_code.empty()) e["decline_code"] = error.decline_code;
  if (!error.param.empty()) e["param"] = error.param;
  e["message"] = error.message;
  return json::object{{"error", std::move(e)}};
}

json::object to_json(const Refund& r) {
  json::object o;
  o["id"] = r.id;
  o["object"] = "refund";
  o["amount"] = r.amount;
  o["charge"] = nullptr;
  o["created"] = r.created;
  o["currency"] = r.currency;
  o["metadata"] = metadata_json(r.metadata);
  o["payment_intent"] = r.payment_intent;
  o["reason"] = optional_json(r.reason);
  o["status"] = r.status;
  if (r.status == "failed") o["failure_reason"] = "unknown";
  return o;
}

json::object to_json(const BalanceTransaction& t) {
  json::object o;
  o["id"] = t.id;
  o["object"] = "customer_balance_transaction";
  o["amount"] = t.amount;
  o["created"] = t.created;
  o["currency"] = t.currency;
  o["customer"] = t.customer;
  o["description"] = optional_json(t.description);
  o["ending_balance"] = t.ending_balance;
  o["livemode"] = false;
  o["metadata"] = metadata_json(t.metadata);
  o["type"] = "adjustment";
  return o;
}

StripeResult<RefundRequest> parse_refund_request(const FormParams& params) {
  RefundRequest req;
  if (auto err = split_params(params, {"amount", "payment_intent", "reason"}, req.metadata))
    return *err;
  const auto* pi = find(params, "payment_intent");
  if (!pi || pi->empty())
    return invalid("parameter_missing",
                   "One of the following params should be provided for this request: "
                   "payment_intent or charge.",
                   "payment_intent");
  if (!valid_id(*pi)) return not_found("payment_intent", *pi, "payment_intent", 400);
  req.payment_intent = *pi;
  const auto* amount = find(params, "amount");
  if (!amount)
    return invalid("parameter_invalid_integer", "Missing required param: amount.", "amount");
  auto n = parse_int(*amount);
  if (!n || *n <= 0) return invalid_integer(*amount);
  if (*n > kMaxAmount)
    return invalid("amount_too_large", "Amount must be no more than 99999999.", "amount");
  req.amount = *n;
  if (const auto* reason = find(params, "reason"); reason && !reason->empty()) {
    if (*reason != "duplicate" && *reason != "fraudulent" && *reason != "requested_by_customer")
      return invalid("parameter_invalid_string",
                     "Invalid reason: must be one of duplicate, fraudulent, or "
                     "requested_by_customer",
                     "reason");
    req.reason = *reason;
  }
  return req;
}

StripeResult<BalanceTransactionRequest> parse_balance_transaction_request(
    const FormParams& params) {
  BalanceTransactionRequest req;
  if (auto err = split_params(params, {"amount", "currency", "description"}, req.metadata))
    return *err;
  const auto* amount = find(params, "amount");
  if (!amount) return invalid("parameter_missing", "Missing required param: amount.", "amount");
  auto n = parse_int(*amount);
  if (!n || *n == 0) return invalid_integer(*amount);
  if (*n > kMaxAmount || *n < -kMaxAmount)
    return invalid("amount_too_large", "Amount must be within -99999999..99999999.", "amount");
  req.amount = *n;
  const auto* currency = find(params, "currency");
  if (!currency)
    return invalid("parameter_missing", "Missing required param: currency.", "currency");
  if (!valid_currency(*currency))
    return invalid("parameter_invalid_string", "Invalid currency: " + currency->substr(0, 16),
                   "currency");
  req.currency = lower(*currency);
  if (const auto* d = find(params, "description"); d && !d->empty()) {
    if (d->size() > kMaxDescriptionLength)
      return invalid("parameter_invalid_string", "Description can have at most 350 characters.",
                     "description");
    req.description = *d;
  }
  return req;
}

StripeResult<ListQuery> parse_list_query(const std::optional<std::string>& limit,
                                         std::optional<std::string> starting_after,
                                         std::optional<std::string> ending_before) {
  ListQuery q;
  if (limit) {
    auto n = parse_int(*limit);
    if (!n || *n < 1 || *n > 100)
      return invalid("parameter_invalid_integer",
                     "Invalid limit: must be an integer between 1 and 100.", "limit");
    q.limit = *n;
  }
  if (starting_after && starting_after->empty()) starting_after.reset();
  if (ending_before && ending_before->empty()) ending_before.reset();
  if (starting_after && ending_before)
    return invalid("parameter_invalid_string",
                   "You may only specify one of these parameters: ending_before, starting_after.",
                   "ending_before");
  q.starting_after = std::move(starting_after);
  q.ending_before = std::move(ending_before);
  return q;
}

PaymentsLedger::PaymentsLedger(size_t max_objects) : max_objects_(max_objects) {}

bool PaymentsLedger::full_locked() const {
  return intents_.size() + customers_.size() + refunds_.size() + txns_.size() >= max_objects_;
}

StripeResult<PaymentIntent> PaymentsLedger::register_intent(PaymentIntent intent) {
  if (!valid_id(intent.id)) return invalid("invalid", "id must be [A-Za-z0-9_.-]{1,255}", "id");
  if (intent.amount <= 0 || intent.amount > kMaxAmount)
    return invalid("invalid", "amount must be in 1..99999999", "amount");
  if (!valid_currency(intent.currency))
    return invalid("invalid", "currency must be three letters", "currency");
  if (!intent.customer.empty() && !valid_id(intent.customer))
    return invalid("invalid", "customer must be [A-Za-z0-9_.-]{1,255}", "customer");
  intent.currency = lower(intent.currency);
  MutexLock lock(mu_);
  auto it = intents_.find(intent.id);
  const bool new_customer = !intent.customer.empty() && !customers_.contains(intent.customer);
  if ((it == intents_.end() || new_customer) && full_locked()) {
    return too_many_objects(/*from_api=*/false);
  }
  if (new_customer) customers_[intent.customer].id = intent.customer;
  if (it != intents_.end()) {
    intent.refunded = it->second.refunded;
    it->second = intent;
  } else {
    intent.refunded = 0;
    intents_.emplace(intent.id, intent);
  }
  return intent;
}

StripeResult<std::string> PaymentsLedger::register_customer(const std::string& id) {
  if (!valid_id(id)) return invalid("invalid", "id must be [A-Za-z0-9_.-]{1,255}", "id");
  MutexLock lock(mu_);
  if (customers_.contains(id)) return id;
  if (full_locked()) {
    return too_many_objects(/*from_api=*/false);
  }
  customers_[id].id = id;
  return id;
}

StripeResult<Refund> PaymentsLedger::create_refund(const RefundRequest& request,
                                                   const std::string& status, int64_t now_s) {
  MutexLock lock(mu_);
  auto it = intents_.find(request.payment_intent);
  if (it == intents_.end())
    return not_found("payment_intent", request.payment_intent, "payment_intent", 400);
  PaymentIntent& intent = it->second;
  const int64_t remaining = intent.amount - intent.refunded;
  if (request.amount > remaining)
    return invalid("amount_too_large",
                   "Refund amount (" + std::to_string(request.amount) +
                       ") is greater than unrefunded amount on charge (" +
                       std::to_string(remaining) + ")",
                   "amount");
  if (full_locked()) {
    return too_many_objects(/*from_api=*/true);
  }
  Refund r;
  r.id = new_id("re_");
  r.amount = request.amount;
  r.currency = intent.currency;
  r.payment_intent = intent.id;
  r.status = status;
  r.reason = request.reason;
  r.metadata = request.metadata;
  r.created = now_s;
  intent.refunded += r.amount;
  refund_order_.push_back(r.id);
  refunds_.emplace(r.id, r);
  return r;
}

StripeResult<BalanceTransaction> PaymentsLedger::create_balance_transaction(
    const std::string& customer_id, const BalanceTransactionRequest& request, int64_t now_s) {
  MutexLock lock(mu_);
  auto it = customers_.find(customer_id);
  if (it == customers_.end()) return not_found("customer", customer_id, "customer", 400);
  Customer& customer = it->second;
  if (!customer.currency.empty() && customer.currency != request.currency)
    return invalid("currency_mismatch",
                   "The customer's balance is in " + customer.currency + "; a transaction in " +
                       request.currency + " cannot be added.",
                   "currency");
  if (full_locked()) {
    return too_many_objects(/*from_api=*/true);
  }
  BalanceTransaction t;
  t.id = new_id("cbtxn_");
  t.amount = request.amount;
  t.currency = request.currency;
  t.customer = customer.id;
  t.description = request.description;
  t.metadata = request.metadata;
  t.created = now_s;
  customer.balance += request.amount;
  customer.currency = request.currency;
  t.ending_balance = customer.balance;
  customer.txn_ids.push_back(t.id);
  txn_order_.push_back(t.id);
  txns_.emplace(t.id, t);
  return t;
}

StripeResult<Refund> PaymentsLedger::settle_refund(const std::string& id,
                                                   const std::string& status) {
  if (status != "succeeded" && status != "failed")
    return invalid("parameter_invalid_string", "status must be succeeded or failed", "status");
  MutexLock lock(mu_);
  auto it = refunds_.find(id);
  if (it == refunds_.end()) return not_found("refund", id, "id", 404);
  Refund& r = it->second;
  if (r.status != "pending") {
    StripeError e = invalid("refund_not_pending", "Refund " + id + " is " + r.status + ".");
    e.status = 409;
    return e;
  }
  r.status = status;
  if (status == "failed") {
    auto pi = intents_.find(r.payment_intent);
    if (pi != intents_.end()) pi->second.refunded -= r.amount;
  }
  return r;
}

StripeResult<Refund> PaymentsLedger::get_refund(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = refunds_.find(id);
  if (it == refunds_.end()) return not_found("refund", id, "id", 404);
  return it->second;
}

StripeResult<ListPage> PaymentsLedger::list_refunds(
    const std::optional<std::string>& payment_intent, const ListQuery& query) const {
  MutexLock lock(mu_);
  if (payment_intent && !intents_.contains(*payment_intent))
    return not_found("payment_intent", *payment_intent, "payment_intent", 400);
  // The lambdas run within this call, under the lock; they read the map
  // through a pointer taken here, as the analysis does not follow the lock
  // into a lambda.
  const auto* refunds = &refunds_;
  return paginate(
      refund_order_, query, "refund",
      [&](const std::string& id) {
        return !payment_intent || refunds->at(id).payment_intent == *payment_intent;
      },
      [&](const std::string& id) { return to_json(refunds->at(id)); });
}

StripeResult<ListPage> PaymentsLedger::list_balance_transactions(const std::string& customer,
                                                                 const ListQuery& query) const {
  MutexLock lock(mu_);
  auto it = customers_.find(customer);
  if (it == customers_.end()) return not_found("customer", customer, "customer", 404);
  // Read under the lock through a pointer taken here (see list_refunds).
  const auto* txns = &txns_;
  return paginate(
      it->second.txn_ids, query, "customer_balance_transaction",
      [](const std::string&) { return true; },
      [&](const std::string& id) { return to_json(txns->at(id)); });
}

json::object PaymentsLedger::snapshot() const {
  MutexLock lock(mu_);
  json::array refunds;
  for (const auto& id : refund_order_) refunds.push_back(to_json(refunds_.at(id)));
  json::array txns;
  for (const auto& id : txn_order_) txns.push_back(to_json(txns_.at(id)));
  return json::object{{"refunds", std::move(refunds)}, {"balance_transactions", std::move(txns)}};
}

void PaymentsLedger::reset() {
  MutexLock lock(mu_);
  refunds_.clear();
  refund_order_.clear();
  txns_.clear();
  txn_order_.clear();
  for (auto& [id, intent] : intents_) intent.refunded = 0;
  for (auto& [id, customer] : customers_) {
    customer.balance = 0;
    customer.currency.clear();
    customer.txn_ids.clear();
  }
}

}  // namespace opgate::sim
