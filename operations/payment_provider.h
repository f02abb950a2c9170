// The payment provider as the domain needs it (a port): execute a refund or
// a credit under an idempotency key, and look an operation up by its key
// for reconciliation. Every answer is a verdict, so the domain decides on
// verdicts, never on HTTP (adapters/payments implements it over a
// Stripe-shaped API). Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace opgate::operations {

struct PaymentRequest {
  // A refund of a payment, a credit to a customer's balance, or a declared
  // operation carried out by its executor.
  enum class Kind { refund, customer_credit, declared };
  Kind kind = Kind::refund;
  std::string operation_key;
  std::string idempotency_key;
  std::string payment_intent;  // refunds
  std::string customer;        // credits
  int64_t amount_minor = 0;
  std::string currency;
  std::string reason;
  // A refund that cancels the order first, at the order service
  // (order_service.h); the order it names.
  bool cancel_order = false;
  std::string order_id;
  // Declared operations: the declaration's name, the owner and the checked
  // arguments (JSON).
  std::string operation;
  std::string owner;
  std::string arguments_json;
  // The executor the operation was first sent to (pb::Operation), if any,
  // and the SHA-256 of the token it was sent (empty: recorded before it was
  // kept).
  std::string executor_url;
  std::string executor_token_sha256;
};

enum class Verdict {
  succeeded,      // the provider holds the object and it succeeded
  pending,        // the provider holds the object; its result is not final
  refused,        // a definite refusal: nothing was or will be done
  indeterminate,  // timeout, 5xx, 429, connection loss: it may have happened
};

// "succeeded", "pending", "refused", "indeterminate" (metrics, audit).
std::string_view to_string(Verdict verdict);

struct PaymentResult {
  Verdict verdict = Verdict::indeterminate;
  std::string object_id;
  std::string provider_status;
  std::string error;  // for people; never a secret
  // Set when the operation failed but something was done that a person must
  // look at (the order cancelled, its refund refused): why, in a sentence.
  std::string attention;
};

// The answer cut to what records keep, each text between characters: an id
// of 255 bytes at most, a status of 64, an error of 500. Whatever a
// provider or executor sends, what is stored reads back.
PaymentResult fit_for_records(PaymentResult answer);

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

}  // namespace opgate::operations
