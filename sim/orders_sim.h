// `opgate-sim orders`: the business's order service that
// `orders.source = "http"` reads. GET /orders/{id} answers the order in the
// seed-file format (404 {"error":{"code":"order_not_found"}} if none);
// POST /orders/{id}/cancel with an Idempotency-Key cancels a paid order
// that was not delivered (409 "not_cancellable", 409 "already_cancelled"),
// and a repeat of the key replays the first answer. A bearer token guards
// both. Fault injection (subject: the order id) adds "malformed" to the
// transport faults: a 200 whose body is not an order. Admin: PUT
// /_sim/orders/{id} replaces an order (the business changed it), GET
// /_sim/orders/{id}, GET /_sim/stats (cancel requests and cancellations
// per order), POST|GET|DELETE /_sim/faults, POST /_sim/reset.
// Thread-safe.
#pragma once

#include <boost/json.hpp>
#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/result.h"
#include "http/message.h"
#include "http/router.h"
#include "sim/faults.h"
#include "sim/idempotency.h"

namespace opgate::sim {

class OrdersSim {
 public:
  // `token`: the only accepted bearer token; empty accepts any.
  OrdersSim(std::string token, const Clock& clock);
  OrdersSim(const OrdersSim&) = delete;
  OrdersSim& operator=(const OrdersSim&) = delete;

  // Every order of an NDJSON file; error "orders_file" naming the line.
  Status load_orders(const std::string& path) EXCLUDES(mu_);

  http::Response handle(http::Request&& request) EXCLUDES(mu_);

 private:
  http::Response get_order(const http::Request& request, const std::string& id) EXCLUDES(mu_);
  http::Response cancel(const http::Request& request, const std::string& id) EXCLUDES(mu_);
  http::Response cancel_now(const std::string& id) EXCLUDES(mu_);

  std::string token_;
  FaultTable faults_;
  IdempotencyStore idempotency_;
  http::Router admin_;
  Mutex mu_;
  std::map<std::string, boost::json::object> orders_ GUARDED_BY(mu_);
  struct Counts {
    int64_t cancel_requests = 0;
    int64_t cancellations = 0;
  };
  std::map<std::string, Counts> counts_ GUARDED_BY(mu_);
};

}  // namespace opgate::sim
