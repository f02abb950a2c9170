#include "sim/history.h"

#include <fmt/format.h>

#include "operations/decisions.h"
#include "operations/execution.h"
#include "operations/proposals.h"
#include "operations/tools.h"

namespace opgate::sim {

namespace {

constexpr size_t kOwners = 1000;

pb::Order order_of(size_t i, int64_t now_s) {
  pb::Order o;
  o.set_order_id(fmt::format("H{}", i));
  o.set_owner(fmt::format("owner-{}", i % kOwners));
  o.set_amount_minor(1000 + static_cast<int64_t>(i % 5000));
  o.set_currency("USD");
  o.set_payment_intent(fmt::format("pi_H{}", i));
  o.set_customer(fmt::format("cus_{}", i % kOwners));
  o.set_payment_method("visa ending 4242");
  o.set_status(pb::ORDER_PAID);
  o.set_placed_at(now_s - 86400);
  return o;
}

// One refund from the customer's request to the provider's answer: the
// order, the bound session, the call, its proposal, an approval, the claim
// and the answer (succeeded, or indeterminate for outcome_unknown).
Status one_refund(store::Transaction& txn, size_t i, bool settle,
                  const operations::PolicyConfig& policy, const operations::Principal& approver) {
  const int64_t now_s = txn.now_ms() / 1000;
  const pb::Order order = order_of(i, now_s);
  txn.put_order(order);
  pb::Session session;
  session.set_session_id(fmt::format("sess_hist_{}", i));
  session.set_owner(order.owner());
  session.set_bound_by("history");
  session.set_bound_at_ms(txn.now_ms());
  session.set_last_sync_ms(txn.now_ms());
  txn.put_session(session);

  pb::ToolCall call;
  call.set_session_id(session.session_id());
  call.set_turn_id("turn_1");
  call.set_call_id(fmt::format("call_hist_{}", i));
  call.set_name("request_refund");
  call.set_arguments_json(fmt::format(R"({{"order_id":"{}"}})", order.order_id()));
  call.set_created_at_ms(txn.now_ms());
  operations::OrderLookup lookup =
      [&](const std::string& id) -> Result<std::optional<operations::OrderView>> {
    OPGATE_ASSIGN_OR_RETURN(auto found, txn.order(id));
    if (!found) return std::optional<operations::OrderView>();
    OPGATE_ASSIGN_OR_RETURN(auto funds, txn.funds(id));
    return std::optional<operations::OrderView>(operations::OrderView{*found, funds});
  };
  OPGATE_ASSIGN_OR_RETURN(
      auto outcome, operations::dispatch_tool(call.name(), call.arguments_json(), order.owner(),
                                              lookup, policy, now_s));
  if (!outcome.proposal) return make_error(errc::internal, "the history's refund was refused");
  OPGATE_TRY(operations::propose(txn, call, *outcome.proposal, policy));
  const std::string key = call.operation_key();
  OPGATE_ASSIGN_OR_RETURN(auto op, txn.operation(key));
  if (!op) return make_error(errc::internal, "the history's proposal was not stored");
  OPGATE_ASSIGN_OR_RETURN(
      auto approved,
      operations::approve(
          txn, key, approver,
          {op->proposal().amount_minor(), op->proposal().currency(), op->fingerprint(), {}, {}},
          policy));
  if (approved.refusal) return *approved.refusal;
  OPGATE_ASSIGN_OR_RETURN(auto claim, operations::claim(txn, key, policy));
  if (!claim.claimed) return make_error(errc::internal, "the history's refund was not claimed");
  operations::PaymentResult answer;
  if (settle) {
    answer.verdict = operations::Verdict::succeeded;
    answer.object_id = fmt::format("re_hist_{}", i);
    answer.provider_status = "succeeded";
  } else {
    answer.error = "timeout after 5000 ms";
  }
  return operations::record_answer(txn, key, answer, "provider", 3'600'000);
}

// Removes the outbox items the history left: what it would have delivered
// (results, notifications) long ago, and the reconciliations of the
// operations left in outcome_unknown (so they stay there to be listed).
Status clear_outbox(store::Storage& storage) {
  for (auto queue : {store::Queue::work, store::Queue::notifications}) {
    while (true) {
      OPGATE_ASSIGN_OR_RETURN(auto due, storage.reader().due(queue, INT64_MAX, 5000, {}));
      if (due.empty()) break;
      OPGATE_TRY(storage.transact([&](store::Transaction& txn) -> Status {
        for (const auto& entry : due) txn.remove_outbox(entry.id);
        return Status::Ok();
      }));
    }
  }
  return Status::Ok();
}

}  // namespace

Status fill_history(store::Storage& storage, ManualClock& clock, const HistoryOptions& options,
                    const std::function<void(size_t)>& progress) {
  operations::PolicyConfig policy;
  policy.two_person_threshold_minor = {{"USD", INT64_MAX}};
  operations::Principal approver;
  approver.name = "history";
  approver.scopes = {"admin"};
  approver.owners = {"*"};
  approver.max_amount_minor = {{"USD", INT64_MAX}};
  const size_t total = options.settled + options.outcome_unknown;
  for (size_t start = 0; start < total; start += options.per_transaction) {
    const size_t end = std::min(total, start + options.per_transaction);
    OPGATE_TRY(storage.transact([&](store::Transaction& txn) -> Status {
      for (size_t i = start; i < end; ++i) {
        OPGATE_TRY(one_refund(txn, i, i < options.settled, policy, approver));
        clock.advance_ms(1000);
      }
      return Status::Ok();
    }));
    OPGATE_TRY(clear_outbox(storage));
    if (progress) progress(end);
  }
  return Status::Ok();
}

}  // namespace opgate::sim
