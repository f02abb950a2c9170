// The payment provider over HTTP (adapters/payments): an object the
// provider answers with settles the operation only when it moved what was
// asked for, the amount and the currency, found by its key or answered to
// the request.
#include "adapters/payments/stripe_provider.h"

#include <doctest/doctest.h>

#include <mutex>

#include "http/server.h"

using namespace opgate;

namespace {

// The provider on loopback: answers every request with one body.
struct Provider {
  std::mutex mu;
  std::string body;
  http::Server server{{}, [this](http::Request&&) {
                        std::lock_guard lock(mu);
                        http::Response res;
                        res.status = 200;
                        res.body = body;
                        res.headers["Content-Type"] = "application/json";
                        return res;
                      }};
  std::string url;

  Provider() {
    auto port = server.start();
    REQUIRE(port.ok());
    url = "http://127.0.0.1:" + std::to_string(*port);
  }
  void answer(std::string b) {
    std::lock_guard lock(mu);
    body = std::move(b);
  }
};

operations::PaymentRequest refund(int64_t amount, std::string currency) {
  operations::PaymentRequest r;
  r.kind = operations::PaymentRequest::Kind::refund;
  r.operation_key = "demo-user:ORDER-1:full-refund:v1";
  r.idempotency_key = "opgate-v1-x";
  r.payment_intent = "pi_1";
  r.amount_minor = amount;
  r.currency = std::move(currency);
  return r;
}

std::string object(const std::string& kind, int64_t amount, const std::string& currency) {
  return R"({"id":"obj_1","object":")" + kind + R"(","status":"succeeded","amount":)" +
         std::to_string(amount) + R"(,"currency":")" + currency +
         R"(","metadata":{"operation_key":"demo-user:ORDER-1:full-refund:v1"}})";
}

std::string listing(const std::string& item) {
  return R"({"object":"list","data":[)" + item + R"(],"has_more":false})";
}

}  // namespace

TEST_CASE("a provider object settles only when it moved the amount and currency asked for") {
  Provider provider;
  auto stripe = adapters::make_stripe_provider({provider.url, "sk_test", 5'000, ""});
  // Refunded in the payment intent's currency, not the order's: ¥5000 is
  // not 50.00 USD.
  provider.answer(object("refund", 5000, "jpy"));
  auto other_currency = stripe->execute(refund(5000, "USD"));
  CHECK(other_currency.verdict == operations::Verdict::indeterminate);
  CHECK(other_currency.error.find("moved 5000 jpy, not the 5000 usd") != std::string::npos);
  provider.answer(object("refund", 100, "usd"));
  CHECK(stripe->execute(refund(5000, "USD")).verdict == operations::Verdict::indeterminate);
  provider.answer(object("refund", 5000, "usd"));
  CHECK(stripe->execute(refund(5000, "USD")).verdict == operations::Verdict::succeeded);
  // A provider that writes the currency in capitals, or the amount as a
  // whole number with a point, answered what was asked.
  provider.answer(object("refund", 5000, "USD"));
  CHECK(stripe->execute(refund(5000, "USD")).verdict == operations::Verdict::succeeded);
  provider.answer(R"({"id":"obj_1","object":"refund","status":"succeeded","amount":5000.0,)"
                  R"("currency":"usd"})");
  CHECK(stripe->execute(refund(5000, "USD")).verdict == operations::Verdict::succeeded);

  // Found by its key in a listing: the same, and a mismatch proves nothing.
  provider.answer(listing(object("refund", 100, "usd")));
  auto found = stripe->find(refund(5000, "USD"));
  CHECK(found.lookup == operations::Lookup::unreachable);
  CHECK(found.error.find("settles nothing") != std::string::npos);
  provider.answer(listing(object("refund", 5000, "usd")));
  CHECK(stripe->find(refund(5000, "USD")).lookup == operations::Lookup::found);

  // A credit is a negative balance transaction of its amount.
  auto credit = refund(1500, "USD");
  credit.kind = operations::PaymentRequest::Kind::customer_credit;
  credit.customer = "cus_1";
  provider.answer(object("customer_balance_transaction", -1500, "usd"));
  CHECK(stripe->execute(credit).verdict == operations::Verdict::succeeded);
  provider.answer(object("customer_balance_transaction", 1500, "usd"));
  CHECK(stripe->execute(credit).verdict == operations::Verdict::indeterminate);
}
