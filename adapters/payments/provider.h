// The payment provider as opgate sees it: execute a refund
// or credit under an idempotency key, and look an operation up by its key
// for reconciliation. Every answer is classified here, so the outbox decides
// on verdicts, not on HTTP. Implementations are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"

namespace opgate::adapters {

struct PaymentRequest {
  enum class Kind { refund, customer_credit };
  Kind kind = Kind::refund;  // a refund of a payment, or a credit to a customer's balance
  std::string operation_key;
  std::string idempotency_key;
  std::string payment_intent;  // refunds
  std::string customer;        // credits
  int64_t amount_minor = 0;
  std::string currency;
  std::string reason;
  // A refund that cancels the order first, at the order service (see
  // adapters/orders/order_service.h); the order it names.
  bool cancel_order = false;
  std::string order_id;
};

enum class Verdict {
  succeeded,      // the provider holds the object and it succeeded
  pending,        // the provider holds the object; its result is not final
  refused,        // a definite refusal: nothing was or will be done
  indeterminate,  // timeout, 5xx, 429, connection loss: it may have happened
};

struct PaymentResult {
  Verdict verdict = Verdict::indeterminate;
  std::string object_id;
  std::string provider_status;
  std::string error;  // for people; never a secret
};

enum class Lookup { found, absent, unreachable };

struct LookupResult {
  Lookup lookup = Lookup::unreachable;
  PaymentResult object;  // when found: succeeded, pending or refused (failed)
  std::string error;
};

class PaymentProvider {
 public:
  virtual ~PaymentProvider() = default;
  virtual PaymentResult execute(const PaymentRequest& request) = 0;
  // Finds the object carrying metadata.operation_key; "absent" only when the
  // provider answered and the listing was complete.
  virtual LookupResult find(const PaymentRequest& request) = 0;
};

struct StripeOptions {
  std::string base_url;
  std::string secret_key;
  int timeout_ms = 5000;
  std::string ca_file;  // https only; empty = system store
};

std::unique_ptr<PaymentProvider> make_stripe_provider(StripeOptions options);

}  // namespace opgate::adapters
