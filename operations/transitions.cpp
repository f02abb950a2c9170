#include "operations/transitions.h"

#include <fmt/format.h>

#include <boost/json.hpp>

#include "common/logging.h"
#include "operations/keys.h"
#include "operations/notifications.h"

namespace opgate::operations {

namespace {
pb::AuditRecord audit_for(const pb::Operation& op, std::string_view action, std::string_view from,
                          const std::string& principal, const std::string& details) {
  pb::AuditRecord r;
  r.set_principal(principal);
  r.set_operation_key(op.key());
  r.set_action(std::string(action));
  r.set_from_state(std::string(from));
  r.set_to_state(std::string(state_text(op)));
  r.set_fingerprint(op.fingerprint());
  r.set_details_json(details);
  return r;
}
// One log line per change, written once the change is durable.
void log_after_commit(store::Transaction& txn, const pb::Operation& op, std::string_view action,
                      std::string_view from, const std::string& principal) {
  txn.after_commit([key = op.key(), session = op.session_id(), action = std::string(action),
                    from = std::string(from), state = std::string(state_text(op)),
                    outcome = std::string(outcome_text(op)), principal,
                    reason = op.decision_reason(), error = op.last_error()] {
    log_event(spdlog::level::info, "operation." + action,
              outcome.empty() ? fmt::format("{}: {} -> {}", key, from.empty() ? "new" : from, state)
                              : fmt::format("{}: {} -> {}/{}", key, from, state, outcome),
              {{"operation_key", key},
               {"session_id", session},
               {"principal", principal},
               {"from", from},
               {"state", state},
               {"outcome", outcome},
               {"reason", reason},
               {"error", error}});
  });
}

}  // namespace

std::string details(std::initializer_list<std::pair<std::string_view, std::string>> fields) {
  boost::json::object o;
  for (const auto& [k, v] : fields) o[k] = v;
  return boost::json::serialize(o);
}

std::string proposal_changed(pb::Operation& op) {
  std::string discarded;
  for (const auto& a : op.approvals()) discarded += (discarded.empty() ? "" : ",") + a.principal();
  op.set_fingerprint(fingerprint(op.proposal()));
  op.clear_approvals();
  return discarded;
}

Status save(store::Transaction& txn, pb::Operation& op) {
  op.set_updated_at_ms(txn.now_ms());
  return txn.put_operation(op);
}

// Appends the audit record of a change and records the chain's head on the
// operation, which is then saved: verification checks one against the other.
static Status save_audited(store::Transaction& txn, pb::Operation& op, pb::AuditRecord record) {
  txn.append_audit(std::move(record));
  OPGATE_ASSIGN_OR_RETURN(auto head, txn.head_to_record());
  op.set_audit_seq(head.seq);
  op.set_audit_hash(head.hash);
  return save(txn, op);
}

Status create(store::Transaction& txn, pb::Operation& op, const std::string& principal,
              const std::string& details_json) {
  set_target(op, {State::pending, Outcome::none});
  op.set_created_at_ms(txn.now_ms());
  OPGATE_TRY(save_audited(txn, op, audit_for(op, "propose", "", principal, details_json)));
  emit(txn, op, notify::proposed);
  log_after_commit(txn, op, "propose", "", principal);
  return Status::Ok();
}

Status apply(store::Transaction& txn, pb::Operation& op, Event event, const std::string& principal,
             const std::string& details_json) {
  const State from = state_of(op);
  OPGATE_ASSIGN_OR_RETURN(const Target target, next(from, event));
  set_target(op, target);
  if (target.state == State::outcome_unknown && from != State::outcome_unknown)
    op.set_unknown_since_ms(txn.now_ms());
  OPGATE_TRY(save_audited(
      txn, op, audit_for(op, to_string(event), to_string(from), principal, details_json)));
  int order = 0;
  for (auto type : events_of(from, event, target)) emit(txn, op, type, order++);
  log_after_commit(txn, op, to_string(event), to_string(from), principal);
  return Status::Ok();
}

Status save_with_audit(store::Transaction& txn, pb::Operation& op, const std::string& action,
                       const std::string& principal, const std::string& details_json) {
  OPGATE_TRY(save_audited(txn, op, audit_for(op, action, state_text(op), principal, details_json)));
  log_after_commit(txn, op, action, state_text(op), principal);
  return Status::Ok();
}

}  // namespace opgate::operations
