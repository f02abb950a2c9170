// A paid USD order for the tools' tests: its payment intent, customer and
// payment method derived from its id and owner.
#pragma once

#include <cstdint>
#include <string>

#include "opgate.pb.h"

namespace opgate::testing {

inline constexpr int64_t kNow = 1'800'000'000;

inline pb::Order paid_order(std::string id, std::string owner, int64_t amount = 2500,
                            pb::OrderStatus status = pb::ORDER_PAID,
                            int64_t placed_at = kNow - 86400) {
  pb::Order o;
  o.set_order_id(id);
  o.set_owner(owner);
  o.set_amount_minor(amount);
  o.set_currency("USD");
  o.set_payment_intent("pi_" + id);
  o.set_customer("cus_" + owner);
  o.set_payment_method("visa ending 4242");
  o.set_status(status);
  o.set_placed_at(placed_at);
  return o;
}

}  // namespace opgate::testing
