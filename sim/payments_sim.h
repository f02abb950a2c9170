// The Stripe-shaped payments simulator as an HTTP handler: bearer/basic
// secret-key auth, refunds and customer balance transactions (form-encoded),
// Stripe idempotency keys, fault injection and the /_sim/ admin API.
// Thread-safe: handle() may run on many server threads at once.
#pragma once

#include <functional>
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
#include "sim/payments_ledger.h"

namespace opgate::sim {

struct PaymentsOptions {
  // If set, the only accepted key; otherwise any key starting "sk_".
  std::optional<std::string> secret_key;
  size_t max_objects = 100'000;
};

class PaymentsSim {
 public:
  PaymentsSim(PaymentsOptions options, const Clock& clock);
  PaymentsSim(const PaymentsSim&) = delete;
  PaymentsSim& operator=(const PaymentsSim&) = delete;

  // Registers the payment intent and customer of every order in an NDJSON
  // file. Error "orders_file" naming the line at fault.
  Status load_orders(const std::string& path);

  http::Response handle(http::Request&& request);

 private:
  enum class CreateKind { kRefund, kBalanceTransaction };

  void add_routes();
  std::optional<std::string> authenticate(const http::Request& request) const;
  http::Response create(const http::Request& request, CreateKind kind, const std::string& customer);
  http::Response guarded_get(const http::Request& request,
                             const std::function<http::Response()>& produce);
  void count_post(const std::optional<std::string>& operation_key) EXCLUDES(stats_mu_);
  void count_object(const std::optional<std::string>& operation_key) EXCLUDES(stats_mu_);

  http::Response list_refunds(const http::Request& request);
  http::Response get_refund(const std::string& id);
  http::Response list_balance_transactions(const http::Request& request,
                                           const std::string& customer);

  http::Response admin_register_intent(const http::Request& request);
  http::Response admin_register_customer(const http::Request& request);
  http::Response admin_settle_refund(const http::Request& request, const std::string& id);
  http::Response admin_stats() EXCLUDES(stats_mu_);
  http::Response admin_reset() EXCLUDES(stats_mu_);

  PaymentsOptions options_;
  const Clock& clock_;
  PaymentsLedger ledger_;
  IdempotencyStore idempotency_;
  FaultTable faults_;
  http::Router api_;
  http::Router admin_;

  struct KeyStats {
    int64_t posts = 0;
    int64_t objects = 0;
  };
  mutable Mutex stats_mu_;
  int64_t post_requests_ GUARDED_BY(stats_mu_) = 0;
  std::map<std::string, KeyStats> by_operation_key_ GUARDED_BY(stats_mu_);
};

}  // namespace opgate::sim
