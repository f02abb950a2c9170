// The payment provider port (operations/payment_provider.h) over a
// Stripe-shaped HTTP API: form-encoded POSTs with an Idempotency-Key,
// reconciliation by listing and matching metadata.operation_key, and every
// HTTP answer classified into a verdict. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "operations/payment_provider.h"

namespace opgate::adapters {

struct StripeOptions {
  std::string base_url;
  std::string secret_key;
  int timeout_ms = 5000;
  std::string ca_file;  // https only; empty = system store
};

std::unique_ptr<operations::PaymentProvider> make_stripe_provider(StripeOptions options);

}  // namespace opgate::adapters
