// Decisions over a real store with an injected clock: expiry (by the
// dispatcher and at the moment of an approval), the policy checked again at
// approval, on-call resolution that keeps its evidence out of the session,
// and owner patterns on every decision.
#include "operations/decisions.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/crypto.h"
#include "operations/declared.h"
#include "operations/drafts.h"
#include "operations/keys.h"
#include "operations/notifications.h"
#include "operations/proposals.h"
#include "operations/step_up.h"
#include "operations/tool_calls.h"
#include "soft_authenticator.h"
#include "world.h"

using namespace opgate;
namespace json = boost::json;

namespace {

constexpr const char* kRefund = "demo-user:ORDER-100:full-refund:v1";

operations::Principal person(std::string name, std::vector<std::string> owners = {"*"}) {
  operations::Principal p;
  p.name = std::move(name);
  p.scopes = {"operations:read", "operations:approve", "operations:resolve"};
  p.owners = std::move(owners);
  p.max_amount_minor = {{"USD", 100000}};
  return p;
}

// A policy declaring one operation, from its declaration's JSON.
operations::PolicyConfig declaring(const std::string& declaration) {
  auto declared = operations::parse_declared_operation(json::parse(declaration), "operations[0]");
  REQUIRE_MESSAGE(declared.ok(), declared.error().message);
  operations::PolicyConfig policy;
  policy.declared.push_back(*declared);
  return policy;
}

struct World : testing::World {
  explicit World(operations::PolicyConfig policy = {}) : testing::World({}, policy) {
    seed_order("ORDER-100");
    REQUIRE(sync->bind("sess_1", "demo-user", "admin").ok());
    operations::SessionView v;
    v.required_actions = {{"call_1", "turn_1", "request_refund", R"({"order_id":"ORDER-100"})"}};
    agents.views["sess_1"] = v;
    webhook("msg_1", "sess_1");
    pump();
    REQUIRE(operation(kRefund).state() == pb::STATE_PENDING);
  }

  // Approves what the operation shows now, or, with an amount, that amount
  // (lower, with a reason, to narrow it).
  Result<operations::Approved> approve(const operations::Principal& who,
                                       std::optional<int64_t> amount = std::nullopt,
                                       std::string edit_reason = {},
                                       std::optional<std::string> currency = std::nullopt,
                                       std::optional<operations::ClaimAtOnce> claim_at_once = {},
                                       const std::vector<operations::Principal>* in_force = {}) {
    auto op = operation(kRefund);
    std::optional<operations::Approved> out;
    Status s = storage->transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(
          auto a, operations::approve(txn, kRefund, who,
                                      {amount.value_or(op.proposal().amount_minor()),
                                       currency.value_or(op.proposal().currency()),
                                       op.fingerprint(),
                                       edit_reason,
                                       {}},
                                      *policy.get(), std::nullopt, claim_at_once, in_force));
      out = a;
      return Status::Ok();
    });
    if (!s) return s.error();
    return *out;
  }
  std::string outcome() { return std::string(operations::outcome_text(operation(kRefund))); }
  std::string result_output() {
    auto c = call("sess_1", "turn_1", "call_1");
    REQUIRE(c->result_saved());
    return c->result().output();
  }
};

}  // namespace

TEST_CASE("a pending operation expires only once its approval TTL has passed") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 3600;
  World w(policy);
  w.clock.advance_ms(3600 * 1000 - 1);
  CHECK(w.engine->expire_pending() == 0);
  CHECK(w.operation(kRefund).state() == pb::STATE_PENDING);
  w.clock.advance_ms(1);
  CHECK(w.engine->expire_pending() == 1);
  CHECK(w.outcome() == "expired");
  CHECK(w.engine->expire_pending() == 0);
  auto output = json::parse(w.result_output());
  CHECK(output.at("status").as_string() == "expired");
  CHECK(w.storage->verify_audit()->ok);
}

TEST_CASE("an approval after the TTL expires the operation instead of approving it") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 3600;
  World w(policy);
  w.clock.advance_ms(3600 * 1000);  // the dispatcher has not run since
  auto r = w.approve(person("alice"));
  REQUIRE(r.ok());
  REQUIRE(r->refusal);
  CHECK(r->refusal->is(errc::expired));
  CHECK(w.outcome() == "expired");
  w.pump();
  CHECK(w.provider.executed.empty());
}

TEST_CASE("an approval the policy no longer allows rejects the operation") {
  operations::PolicyConfig policy;
  policy.refund_window_days = 1;
  policy.approval_ttl_s = 7 * 86400;
  World w(policy);
  w.clock.advance_ms(2 * 86'400'000);  // now outside the 1-day window
  auto r = w.approve(person("alice"));
  REQUIRE(r.ok());
  REQUIRE(r->refusal);
  CHECK(r->refusal->is(errc::policy_refused));
  CHECK(w.outcome() == "rejected");
  CHECK(json::parse(w.result_output()).at("reason").as_string().find("window") !=
        std::string::npos);
}

TEST_CASE("with no threshold for the currency, one approval does not release the money") {
  operations::PolicyConfig policy;
  policy.two_person_threshold_minor = {{"GBP", 50000}};  // none for USD
  World w(policy);
  auto first = w.approve(person("alice"));
  REQUIRE(first.ok());
  CHECK(first->step == operations::ApprovalStep::recorded);
  CHECK(w.operation(kRefund).state() == pb::STATE_PENDING);
  auto second = w.approve(person("bob"));
  REQUIRE(second.ok());
  CHECK(second->step == operations::ApprovalStep::complete);
  CHECK(w.operation(kRefund).state() == pb::STATE_APPROVED);
}

