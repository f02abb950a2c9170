#include "outbox/outbox.h"

#include <fmt/format.h>

#include "common/crypto.h"
#include "operations/proposal.h"
#include "operations/repository.h"
#include "worker/tools.h"

namespace opgate::outbox {

using store::Cf;

std::string call_key(const std::string& session, const std::string& turn, const std::string& call) {
  return fmt::format("{}/{}/{}", session, turn, call);
}
std::string call_key(const pb::CallRef& c) {
  return call_key(c.session_id(), c.turn_id(), c.call_id());
}
std::string call_key(const pb::ToolCall& c) {
  return call_key(c.session_id(), c.turn_id(), c.call_id());
}

pb::CallRef call_ref(const pb::ToolCall& call) {
  pb::CallRef ref;
  ref.set_session_id(call.session_id());
  ref.set_turn_id(call.turn_id());
  ref.set_call_id(call.call_id());
  return ref;
}

std::string result_idempotency_key(const pb::CallRef& call) {
  return "opgate-result-" + crypto::sha256_hex(call_key(call)).substr(0, 40);
}

bool needs_attention(const pb::Operation& op, int64_t now_ms, const AttentionPolicy& policy) {
  if (op.state() != "outcome_unknown") return false;
  return op.attempts() >= policy.after_attempts ||
         now_ms - op.unknown_since_ms() >= policy.after_ms;
}

Outbox::Outbox(store::Store& store) : store_(store) {
  uint64_t start = 1;
  auto last = store_.last_key(Cf::outbox, "");
  if (last && last->has_value()) start = std::stoull(**last, nullptr, 16) + 1;
  seq_ = start;
}

void Outbox::enqueue(store::Txn& txn, pb::OutboxItem item) {
  item.set_created_at_ms(txn.now_ms());
  txn.batch().put(Cf::outbox, fmt::format("{:016x}", seq_++), item);
}

Result<std::vector<Outbox::Entry>> Outbox::due(int64_t now_ms, size_t limit) const {
  std::vector<Entry> out;
  Status s = store_.scan(Cf::outbox, "", [&](std::string_view k, std::string_view v) {
    pb::OutboxItem item;
    if (!item.ParseFromString(std::string(v))) return true;
    if (item.not_before_ms() <= now_ms) out.push_back({std::string(k), std::move(item)});
    return out.size() < limit;
  });
  if (!s) return s.error();
  return out;
}

namespace {
void stage_ledger(store::Txn& txn, const pb::Operation& op, const std::string& recorded_by) {
  pb::LedgerEntry row;
  row.set_operation_key(op.key());
  row.set_session_id(op.session_id());
  row.set_owner(op.proposal().owner());
  row.set_order_id(op.proposal().order_id());
  row.set_kind(op.proposal().kind());
  row.set_amount_minor(op.proposal().amount_minor());
  row.set_currency(op.proposal().currency());
  row.set_provider_object_id(op.provider_object_id());
  row.set_at_ms(txn.now_ms());
  row.set_recorded_by(recorded_by);
  txn.batch().put(Cf::ledger, op.key(), row);
}

// A succeeded refund changes the order: later proposals see it refunded.
Status stage_order_refunded(store::Txn& txn, const pb::Operation& op) {
  if (op.proposal().kind() != operations::kFullRefund) return Status::Ok();
  auto order = txn.store().get_message<pb::Order>(Cf::orders, op.proposal().order_id());
  if (!order) return order.error();
  if (!order->has_value()) return Status::Ok();
  auto& o = **order;
  o.set_refunded_minor(o.refunded_minor() + op.proposal().amount_minor());
  if (o.refunded_minor() >= o.amount_minor()) o.set_status("refunded");
  o.set_updated_at_ms(txn.now_ms());
  txn.batch().put(Cf::orders, o.order_id(), o);
  return Status::Ok();
}

}  // namespace

Status Outbox::stage_success(store::Txn& txn, const pb::Operation& op,
                             const std::string& recorded_by) {
  stage_ledger(txn, op, recorded_by);
  return stage_order_refunded(txn, op);
}

void Outbox::stage_result(store::Txn& txn, pb::ToolCall& call, const pb::ToolResult& result) {
  *call.mutable_result() = result;
  call.mutable_result()->set_saved_at_ms(txn.now_ms());
  call.set_result_saved(true);
  call.set_delivery("pending");
  txn.batch().put(Cf::calls, call_key(call), call);
  pb::OutboxItem item;
  item.set_kind(std::string(kDeliverResult));
  item.set_operation_key(call.operation_key());
  *item.mutable_call() = call_ref(call);
  enqueue(txn, std::move(item));
}

Status Outbox::settle(store::Txn& txn, pb::Operation& operation, operations::Event event,
                      const std::string& principal, const std::string& details_json,
                      const std::string& recorded_by) {
  if (Status s = operations::apply(txn, operation, event, principal, details_json); !s) return s;
  if (operation.outcome() == "succeeded")
    if (Status s = stage_success(txn, operation, recorded_by.empty() ? principal : recorded_by); !s)
      return s;
  return stage_settled_results(txn, operation);
}

Status Outbox::stage_settled_results(store::Txn& txn, const pb::Operation& op) {
  const pb::ToolResult result = worker::settled_result(op);
  for (const auto& ref : op.calls()) {
    auto call = store_.get_message<pb::ToolCall>(Cf::calls, call_key(ref));
    if (!call) return call.error();
    if (!call->has_value() || (*call)->result_saved()) continue;
    stage_result(txn, **call, result);
  }
  return Status::Ok();
}

}  // namespace opgate::outbox
