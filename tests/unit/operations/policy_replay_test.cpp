// Replaying recorded proposals against another policy: what would differ,
// and reading the policy back from what the API shows.
#include "operations/policy_replay.h"

#include <doctest/doctest.h>

#include "operations/keys.h"
#include "operations/views.h"

using namespace opgate;

namespace {

pb::Proposal proposal(std::string_view kind, int64_t amount, std::string tier,
                      std::string reason = "") {
  pb::Proposal p;
  p.set_kind(std::string(kind));
  p.set_owner("demo-user");
  p.set_order_id("ORDER-100");
  p.set_amount_minor(amount);
  p.set_currency("USD");
  p.set_tier(std::move(tier));
  p.set_reason(std::move(reason));
  return p;
}

}  // namespace

TEST_CASE("the same policy changes nothing; a raised tier, two-person line or step-up shows") {
  operations::PolicyConfig current;
  const auto refund = proposal(operations::kFullRefund, 2500, "refund");
  CHECK(operations::replay_proposal(refund, current, current).empty());
  operations::PolicyConfig next = current;
  next.tools["request_refund"].tier = "supervisor";
  next.two_person_threshold_minor = {{"USD", 2000}};
  next.step_up.tiers = {"supervisor"};
  auto diffs = operations::replay_proposal(refund, current, next);
  REQUIRE(diffs.size() == 3);
  CHECK(diffs[0].what == "tier");
  CHECK(diffs[0].was == "refund");
  CHECK(diffs[0].would_be == "supervisor");
  CHECK(diffs[1].what == "approvals_needed");
  CHECK(diffs[1].was == "1");
  CHECK(diffs[1].would_be == "2");
  CHECK(diffs[2].what == "step_up");
  CHECK(diffs[2].would_be == "passkey");
}

TEST_CASE(
    "a credit over a lowered cap, with a dropped reason code, or a disabled tool is refused") {
  operations::PolicyConfig current;
  const auto credit = proposal(operations::kAccountCredit, 5000, "supervisor", "GOODWILL");
  operations::PolicyConfig lower_cap = current;
  lower_cap.credit_hard_cap_minor = {{"USD", 4000}};
  auto capped = operations::replay_proposal(credit, current, lower_cap);
  REQUIRE(capped.size() == 1);
  CHECK(capped[0].what == "refused");
  CHECK(capped[0].was == "allowed");
  CHECK(capped[0].would_be.find("credit cap") != std::string::npos);
  operations::PolicyConfig codes = current;
  codes.credit_reason_codes = {"DAMAGED_ITEM"};
  CHECK(operations::replay_proposal(credit, current, codes)[0].would_be.find("GOODWILL") !=
        std::string::npos);
  operations::PolicyConfig off = current;
  off.tools["issue_account_credit"].enabled = false;
  CHECK(operations::replay_proposal(credit, current, off)[0].would_be ==
        "issue_account_credit is disabled");
  // Refused before, allowed now: shown the other way round.
  auto reopened = operations::replay_proposal(credit, off, current);
  REQUIRE_FALSE(reopened.empty());
  CHECK(reopened[0].would_be == "allowed");
}

TEST_CASE("the policy the API shows reads back as the same policy") {
  operations::PolicyConfig p;
  p.tools["cancel_order"].enabled = false;
  p.tools["request_refund"].tier = "support";
  p.refund_window_days = 14;
  p.credit_reason_codes = {"GOODWILL"};
  p.credit_hard_cap_minor = {{"EUR", 7000}};
  p.two_person_threshold_minor = {{"USD", 123}};
  p.escalation = {60, 600, "support"};
  p.step_up.tiers = {"supervisor"};
  p.step_up.above_minor = {{"USD", 9000}};
  auto back = operations::policy_from_json(operations::policy_json(p));
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  CHECK(operations::policy_json(*back) == operations::policy_json(p));
  auto shown = operations::policy_json(p);
  shown.erase("escalation");
  CHECK(operations::policy_from_json(shown).error().is(errc::bad_request));
}