TEST_CASE("an earlier approval counts only while its approver may still approve the proposal") {
  operations::PolicyConfig policy;
  policy.two_person_threshold_minor = {{"GBP", 50000}};  // none for USD: two approvals
  auto approve = [](World& w, const operations::Principal& who,
                    const std::vector<operations::Principal>& in_force) {
    return w.approve(who, std::nullopt, {}, std::nullopt, {}, &in_force);
  };
  auto lapsed_record = [](World& w) -> std::string {
    auto audit = w.storage->reader().audit_of(kRefund);
    REQUIRE(audit.ok());
    for (const auto& r : *audit)
      if (r.action() == "approval_lapsed")
        return json::parse(r.details_json()).at("discarded_approvals").as_string().c_str();
    return "";
  };
  std::vector<operations::Principal> in_force{person("alice"), person("bob"), person("carol")};
  for (auto& p : in_force) p.token_sha256 = crypto::sha256_hex("tok-" + p.name);
  SUBCASE("the first approver's limit was cut below the amount") {
    World w(policy);
    REQUIRE(approve(w, in_force[0], in_force)->step == operations::ApprovalStep::recorded);
    in_force[0].max_amount_minor = {{"USD", 100}};  // a reload
    auto second = approve(w, in_force[1], in_force);
    REQUIRE(second.ok());
    CHECK(second->step == operations::ApprovalStep::recorded);
    auto op = w.operation(kRefund);
    CHECK(op.state() == pb::STATE_PENDING);
    REQUIRE(op.approvals_size() == 1);
    CHECK(op.approvals(0).principal() == "bob");
    CHECK(lapsed_record(w) == "alice");
    // A second approver in force completes it.
    auto third = approve(w, in_force[2], in_force);
    REQUIRE(third.ok());
    CHECK(third->step == operations::ApprovalStep::complete);
    CHECK(w.operation(kRefund).state() == pb::STATE_APPROVED);
    CHECK(w.storage->verify_audit()->ok);
  }
  SUBCASE("the first approver's token is gone") {
    World w(policy);
    REQUIRE(approve(w, in_force[0], in_force)->step == operations::ApprovalStep::recorded);
    in_force.erase(in_force.begin());  // alice's token revoked
    auto second = approve(w, in_force[0], in_force);
    REQUIRE(second.ok());
    CHECK(second->step == operations::ApprovalStep::recorded);
    CHECK(w.operation(kRefund).state() == pb::STATE_PENDING);
    CHECK(lapsed_record(w) == "alice");
  }
  SUBCASE("the first approver's token was replaced") {
    World w(policy);
    REQUIRE(approve(w, in_force[0], in_force)->step == operations::ApprovalStep::recorded);
    in_force[0].token_sha256 = crypto::sha256_hex("tok-alice-new");  // the old one leaked
    auto second = approve(w, in_force[1], in_force);
    REQUIRE(second.ok());
    CHECK(second->step == operations::ApprovalStep::recorded);
    CHECK(lapsed_record(w) == "alice");
    // alice's new token approves again, and that approval counts.
    auto again = approve(w, in_force[0], in_force);
    REQUIRE(again.ok());
    CHECK(again->step == operations::ApprovalStep::complete);
  }
  SUBCASE("approvers still in force: nothing lapses") {
    World w(policy);
    REQUIRE(approve(w, in_force[0], in_force)->step == operations::ApprovalStep::recorded);
    auto second = approve(w, in_force[1], in_force);
    REQUIRE(second.ok());
    CHECK(second->step == operations::ApprovalStep::complete);
    CHECK(lapsed_record(w).empty());
  }
}

TEST_CASE("a reload that raises a refund's tier binds the pending proposal: the old tier cannot") {
  World w;
  const std::string shown = w.operation(kRefund).fingerprint();
  REQUIRE(w.operation(kRefund).proposal().tier() == "refund");
  auto desk = person("refund-desk");
  desk.tiers = {"refund"};
  // SIGHUP: [policy.tools.request_refund] tier = "supervisor".
  operations::PolicyConfig raised;
  raised.tools["request_refund"].tier = "supervisor";
  w.policy.set(raised);
  auto first = w.approve(desk);
  REQUIRE(first.ok());
  REQUIRE(first->refusal);
  CHECK(first->refusal->is(errc::proposal_mismatch));
  auto op = w.operation(kRefund);
  CHECK(op.state() == pb::STATE_PENDING);
  CHECK(op.proposal().tier() == "supervisor");
  CHECK(op.fingerprint() != shown);
  CHECK(op.fingerprint() == operations::fingerprint(op.proposal()));
  // What it shows now is what the desk may not approve.
  auto again = w.approve(desk);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().is(errc::forbidden));
  CHECK(w.operation(kRefund).state() == pb::STATE_PENDING);
  // Nor deny: a desk decides its own tiers only, either way.
  Status denied = w.storage->transact([&](store::Transaction& txn) -> Status {
    return operations::deny(txn, kRefund, desk, "not ours to decide");
  });
  REQUIRE_FALSE(denied.ok());
  CHECK(denied.error().is(errc::forbidden));
  CHECK(w.operation(kRefund).state() == pb::STATE_PENDING);
  auto supervisor = w.approve(person("sam"));
  REQUIRE(supervisor.ok());
  CHECK_FALSE(supervisor->refusal);
  CHECK(w.operation(kRefund).state() == pb::STATE_APPROVED);
  CHECK(w.storage->verify_audit()->ok);
}

TEST_CASE("re-tiering discards the approvals given for the old tier; a lower tier applies too") {
  operations::PolicyConfig policy;
  policy.two_person_threshold_minor = {{"USD", 1000}};  // 25.00 USD needs two
  World w(policy);
  auto first = w.approve(person("alice"));
  REQUIRE(first.ok());
  REQUIRE(first->step == operations::ApprovalStep::recorded);
  REQUIRE(w.operation(kRefund).approvals_size() == 1);
  auto lowered = policy;
  lowered.tools["request_refund"].tier = "support";
  w.policy.set(lowered);
  auto n = operations::retier_pending(*w.storage, lowered);
  REQUIRE(n.ok());
  CHECK(*n == 1);
  auto op = w.operation(kRefund);
  CHECK(op.proposal().tier() == "support");
  CHECK(op.approvals_size() == 0);
  CHECK(*operations::retier_pending(*w.storage, lowered) == 0);  // nothing left to change
  auto audit = w.storage->reader().audit_of(kRefund);
  REQUIRE(audit.ok());
  CHECK(audit->back().action() == "retier");
  CHECK(audit->back().details_json().find("alice") != std::string::npos);
  // Two new approvals are needed, alice's among them if she gives it again.
  REQUIRE(w.approve(person("alice"))->step == operations::ApprovalStep::recorded);
  REQUIRE(w.approve(person("bob"))->step == operations::ApprovalStep::complete);
}

TEST_CASE("the approver is checked as configured when its approval is written") {
  World w;
  const auto before = w.operation(kRefund);
  auto alice = person("alice");
  alice.token_sha256 = crypto::sha256_hex("tok-alice");
  // Revoked by a reload while the request waited (on the order service):
  // it approves nothing.
  std::vector<operations::Principal> in_force{person("bob")};
  auto revoked = w.approve(alice, std::nullopt, {}, std::nullopt, {}, &in_force);
  REQUIRE_FALSE(revoked.ok());
  CHECK(revoked.error().is(errc::unauthorized));
  // Replaced: the same name with another token is not this request's.
  auto replaced = alice;
  replaced.token_sha256 = crypto::sha256_hex("tok-alice-new");
  in_force = {replaced};
  CHECK(w.approve(alice, std::nullopt, {}, std::nullopt, {}, &in_force)
            .error()
            .is(errc::unauthorized));
  // Still configured, with its limit cut: the limit in force applies.
  auto cut = alice;
  cut.max_amount_minor = {{"USD", 100}};
  in_force = {cut};
  CHECK(
      w.approve(alice, std::nullopt, {}, std::nullopt, {}, &in_force).error().is(errc::forbidden));
  CHECK(w.operation(kRefund).SerializeAsString() == before.SerializeAsString());
  in_force = {alice};
  CHECK(w.approve(alice, std::nullopt, {}, std::nullopt, {}, &in_force).ok());
}

