#include "sim/idempotency.h"

#include <doctest/doctest.h>

#include "common/clock.h"
#include "sim/form.h"

using namespace opgate;
using namespace opgate::sim;

TEST_CASE("sim idempotency: replay, mismatch, in flight, scope") {
  ManualClock clock(1'000'000);
  IdempotencyStore store(clock);
  auto first = store.begin("sk_a", "key", "fp1");
  REQUIRE(first.outcome == IdempotencyOutcome::kStarted);
  CHECK(store.begin("sk_a", "key", "fp1").outcome == IdempotencyOutcome::kInFlight);
  // Another API key is another namespace.
  auto other = store.begin("sk_b", "key", "fp2");
  CHECK(other.outcome == IdempotencyOutcome::kStarted);

  first.claim.save(http::json_response(200, R"({"id":"re_1"})"));
  auto replay = store.begin("sk_a", "key", "fp1");
  REQUIRE(replay.outcome == IdempotencyOutcome::kReplay);
  CHECK(replay.saved.status == 200);
  CHECK(replay.saved.body == R"({"id":"re_1"})");
  CHECK(store.begin("sk_a", "key", "fp-other").outcome == IdempotencyOutcome::kMismatch);
}

TEST_CASE("sim idempotency: an unsaved claim forgets the key") {
  ManualClock clock(0);
  IdempotencyStore store(clock);
  {
    auto begun = store.begin("s", "k", "fp");
    REQUIRE(begun.outcome == IdempotencyOutcome::kStarted);
  }  // dropped without saving: nothing was executed
  auto again = store.begin("s", "k", "other-fp");
  CHECK(again.outcome == IdempotencyOutcome::kStarted);
}

TEST_CASE("sim idempotency: keys expire after the TTL, the store is bounded") {
  ManualClock clock(0);
  IdempotencyStore store(clock, 2, 1000);
  store.begin("s", "a", "fp").claim.save(http::json_response(200, "{}"));
  store.begin("s", "b", "fp").claim.save(http::json_response(200, "{}"));
  CHECK(store.begin("s", "c", "fp").outcome == IdempotencyOutcome::kFull);
  clock.advance_ms(1000);
  CHECK(store.begin("s", "a", "fp-new").outcome == IdempotencyOutcome::kStarted);
}

TEST_CASE("sim form: Stripe-style bodies decode and fingerprint order-independently") {
  auto parsed = parse_form("amount=100&metadata[operation_key]=u%3AORDER-1&reason=a+b");
  REQUIRE(parsed.ok());
  CHECK(parsed->at("amount") == "100");
  CHECK(parsed->at("metadata[operation_key]") == "u:ORDER-1");
  CHECK(parsed->at("reason") == "a b");
  CHECK_FALSE(parse_form("a=%zz").ok());
  CHECK_FALSE(parse_form("a=%4").ok());
  auto reordered = parse_form("reason=a+b&metadata%5Boperation_key%5D=u:ORDER-1&amount=100");
  REQUIRE(reordered.ok());
  CHECK(request_fingerprint("POST", "/v1/refunds", *parsed) ==
        request_fingerprint("POST", "/v1/refunds", *reordered));
  CHECK(request_fingerprint("POST", "/v1/refunds", *parsed) !=
        request_fingerprint("POST", "/v1/refundz", *parsed));

  CHECK(parse_int("42") == 42);
  CHECK(parse_int("-7") == -7);
  CHECK_FALSE(parse_int("1.5").has_value());
  CHECK_FALSE(parse_int("+1").has_value());
  CHECK_FALSE(parse_int("").has_value());
  CHECK_FALSE(parse_int("-").has_value());
  CHECK_FALSE(parse_int("99999999999999999999").has_value());
}
