// A cancel_order operation through the cancelling provider
// (adapters/orders): the cancellation goes to the order service first, the
// refund to the provider only once it is proven, and reconciliation proves
// the refund at the provider, never from what the order service says now.
#include <doctest/doctest.h>

#include "adapters/orders/http_order_service.h"
#include "world.h"

using namespace opgate;

namespace {

// An order service that answers as scripted and counts what it was asked.
class FakeOrders final : public operations::OrderService {
 public:
  operations::FetchedOrder fetched;
  operations::CancelResult cancelled;
  int gets = 0;
  int cancels = 0;

  operations::FetchedOrder get(const std::string&) override {
    ++gets;
    return fetched;
  }
  operations::CancelResult cancel(const std::string&, const std::string&,
                                  const std::string&) override {
    ++cancels;
    return cancelled;
  }
};

operations::PaymentRequest cancel_request() {
  operations::PaymentRequest r;
  r.operation_key = "demo-user:ORDER-100:cancel-order:v1";
  r.idempotency_key = "opgate-v1-abc";
  r.payment_intent = "pi_ORDER-100";
  r.amount_minor = 2500;
  r.currency = "USD";
  r.cancel_order = true;
  r.order_id = "ORDER-100";
  return r;
}

// The order as the service reports it after a person changed it back.
operations::FetchedOrder delivered_order() {
  operations::FetchedOrder f;
  f.read = operations::OrderRead::found;
  f.order.set_order_id("ORDER-100");
  f.order.set_status(pb::ORDER_PAID);
  f.order.add_deliveries()->set_status("delivered");
  return f;
}

}  // namespace

TEST_CASE(
    "a cancellation's refund found at the provider is found, whatever the order service says") {
  FakeOrders orders;
  orders.fetched = delivered_order();
  testing::FakeProvider payments;
  operations::LookupResult held;
  held.lookup = operations::Lookup::found;
  held.object = {operations::Verdict::succeeded, "re_1", "succeeded", "", ""};
  payments.lookups = {held};
  auto provider = adapters::make_cancelling_provider(payments, orders);
  auto found = provider->find(cancel_request());
  CHECK(found.lookup == operations::Lookup::found);
  CHECK(found.object.object_id == "re_1");
  REQUIRE(payments.looked_up.size() == 1);
  CHECK(payments.looked_up[0].operation_key == "demo-user:ORDER-100:cancel-order:v1");
  CHECK(orders.cancels == 0);
}

TEST_CASE("a cancellation's refund the provider cannot be asked about stays unproven") {
  FakeOrders orders;
  orders.fetched = delivered_order();
  testing::FakeProvider payments;  // no script: unreachable
  auto provider = adapters::make_cancelling_provider(payments, orders);
  auto found = provider->find(cancel_request());
  CHECK(found.lookup == operations::Lookup::unreachable);
  CHECK(payments.looked_up.size() == 1);
}

TEST_CASE("a cancellation is refunded only once the order service confirms it") {
  FakeOrders orders;
  testing::FakeProvider payments;
  auto provider = adapters::make_cancelling_provider(payments, orders);
  SUBCASE("refused: no refund") {
    orders.cancelled = {operations::Verdict::refused, "not cancellable"};
    CHECK(provider->execute(cancel_request()).verdict == operations::Verdict::refused);
    CHECK(payments.calls() == 0);
  }
  SUBCASE("indeterminate: no refund yet") {
    orders.cancelled = {operations::Verdict::indeterminate, "timeout"};
    CHECK(provider->execute(cancel_request()).verdict == operations::Verdict::indeterminate);
    CHECK(payments.calls() == 0);
  }
  SUBCASE("cancelled: the refund goes out") {
    orders.cancelled = {operations::Verdict::succeeded, ""};
    auto paid = provider->execute(cancel_request());
    CHECK(paid.verdict == operations::Verdict::succeeded);
    CHECK(paid.attention.empty());
    CHECK(payments.calls() == 1);
  }
  SUBCASE("its refund found failed: a person must look") {
    operations::LookupResult failed;
    failed.lookup = operations::Lookup::found;
    failed.object = {operations::Verdict::refused, "re_1", "failed", "", ""};
    payments.lookups = {failed};
    CHECK(provider->find(cancel_request()).object.attention.find("the order is cancelled") !=
          std::string::npos);
    // Not a cancellation: nothing was done besides.
    auto plain = cancel_request();
    plain.cancel_order = false;
    CHECK(provider->find(plain).object.attention.empty());
  }
  SUBCASE("cancelled, its refund refused: failed, and a person must look") {
    orders.cancelled = {operations::Verdict::succeeded, ""};
    payments.answers = {{operations::Verdict::refused, "", "", "charge_disputed", ""}};
    auto half = provider->execute(cancel_request());
    CHECK(half.verdict == operations::Verdict::refused);
    CHECK(half.attention.find("the order is cancelled") != std::string::npos);
  }
}