TEST_CASE("lowering a declared amount: only within the declaration, only by a desk of its tier") {
  const auto policy = declaring(R"({
    "name": "waive_fee", "description": "Waive a fee.", "money": "credit",
    "amount_argument": "amount_minor", "tier": "support",
    "tier_above_minor": {"supervisor": {"USD": 1000}},
    "effect": "{amount} of a fee on order {order_id} is credited.",
    "parameters": {"required": ["amount_minor"],
                   "properties": {"amount_minor": {"type": "integer", "minimum": 500}}},
    "executor": {"url": "http://127.0.0.1:9/waive", "token_env": "WAIVE_TOKEN"}})");
  World w(policy);
  w.seed_order("ORDER-200");
  operations::SessionView v;
  v.required_actions = {
      {"call_w", "turn_2", "waive_fee", R"({"order_id":"ORDER-200","amount_minor":1500})"}};
  w.agents.views["sess_1"] = v;
  w.webhook("msg_2", "sess_1");
  w.pump();
  const std::string key = "demo-user:ORDER-200:waive_fee:v1";
  const auto before = w.operation(key);
  REQUIRE(before.state() == pb::STATE_PENDING);
  REQUIRE(before.proposal().tier() == "supervisor");
  // The executor is sent the operation key as its Idempotency-Key: the key
  // on-call is shown is that one.
  CHECK(before.idempotency_key() == key);
  CHECK(w.operation(kRefund).idempotency_key().starts_with("opgate-v1-"));
  auto lower = [&](const operations::Principal& who, int64_t amount) {
    return w.storage->transact([&](store::Transaction& txn) -> Status {
      OPGATE_TRY(operations::approve(txn, key, who,
                                     {amount, "USD", before.fingerprint(), "less", {}}, policy,
                                     std::nullopt, std::nullopt));
      return Status::Ok();
    });
  };
  // A support desk may not decide a supervisor-tier proposal: nor lower it
  // into its own tier.
  auto desk = person("dana");
  desk.tiers = {"support"};
  auto by_desk = lower(desk, 800);
  REQUIRE_FALSE(by_desk.ok());
  CHECK(by_desk.error().is(errc::forbidden));
  // Below the declared minimum: refused, the proposal kept for another
  // decision (it was rejected, and the agent told, before).
  auto below = lower(person("carol"), 100);
  REQUIRE_FALSE(below.ok());
  CHECK(below.error().is(errc::widening_refused));
  CHECK(below.error().message.find("does not fit the declaration") != std::string::npos);
  CHECK(w.operation(key).SerializeAsString() == before.SerializeAsString());
  // Within it, by a supervisor: lowered into the support tier.
  REQUIRE(lower(person("carol"), 800).ok());
  CHECK(w.operation(key).proposal().amount_minor() == 800);
  CHECK(w.operation(key).proposal().arguments_json().find("800") != std::string::npos);
}

TEST_CASE("a credit re-tiered by a lower support limit is decided at the tier in force") {
  operations::PolicyConfig policy;
  World w(policy);
  operations::SessionView v;
  v.required_actions = {{"call_c", "turn_2", "issue_account_credit",
                         R"({"order_id":"ORDER-100","amount_minor":1500,"currency":"USD",)"
                         R"("reason_code":"GOODWILL"})"}};
  w.agents.views["sess_1"] = v;
  w.webhook("msg_2", "sess_1");
  w.pump();
  const std::string key = "demo-user:ORDER-100:account-credit:v1";
  REQUIRE(w.operation(key).proposal().tier() == "support");
  auto lowered = policy;
  lowered.credit_support_limit_minor = {{"USD", 1000}};
  w.policy.set(lowered);
  REQUIRE(*operations::retier_pending(*w.storage, lowered) == 1);
  CHECK(w.operation(key).proposal().tier() == "supervisor");
  CHECK(w.operation(key).state() == pb::STATE_PENDING);  // re-tiered, not rejected
}

TEST_CASE("a deny after the TTL records the expiry it is, and asking again changes nothing") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 3600;
  World w(policy);
  w.clock.advance_ms(3600 * 1000);  // the sweeper has not run since
  auto deny = [&] {
    return w.storage->transact([&](store::Transaction& txn) {
      return operations::deny(txn, kRefund, person("alice"), "not this one");
    });
  };
  REQUIRE(deny().ok());
  CHECK(w.outcome() == "expired");
  auto op = w.operation(kRefund);
  CHECK(op.decided_by().empty());
  auto audit = w.storage->reader().audit_of(kRefund);
  REQUIRE(audit.ok());
  CHECK(audit->back().action() == "expire");
  CHECK(json::parse(audit->back().details_json()).at("noticed_by").as_string() == "alice");
  const auto head = w.storage->reader().audit_head()->seq;
  REQUIRE(deny().ok());  // again: the same outcome, nothing written
  CHECK(w.storage->reader().audit_head()->seq == head);
  CHECK(json::parse(w.result_output()).at("status").as_string() == "expired");
  CHECK(w.storage->verify_audit()->ok);
}

TEST_CASE("a withdrawal after the TTL records the expiry, not the agent's withdrawal") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 60;
  World w(policy);
  const std::string owner = w.operation(kRefund).proposal().owner();
  w.clock.advance_ms(60 * 1000);
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::withdraw(txn, kRefund, owner, "agent", "changed my mind");
              })
              .ok());
  CHECK(w.outcome() == "expired");
  CHECK(w.operation(kRefund).decision_reason() != "changed my mind");
}

