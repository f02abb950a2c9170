// Declared operations' executors (operations/declared.h) behind the
// payment provider port: a request of kind `declared` goes to its
// declaration's executor over HTTP, every other request to the provider
// underneath. The executor is found in the policy in force at the call, so
// a reload changes it without a restart, except the URL of an operation
// sent already: it is asked there (PaymentRequest::executor_url).
// Thread-safe.
//
// The executor contract: POST {url} {"operation_key","owner","order_id",
// "arguments","amount_minor","currency"} with Idempotency-Key:
// {operation_key} and a bearer token answers 2xx {"status":"succeeded" |
// "failed","id","detail"}; a timeout, 5xx, 429 or 409 may have happened
// (indeterminate); 400, 404 and 422 are refusals. GET {url}/{operation_key}
// answers 200 with the same body, or 404 with a JSON object if it never
// executed (a 404 without one may be a proxy's: not taken as proof).
#pragma once

#include <memory>

#include "common/live.h"
#include "operations/payment_provider.h"
#include "operations/policy.h"

namespace opgate::adapters {

// `max_timeout_ms` bounds every executor call (the outbox's claim lease is
// sized for it).
std::unique_ptr<operations::PaymentProvider> make_declared_executors(
    operations::PaymentProvider& provider, const Live<operations::PolicyConfig>& policy,
    int64_t max_timeout_ms);

}  // namespace opgate::adapters
