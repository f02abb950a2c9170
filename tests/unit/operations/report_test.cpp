// The decision report over a known history: every figure checked.
#include "operations/report.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>

using namespace opgate;
namespace json = boost::json;

namespace {

pb::Operation op(std::string kind, int64_t amount, std::string tier, int64_t created_s) {
  pb::Operation o;
  o.set_key(kind + std::to_string(created_s));
  o.mutable_proposal()->set_kind(std::move(kind));
  o.mutable_proposal()->set_amount_minor(amount);
  o.mutable_proposal()->set_currency("USD");
  o.mutable_proposal()->set_tier(std::move(tier));
  o.set_created_at_ms(created_s * 1000);
  o.set_state(pb::STATE_PENDING);
  return o;
}

pb::Operation approved(pb::Operation o, const std::string& by, int64_t at_s) {
  auto* a = o.add_approvals();
  a->set_principal(by);
  a->set_at_ms(at_s * 1000);
  o.set_state(pb::STATE_SETTLED);
  o.set_outcome(pb::OUTCOME_SUCCEEDED);
  return o;
}

}  // namespace

TEST_CASE("the report counts what was proposed, decided and how fast, from the window only") {
  operations::DecisionReport r(100'000);
  r.add(op("full-refund", 999, "refund", 50));  // before the window: not counted
  r.add(approved(op("full-refund", 2500, "refund", 100), "alice", 110));            // 10 s
  r.add(approved(op("full-refund", 1500, "refund", 200), "alice", 230));            // 30 s
  auto lowered = approved(op("account-credit", 1000, "support", 300), "bob", 400);  // 100 s
  lowered.mutable_proposal()->set_original_amount_minor(1600);
  lowered.set_unknown_since_ms(410'000);
  lowered.set_updated_at_ms(470'000);  // resolved 60 s later
  r.add(lowered);
  auto denied = op("full-refund", 800, "refund", 500);
  denied.set_state(pb::STATE_SETTLED);
  denied.set_outcome(pb::OUTCOME_DENIED);
  denied.set_decided_by("bob");
  denied.set_decision_reason("outside the window");
  denied.set_updated_at_ms(520'000);  // 20 s
  r.add(denied);
  auto escalated = op("full-refund", 700, "supervisor", 600);
  escalated.set_escalated_at_ms(660'000);
  escalated.set_reminded_at_ms(630'000);
  r.add(escalated);

  auto o = r.json();
  CHECK(o.at("proposals").as_int64() == 5);
  CHECK(o.at("kinds").at("full-refund").at("count").as_int64() == 4);
  CHECK(o.at("kinds").at("full-refund").at("by_tier").at("refund").as_int64() == 3);
  CHECK(o.at("kinds").at("full-refund").at("amount_minor").at("USD").as_int64() ==
        2500 + 1500 + 800 + 700);
  CHECK(o.at("outcomes").at("approved").as_int64() == 3);
  CHECK(o.at("outcomes").at("denied").as_int64() == 1);
  CHECK(o.at("outcomes").at("pending").as_int64() == 1);
  // Decisions took 10, 30, 100 and 20 s.
  CHECK(o.at("time_to_decision_ms").at("count").as_int64() == 4);
  CHECK(o.at("time_to_decision_ms").at("p50").as_int64() == 30'000);
  CHECK(o.at("time_to_decision_ms").at("p95").as_int64() == 100'000);
  CHECK(o.at("reminded").as_int64() == 1);
  CHECK(o.at("escalated").as_int64() == 1);
  CHECK(o.at("narrowed").at("count").as_int64() == 1);
  CHECK(o.at("narrowed").at("amount_removed_minor").at("USD").as_int64() == 600);
  CHECK(o.at("denial_reasons").at("outside the window").as_int64() == 1);
  CHECK(o.at("outcome_unknown").at("count").as_int64() == 1);
  CHECK(o.at("outcome_unknown").at("of_executed").as_int64() == 3);
  CHECK(o.at("outcome_unknown").at("time_to_resolution_ms").at("p50").as_int64() == 60'000);
  CHECK(o.at("approvers").at("alice").at("approved").as_int64() == 2);
  CHECK(o.at("approvers").at("bob").at("approved").as_int64() == 1);
  CHECK(o.at("approvers").at("bob").at("denied").as_int64() == 1);
}

TEST_CASE("an empty window reports zeros and no times") {
  auto o = operations::DecisionReport(0).json();
  CHECK(o.at("proposals").as_int64() == 0);
  CHECK(o.at("time_to_decision_ms").at("p50").is_null());
  CHECK(o.at("outcome_unknown").at("rate").as_double() == 0.0);
}

TEST_CASE("the report shows the 20 most frequent denial reasons and counts the rest") {
  operations::DecisionReport r(0);
  auto deny = [&](const std::string& reason) {
    auto denied = op("full-refund", 800, "refund", 500);
    denied.set_state(pb::STATE_SETTLED);
    denied.set_outcome(pb::OUTCOME_DENIED);
    denied.set_decided_by("bob");
    denied.set_decision_reason(reason);
    r.add(denied);
  };
  for (int i = 0; i < 5; ++i) deny("outside the window");
  for (int i = 0; i < 1500; ++i) deny("reason " + std::to_string(i));
  auto o = r.json();
  const auto& shown = o.at("denial_reasons").as_object();
  CHECK(shown.size() == 20);
  CHECK(shown.at("outside the window").as_int64() == 5);
  CHECK(o.at("denials_for_other_reasons").as_int64() == 1500 - 19);
  CHECK(o.at("outcomes").at("denied").as_int64() == 1505);
}