TEST_CASE("outside the principal's owner patterns an operation does not exist") {
  World w;
  auto r = w.approve(person("alice", {"team-b-*"}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().is(errc::not_found));
  Status denied = w.storage->transact([&](store::Transaction& txn) {
    return operations::deny(txn, kRefund, person("alice", {}), "no");
  });
  CHECK(denied.error().is(errc::not_found));
  CHECK(w.operation(kRefund).state() == pb::STATE_PENDING);
}

TEST_CASE("on-call's evidence stays in the record; the session gets the outcome") {
  World w;
  REQUIRE(w.approve(person("alice")).ok());
  w.provider.answers = {{operations::Verdict::indeterminate, "", "", "timeout", ""}};
  w.pump();
  REQUIRE(w.operation(kRefund).state() == pb::STATE_OUTCOME_UNKNOWN);
  operations::Resolution r;
  r.outcome = operations::Outcome::succeeded;
  r.evidence = "ticket OPS-4411, seen by Jane Doe in the dashboard";
  r.provider_object_id = "re_manual_1";
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::resolve(txn, kRefund, person("oncall"), r);
              })
              .ok());
  auto op = w.operation(kRefund);
  CHECK(op.evidence() == r.evidence);
  CHECK(op.provider_object_id() == "re_manual_1");
  const auto output = w.result_output();
  CHECK(output.find("OPS-4411") == std::string::npos);
  CHECK(output.find("Jane") == std::string::npos);
  CHECK(output.find("re_manual_1") != std::string::npos);
  CHECK((*w.storage->reader().ledger_entry(kRefund))->provider_object_id() == "re_manual_1");
}

TEST_CASE("an operation whose provider object is still pending cannot be resolved as failed") {
  World w;
  REQUIRE(w.approve(person("alice")).ok());
  w.provider.answers = {{operations::Verdict::pending, "re_1", "pending", "", ""}};
  w.pump();
  REQUIRE(w.operation(kRefund).state() == pb::STATE_OUTCOME_UNKNOWN);
  auto resolve = [&](operations::Outcome outcome) {
    operations::Resolution r;
    r.outcome = outcome;
    r.evidence = "ticket OPS-1";
    return w.storage->transact([&](store::Transaction& txn) {
      return operations::resolve(txn, kRefund, person("oncall"), r);
    });
  };
  auto failed = resolve(operations::Outcome::failed);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().is(errc::invalid_state));
  CHECK(failed.error().message.find("re_1 in status pending") != std::string::npos);
  CHECK(w.operation(kRefund).state() == pb::STATE_OUTCOME_UNKNOWN);
  // Seen paid out, as another object: that may be recorded, and the object
  // the provider named stays named in the audit record.
  operations::Resolution paid;
  paid.outcome = operations::Outcome::succeeded;
  paid.evidence = "ticket OPS-1";
  paid.provider_object_id = "re_other";
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::resolve(txn, kRefund, person("oncall"), paid);
              })
              .ok());
  CHECK(w.operation(kRefund).provider_object_id() == "re_other");
  auto records = w.storage->reader().audit_of(kRefund);
  REQUIRE(records.ok());
  CHECK(records->back().details_json().find(R"("replaced_provider_object_id":"re_1")") !=
        std::string::npos);
}

TEST_CASE("a pending object the reconciler finds holds a resolution as failed back too") {
  World w;
  REQUIRE(w.approve(person("alice")).ok());
  w.provider.answers = {{operations::Verdict::indeterminate, "", "", "timeout", ""}};
  w.pump();
  operations::LookupResult pending;
  pending.lookup = operations::Lookup::found;
  pending.object = {operations::Verdict::pending, "re_2", "pending", "", ""};
  w.provider.lookups = {pending};
  w.clock.advance_ms(3'600'000);
  w.pump();
  REQUIRE(w.operation(kRefund).state() == pb::STATE_OUTCOME_UNKNOWN);
  CHECK(w.operation(kRefund).provider_object_id() == "re_2");
  operations::Resolution r;
  r.outcome = operations::Outcome::failed;
  r.evidence = "ticket OPS-2";
  Status failed = w.storage->transact([&](store::Transaction& txn) {
    return operations::resolve(txn, kRefund, person("oncall"), r);
  });
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().is(errc::invalid_state));
}

TEST_CASE("an approver lowers the amount: narrowed in place, paid and told at the lower amount") {
  World w;
  const auto proposed = w.operation(kRefund);
  auto a = w.approve(person("alice"), 1500, "Only the damaged item is refunded.");
  REQUIRE_MESSAGE(a.ok(), a.error().message);
  CHECK_FALSE(a->refusal);
  auto op = w.operation(kRefund);
  CHECK(op.state() == pb::STATE_APPROVED);
  CHECK(op.proposal().amount_minor() == 1500);
  CHECK(op.proposal().original_amount_minor() == 2500);
  CHECK(op.proposal().edited_by() == "alice");
  CHECK(op.proposal().edit_reason() == "Only the damaged item is refunded.");
  CHECK(op.fingerprint() != proposed.fingerprint());
  CHECK(op.fingerprint() == operations::fingerprint(op.proposal()));
  CHECK(op.proposal().effect().find("15.00 USD (lowered by the approver from 25.00 USD)") !=
        std::string::npos);
  // Unchanged: owner, order, currency, kind, payee.
  CHECK(op.proposal().owner() == proposed.proposal().owner());
  CHECK(op.proposal().order_id() == proposed.proposal().order_id());
  CHECK(op.proposal().currency() == proposed.proposal().currency());
  CHECK(op.proposal().kind() == proposed.proposal().kind());
  CHECK(op.proposal().payment_method() == proposed.proposal().payment_method());
  REQUIRE(op.approvals_size() == 1);
  CHECK(op.approvals(0).principal() == "alice");
  auto records = w.storage->reader().audit_of(kRefund);
  REQUIRE(records.ok());
  REQUIRE(records->size() >= 3);
  const auto& narrow = (*records)[records->size() - 2];  // then the approval
  CHECK(narrow.action() == "narrow");
  CHECK(narrow.principal() == "alice");
  CHECK(narrow.details_json().find("\"to_amount_minor\":\"1500\"") != std::string::npos);
  CHECK(records->back().details_json().find("\"original_amount_minor\":2500") != std::string::npos);

  w.pump();
  REQUIRE(w.provider.executed.size() == 1);
  CHECK(w.provider.executed[0].amount_minor == 1500);
  CHECK(w.outcome() == "succeeded");
  auto output = json::parse(w.result_output()).as_object();
  CHECK(output.at("amount_minor").as_int64() == 1500);
  CHECK(output.at("original_amount_minor").as_int64() == 2500);
  CHECK(output.at("edit_reason").as_string() == "Only the damaged item is refunded.");
  auto row = w.storage->reader().ledger_entry(kRefund);
  REQUIRE(row.ok());
  REQUIRE(row->has_value());
  CHECK((*row)->amount_minor() == 1500);
  CHECK((*row)->original_amount_minor() == 2500);
  CHECK(w.storage->verify_audit()->ok);
}

