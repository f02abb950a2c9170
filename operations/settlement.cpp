#include "operations/settlement.h"

#include <boost/json.hpp>

#include "operations/keys.h"
#include "operations/orders.h"
#include "operations/policy.h"
#include "operations/transitions.h"

namespace opgate::operations {

namespace json = boost::json;

pb::ToolResult failure_result(std::string error) {
  pb::ToolResult r;
  r.set_success(false);
  r.set_error(std::move(error));
  return r;
}

pb::ToolResult settled_result(const pb::Operation& op) {
  json::object out{{"status", outcome_text(op)},
                   {"operation_key", op.key()},
                   {"kind", op.proposal().kind()},
                   {"order_id", op.proposal().order_id()},
                   {"amount_minor", op.proposal().amount_minor()},
                   {"currency", op.proposal().currency()}};
  if (op.proposal().original_amount_minor() != 0) {
    // The approver lowered it: the agent hears both amounts and why.
    out["original_amount_minor"] = op.proposal().original_amount_minor();
    out["edit_reason"] = op.proposal().edit_reason();
  }
  if (!op.proposal().arguments_json().empty()) {
    // A declared operation: the arguments as approved (and executed).
    json::error_code ec;
    auto arguments = json::parse(op.proposal().arguments_json(), ec);
    if (!ec) out["arguments"] = std::move(arguments);
  }
  if (is(op, Outcome::succeeded)) out["provider_object_id"] = op.provider_object_id();
  if (!op.decision_reason().empty()) out["reason"] = op.decision_reason();
  pb::ToolResult r;
  r.set_success(true);
  r.set_output(json::serialize(out));
  return r;
}

void stage_result(store::Transaction& txn, pb::ToolCall& call, const pb::ToolResult& result) {
  *call.mutable_result() = result;
  call.mutable_result()->set_saved_at_ms(txn.now_ms());
  call.set_result_saved(true);
  call.clear_delivery_error();
  if (call.mcp()) {
    // The agent reads it over MCP: nothing to post.
    call.set_delivery(pb::DELIVERY_NONE);
    txn.put_call(call);
    return;
  }
  call.set_delivery(pb::DELIVERY_PENDING);
  txn.put_call(call);
  pb::OutboxItem item;
  item.set_kind(pb::OUTBOX_DELIVER_RESULT);
  item.set_operation_key(call.operation_key());
  item.mutable_call()->set_session_id(call.session_id());
  item.mutable_call()->set_turn_id(call.turn_id());
  item.mutable_call()->set_call_id(call.call_id());
  *item.mutable_result() = call.result();
  txn.enqueue(std::move(item));
}

namespace {

Status update_funds(store::Transaction& txn, const pb::Operation& op, bool succeeded) {
  const auto& p = op.proposal();
  OPGATE_ASSIGN_OR_RETURN(pb::OrderFunds funds, txn.funds(p.order_id()));
  if (op.reserved_funds())
    funds.set_reserved_minor(std::max<int64_t>(0, funds.reserved_minor() - p.amount_minor()));
  if (succeeded) {
    if (counts_as_credit(p))
      funds.set_credited_minor(funds.credited_minor() + p.amount_minor());
    else
      funds.set_refunded_minor(funds.refunded_minor() + p.amount_minor());
  }
  if (!succeeded && !op.reserved_funds()) return Status::Ok();  // nothing moved
  funds.set_order_id(p.order_id());
  funds.set_updated_at_ms(txn.now_ms());
  txn.put_funds(funds);
  return Status::Ok();
}

void stage_ledger(store::Transaction& txn, const pb::Operation& op,
                  const std::string& recorded_by) {
  pb::LedgerEntry row;
  row.set_operation_key(op.key());
  row.set_session_id(op.session_id());
  row.set_owner(op.proposal().owner());
  row.set_order_id(op.proposal().order_id());
  row.set_kind(op.proposal().kind());
  row.set_amount_minor(op.proposal().amount_minor());
  row.set_original_amount_minor(op.proposal().original_amount_minor());
  row.set_currency(op.proposal().currency());
  row.set_provider_object_id(op.provider_object_id());
  row.set_at_ms(txn.now_ms());
  row.set_recorded_by(recorded_by);
  txn.put_ledger(row);
}

// The embedded order source's cancellation: the order's own record, in the
// transaction that settles the refund, so the two are proven together.
Status cancel_at_source(store::Transaction& txn, const pb::Operation& op) {
  OPGATE_ASSIGN_OR_RETURN(auto order, txn.order(op.proposal().order_id()));
  if (!order || order->status() == pb::ORDER_CANCELLED) return Status::Ok();
  order->set_status(pb::ORDER_CANCELLED);
  return upsert_order(txn, *order, "operation:" + op.key());
}

}  // namespace

Status reserve_funds(store::Transaction& txn, pb::Operation& op) {
  if (op.reserved_funds()) return Status::Ok();
  const auto& p = op.proposal();
  OPGATE_ASSIGN_OR_RETURN(pb::OrderFunds funds, txn.funds(p.order_id()));
  funds.set_order_id(p.order_id());
  funds.set_reserved_minor(funds.reserved_minor() + p.amount_minor());
  funds.set_updated_at_ms(txn.now_ms());
  txn.put_funds(funds);
  op.set_reserved_funds(true);
  return Status::Ok();
}

Status settle(store::Transaction& txn, pb::Operation& op, Event event, const std::string& principal,
              const std::string& details_json, const std::string& recorded_by) {
  OPGATE_TRY(apply(txn, op, event, principal, details_json));
  if (!is(op, State::settled))
    return make_error(errc::internal, "settle() was given an event that does not settle");
  const bool succeeded = is(op, Outcome::succeeded);
  if (succeeded) stage_ledger(txn, op, recorded_by.empty() ? principal : recorded_by);
  if (succeeded && op.proposal().kind() == kCancelOrder) OPGATE_TRY(cancel_at_source(txn, op));
  OPGATE_TRY(update_funds(txn, op, succeeded));
  if (op.reserved_funds()) {
    op.set_reserved_funds(false);
    OPGATE_TRY(txn.put_operation(op));
  }
  const pb::ToolResult result = settled_result(op);
  for (const auto& ref : op.calls()) {
    OPGATE_ASSIGN_OR_RETURN(auto call, txn.call(ref));
    if (!call || call->result_saved()) continue;
    stage_result(txn, *call, result);
  }
  return Status::Ok();
}

}  // namespace opgate::operations
