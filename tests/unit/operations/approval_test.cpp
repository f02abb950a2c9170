#include <doctest/doctest.h>

#include "common/crypto.h"
#include "operations/authority.h"
#include "operations/keys.h"
#include "operations/policy.h"
#include "operator_api/auth.h"

using namespace opgate;
using namespace opgate::operations;
using operator_api::authenticate;

namespace {
pb::Operation pending_op(int64_t amount = 2500, std::string owner = "demo-user") {
  pb::Operation op;
  op.set_key(owner + ":ORDER-100:full-refund:v1");
  op.set_state(pb::STATE_PENDING);
  auto* p = op.mutable_proposal();
  p->set_kind("full-refund");
  p->set_owner(owner);
  p->set_order_id("ORDER-100");
  p->set_amount_minor(amount);
  p->set_currency("USD");
  op.set_fingerprint(operations::fingerprint(*p));
  return op;
}

Principal approver(std::string name = "alice", int64_t limit = 100000) {
  Principal p;
  p.name = name;
  p.scopes = {"operations:read", "operations:approve"};
  p.owners = {"*"};
  p.max_amount_minor = {{"USD", limit}};
  return p;
}

ApprovalRequest exact(const pb::Operation& op) {
  return {op.proposal().amount_minor(), op.proposal().currency(), op.fingerprint(), {}, {}};
}

// Approvals needed under the default policy (two above 500.00 USD or GBP).
int needed(const pb::Operation& op) { return approvals_needed(op.proposal(), PolicyConfig{}); }
}  // namespace

TEST_CASE("a token is found by its SHA-256 only, and only with the Bearer scheme") {
  Principal p = approver();
  p.token_sha256 = crypto::sha256_hex("s3cret-token-for-a-test");
  std::vector<Principal> all{p};
  CHECK(authenticate(all, std::string("Bearer s3cret-token-for-a-test")) != nullptr);
  CHECK(authenticate(all, std::string("Bearer wrong")) == nullptr);
  CHECK(authenticate(all, std::string("Basic s3cret-token-for-a-test")) == nullptr);
  CHECK(authenticate(all, std::string("Bearer ")) == nullptr);
  CHECK(authenticate(all, std::nullopt) == nullptr);
}

TEST_CASE("a token shorter than 20 characters never authenticates, whatever hash is configured") {
  Principal p = approver();
  p.token_sha256 = crypto::sha256_hex("short-but-configured");  // 20 characters
  std::vector<Principal> all{p};
  CHECK(authenticate(all, std::string("Bearer short-but-configured")) != nullptr);
  p.token_sha256 = crypto::sha256_hex("19-chars-configured");
  all = {p};
  CHECK(authenticate(all, std::string("Bearer 19-chars-configured")) == nullptr);
  CHECK(operator_api::authenticate_token(all, "19-chars-configured") == nullptr);
}

TEST_CASE("the exact proposal is approved in one step below the two-person threshold") {
  auto op = pending_op();
  auto r = check_approval(op, approver(), exact(op), needed(op));
  REQUIRE(r.ok());
  CHECK(*r == ApprovalStep::complete);
}

TEST_CASE("any difference in amount, currency or fingerprint is a proposal_mismatch") {
  auto op = pending_op();
  auto amount = exact(op);
  amount.amount_minor += 1;
  auto currency = exact(op);
  currency.currency = "GBP";
  auto fp = exact(op);
  fp.fingerprint[0] = fp.fingerprint[0] == 'a' ? 'b' : 'a';
  for (const auto& req : {amount, currency, fp}) {
    auto r = check_approval(op, approver(), req, needed(op));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "proposal_mismatch");
  }
}

TEST_CASE("authority: scope, owner patterns, amount limit and self-approval") {
  auto op = pending_op();
  Principal reader = approver();
  reader.scopes = {"operations:read"};
  CHECK(check_approval(op, reader, exact(op), needed(op)).error().code == "forbidden");
  Principal scoped = approver();
  scoped.owners = {"team-b-*"};
  CHECK_FALSE(scoped.may_act_for("demo-user"));
  scoped.owners = {"demo-*"};
  CHECK(scoped.may_act_for("demo-user"));
  scoped.owners = {};
  CHECK_FALSE(scoped.may_act_for("demo-user"));  // no patterns: nothing (fails closed)
  CHECK(check_approval(op, approver("alice", 2499), exact(op), needed(op)).error().code ==
        "forbidden");
  Principal no_gbp = approver();
  no_gbp.max_amount_minor = {{"GBP", 100000}};
  CHECK(check_approval(op, no_gbp, exact(op), needed(op)).error().code == "forbidden");
  CHECK(check_approval(op, approver("demo-user"), exact(op), needed(op)).error().code ==
        "self_approval");
}

TEST_CASE("a token limited to the support tier approves small credits, never refunds") {
  auto refund = pending_op(1500);
  refund.mutable_proposal()->set_tier("refund");
  auto credit = pending_op(1500);
  credit.mutable_proposal()->set_kind("account-credit");
  credit.mutable_proposal()->set_tier("support");
  credit.set_fingerprint(operations::fingerprint(credit.proposal()));
  refund.set_fingerprint(operations::fingerprint(refund.proposal()));
  Principal support = approver("sam", 2000);
  support.tiers = {"support"};
  CHECK(check_approval(credit, support, exact(credit), needed(credit)).ok());
  auto r = check_approval(refund, support, exact(refund), needed(refund));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == "forbidden");
}

TEST_CASE("above the threshold two distinct principals must approve") {
  auto op = pending_op(60000);
  auto first = check_approval(op, approver("alice"), exact(op), needed(op));
  REQUIRE(first.ok());
  CHECK(*first == ApprovalStep::recorded);
  op.add_approvals()->set_principal("alice");
  auto again = check_approval(op, approver("alice"), exact(op), needed(op));
  REQUIRE(again.ok());
  CHECK(*again == ApprovalStep::repeat);
  auto second = check_approval(op, approver("bob"), exact(op), needed(op));
  REQUIRE(second.ok());
  CHECK(*second == ApprovalStep::complete);
}

TEST_CASE("an operation that is not pending cannot be approved") {
  auto op = pending_op();
  op.set_state(pb::STATE_SETTLED);
  op.set_outcome(pb::OUTCOME_DENIED);
  CHECK(check_approval(op, approver(), exact(op), needed(op)).error().code == "invalid_state");
}

TEST_CASE("a currency with no two-person threshold needs two approvers, whatever the amount") {
  PolicyConfig policy;
  policy.two_person_threshold_minor = {{"USD", 50000}};
  auto op = pending_op(100);
  op.mutable_proposal()->set_currency("EUR");
  CHECK(approvals_needed(op.proposal(), policy) == 2);
  op.mutable_proposal()->set_currency("USD");
  CHECK(approvals_needed(op.proposal(), policy) == 1);
  op.mutable_proposal()->set_amount_minor(50001);
  CHECK(approvals_needed(op.proposal(), policy) == 2);
}