TEST_CASE("an approval never widens: higher, another currency, zero, no reason change nothing") {
  World w;
  const auto before = w.operation(kRefund);
  const auto head = w.storage->reader().audit_head()->seq;
  auto higher = w.approve(person("alice"), 2600, "more");
  REQUIRE_FALSE(higher.ok());
  CHECK(higher.error().is(errc::widening_refused));
  auto other_currency = w.approve(person("alice"), 1500, "less", std::string("GBP"));
  REQUIRE_FALSE(other_currency.ok());
  CHECK(other_currency.error().is(errc::widening_refused));
  auto zero = w.approve(person("alice"), 0, "nothing");
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.error().is(errc::widening_refused));
  auto no_reason = w.approve(person("alice"), 1500);
  REQUIRE_FALSE(no_reason.ok());
  CHECK(no_reason.error().is(errc::bad_request));
  // Above the approver's limit only once lowered? No: a lower amount over a
  // limit the approver lacks is refused and nothing is kept either.
  auto p = person("carol");
  p.max_amount_minor = {{"USD", 1000}};
  auto over_limit = w.approve(p, 1500, "less");
  REQUIRE_FALSE(over_limit.ok());
  CHECK(over_limit.error().is(errc::forbidden));
  const auto after = w.operation(kRefund);
  CHECK(after.SerializeAsString() == before.SerializeAsString());
  CHECK(w.storage->reader().audit_head()->seq == head);
}

TEST_CASE("lowering discards the approvals so far; the second approver approves what was lowered") {
  operations::PolicyConfig policy;
  policy.two_person_threshold_minor = {{"USD", 100}};  // 25.00 and 15.00 both need two
  World w(policy);
  REQUIRE(w.approve(person("bob")).ok());
  REQUIRE(w.operation(kRefund).approvals_size() == 1);
  const auto seen_by_bob = w.operation(kRefund);
  auto lowered = w.approve(person("alice"), 1500, "Partial.");
  REQUIRE_MESSAGE(lowered.ok(), lowered.error().message);
  auto op = w.operation(kRefund);
  CHECK(op.state() == pb::STATE_PENDING);
  REQUIRE(op.approvals_size() == 1);
  CHECK(op.approvals(0).principal() == "alice");  // bob's approval was of 25.00
  // bob approving what he saw before (25.00) is a mismatch now.
  Status stale = w.storage->transact([&](store::Transaction& txn) -> Status {
    OPGATE_TRY(operations::approve(txn, kRefund, person("bob"),
                                   {2500, "USD", seen_by_bob.fingerprint(), {}, {}}, policy));
    return Status::Ok();
  });
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.error().is(errc::proposal_mismatch));
  // bob lowers it further: alice's approval (of 15.00) is discarded in turn,
  // and the original stays what the agent proposed.
  REQUIRE(w.approve(person("bob"), 1000, "Less still.").ok());
  op = w.operation(kRefund);
  REQUIRE(op.approvals_size() == 1);
  CHECK(op.approvals(0).principal() == "bob");
  CHECK(op.proposal().original_amount_minor() == 2500);
  CHECK(op.proposal().edited_by() == "bob");
  REQUIRE(w.approve(person("alice")).ok());
  op = w.operation(kRefund);
  CHECK(op.state() == pb::STATE_APPROVED);
  CHECK(op.proposal().amount_minor() == 1000);
}

TEST_CASE("claiming at once: only the last approval needed claims, at the amount approved") {
  operations::PolicyConfig policy;
  policy.two_person_threshold_minor = {{"USD", 100}};
  World w(policy);
  const operations::ClaimAtOnce at_once{"lease-1", 30'000};
  auto first = w.approve(person("bob"), std::nullopt, {}, std::nullopt, at_once);
  REQUIRE(first.ok());
  CHECK_FALSE(first->claimed);
  CHECK(w.operation(kRefund).state() == pb::STATE_PENDING);
  CHECK(w.due(w.clock.now_ms() + 3'600'000).empty());
  // alice lowers it: bob's approval goes, hers is the first again.
  auto lowered = w.approve(person("alice"), 1500, "Partial.", std::nullopt, at_once);
  REQUIRE(lowered.ok());
  CHECK_FALSE(lowered->claimed);
  auto last = w.approve(person("bob"), std::nullopt, {}, std::nullopt, at_once);
  REQUIRE_MESSAGE(last.ok(), last.error().message);
  REQUIRE(last->claimed);
  CHECK(last->claimed->state() == pb::STATE_EXECUTING);
  CHECK(last->claimed->proposal().amount_minor() == 1500);
  CHECK(last->claimed->attempts() == 1);
  CHECK(w.operation(kRefund).state() == pb::STATE_EXECUTING);
  CHECK(w.storage->reader().funds("ORDER-100")->reserved_minor() == 1500);
  auto items = w.due(w.clock.now_ms() + 30'000);
  REQUIRE(items.size() == 1);
  CHECK(items[0].item.lease_token() == "lease-1");
  CHECK(items[0].item.not_before_ms() == w.clock.now_ms() + 30'000);
}

TEST_CASE("claiming at once: a refused approval claims nothing and holds nothing") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 3600;
  World w(policy);
  w.clock.advance_ms(3600 * 1000);  // past the approval time limit
  const operations::ClaimAtOnce at_once{"lease-1", 30'000};
  auto late = w.approve(person("alice"), std::nullopt, {}, std::nullopt, at_once);
  REQUIRE(late.ok());
  REQUIRE(late->refusal);
  CHECK(late->refusal->is(errc::expired));
  CHECK_FALSE(late->claimed);
  CHECK(w.outcome() == "expired");
  CHECK(w.storage->reader().funds("ORDER-100")->reserved_minor() == 0);
}

TEST_CASE("an expired proposal is settled as it was proposed, not as an approver lowered it") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 60;
  World w(policy);
  w.clock.advance_ms(61 * 1000);
  auto a = w.approve(person("alice"), 1500, "Partial.");
  REQUIRE(a.ok());
  REQUIRE(a->refusal);
  CHECK(a->refusal->is(errc::expired));
  auto op = w.operation(kRefund);
  CHECK(w.outcome() == "expired");
  CHECK(op.proposal().amount_minor() == 2500);
  CHECK(op.proposal().original_amount_minor() == 0);
}

TEST_CASE("reminders are raised a page a pass, so many due at once do not hold the dispatcher") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 3600;
  policy.escalation.remind_after_s = 600;
  World w(policy);
  // 299 more proposals, pending since the first.
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) -> Status {
                for (int i = 0; i < 299; ++i) {
                  pb::Operation op = w.operation(kRefund);
                  op.set_key(fmt::format("demo-user:ORDER-X{:03}:full-refund:v1", i));
                  op.mutable_proposal()->set_order_id(fmt::format("ORDER-X{:03}", i));
                  OPGATE_TRY(txn.put_operation(op));
                }
                return Status::Ok();
              })
              .ok());
  w.clock.advance_ms(600 * 1000);
  CHECK(w.engine->remind_and_escalate() == daemon::Engine::kEscalationsPerPass);
  CHECK(w.engine->remind_and_escalate() == 300 - daemon::Engine::kEscalationsPerPass);
  CHECK(w.engine->remind_and_escalate() == 0);
}

