// The business's order service as the domain needs it (a port, for
// `orders.source = "http"`): read one order, and cancel one under an
// idempotency key. Every answer is classified, so callers decide on
// verdicts, not on HTTP: an order is found, proven absent, or unavailable
// (down, slow, or an answer that does not parse strictly), never guessed
// (adapters/orders implements it over HTTP). Implementations are
// thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "operations/payment_provider.h"
#include "opgate.pb.h"

namespace opgate::operations {

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

}  // namespace opgate::operations
