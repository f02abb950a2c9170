// The Stripe-shaped object model of the payments simulator: payment intents,
// customers, refunds and customer balance transactions, with Stripe's
// parameter validation and error shapes. No sockets, no idempotency, no
// faults: those wrap it in payments_sim. Thread-safe: locks itself.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/mutex.h"
#include "sim/form.h"

namespace opgate::sim {

// A Stripe error: {"error":{"type","code","param","decline_code","message"}}.
struct StripeError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string code;  // "" = omitted
  std::string message;
  std::string param;         // "" = omitted
  std::string decline_code;  // "" = omitted
};
boost::json::object stripe_error_json(const StripeError& error);

template <typename T>
using StripeResult = std::variant<T, StripeError>;

struct PaymentIntent {
  std::string id;
  int64_t amount = 0;
  std::string currency;  // lowercase
  std::string customer;  // "" = none
  int64_t refunded = 0;  // succeeded plus pending refunds
};

using Metadata = std::map<std::string, std::string>;

struct Refund {
  std::string id;
  int64_t amount = 0;
  std::string currency;
  std::string payment_intent;
  std::string status;  // succeeded | pending | failed
  std::optional<std::string> reason;
  Metadata metadata;
  int64_t created = 0;
};

struct BalanceTransaction {
  std::string id;
  int64_t amount = 0;
  std::string currency;
  std::string customer;
  std::optional<std::string> description;
  Metadata metadata;
  int64_t created = 0;
  int64_t ending_balance = 0;
};

boost::json::object to_json(const Refund& refund);
boost::json::object to_json(const BalanceTransaction& txn);

// Validated create requests, parsed from form parameters.
struct RefundRequest {
  std::string payment_intent;
  int64_t amount = 0;
  std::optional<std::string> reason;
  Metadata metadata;
};
struct BalanceTransactionRequest {
  int64_t amount = 0;
  std::string currency;  // lowercase
  std::optional<std::string> description;
  Metadata metadata;
};

StripeResult<RefundRequest> parse_refund_request(const FormParams& params);
StripeResult<BalanceTransactionRequest> parse_balance_transaction_request(const FormParams& params);

struct ListQuery {
  int64_t limit = 10;
  std::optional<std::string> starting_after;
  std::optional<std::string> ending_before;
};
// Parses limit, starting_after and ending_before; 400 if malformed.
StripeResult<ListQuery> parse_list_query(const std::optional<std::string>& limit,
                                         std::optional<std::string> starting_after,
                                         std::optional<std::string> ending_before);

struct ListPage {
  boost::json::array data;  // newest first
  bool has_more = false;
};

class PaymentsLedger {
 public:
  explicit PaymentsLedger(size_t max_objects = 100'000);

  // Registers or updates an intent (its refunded total is kept) and its
  // customer. Error "invalid" or "full".
  StripeResult<PaymentIntent> register_intent(PaymentIntent intent) EXCLUDES(mu_);
  StripeResult<std::string> register_customer(const std::string& id) EXCLUDES(mu_);

  // `status` is "succeeded" or "pending".
  StripeResult<Refund> create_refund(const RefundRequest& request, const std::string& status,
                                     int64_t now_s) EXCLUDES(mu_);
  StripeResult<BalanceTransaction> create_balance_transaction(
      const std::string& customer, const BalanceTransactionRequest& request, int64_t now_s)
      EXCLUDES(mu_);
  // Refunds settle only from pending; a failed refund frees its amount.
  StripeResult<Refund> settle_refund(const std::string& id, const std::string& status)
      EXCLUDES(mu_);

  StripeResult<Refund> get_refund(const std::string& id) const EXCLUDES(mu_);
  StripeResult<ListPage> list_refunds(const std::optional<std::string>& payment_intent,
                                      const ListQuery& query) const EXCLUDES(mu_);
  StripeResult<ListPage> list_balance_transactions(const std::string& customer,
                                                   const ListQuery& query) const EXCLUDES(mu_);

  // Everything, oldest first: {"refunds":[...],"balance_transactions":[...]}.
  boost::json::object snapshot() const EXCLUDES(mu_);
  // Forgets refunds and balance transactions; keeps intents and customers,
  // with their totals zeroed.
  void reset() EXCLUDES(mu_);

 private:
  struct Customer {
    std::string id;
    int64_t balance = 0;
    std::string currency;              // "" until the first transaction
    std::vector<std::string> txn_ids;  // oldest first
  };

  bool full_locked() const REQUIRES(mu_);

  const size_t max_objects_;
  mutable Mutex mu_;
  std::unordered_map<std::string, PaymentIntent> intents_ GUARDED_BY(mu_);
  std::unordered_map<std::string, Customer> customers_ GUARDED_BY(mu_);
  std::unordered_map<std::string, Refund> refunds_ GUARDED_BY(mu_);
  std::vector<std::string> refund_order_ GUARDED_BY(mu_);  // oldest first
  std::unordered_map<std::string, BalanceTransaction> txns_ GUARDED_BY(mu_);
  std::vector<std::string> txn_order_ GUARDED_BY(mu_);  // oldest first
};

}  // namespace opgate::sim