TEST_CASE("a proposal nobody decides is reminded about, then escalated, once each; expiry stands") {
  operations::PolicyConfig policy;
  policy.approval_ttl_s = 3600;
  policy.escalation.remind_after_s = 600;
  policy.escalation.escalate_after_s = 1800;
  policy.escalation.escalate_to_tier = "supervisor";
  World w(policy);
  const auto proposed = w.operation(kRefund);
  REQUIRE(proposed.proposal().tier() == "refund");
  auto events_of = [&](std::string_view type) {
    auto all = w.storage->reader().notifications_since(0, 1000);
    REQUIRE(all.ok());
    return std::count_if(all->begin(), all->end(),
                         [&](const pb::Notification& n) { return n.type() == type; });
  };
  w.clock.advance_ms(600 * 1000 - 1);
  CHECK(w.engine->remind_and_escalate() == 0);
  w.clock.advance_ms(1);
  CHECK(w.engine->remind_and_escalate() == 1);
  CHECK(w.engine->remind_and_escalate() == 0);  // once
  CHECK(events_of(operations::notify::reminder) == 1);
  auto op = w.operation(kRefund);
  CHECK(op.reminded_at_ms() == w.clock.now_ms());
  CHECK(op.fingerprint() == proposed.fingerprint());  // a reminder changes nothing decided

  // bob approves under the refund tier; nobody else does in time.
  operations::PolicyConfig two = policy;
  two.two_person_threshold_minor = {{"USD", 100}};
  w.policy.set(two);
  REQUIRE(w.approve(person("bob")).ok());
  REQUIRE(w.operation(kRefund).approvals_size() == 1);
  w.clock.advance_ms(1200 * 1000);
  CHECK(w.engine->remind_and_escalate() == 1);
  CHECK(w.engine->remind_and_escalate() == 0);
  CHECK(events_of(operations::notify::escalated) == 1);
  op = w.operation(kRefund);
  CHECK(op.proposal().tier() == "supervisor");
  CHECK(op.escalated_to_tier() == "supervisor");
  CHECK(op.fingerprint() != proposed.fingerprint());
  CHECK(op.approvals_size() == 0);  // bob approved a refund-tier proposal
  auto audit = w.storage->reader().audit_of(kRefund);
  REQUIRE(audit.ok());
  CHECK(audit->back().action() == "escalate");
  CHECK(audit->back().details_json().find("\"discarded_approvals\":\"bob\"") != std::string::npos);

  // A reload that re-tiers never lowers an escalated proposal.
  auto changed = operations::retier_pending(*w.storage, *w.policy.get());
  REQUIRE(changed.ok());
  CHECK(*changed == 0);
  CHECK(w.operation(kRefund).proposal().tier() == "supervisor");
  // A refund-tier token may no longer approve it.
  auto refund_only = person("carol");
  refund_only.tiers = {"refund"};
  auto refused = w.approve(refund_only);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().is(errc::forbidden));

  // Expiry still fails closed.
  w.clock.advance_ms(1800 * 1000);
  CHECK(w.engine->expire_pending() == 1);
  CHECK(w.outcome() == "expired");
  CHECK(w.engine->remind_and_escalate() == 0);
  CHECK(w.storage->verify_audit()->ok);
}

TEST_CASE("escalation leaves a proposal already at or above the tier alone") {
  operations::PolicyConfig policy;
  policy.escalation.escalate_after_s = 60;
  policy.escalation.escalate_to_tier = "refund";
  World w(policy);
  w.clock.advance_ms(61 * 1000);
  CHECK(w.engine->remind_and_escalate() == 0);
  CHECK(w.operation(kRefund).escalated_at_ms() == 0);
}

namespace {

const operations::PasskeySite kSite{"localhost", "http://localhost:8081"};

// Registers the authenticator's passkey for `principal` as the console does
// (with an administrator's allowance first, if `allow`).
Status register_with(World& w, testing::SoftAuthenticator& authenticator,
                     const std::string& principal, bool allow) {
  return w.storage->transact([&](store::Transaction& txn) -> Status {
    if (allow) OPGATE_TRY(operations::allow_passkey_enrolment(txn, principal, "admin"));
    OPGATE_ASSIGN_OR_RETURN(auto challenge,
                            operations::issue_passkey_challenge(txn, principal, "register"));
    OPGATE_TRY(operations::register_passkey(
        txn, principal, "laptop", challenge,
        testing::SoftAuthenticator::client_data("webauthn.create", challenge, kSite.origin),
        authenticator.attestation_object(), kSite));
    return Status::Ok();
  });
}

// alice's passkey, registered through the store as the console registers one.
struct Passkeys {
  World& w;
  testing::SoftAuthenticator authenticator{"localhost"};
  explicit Passkeys(World& world, const std::string& principal = "alice") : w(world) {
    Status s = register_with(w, authenticator, principal, true);
    REQUIRE_MESSAGE(s.ok(), s.error().message);
  }
  // The proof the console sends for approving `key` as shown.
  operations::StepUpProof prove(const std::string& principal, const std::string& key,
                                const std::string& fingerprint) {
    std::string challenge;
    Status s = w.storage->transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(challenge, operations::issue_passkey_challenge(
                                             txn, principal, "approve", key, fingerprint));
      return Status::Ok();
    });
    REQUIRE(s.ok());
    operations::StepUpProof proof;
    proof.challenge = challenge;
    proof.credential_id = authenticator.credential_id();
    proof.client_data_json =
        testing::SoftAuthenticator::client_data("webauthn.get", challenge, kSite.origin);
    auto a = authenticator.assert_for(proof.client_data_json);
    proof.authenticator_data = a.authenticator_data;
    proof.signature = a.signature;
    proof.site = kSite;
    return proof;
  }
};

Status approve_with(World& w, const operations::Principal& who,
                    std::optional<operations::StepUpProof> proof,
                    const std::string& key = kRefund) {
  auto op = w.operation(key);
  return w.storage->transact([&](store::Transaction& txn) -> Status {
    OPGATE_TRY(operations::approve(txn, key, who,
                                   {op.proposal().amount_minor(),
                                    op.proposal().currency(),
                                    op.fingerprint(),
                                    {},
                                    std::move(proof)},
                                   *w.policy.get()));
    return Status::Ok();
  });
}

}  // namespace

