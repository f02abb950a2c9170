#include "sim/payments_ledger.h"

#include <doctest/doctest.h>

using namespace opgate::sim;

namespace {

template <typename T>
const T& ok(const StripeResult<T>& r) {
  REQUIRE(std::holds_alternative<T>(r));
  return std::get<T>(r);
}

template <typename T>
const StripeError& err(const StripeResult<T>& r) {
  REQUIRE(std::holds_alternative<StripeError>(r));
  return std::get<StripeError>(r);
}

RefundRequest refund(std::string pi, int64_t amount) {
  RefundRequest r;
  r.payment_intent = std::move(pi);
  r.amount = amount;
  return r;
}

}  // namespace

TEST_CASE("sim ledger: refunds are bounded by the unrefunded amount") {
  PaymentsLedger ledger;
  ok(ledger.register_intent({"pi_1", 1000, "USD", "cus_1", 0}));
  CHECK(ok(ledger.create_refund(refund("pi_1", 600), "succeeded", 1)).currency == "usd");
  CHECK(err(ledger.create_refund(refund("pi_1", 401), "succeeded", 1)).code == "amount_too_large");
  auto pending = ok(ledger.create_refund(refund("pi_1", 400), "pending", 1));
  CHECK(err(ledger.create_refund(refund("pi_1", 1), "succeeded", 1)).code == "amount_too_large");
  // A failed refund frees its amount again.
  CHECK(ok(ledger.settle_refund(pending.id, "failed")).status == "failed");
  CHECK(err(ledger.settle_refund(pending.id, "succeeded")).status == 409);
  ok(ledger.create_refund(refund("pi_1", 400), "succeeded", 1));
  CHECK(err(ledger.create_refund(refund("pi_x", 1), "succeeded", 1)).code == "resource_missing");
}

TEST_CASE("sim ledger: refund parameters are validated like Stripe") {
  auto parse = [](FormParams p) { return parse_refund_request(p); };
  CHECK(err(parse({{"payment_intent", "pi_1"}})).code == "parameter_invalid_integer");
  CHECK(err(parse({{"payment_intent", "pi_1"}, {"amount", "0"}})).code ==
        "parameter_invalid_integer");
  CHECK(err(parse({{"payment_intent", "pi_1"}, {"amount", "12.5"}})).code ==
        "parameter_invalid_integer");
  CHECK(err(parse({{"amount", "5"}})).code == "parameter_missing");
  CHECK(err(parse({{"payment_intent", "pi_1"}, {"amount", "5"}, {"currency", "usd"}})).code ==
        "parameter_unknown");
  CHECK(err(parse({{"payment_intent", "pi_1"}, {"amount", "5"}, {"reason", "because"}})).param ==
        "reason");
  auto req = ok(parse({{"payment_intent", "pi_1"},
                       {"amount", "5"},
                       {"reason", "requested_by_customer"},
                       {"metadata[operation_key]", "u:O-1:full-refund:v1"}}));
  CHECK(req.metadata.at("operation_key") == "u:O-1:full-refund:v1");
}

TEST_CASE("sim ledger: balance transactions track the customer's balance") {
  PaymentsLedger ledger;
  ok(ledger.register_customer("cus_1"));
  auto req = ok(parse_balance_transaction_request(
      {{"amount", "-500"}, {"currency", "GBP"}, {"metadata[operation_key]", "k"}}));
  CHECK(req.currency == "gbp");
  CHECK(ok(ledger.create_balance_transaction("cus_1", req, 1)).ending_balance == -500);
  CHECK(ok(ledger.create_balance_transaction("cus_1", req, 1)).ending_balance == -1000);
  CHECK(err(ledger.create_balance_transaction("cus_2", req, 1)).code == "resource_missing");
  CHECK(err(parse_balance_transaction_request({{"amount", "0"}, {"currency", "usd"}})).code ==
        "parameter_invalid_integer");
}

TEST_CASE("sim ledger: lists are newest first with cursors") {
  PaymentsLedger ledger;
  ok(ledger.register_intent({"pi_1", 1000, "usd", "", 0}));
  ok(ledger.register_intent({"pi_2", 1000, "usd", "", 0}));
  std::vector<std::string> ids;
  for (int i = 1; i <= 5; ++i)
    ids.push_back(ok(ledger.create_refund(refund("pi_1", i), "succeeded", i)).id);
  ok(ledger.create_refund(refund("pi_2", 9), "succeeded", 9));

  ListQuery q;
  q.limit = 2;
  auto page = ok(ledger.list_refunds(std::string("pi_1"), q));
  REQUIRE(page.data.size() == 2);
  CHECK(page.data[0].as_object().at("id").as_string() == ids[4]);
  CHECK(page.has_more);
  q.starting_after = ids[3];
  page = ok(ledger.list_refunds(std::string("pi_1"), q));
  CHECK(page.data[0].as_object().at("id").as_string() == ids[2]);
  q.starting_after = ids[1];
  page = ok(ledger.list_refunds(std::string("pi_1"), q));
  REQUIRE(page.data.size() == 1);
  CHECK_FALSE(page.has_more);
  q.starting_after = "re_missing";
  CHECK(err(ledger.list_refunds(std::nullopt, q)).code == "resource_missing");
  CHECK(ok(ledger.list_refunds(std::nullopt, ListQuery{100, {}, {}})).data.size() == 6);
  CHECK(std::holds_alternative<StripeError>(parse_list_query(std::string("101"), {}, {})));
}
