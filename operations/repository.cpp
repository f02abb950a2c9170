#include "operations/repository.h"

#include <fmt/format.h>

namespace opgate::operations {

using store::Cf;

std::string record_key(const std::string& key) { return "o/" + key; }

namespace {
std::string index_key(std::string_view state, const std::string& key) {
  return fmt::format("s/{}/{}", state, key);
}

// Pending operations by expiry time, so expiry reads only what is due.
std::string expiry_key(int64_t expires_at_ms, const std::string& key) {
  return fmt::format("x/{:016x}/{}", expires_at_ms, key);
}

pb::AuditRecord audit_for(const pb::Operation& op, std::string_view action, std::string_view from,
                          const std::string& principal, const std::string& details) {
  pb::AuditRecord r;
  r.set_principal(principal);
  r.set_operation_key(op.key());
  r.set_action(std::string(action));
  r.set_from_state(std::string(from));
  r.set_to_state(op.state());
  r.set_fingerprint(op.fingerprint());
  r.set_details_json(details);
  return r;
}
}  // namespace

Result<std::optional<pb::Operation>> load(const store::Store& store, const std::string& key) {
  return store.get_message<pb::Operation>(Cf::operations, record_key(key));
}

Result<std::vector<std::string>> keys_expired_by(const store::Store& store, int64_t now_ms,
                                                 size_t limit) {
  std::vector<std::string> keys;
  Status s = store.scan(Cf::operations, "x/", [&](std::string_view k, std::string_view) {
    // "x/" + 16 hex digits + "/" + key
    if (k.size() < 19) return true;
    if (std::stoll(std::string(k.substr(2, 16)), nullptr, 16) > now_ms) return false;
    keys.emplace_back(k.substr(19));
    return keys.size() < limit;
  });
  if (!s) return s.error();
  return keys;
}

Result<size_t> count_in_state(const store::Store& store, State state) {
  size_t n = 0;
  Status s = store.scan(Cf::operations, fmt::format("s/{}/", to_string(state)),
                        [&](std::string_view, std::string_view) {
                          ++n;
                          return true;
                        });
  if (!s) return s.error();
  return n;
}

Result<std::vector<std::string>> keys_in_state(const store::Store& store, State state, size_t limit,
                                               const std::string& after) {
  std::vector<std::string> keys;
  const std::string prefix = fmt::format("s/{}/", to_string(state));
  std::string start = after.empty() ? std::string() : prefix + after + '\0';
  Status s = store.scan(
      Cf::operations, prefix,
      [&](std::string_view k, std::string_view) {
        keys.emplace_back(k.substr(prefix.size()));
        return keys.size() < limit;
      },
      start);
  if (!s) return s.error();
  return keys;
}

void save(store::Txn& txn, const pb::Operation& op) {
  txn.batch().put(Cf::operations, record_key(op.key()), op);
}

void create(store::Txn& txn, pb::Operation& op, const std::string& principal,
            const std::string& details_json) {
  op.set_state(std::string(to_string(State::pending)));
  op.set_created_at_ms(txn.now_ms());
  op.set_updated_at_ms(txn.now_ms());
  save(txn, op);
  txn.batch().put(Cf::operations, index_key(op.state(), op.key()), "");
  txn.batch().put(Cf::operations, expiry_key(op.expires_at_ms(), op.key()), "");
  txn.audit(audit_for(op, "propose", "", principal, details_json));
}

Status apply(store::Txn& txn, pb::Operation& op, Event event, const std::string& principal,
             const std::string& details_json) {
  auto from = parse_state(op.state());
  if (!from) return make_error("corrupt_record", "operation has an unknown state");
  auto target = next(*from, event);
  if (!target) return target.error();
  const std::string from_text = op.state();
  txn.batch().del(Cf::operations, index_key(from_text, op.key()));
  if (*from == State::pending)
    txn.batch().del(Cf::operations, expiry_key(op.expires_at_ms(), op.key()));
  op.set_state(std::string(to_string(target->state)));
  op.set_outcome(std::string(to_string(target->outcome)));
  op.set_updated_at_ms(txn.now_ms());
  if (target->state == State::outcome_unknown && from_text != "outcome_unknown")
    op.set_unknown_since_ms(txn.now_ms());
  save(txn, op);
  txn.batch().put(Cf::operations, index_key(op.state(), op.key()), "");
  txn.audit(audit_for(op, to_string(event), from_text, principal, details_json));
  return Status::Ok();
}

void save_with_audit(store::Txn& txn, const pb::Operation& op, const std::string& action,
                     const std::string& principal, const std::string& details_json) {
  save(txn, op);
  txn.audit(audit_for(op, action, op.state(), principal, details_json));
}

}  // namespace opgate::operations