TEST_CASE("step-up: above the policy's line an approval needs the approver's passkey") {
  operations::PolicyConfig policy;
  policy.step_up.tiers = {"refund"};
  World w(policy);
  const auto before = w.operation(kRefund);
  Status bare = approve_with(w, person("alice"), std::nullopt);
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.error().is(errc::step_up_required));
  CHECK(w.operation(kRefund).SerializeAsString() == before.SerializeAsString());

  Passkeys keys(w);
  auto registered = operations::passkeys_of(w.storage->reader(), "alice");
  REQUIRE(registered.ok());
  REQUIRE(registered->size() == 1);
  auto audit = w.storage->reader().audit_of("passkey:alice");
  REQUIRE(audit.ok());
  REQUIRE(audit->size() == 2);
  CHECK(audit->front().action() == "passkey_enrolment_allowed");
  CHECK(audit->front().principal() == "admin");
  CHECK(audit->back().action() == "passkey_registered");

  // bob's passkey-less approval, and alice's proof presented by bob, fail.
  auto proof = keys.prove("alice", kRefund, before.fingerprint());
  Status by_bob = approve_with(w, person("bob"), proof);
  REQUIRE_FALSE(by_bob.ok());
  CHECK(by_bob.error().is(errc::step_up_failed));
  // The same proof by alice: approved (the failed attempt used nothing up).
  Status ok = approve_with(w, person("alice"), proof);
  REQUIRE_MESSAGE(ok.ok(), ok.error().message);
  CHECK(w.operation(kRefund).state() == pb::STATE_APPROVED);
  CHECK((*operations::passkeys_of(w.storage->reader(), "alice"))[0].sign_count() == 1);
}

TEST_CASE("step-up: a currency the policy names no line for needs the passkey at any amount") {
  operations::PolicyConfig policy;
  policy.step_up.above_minor = {{"EUR", 50000}};  // the refund is in USD
  World w(policy);
  const auto before = w.operation(kRefund);
  REQUIRE(before.proposal().currency() == "USD");
  Status bare = approve_with(w, person("alice"), std::nullopt);
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.error().is(errc::step_up_required));
  CHECK(w.operation(kRefund).SerializeAsString() == before.SerializeAsString());
  // With a line for USD above the refund, no passkey is asked.
  operations::PolicyConfig lined;
  lined.step_up.above_minor = {{"EUR", 50000}, {"USD", 50000}};
  World v(lined);
  Status approved = approve_with(v, person("alice"), std::nullopt);
  REQUIRE_MESSAGE(approved.ok(), approved.error().message);
}

TEST_CASE("step-up: a replayed assertion, another operation's or a stale one is refused") {
  operations::PolicyConfig policy;
  policy.step_up.above_minor = {{"USD", 1000}};
  policy.two_person_threshold_minor = {{"USD", 100}};  // two approvals, so a replay can be tried
  World w(policy);
  Passkeys alice(w);
  Passkeys bob(w, "bob");
  const auto shown = w.operation(kRefund);
  auto proof = alice.prove("alice", kRefund, shown.fingerprint());
  REQUIRE(approve_with(w, person("alice"), proof).ok());
  REQUIRE(w.operation(kRefund).approvals_size() == 1);
  // bob replays alice's assertion: not his passkey, not his challenge.
  Status replay = approve_with(w, person("bob"), proof);
  REQUIRE_FALSE(replay.ok());
  CHECK(replay.error().is(errc::step_up_failed));
  // A challenge for another fingerprint (the proposal as it was before).
  auto stale = bob.prove("bob", kRefund, std::string(64, 'f'));
  Status stale_status = approve_with(w, person("bob"), stale);
  REQUIRE_FALSE(stale_status.ok());
  CHECK(stale_status.error().is(errc::step_up_failed));
  // bob's own, for this operation as shown: approved.
  auto good = bob.prove("bob", kRefund, shown.fingerprint());
  REQUIRE(approve_with(w, person("bob"), good).ok());
  CHECK(w.operation(kRefund).state() == pb::STATE_APPROVED);
  // Used once: the same proof again is refused whatever it is for.
  w.seed_order("ORDER-200");
  Status again = w.storage->transact([&](store::Transaction& txn) -> Status {
    return operations::check_step_up(txn, "bob", kRefund, shown.fingerprint(), good);
  });
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().is(errc::step_up_failed));
}

TEST_CASE("step-up: a removed passkey no longer signs, and its removal is audited") {
  operations::PolicyConfig policy;
  policy.step_up.tiers = {"refund"};
  World w(policy);
  Passkeys keys(w);
  const auto shown = w.operation(kRefund);
  auto proof = keys.prove("alice", kRefund, shown.fingerprint());
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::remove_passkey(txn, "alice", keys.authenticator.credential_id());
              })
              .ok());
  CHECK(operations::passkeys_of(w.storage->reader(), "alice")->empty());
  Status s = approve_with(w, person("alice"), proof);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().is(errc::step_up_failed));
  auto audit = w.storage->reader().audit_of("passkey:alice");
  REQUIRE(audit->size() == 3);
  CHECK(audit->back().action() == "passkey_removed");
  CHECK(w.storage->verify_audit()->ok);
}

TEST_CASE("the same proposal made again links to it after it was escalated or lowered") {
  operations::PolicyConfig policy;
  policy.escalation.escalate_after_s = 60;
  World w(policy);
  const auto as_proposed = w.operation(kRefund).proposal();
  auto propose_again = [&](const std::string& call_id) {
    pb::ToolCall call;
    call.set_session_id("sess_1");
    call.set_turn_id("turn_2");
    call.set_call_id(call_id);
    call.set_name("request_refund");
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  return operations::propose(txn, call, as_proposed, *w.policy.get());
                })
                .ok());
    return call;
  };
  w.clock.advance_ms(61 * 1000);
  REQUIRE(w.engine->remind_and_escalate() == 1);
  REQUIRE(w.operation(kRefund).proposal().tier() == "supervisor");
  auto again = propose_again("call_2");
  CHECK(again.operation_key() == kRefund);
  CHECK_FALSE(again.result_saved());  // linked, waiting: not refused
  REQUIRE(w.approve(person("alice"), 1500, "Partial.").ok());
  auto after_lowering = propose_again("call_3");
  CHECK(after_lowering.operation_key() == kRefund);
  CHECK(w.operation(kRefund).calls_size() == 3);
}

