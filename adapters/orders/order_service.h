// The business's order service as opgate sees it (`orders.source =
// "http"`): read one order, and cancel one under an idempotency key. Every
// answer is classified here, so callers decide on verdicts, not on HTTP:
// an order is found, proven absent, or unavailable (down, slow, or an
// answer that does not parse strictly) — never guessed. Implementations
// are thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "adapters/payments/provider.h"
#include "common/result.h"
#include "opgate.pb.h"

namespace opgate::adapters {

enum class OrderRead {
  found,        // the service answered with the order
  absent,       // the service answered that it has no such order
  unavailable,  // no usable answer: down, timeout, 5xx, 429 or malformed data
};

// "found", "absent" or "unavailable" (metrics and logs).
std::string_view read_name(OrderRead read);

struct FetchedOrder {
  OrderRead read = OrderRead::unavailable;
  pb::Order order;    // when found
  std::string error;  // when unavailable: for people, never a secret
};

// The order service's answer to a cancellation: succeeded (the order is
// cancelled, now or by an earlier request under the same key), refused (a
// definite no: nothing was done), or indeterminate (it may have happened).
struct CancelResult {
  Verdict verdict = Verdict::indeterminate;
  std::string error;
};

class OrderService {
 public:
  virtual ~OrderService() = default;
  virtual FetchedOrder get(const std::string& order_id) = 0;
  virtual CancelResult cancel(const std::string& order_id, const std::string& idempotency_key,
                              const std::string& reason) = 0;
};

// Parses an order body as strictly as a seed file (the domain's parser).
using OrderParser = std::function<Result<pb::Order>(std::string_view json_text)>;

struct OrderServiceOptions {
  std::string base_url;  // http(s)://host:port[/prefix]
  std::string token;     // sent as "Authorization: Bearer ..."
  int timeout_ms = 3000;
  std::string ca_file;  // https only; empty = system store
};

// GET {base_url}/orders/{id}: 200 with the order (which must carry that id),
// 404 for none; POST {base_url}/orders/{id}/cancel with an Idempotency-Key:
// 200 cancelled (also 409 "already_cancelled": the state asked for holds),
// any other 404, 409 or 422 with an error code refused.
std::unique_ptr<OrderService> make_http_order_service(OrderServiceOptions options,
                                                      OrderParser parse);

// The payment provider, with a cancel_order operation carried out as two
// consequences: the cancellation at the order service (its own idempotency
// key, the operation's with "-cancel" appended), and only once it is proven
// the refund at the provider. An indeterminate answer from either is
// indeterminate. Reconciliation looks the refund up at the provider (by its
// metadata operation_key), never at the order service: a refund found
// there settles the operation whatever the order's status is now, and one
// proven absent is executed again (cancellation first, under its key).
// Other requests pass through.
std::unique_ptr<PaymentProvider> make_cancelling_provider(PaymentProvider& payments,
                                                          OrderService& orders);

}  // namespace opgate::adapters
