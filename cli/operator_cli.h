// The operator's command line: each function runs one command against the
// operator API at OPGATE_URL with OPGATE_TOKEN and prints for people, or
// JSON with --json. Returns the process exit code.
#pragma once

#include <boost/json/object.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "operations/policy.h"

namespace opgate::cli {

struct Context {
  std::string url;    // OPGATE_URL, default http://127.0.0.1:8081
  std::string token;  // OPGATE_TOKEN
  // OPGATE_CA_FILE: the CA that signed the operator listener's certificate
  // (https URLs); empty trusts the system store.
  std::string ca_file;
  bool json = false;
  bool assume_yes = false;
  int page_size = 1000;  // operations per page of a listing; every page is read
};

int bind_session(const Context& c, const std::string& session, const std::string& owner);
int recover_session(const Context& c, const std::string& session);
int inspect_session(const Context& c, const std::string& session);
int pending(const Context& c, const std::string& session);
// With `amount` ("15.00", below the proposal's), approves that lower amount
// with `reason`: the server narrows the proposal (it never widens one). An
// amount given empty is refused, not read as none: it would approve more.
int approve(const Context& c, const std::string& key, const std::string& session,
            const std::optional<std::string>& amount = {}, const std::string& reason = {});
// With a session given, the operation must belong to it.
int deny(const Context& c, const std::string& key, const std::string& reason,
         const std::string& session);
int list_operations(const Context& c, const std::string& state, bool attention);
// An administrator lets `principal` register one passkey (within a day).
int allow_passkey(const Context& c, const std::string& principal);
// The policy in force at the daemon (GET /v1/policy), or as given.
int policy_show(const Context& c);
int print_policy(const Context& c, const boost::json::object& policy);
// Replays the proposals recorded within `since` ("30d", "12h", "90m")
// against `next`: what would differ from the daemon's policy in force.
// Reads only; changes nothing.
// Where `opgate policy test` reads the recorded proposals: the daemon (the
// default; the baseline is the policy it shows), or offline a stopped
// daemon's data directory or a backup, against `current`.
struct ReplaySource {
  std::string data_dir;
  std::string backup_dir;
  std::optional<operations::PolicyConfig> current;
};
int policy_test(const Context& c, const operations::PolicyConfig& next, const std::string& since,
                const ReplaySource& source = {});
// How approvals went for the proposals of the window ("7d", "12h").
int report(const Context& c, const std::string& since);
// Replies the agent drafted (of one order, or every order the token sees).
int list_drafts(const Context& c, const std::string& order_id);
int show_operation(const Context& c, const std::string& key);
int reconcile(const Context& c, const std::string& key);
int resolve(const Context& c, const std::string& key, const std::string& outcome,
            const std::string& evidence, const std::string& provider_object_id);
int ledger(const Context& c, const std::string& session, const std::string& owner);
// expect_head "SEQ:HASH" (a witness's record of the chain) or "".
int audit_verify_online(const Context& c, const std::string& expect_head);
int audit_verify_offline(const std::string& data_dir, bool json, const std::string& expect_head);
// opgate audit export --operation KEY --out FILE: the pack, byte for byte.
int audit_export(const Context& c, const std::string& key, const std::string& out_file);
// opgate audit verify-evidence FILE [--head SEQ:HASH]: 0 if it verifies,
// 1 if not, 2 if it cannot be read.
int verify_evidence_file(const std::string& file, bool json, const std::string& witnessed_head);
int import_orders(const Context& c, const std::string& file);
// Online: the daemon writes the copy on its host. Offline: a stopped
// daemon's new data directory from a copy.
int backup_create(const Context& c, const std::string& dir);
int notify_list(const Context& c);
// `since`: Unix seconds, or a duration back from now ("90m", "2h", "1d").
int notify_replay(const Context& c, const std::string& endpoint, const std::string& since);
int notify_enable(const Context& c, const std::string& endpoint);
// Deliveries held for an endpoint this node no longer knows: replayed to a
// configured endpoint `to`, or discarded when `to` is empty.
int notify_release_held(const Context& c, const std::string& from, const std::string& to);
int backup_restore(const std::string& backup_dir, const std::string& data_dir, bool json);
// Agent tokens for the MCP front door. `ttl`: none (never expires),
// seconds, or a duration such as 90m, 12h, 30d (given empty: refused).
int agent_token_create(const Context& c, const std::string& owner, const std::string& label,
                       const std::optional<std::string>& ttl);
int agent_token_list(const Context& c);
int agent_token_revoke(const Context& c, const std::string& id);

}  // namespace opgate::cli
