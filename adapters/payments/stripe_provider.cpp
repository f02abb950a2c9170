#include "adapters/payments/stripe_provider.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <optional>

#include "common/json_fields.h"
#include "http/client.h"

namespace opgate::adapters {

namespace json = boost::json;
using operations::Lookup;
using operations::LookupResult;
using operations::PaymentProvider;
using operations::PaymentRequest;
using operations::PaymentResult;
using operations::Verdict;

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A provider object (refund or balance transaction) → verdict.
PaymentResult classify_object(const json::object& o) {
  PaymentResult r;
  r.object_id = string_field(o, "id");
  r.provider_status = string_field(o, "status");
  const std::string& st = r.provider_status;
  if (string_field(o, "object") == "customer_balance_transaction" || st == "succeeded")
    r.verdict = Verdict::succeeded;
  else if (st == "pending" || st == "requires_action")
    r.verdict = Verdict::pending;
  else if (st == "failed" || st == "canceled")
    r.verdict = Verdict::refused;
  else
    r.verdict = Verdict::pending;
  return r;
}

// Why the provider's object is not what was asked for: another amount (a
// balance transaction's amount is the credit, negative) or another currency
// (a refund is in its payment intent's, whatever the order said). Such an
// object settles nothing: the operation waits in outcome_unknown for a
// person, never recorded at the proposal's amount.
std::optional<std::string> mismatch(const json::object& o, const PaymentRequest& req) {
  const int64_t expected =
      req.kind == PaymentRequest::Kind::refund ? req.amount_minor : -req.amount_minor;
  // Any number that is a whole amount (1500.0 too), as Boost.JSON converts
  // it without loss.
  std::optional<int64_t> amount;
  if (const auto* value = o.if_contains("amount")) {
    json::error_code ec;
    const auto n = value->to_number<int64_t>(ec);
    if (!ec) amount = n;
  }
  const std::string currency = lower(string_field(o, "currency"));
  if (amount == expected && currency == lower(req.currency)) return std::nullopt;
  return fmt::format(
      "the provider's object {} moved {} {}, not the {} {} asked for: it settles nothing, a "
      "person must look",
      string_field(o, "id"), amount ? std::to_string(*amount) : "?",
      currency.empty() ? "?" : currency, expected, lower(req.currency));
}

class StripeProvider final : public PaymentProvider {
 public:
  explicit StripeProvider(StripeOptions o) : o_(std::move(o)) {
    while (!o_.base_url.empty() && o_.base_url.back() == '/') o_.base_url.pop_back();
  }

  PaymentResult execute(const PaymentRequest& req) override {
    std::string path, form;
    if (req.kind == PaymentRequest::Kind::refund) {
      path = "/v1/refunds";
      form = fmt::format(
          "payment_intent={}&amount={}&reason=requested_by_customer&"
          "metadata%5Boperation_key%5D={}",
          http::url_component(req.payment_intent), req.amount_minor,
          http::url_component(req.operation_key));
    } else {
      path =
          fmt::format("/v1/customers/{}/balance_transactions", http::url_component(req.customer));
      form = fmt::format("amount={}&currency={}&description={}&metadata%5Boperation_key%5D={}",
                         -req.amount_minor, lower(req.currency),
                         http::url_component("opgate " + req.reason),
                         http::url_component(req.operation_key));
    }
    http::ClientRequest http_req = base("POST", path);
    http_req.headers["Content-Type"] = "application/x-www-form-urlencoded";
    http_req.headers["Idempotency-Key"] = req.idempotency_key;
    http_req.body = std::move(form);
    auto res = http::send(http_req);
    PaymentResult out;
    if (!res) {
      // Whether or not the request reached the provider, only the provider's
      // answer may settle the operation: connect failures are retried safely
      // under the same key, so they too stay indeterminate.
      out.error = res.error().message;
      return out;
    }
    json::error_code ec;
    auto v = json::parse(res->body, ec);
    const json::object* obj = (!ec && v.is_object()) ? &v.as_object() : nullptr;
    if (res->status == 200 && obj) {
      PaymentResult answer = classify_object(*obj);
      if (auto why = mismatch(*obj, req)) {
        // Not an object on its way to this operation's end: no status that
        // would hold a resolution back.
        answer.verdict = Verdict::indeterminate;
        answer.provider_status.clear();
        answer.error = std::move(*why);
      }
      return answer;
    }
    if (res->status == 402 || res->status == 400 || res->status == 404) {
      std::string type, code, message;
      if (obj) {
        if (auto* e = obj->if_contains("error"); e && e->is_object()) {
          type = string_field(e->as_object(), "type");
          code = string_field(e->as_object(), "code");
          message = string_field(e->as_object(), "message");
        }
      }
      // An idempotency error means our own earlier request is still in
      // flight or was different; it is not a refusal of the operation.
      if (type == "card_error" || type == "invalid_request_error") {
        out.verdict = Verdict::refused;
        out.error = fmt::format("{}: {}", code.empty() ? type : code, message);
        return out;
      }
    }
    out.error = fmt::format("provider answered {}", res->status);
    return out;
  }