TEST_CASE(
    "a call's arguments are kept whole: a long declared call made again links to its "
    "settled operation; past the limit a call is refused") {
  const auto policy = declaring(R"({
    "name": "waive_fee", "description": "Waive a fee.", "money": "credit",
    "amount_argument": "amount_minor", "tier": "support",
    "effect": "{amount} of a fee on order {order_id} is credited.",
    "parameters": {"required": ["amount_minor", "why", "context"],
                   "properties": {"amount_minor": {"type": "integer"},
                                  "why": {"type": "string", "maxLength": 4000},
                                  "context": {"type": "string", "maxLength": 4000}}},
    "executor": {"url": "http://127.0.0.1:9/waive", "token_env": "WAIVE_TOKEN"}})");
  World w(policy);
  w.seed_order("ORDER-200");
  auto answer = [&](const std::string& call_id, const std::string& arguments) {
    operations::AgentCall a;
    a.ref.set_session_id("sess_1");
    a.ref.set_turn_id("turn_9");
    a.ref.set_call_id(call_id);
    a.name = "waive_fee";
    a.arguments_json = arguments;
    a.owner = "demo-user";
    std::optional<operations::AnsweredCall> out;
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) -> Status {
                  OPGATE_ASSIGN_OR_RETURN(
                      out, operations::answer_call(txn, a, *w.policy.get(), nullptr));
                  return Status::Ok();
                })
                .ok());
    return out->call;
  };
  // 4,000 characters of three bytes each, twice: 24 KB of arguments.
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "\u65e5";
  const std::string arguments = R"({"order_id":"ORDER-200","amount_minor":1500,"why":")" + text +
                                R"(","context":")" + text + R"("})";
  REQUIRE(arguments.size() > 24'000);
  const auto first = answer("call_1", arguments);
  const std::string key = "demo-user:ORDER-200:waive_fee:v1";
  REQUIRE(first.operation_key() == key);
  for (const char* name : {"alice", "bob"}) {
    const auto op = w.operation(key);
    if (op.state() != pb::STATE_PENDING) break;
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) -> Status {
                  OPGATE_TRY(operations::approve(txn, key, person(name),
                                                 {1500, "USD", op.fingerprint(), {}, {}}, policy,
                                                 std::nullopt, std::nullopt));
                  return Status::Ok();
                })
                .ok());
  }
  w.pump();
  REQUIRE(std::string(operations::outcome_text(w.operation(key))) == "succeeded");
  // The same call again: linked to the operation (its outcome), not asked
  // of the policy again, which would refuse 1,500 of the 1,000 left.
  const auto again = answer("call_2", arguments);
  CHECK(again.operation_key() == key);
  // Past the limit: refused whole, never kept cut.
  const auto huge = answer("call_3", R"({"order_id":"ORDER-200","amount_minor":100,"why":")" +
                                         std::string(70'000, 'x') + R"("})");
  REQUIRE(huge.result_saved());
  CHECK_FALSE(huge.result().success());
  CHECK(huge.result().error().find("a call takes at most 65536") != std::string::npos);
}

TEST_CASE("an order takes a bounded number of proposals of one kind") {
  World w;
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::deny(txn, kRefund, person("alice"), "no");
              })
              .ok());
  // As if a thousand had been made and settled before.
  auto last = w.operation(kRefund);
  const std::string thousandth = "demo-user:ORDER-100:full-refund:v1000";
  last.set_key(thousandth);
  REQUIRE(
      w.storage->transact([&](store::Transaction& txn) { return txn.put_operation(last); }).ok());
  CHECK(operations::key_version(thousandth) == 1000);
  auto another = last.proposal();
  another.set_reason("a different reason: a different proposal");
  pb::ToolCall call;
  call.set_session_id("sess_1");
  call.set_turn_id("turn_2");
  call.set_call_id("call_2");
  call.set_name("request_refund");
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::propose(txn, call, another, *w.policy.get());
              })
              .ok());
  REQUIRE(call.result_saved());
  CHECK(call.result().error().find("1000 proposals of this kind") != std::string::npos);
  CHECK(call.operation_key().empty());
  CHECK_FALSE(w.storage->reader().operation("demo-user:ORDER-100:full-refund:v1001")->has_value());
}

TEST_CASE("registering a passkey needs an administrator's allowance, used up by it") {
  World w;
  testing::SoftAuthenticator authenticator{"localhost"};
  auto register_one = [&](const std::string& principal) {
    return register_with(w, authenticator, principal, false);
  };
  Status without = register_one("alice");
  REQUIRE_FALSE(without.ok());
  CHECK(without.error().is(errc::step_up_required));
  CHECK(operations::passkeys_of(w.storage->reader(), "alice")->empty());
  REQUIRE(w.storage
              ->transact([&](store::Transaction& txn) {
                return operations::allow_passkey_enrolment(txn, "alice", "admin");
              })
              .ok());
  REQUIRE(register_one("alice").ok());
  // Used up: a second registration needs a new allowance.
  testing::SoftAuthenticator second{"localhost"};
  Status again = register_with(w, second, "alice", false);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().is(errc::step_up_required));
  // "alice/ops" is another principal: its passkeys are never alice's.
  Passkeys other(w, "alice/ops");
  CHECK(operations::passkeys_of(w.storage->reader(), "alice")->size() == 1);
  CHECK(operations::passkeys_of(w.storage->reader(), "alice/ops")->size() == 1);
}

TEST_CASE("drafts are listed by order in pages; an order's newest come first on its page") {
  World w;
  for (int i = 0; i < 5; ++i) {
    w.clock.advance_ms(1000);
    pb::ToolCall call;
    call.set_session_id("sess_1");
    call.set_call_id("draft_" + std::to_string(i));
    REQUIRE(w.storage
                ->transact([&](store::Transaction& txn) {
                  operations::record_draft(txn, call, i == 2 ? "other-user" : "demo-user",
                                           "ORDER-100", "reply " + std::to_string(i), "system");
                  return Status::Ok();
                })
                .ok());
  }
  auto mine = [](const pb::Draft& d) { return d.owner() == "demo-user"; };
  auto first = operations::drafts(w.storage->reader(), "ORDER-100", "", 2, mine);
  REQUIRE(first.ok());
  REQUIRE(first->drafts.size() == 2);
  CHECK(first->drafts[0].text() == "reply 0");
  CHECK(first->drafts[1].text() == "reply 1");
  REQUIRE_FALSE(first->next_after.empty());
  auto second = operations::drafts(w.storage->reader(), "ORDER-100", first->next_after, 2, mine);
  REQUIRE(second.ok());
  REQUIRE(second->drafts.size() == 2);
  CHECK(second->drafts[0].text() == "reply 3");  // reply 2 is another owner's
  auto latest = operations::latest_drafts(w.storage->reader(), "ORDER-100", 3);
  REQUIRE(latest.ok());
  REQUIRE(latest->size() == 3);
  CHECK((*latest)[0].text() == "reply 4");
  CHECK((*latest)[2].text() == "reply 2");
  CHECK(operations::drafts(w.storage->reader(), "ORDER-999", "", 10, mine)->drafts.empty());
}
