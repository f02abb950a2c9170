// The order service port (operations/order_service.h) over HTTP, and the
// payment provider that carries out a cancel_order operation through it.
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "operations/order_service.h"
#include "operations/payment_provider.h"

namespace opgate::adapters {

struct OrderServiceOptions {
  std::string base_url;  // http(s)://host:port[/prefix]
  std::string token;     // sent as "Authorization: Bearer ..."
  int timeout_ms = 3000;
  std::string ca_file;  // https only; empty = system store
};

// GET {base_url}/orders/{id}: 200 with the order (which must carry that id
// and parse as strictly as a seed file), 404 for none; POST
// {base_url}/orders/{id}/cancel with an Idempotency-Key: 200 cancelled (also
// 409 "already_cancelled": the state asked for holds), any other 404, 409 or
// 422 with an error code refused.
std::unique_ptr<operations::OrderService> make_http_order_service(OrderServiceOptions options);

// The payment provider, with a cancel_order operation carried out as two
// consequences: the cancellation at the order service (its own idempotency
// key, the operation's with "-cancel" appended), and only once it is proven
// the refund at the provider. An indeterminate answer from either is
// indeterminate. Reconciliation looks the refund up at the provider (by its
// metadata operation_key), never at the order service: a refund found
// there settles the operation whatever the order's status is now, and one
// proven absent is executed again (cancellation first, under its key).
// Other requests pass through.
std::unique_ptr<operations::PaymentProvider> make_cancelling_provider(
    operations::PaymentProvider& payments, operations::OrderService& orders);

}  // namespace opgate::adapters