  LookupResult find(const PaymentRequest& req) override {
    LookupResult out;
    std::string path = req.kind == PaymentRequest::Kind::refund
                           ? fmt::format("/v1/refunds?payment_intent={}&limit=100",
                                         http::url_component(req.payment_intent))
                           : fmt::format("/v1/customers/{}/balance_transactions?limit=100",
                                         http::url_component(req.customer));
    std::string starting_after;
    for (int page = 0; page < 100; ++page) {
      auto http_req =
          base("GET", starting_after.empty()
                          ? path
                          : path + "&starting_after=" + http::url_component(starting_after));
      auto res = http::send(http_req);
      if (!res) {
        out.error = res.error().message;
        return out;
      }
      json::error_code ec;
      auto v = json::parse(res->body, ec);
      if (res->status != 200 || ec || !v.is_object()) {
        out.error = fmt::format("provider listing answered {}", res->status);
        return out;
      }
      auto* data = v.as_object().if_contains("data");
      if (!data || !data->is_array()) {
        out.error = "provider listing has no data";
        return out;
      }
      for (auto& item : data->as_array()) {
        if (!item.is_object()) continue;
        auto& o = item.as_object();
        starting_after = string_field(o, "id");
        auto* md = o.if_contains("metadata");
        if (md && md->is_object() &&
            string_field(md->as_object(), "operation_key") == req.operation_key) {
          if (auto why = mismatch(o, req)) {
            out.error = std::move(*why);  // unreachable: proves nothing either way
            return out;
          }
          out.lookup = Lookup::found;
          out.object = classify_object(o);
          return out;
        }
      }
      auto* more = v.as_object().if_contains("has_more");
      if (!more || !more->is_bool()) {
        out.error = "provider listing does not say whether it is complete";
        return out;
      }
      if (!more->as_bool()) {
        out.lookup = Lookup::absent;
        return out;
      }
      if (starting_after.empty()) {
        out.error = "provider listing cannot be paged";
        return out;
      }
    }
    out.error = "provider listing is too long to prove absence";
    return out;
  }

 private:
  http::ClientRequest base(const char* method, const std::string& path) {
    http::ClientRequest r;
    r.method = method;
    r.url = o_.base_url + path;
    r.timeout = std::chrono::milliseconds(o_.timeout_ms);
    r.ca_file = o_.ca_file;
    r.headers["Authorization"] = "Bearer " + o_.secret_key;
    return r;
  }

  StripeOptions o_;
};

}  // namespace

std::unique_ptr<PaymentProvider> make_stripe_provider(StripeOptions options) {
  return std::make_unique<StripeProvider>(std::move(options));
}

}  // namespace opgate::adapters
