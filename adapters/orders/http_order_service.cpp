#include "adapters/orders/http_order_service.h"

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/json_fields.h"
#include "http/client.h"
#include "operations/orders.h"

namespace opgate::adapters {

namespace json = boost::json;
using operations::CancelResult;
using operations::FetchedOrder;
using operations::LookupResult;
using operations::OrderRead;
using operations::OrderService;
using operations::PaymentProvider;
using operations::PaymentRequest;
using operations::PaymentResult;
using operations::Verdict;

namespace {

// The error code of a body {"error": {"code": "..."}}, or "".
std::string error_code_of(std::string_view body) {
  json::error_code ec;
  auto v = json::parse(body, ec);
  if (ec || !v.is_object()) return "";
  auto* e = v.as_object().if_contains("error");
  if (!e || !e->is_object()) return "";
  return string_field(e->as_object(), "code");
}

class HttpOrderService final : public OrderService {
 public:
  explicit HttpOrderService(OrderServiceOptions o) : o_(std::move(o)) {
    while (!o_.base_url.empty() && o_.base_url.back() == '/') o_.base_url.pop_back();
  }

  FetchedOrder get(const std::string& order_id) override {
    FetchedOrder out;
    auto res = http::send(request("GET", order_id, ""));
    if (!res) {
      out.error = "the order service cannot be reached: " + res.error().message;
      return out;
    }
    if (res->status == 404 && error_code_of(res->body) == "order_not_found") {
      out.read = OrderRead::absent;
      return out;
    }
    if (res->status != 200) {
      // A 404 that does not say the order is unknown is a wrong base_url or
      // a proxy's page: not proof that the order does not exist.
      out.error = fmt::format("the order service answered {}", res->status);
      return out;
    }
    auto order = operations::parse_order(res->body);
    if (!order) {
      out.error = "the order service answered malformed data: " + order.error().message;
      return out;
    }
    if (order->order_id() != order_id) {
      out.error = fmt::format("the order service answered with order '{}' when asked for '{}'",
                              order->order_id(), order_id);
      return out;
    }
    out.read = OrderRead::found;
    out.order = std::move(*order);
    return out;
  }

  CancelResult cancel(const std::string& order_id, const std::string& idempotency_key,
                      const std::string& reason) override {
    auto req = request("POST", order_id, "/cancel");
    req.headers["Content-Type"] = "application/json";
    req.headers["Idempotency-Key"] = idempotency_key;
    req.body = json::serialize(json::object{{"reason", reason}});
    auto res = http::send(req);
    CancelResult out;
    if (!res) {
      // Retried under the same key, only the service's answer settles it.
      out.error = "the order service cannot be reached: " + res.error().message;
      return out;
    }
    if (res->status == 200) {
      auto order = operations::parse_order(res->body);
      if (order && order->order_id() == order_id && order->status() == pb::ORDER_CANCELLED) {
        out.verdict = Verdict::succeeded;
        return out;
      }
      out.error = "the order service answered the cancellation with malformed data";
      return out;
    }
    const std::string code = error_code_of(res->body);
    if (code == "already_cancelled") {
      // Cancelled before (an earlier attempt whose key has expired, or a
      // person): the state asked for holds.
      out.verdict = Verdict::succeeded;
      return out;
    }
    if ((res->status == 409 || res->status == 422 || res->status == 404) && !code.empty() &&
        code != "idempotency_key_in_use") {
      out.verdict = Verdict::refused;
      out.error = fmt::format("the order service refused the cancellation ({})", code);
      return out;
    }
    out.error = fmt::format("the order service answered {}", res->status);
    return out;
  }

 private:
  http::ClientRequest request(const char* method, const std::string& order_id,
                              std::string_view suffix) const {
    http::ClientRequest r;
    r.method = method;
    r.url = fmt::format("{}/orders/{}{}", o_.base_url, http::url_component(order_id), suffix);
    r.headers["Authorization"] = "Bearer " + o_.token;
    r.headers["Accept"] = "application/json";
    r.timeout = std::chrono::milliseconds(o_.timeout_ms);
    r.ca_file = o_.ca_file;
    return r;
  }

  OrderServiceOptions o_;
};

class CancellingProvider final : public PaymentProvider {
 public:
  CancellingProvider(PaymentProvider& payments, OrderService& orders)
      : payments_(payments), orders_(orders) {}

  PaymentResult execute(const PaymentRequest& req) override {
    if (!req.cancel_order) return payments_.execute(req);
    auto cancelled = orders_.cancel(req.order_id, req.idempotency_key + "-cancel", req.reason);
    if (cancelled.verdict != Verdict::succeeded) {
      PaymentResult out;
      out.verdict =
          cancelled.verdict == Verdict::refused ? Verdict::refused : Verdict::indeterminate;
      out.error = cancelled.error;
      return out;
    }
    // The cancellation is proven; now, and only now, the refund.
    PaymentResult refunded = payments_.execute(req);
    if (refunded.verdict == Verdict::refused) {
      refunded.error =
          "the order is cancelled, but the provider refused the refund: " + refunded.error;
      refunded.attention =
          "the order is cancelled at the order service, but the provider refused its refund";
    }
    return refunded;
  }

  // The refund is proven at the provider, by its operation_key, whatever the
  // order service says now: an order reported as not cancelled (its status
  // changed again, or the service forgot the request) proves nothing about
  // a refund that went out. Absent there, executing again is safe either
  // way: the cancellation replays under its key (or is already in place),
  // and only then the refund goes out.
  LookupResult find(const PaymentRequest& req) override {
    LookupResult found = payments_.find(req);
    if (req.cancel_order && found.lookup == operations::Lookup::found &&
        found.object.verdict == Verdict::refused)
      found.object.attention =
          "the order is cancelled at the order service, but the provider reports its refund "
          "failed";
    return found;
  }

 private:
  PaymentProvider& payments_;
  OrderService& orders_;
};

}  // namespace

std::unique_ptr<OrderService> make_http_order_service(OrderServiceOptions options) {
  return std::make_unique<HttpOrderService>(std::move(options));
}

std::unique_ptr<PaymentProvider> make_cancelling_provider(PaymentProvider& payments,
                                                          OrderService& orders) {
  return std::make_unique<CancellingProvider>(payments, orders);
}

}  // namespace opgate::adapters
