#include "operations/tool_calls.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/text.h"
#include "operations/drafts.h"
#include "operations/notes.h"
#include "operations/orders.h"
#include "operations/proposals.h"
#include "operations/settlement.h"
#include "operations/tools.h"

namespace opgate::operations {

FetchedOrders fetch_orders(OrderService* service, const std::vector<std::string>& arguments_json,
                           Metrics& metrics) {
  FetchedOrders fetched;
  if (!service) return fetched;
  for (const auto& arguments : arguments_json) {
    auto id = order_id_argument(arguments);
    if (!id || fetched.contains(*id)) continue;
    auto order = service->get(*id);
    metrics.inc("opgate_order_service_reads_total",
                {{"result", std::string(read_name(order.read))}});
    if (order.read == OrderRead::unavailable)
      spdlog::warn("cannot read order {} from the order service: {}", *id, order.error);
    fetched.emplace(*id, std::move(order));
  }
  return fetched;
}

Result<AnsweredCall> answer_call(store::Transaction& txn, const AgentCall& request,
                                 const PolicyConfig& policy, const FetchedOrders* fetched) {
  AnsweredCall out;
  pb::ToolCall& call = out.call;
  call.set_session_id(request.ref.session_id());
  call.set_turn_id(request.ref.turn_id());
  call.set_call_id(request.ref.call_id());
  call.set_name(std::string(utf8_prefix(request.name, 128)));
  call.set_arguments_json(std::string(utf8_prefix(request.arguments_json, kMaxArgumentBytes)));
  call.set_created_at_ms(txn.now_ms());
  call.set_mcp(request.mcp);
  // Arguments are kept whole or not at all: a call is answered by what it
  // asked, and a repeat is linked by its arguments, which a cut copy no
  // longer has.
  if (request.arguments_json.size() > kMaxArgumentBytes) {
    out.outcome = "refused";
    stage_result(txn, call,
                 failure_result(fmt::format("The arguments are {} bytes; a call takes at most {}.",
                                            request.arguments_json.size(), kMaxArgumentBytes)));
    return out;
  }

  // A refund already proposed for the order, or the same call of another
  // proposing tool made again, answers from the operation before the policy
  // is asked again: once refunded (or credited), the order would fail the
  // policy, but the agent must hear the recorded outcome.
  if (auto kind = proposal_kind(request.name, policy)) {
    const bool refund = request.name == "request_refund";
    auto order_id = refund ? refund_order_id(request.arguments_json)
                           : order_id_argument(request.arguments_json);
    if (order_id) {
      call.set_order_id(*order_id);
      OPGATE_ASSIGN_OR_RETURN(
          bool linked,
          refund
              ? link_to_refund(txn, call, request.owner, *order_id, request.principal)
              : link_to_same_call(txn, call, request.owner, *order_id, *kind, request.principal));
      if (linked) {
        out.outcome = "proposal";
        return out;
      }
    }
  }

  OrderLookup lookup = [&](const std::string& order_id) -> Result<std::optional<OrderView>> {
    if (fetched) {
      // The order service is the truth: its answer, read just now, is kept
      // as the store's copy (audited when it changed), which the proposal,
      // the console and the later re-checks read.
      auto it = fetched->find(order_id);
      if (it == fetched->end() || it->second.read == OrderRead::unavailable)
        return make_error(errc::orders_unavailable,
                          it == fetched->end() ? "the order was not read" : it->second.error);
      if (it->second.read == OrderRead::absent) return std::optional<OrderView>();
      OPGATE_TRY(upsert_order(txn, it->second.order, kOrderServicePrincipal));
    }
    OPGATE_ASSIGN_OR_RETURN(auto order, txn.order(order_id));
    if (!order) return std::optional<OrderView>();
    OPGATE_ASSIGN_OR_RETURN(auto funds, txn.funds(order_id));
    return std::optional<OrderView>(OrderView{std::move(*order), std::move(funds)});
  };
  // The cited call, by id: an MCP agent's calls are kept under two turns
  // ("call" and "task") of its token's session, read directly however many
  // it made; a session's are few, read once.
  const std::string& session_id = request.ref.session_id();
  std::optional<std::vector<pb::ToolCall>> session_calls_read;
  CallsLookup session_calls =
      [&](const std::string& call_id) -> Result<std::optional<pb::ToolCall>> {
    if (request.mcp) {
      for (const char* turn : {"call", "task"}) {
        pb::CallRef ref;
        ref.set_session_id(session_id);
        ref.set_turn_id(turn);
        ref.set_call_id(call_id);
        OPGATE_ASSIGN_OR_RETURN(auto found, txn.call(ref));
        if (found) return found;
      }
      return std::optional<pb::ToolCall>();
    }
    if (!session_calls_read) {
      OPGATE_ASSIGN_OR_RETURN(session_calls_read, txn.calls_of(session_id));
    }
    for (const auto& c : *session_calls_read)
      if (c.call_id() == call_id) return std::optional<pb::ToolCall>(c);
    return std::optional<pb::ToolCall>();
  };
  OPGATE_ASSIGN_OR_RETURN(auto outcome,
                          dispatch_tool(request.name, request.arguments_json, request.owner, lookup,
                                        policy, txn.now_ms() / 1000, session_calls));
  // The order the call concerns: the evidence a later internal note may cite.
  call.set_order_id(outcome.proposal ? outcome.proposal->order_id() : outcome.order_id);
  if (outcome.draft) {
    record_draft(txn, call, request.owner, outcome.draft->order_id, outcome.draft->text,
                 request.principal);
    outcome.result = draft_result(*outcome.draft, draft_id(call));
  }
  if (outcome.note) {
    record_note(txn, call, request.owner, outcome.note->order_id, outcome.note->text,
                outcome.note->evidence);
    outcome.result = note_result(*outcome.note, note_key(call));
  }
  if (outcome.result) {
    out.outcome = outcome.result->success() ? "ok" : "refused";
    stage_result(txn, call, *outcome.result);
    return out;
  }
  out.outcome = "proposal";
  OPGATE_TRY(propose(txn, call, *outcome.proposal, policy, request.principal));
  return out;
}

}  // namespace opgate::operations
