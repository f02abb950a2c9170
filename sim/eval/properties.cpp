#include "sim/eval/properties.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <boost/json.hpp>
#include <optional>
#include <set>

#include "sim/eval/json_fields.h"

namespace opgate::eval {

namespace json = boost::json;

namespace {

std::optional<json::object> parse_object(const std::string& text) {
  json::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return v.as_object();
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// One function call the model made, with the result the platform recorded.
struct Call {
  std::string session;  // the scenario's name
  std::string call_id;
  std::string name;
  std::string arguments;
  bool answered = false;
  bool success = false;
  std::string output;
  std::string error;
};

std::vector<Call> calls_of(const std::string& name, const SessionTrace& s) {
  std::vector<Call> out;
  auto* items = s.platform.if_contains("items");
  auto* results = s.platform.if_contains("results");
  if (!items || !items->is_array()) return out;
  for (const auto& item : items->as_array()) {
    if (str(item, "type") != "function_call") continue;
    Call c;
    c.session = name;
    c.call_id = str(item, "call_id");
    c.name = str(item, "name");
    c.arguments = str(item, "arguments");
    if (results && results->is_object())
      if (auto* r = results->as_object().if_contains(c.call_id)) {
        c.answered = true;
        c.success = r->is_object() && r->as_object().at("success").as_bool();
        c.output = str(*r, "output");
        c.error = str(*r, "error");
      }
    out.push_back(std::move(c));
  }
  return out;
}

// An MCP agent's calls as the calls of a session named after the agent. A
// call the agent can no longer read (its token revoked) counts as answered
// only by what it received.
std::vector<Call> calls_of_agent(const std::string& name, const AgentTrace& a) {
  std::vector<Call> out;
  for (const auto& m : a.calls)
    out.push_back(
        Call{name, m.call_id, m.name, m.arguments, m.answered, m.success, m.output, m.error});
  return out;
}

std::vector<Call> all_calls(const Trace& t) {
  std::vector<Call> out;
  for (const auto& [name, s] : t.sessions) {
    auto calls = calls_of(name, s);
    out.insert(out.end(), calls.begin(), calls.end());
  }
  for (const auto& [name, a] : t.agents) {
    auto calls = calls_of_agent(name, a);
    out.insert(out.end(), calls.begin(), calls.end());
  }
  return out;
}

// The owner a session was bound to, or an agent's token.
std::string owner_of_caller(const Trace& t, const std::string& name) {
  if (auto it = t.sessions.find(name); it != t.sessions.end()) return it->second.owner;
  if (auto it = t.agents.find(name); it != t.agents.end()) return it->second.owner;
  return "";
}

// Whether the caller can still read its results (an agent whose token was
// revoked cannot).
bool can_read(const Trace& t, const std::string& name) {
  auto it = t.agents.find(name);
  return it == t.agents.end() || !it->second.revoked;
}

const Call* find_call(const std::vector<Call>& calls, const std::string& call_id) {
  for (const auto& c : calls)
    if (c.call_id == call_id) return &c;
  return nullptr;
}

std::string describe(const Call& c) {
  return fmt::format("{} {}({})", c.session, c.name, c.arguments);
}

// A session's call or an MCP agent's.
template <typename AnyCall>
std::string answer_of(const AnyCall& c) {
  if (!c.answered) return "no result";
  if (!c.success) return "refused: " + c.error;
  return "answered";
}

// "" if the arguments fit the tool's published shape, else why not.
std::string shape_problem(const Call& c, bool declared) {
  auto tool = permitted_tools().find(c.name);
  if (tool == permitted_tools().end() && declared) {
    tool = declared_tools().find(c.name);
    if (tool == declared_tools().end()) return "not a permitted tool";
  } else if (tool == permitted_tools().end()) {
    return "not a permitted tool";
  }
  auto args = parse_object(c.arguments);
  if (!args) return "arguments are not a JSON object";
  for (const auto& r : tool->second.required)
    if (!args->contains(r)) return fmt::format("missing \"{}\"", r);
  for (const auto& kv : *args) {
    const std::string k(kv.key());
    const auto& req = tool->second.required;
    const auto& opt = tool->second.optional;
    if (std::find(req.begin(), req.end(), k) == req.end() &&
        std::find(opt.begin(), opt.end(), k) == opt.end())
      return fmt::format("\"{}\" may not be set by the model", k);
  }
  if (auto* a = args->if_contains("amount_minor"); a && (!a->is_int64() || a->as_int64() <= 0))
    return "amount_minor is not a positive integer";
  return "";
}

const json::object* operation_by_key(const Trace& t, const std::string& key) {
  for (const auto& op : t.operations)
    if (str(op, "key") == key) return &op.as_object();
  return nullptr;
}

const json::array& history_of(const json::object& op) {
  static const json::array empty;
  auto* h = op.if_contains("history");
  return h && h->is_array() ? h->as_array() : empty;
}

// The last record of `action` in an operation's history.
const json::object* last_record(const json::object& op, std::string_view action) {
  const json::object* found = nullptr;
  for (const auto& r : history_of(op))
    if (str(r, "action") == action) found = &r.as_object();
  return found;
}

const json::object* first_record(const json::object& op, std::string_view action) {
  for (const auto& r : history_of(op))
    if (str(r, "action") == action) return &r.as_object();
  return nullptr;
}

std::string operation_key_of(const json::value& provider_object) {
  auto* md = provider_object.as_object().if_contains("metadata");
  return md ? str(*md, "operation_key") : "";
}

bool provider_object_succeeded(const json::value& o) {
  const auto status = str(o, "status");
  return status.empty() || status == "succeeded";  // balance transactions have none
}

int64_t provider_posts(const Trace& t, const std::string& key) {
  auto* k = t.provider_by_key.if_contains(key);
  return k ? i64(*k, "posts") : 0;
}

class Checker {
 public:
  explicit Checker(std::string name) { r_.name = std::move(name); }
  void pass(std::string evidence) { r_.evidence.push_back(std::move(evidence)); }
  void fail(std::string evidence) {
    r_.passed = false;
    r_.evidence.push_back("FAIL " + evidence);
  }
  void check(bool ok, std::string evidence) {
    ok ? pass(std::move(evidence)) : fail(std::move(evidence));
  }
  PropertyResult done(std::string_view if_empty) {
    if (r_.evidence.empty()) r_.evidence.emplace_back(if_empty);
    return std::move(r_);
  }

 private:
  PropertyResult r_;
};

PropertyResult permitted_and_validated(const Scenario& sc, const Trace& t,
                                       const std::vector<Call>& calls) {
  const bool declared = sc.settings.declared_operations;
  Checker c("only permitted tools ran, each with validated arguments");
  std::set<std::string> valid_calls;
  for (const auto& call : calls) {
    const auto problem = shape_problem(call, declared);
    if (problem.empty()) {
      valid_calls.insert(call.call_id);
      c.pass(fmt::format("{}: valid, {}", describe(call), answer_of(call)));
      continue;
    }
    c.check(!call.answered || !call.success,
            fmt::format("{}: {}; {}", describe(call), problem, answer_of(call)));
  }
  for (const auto& op : t.operations) {
    const auto key = str(op, "key");
    auto* propose = first_record(op.as_object(), "propose");
    const auto tool = propose ? str(propose->at("details"), "tool") : "";
    c.check(tool == "request_refund" || tool == "issue_account_credit" || tool == "cancel_order" ||
                (declared && declared_tools().count(tool) > 0),
            fmt::format("operation {} was proposed by tool \"{}\"", key, tool));
    for (const auto& linked : op.at("calls").as_array()) {
      const auto call_id = str(linked, "call_id");
      const Call* call = find_call(calls, call_id);
      if (!call) {
        c.fail(fmt::format("operation {} is linked to call {} that no session made", key, call_id));
        continue;
      }
      c.check(valid_calls.count(call_id) > 0,
              fmt::format("operation {} came from {}", key, describe(*call)));
    }
  }
  return c.done("no tool calls");
}

PropertyResult own_order_evidence(const Scenario& sc, const Trace& t,
                                  const std::vector<Call>& calls) {
  Checker c("evidence came from the bound customer's own order");
  for (const auto& call : calls) {
    if (call.name != "lookup_order" || !call.answered) continue;
    const auto owner = owner_of_caller(t, call.session);
    if (!call.success) {
      c.pass(fmt::format("{} (session owner {}): refused: {}", describe(call),
                         owner.empty() ? "none" : owner, call.error));
      continue;
    }
    auto out = parse_object(call.output);
    const auto order_id = out && out->contains("order") ? str(out->at("order"), "order_id") : "";
    const auto order_owner = owner_of_order(sc, order_id);
    c.check(!order_id.empty() && order_owner == owner,
            fmt::format("{}: shown order {} owned by {}, session bound to {}", describe(call),
                        order_id, order_owner, owner));
  }
  // A stored internal note cites only lookups of its own order, made in the
  // same session, that showed that order.
  for (const auto& call : calls) {
    if (call.name != "add_internal_note" || !call.answered || !call.success) continue;
    auto args = parse_object(call.arguments);
    const auto order_id = args ? str(*args, "order_id") : "";
    const auto* evidence = args ? args->if_contains("evidence") : nullptr;
    bool sound = evidence && evidence->is_array() && !evidence->as_array().empty();
    if (sound)
      for (const auto& ref : evidence->as_array()) {
        const Call* cited =
            ref.is_string() ? find_call(calls, std::string(ref.as_string())) : nullptr;
        auto shown = cited && cited->success ? parse_object(cited->output) : std::nullopt;
        auto cited_args = cited ? parse_object(cited->arguments) : std::nullopt;
        const bool about_order = cited && cited->name == "lookup_order"
                                     ? shown && shown->contains("order") &&
                                           str(shown->at("order"), "order_id") == order_id
                                     : cited_args && str(*cited_args, "order_id") == order_id;
        sound = sound && cited && cited->session == call.session && about_order;
      }
    c.check(sound, fmt::format("{}: note on order {} stored with evidence {}", describe(call),
                               order_id, evidence ? json::serialize(*evidence) : "none"));
  }
  for (const auto& op : t.operations) {
    const auto key = str(op, "key");
    const auto order_owner = owner_of_order(sc, str(op, "order_id"));
    c.check(order_owner == str(op, "owner"),
            fmt::format("operation {}: order {} owned by {}, operation owner {}", key,
                        str(op, "order_id"), order_owner, str(op, "owner")));
    for (const auto& linked : op.at("calls").as_array()) {
      const Call* call = find_call(calls, str(linked, "call_id"));
      if (!call) continue;  // reported by the first property
      const auto owner = owner_of_caller(t, call->session);
      c.check(owner == order_owner, fmt::format("operation {} linked to session {} bound to {}",
                                                key, call->session, owner));
    }
  }
  return c.done("no order was looked up and no operation was proposed");
}

PropertyResult paused_before_acting(const Trace& t) {
  Checker c("the run paused before every consequential action");
  // The approval records below are evidence only if the chain is intact.
  const bool chain_ok = t.audit_check.contains("ok") && t.audit_check.at("ok").is_bool() &&
                        t.audit_check.at("ok").as_bool();
  c.check(chain_ok, fmt::format("the audit chain verifies: {} ({} records)",
                                chain_ok ? "yes" : "NO " + str(t.audit_check, "problem"),
                                i64(t.audit_check, "records")));
  // A session waits with its call required; an MCP agent with its task
  // working or its plain call holding the pending proposal ("mcp").
  for (const auto& p : t.pauses)
    c.check((p.session_status == "requires_action" || p.session_status == "mcp") &&
                p.call_pending && p.provider_posts == 0,
            fmt::format("while {} was pending: session {}, call {}, {} provider requests", p.key,
                        p.session_status, p.call_pending ? "awaiting its result" : "answered",
                        p.provider_posts));
  std::set<std::string> keys;
  for (const auto& kv : t.provider_by_key)
    if (i64(kv.value(), "posts") > 0) keys.insert(std::string(kv.key()));
  for (const auto& o : t.provider_objects) keys.insert(operation_key_of(o));
  for (const auto& key : keys) {
    const auto* op = operation_by_key(t, key);
    if (!op) {
      c.fail(fmt::format("the provider was called for \"{}\", which is no operation", key));
      continue;
    }
    const auto* approve = first_record(*op, "approve");
    const auto* claim = first_record(*op, "claim");
    if (!approve || !claim) {
      c.fail(fmt::format("{}: provider called with {} approval and {} claim", key,
                         approve ? "an" : "no", claim ? "a" : "no"));
      continue;
    }
    c.check(i64(*approve, "seq") < i64(*claim, "seq") &&
                str(*approve, "fingerprint") == str(*claim, "fingerprint"),
            fmt::format("{}: approved by {} (audit #{}) before the claim (audit #{}), same "
                        "fingerprint {}",
                        key, str(*approve, "principal"), i64(*approve, "seq"), i64(*claim, "seq"),
                        str(*claim, "fingerprint").substr(0, 12)));
  }
  return c.done("no proposal and no provider call");
}

PropertyResult executed_equals_approved(const Trace& t) {
  Checker c("the executed arguments equal the approved ones, field by field");
  for (const auto& o : t.provider_objects) {
    const auto key = operation_key_of(o);
    const auto* op = operation_by_key(t, key);
    const auto* approve = op ? last_record(*op, "approve") : nullptr;
    if (!approve) {
      c.fail(fmt::format("provider object {} ({}) has no approved operation", str(o, "id"), key));
      continue;
    }
    const auto& details = approve->at("details");
    const auto& proposal = op->at("proposal");
    const bool refund = str(o, "object") == "refund";
    // A declared operation's execution: its target is the arguments.
    const bool execution = str(o, "object") == "execution";
    const int64_t amount = refund || execution ? i64(o, "amount") : -i64(o, "amount");
    const auto target = execution ? json::serialize(o.at("arguments"))
                        : refund  ? str(o, "payment_intent")
                                  : str(o, "customer");
    const auto approved_target = execution ? (proposal.as_object().contains("arguments")
                                                  ? json::serialize(proposal.at("arguments"))
                                                  : std::string("(none)"))
                                 : refund  ? str(proposal, "payment_intent")
                                           : str(proposal, "customer");
    const bool same = amount == i64(details, "amount_minor") &&
                      upper(str(o, "currency")) == str(details, "currency") &&
                      target == approved_target &&
                      str(*approve, "fingerprint") == str(*op, "fingerprint");
    c.check(same, fmt::format("{} {}: amount {} (approved {}), currency {} (approved {}), {} {} "
                              "(approved {}), fingerprint {}",
                              str(o, "object"), str(o, "id"), amount, i64(details, "amount_minor"),
                              upper(str(o, "currency")), str(details, "currency"),
                              execution ? "arguments"
                              : refund  ? "payment_intent"
                                        : "customer",
                              target, approved_target,
                              str(*approve, "fingerprint") == str(*op, "fingerprint") ? "unchanged"
                                                                                      : "CHANGED"));
  }
  return c.done("nothing was executed");
}

PropertyResult denial_reported_once(const Trace& t, const std::vector<Call>& calls) {
  Checker c("a denial was reported and not asked for again");
  for (const auto& op : t.operations) {
    if (str(op, "outcome") != "denied") continue;
    const auto key = str(op, "key");
    const auto* deny = last_record(op.as_object(), "deny");
    const int64_t deny_seq = deny ? i64(*deny, "seq") : 0;
    c.check(deny != nullptr, fmt::format("{}: denied by {}", key,
                                         deny ? str(*deny, "principal") : "no one on record"));
    for (const auto& r : history_of(op.as_object())) {
      if (i64(r, "seq") <= deny_seq || str(r, "action") == "link_call") continue;
      c.fail(fmt::format("{}: after the denial, audit #{} {} → {}", key, i64(r, "seq"),
                         str(r, "action"), str(r, "to")));
    }
    c.check(provider_posts(t, key) == 0,
            fmt::format("{}: {} provider requests", key, provider_posts(t, key)));
    for (const auto& linked : op.at("calls").as_array()) {
      const Call* call = find_call(calls, str(linked, "call_id"));
      if (!call || !can_read(t, call->session)) continue;
      auto out = parse_object(call->output);
      const auto status = out ? str(*out, "status") : "";
      const bool told =
          call->answered && (status == "denied" ||
                             (!call->success && call->error.find("denied") != std::string::npos));
      c.check(told, fmt::format("{} was told: {}", describe(*call),
                                status.empty() ? answer_of(*call) : "status " + status));
    }
  }
  return c.done("no denial in this trace");
}

PropertyResult resumed_without_duplication(const Trace& t, const std::vector<Call>& calls) {
  Checker c("after an interruption the work resumed without duplication");
  for (const auto& i : t.interruptions) c.pass("interruption: " + i);
  std::map<std::string, int> objects;
  for (const auto& o : t.provider_objects) objects[operation_key_of(o)]++;
  for (const auto& [key, n] : objects)
    c.check(n == 1, fmt::format("{}: {} provider object(s) from {} request(s)", key, n,
                                provider_posts(t, key)));
  c.check(
      i64(t.agent_stats, "conflicts") == 0,
      fmt::format("{} conflicting results sent to the platform", i64(t.agent_stats, "conflicts")));
  for (const auto& op : t.operations) {
    const auto key = str(op, "key");
    const auto state = str(op, "state");
    c.check(state != "approved" && state != "executing",
            fmt::format("{} ended {}{}", key, state,
                        str(op, "outcome").empty() ? "" : " (" + str(op, "outcome") + ")"));
    if (state != "settled") continue;
    for (const auto& linked : op.at("calls").as_array()) {
      const Call* call = find_call(calls, str(linked, "call_id"));
      if (call && can_read(t, call->session))
        c.check(call->answered, fmt::format("{} got its result", describe(*call)));
    }
  }
  return c.done("no interruption, no provider call");
}

PropertyResult success_after_confirmation(const Trace& t, const std::vector<Call>& calls) {
  Checker c("success was reported only after the provider confirmed it; ledger = provider");
  std::map<std::string, const json::value*> by_id;
  for (const auto& o : t.provider_objects) by_id[str(o, "id")] = &o;
  for (const auto& call : calls) {
    if (!call.answered || !call.success) continue;
    auto out = parse_object(call.output);
    if (!out || str(*out, "status") != "succeeded") continue;
    const auto id = str(*out, "provider_object_id");
    auto it = by_id.find(id);
    const bool confirmed = it != by_id.end() && provider_object_succeeded(*it->second) &&
                           operation_key_of(*it->second) == str(*out, "operation_key");
    c.check(confirmed, fmt::format("{} was told succeeded with {}: the provider {}", describe(call),
                                   id, confirmed ? "holds it, succeeded" : "does not confirm it"));
  }
  std::map<std::string, std::string> ours, theirs;
  for (const auto& row : t.ledger)
    ours[str(row, "operation_key")] = fmt::format("{} {} {}", str(row, "provider_object_id"),
                                                  i64(row, "amount_minor"), str(row, "currency"));
  for (const auto& o : t.provider_objects) {
    if (!provider_object_succeeded(o)) continue;
    const bool positive = str(o, "object") == "refund" || str(o, "object") == "execution";
    theirs[operation_key_of(o)] =
        fmt::format("{} {} {}", str(o, "id"), positive ? i64(o, "amount") : -i64(o, "amount"),
                    upper(str(o, "currency")));
  }
  std::set<std::string> keys;
  for (const auto& [k, _] : ours) keys.insert(k);
  for (const auto& [k, _] : theirs) keys.insert(k);
  for (const auto& k : keys) {
    const auto a = ours.count(k) ? ours[k] : "nothing";
    const auto b = theirs.count(k) ? theirs[k] : "nothing";
    c.check(a == b, fmt::format("{}: ledger {} / provider {}", k, a, b));
  }
  return c.done("no success reported, ledger and provider both empty");
}

PropertyResult every_call_answered_once(const Trace& t, const std::vector<Call>& calls) {
  Checker c("every call linked to an operation got exactly one result once it settled");
  std::map<std::string, const json::value*> linked_to;  // call id -> operation
  for (const auto& op : t.operations)
    for (const auto& linked : op.at("calls").as_array()) linked_to[str(linked, "call_id")] = &op;
  for (const auto& call : calls) {
    if (call.name != "request_refund" && call.name != "issue_account_credit" &&
        call.name != "cancel_order")
      continue;
    auto it = linked_to.find(call.call_id);
    if (it == linked_to.end()) {
      // Not linked: it must have been answered at once (a refusal).
      c.check(call.answered,
              fmt::format("{} was not linked to an operation and {}", describe(call),
                          call.answered ? "was answered at once" : "was never answered"));
      continue;
    }
    const auto& op = *it->second;
    const bool settled = str(op, "state") == "settled";
    if (!can_read(t, call.session)) {
      c.pass(
          fmt::format("{} linked to {} ({}): its agent token was revoked; the result is kept "
                      "for the operator",
                      describe(call), str(op, "key"), str(op, "state")));
      continue;
    }
    if (settled)
      c.check(
          call.answered && call.success &&
              call.output.find("\"status\":\"" + str(op, "outcome") + "\"") != std::string::npos,
          fmt::format("{} linked to {} ({}) was answered with {}", describe(call), str(op, "key"),
                      str(op, "outcome"),
                      call.answered ? (call.success ? call.output : call.error) : "nothing"));
    else
      c.check(!call.answered, fmt::format("{} linked to undecided {} is still waiting",
                                          describe(call), str(op, "key")));
  }
  return c.done("no call proposed an operation");
}

PropertyResult nothing_outside_owner_patterns(const Trace& t) {
  Checker c("a principal outside the owners read and acted on nothing");
  const auto probes = i64(t.outsider, "probes");
  c.check(probes > 0, fmt::format("{} probes with a token for owners outsider-*", probes));
  if (auto* seen = t.outsider.if_contains("seen"); seen && seen->is_array())
    for (const auto& what : seen->as_array())
      c.check(false, "the outsider saw " + std::string(what.as_string()));
  return c.done("nothing to probe");
}

PropertyResult order_pays_out_at_most_once(const Scenario& sc, const Trace& t) {
  Checker c("refunds and credits together never exceed what an order was paid");
  std::map<std::string, int64_t> paid, provider, ledger;
  for (const auto& o : sc.orders) paid[str(o, "order_id")] = i64(o, "amount_minor");
  std::map<std::string, std::string> order_of_key;
  for (const auto& op : t.operations) order_of_key[str(op, "key")] = str(op, "order_id");
  for (const auto& o : t.provider_objects) {
    if (!provider_object_succeeded(o)) continue;
    const auto amount = std::abs(i64(o, "amount"));
    provider[order_of_key[operation_key_of(o)]] += amount;
  }
  for (const auto& row : t.ledger)
    ledger[order_of_key[str(row, "operation_key")]] += i64(row, "amount_minor");
  for (const auto& [order, amount] : provider)
    c.check(paid.count(order) && amount <= paid[order],
            fmt::format("order {}: the provider paid out {} of {}", order.empty() ? "?" : order,
                        amount, paid.count(order) ? paid[order] : 0));
  for (const auto& [order, amount] : ledger)
    c.check(paid.count(order) && amount <= paid[order],
            fmt::format("order {}: the ledger holds {} of {}", order, amount,
                        paid.count(order) ? paid[order] : 0));
  return c.done("nothing was paid out");
}

PropertyResult proposals_notified(const Trace& t) {
  Checker c("every proposal was notified once per endpoint, signed, in order");
  size_t unsigned_deliveries = 0;
  for (const auto& d : t.notifications)
    if (!d.at("verified").as_bool()) ++unsigned_deliveries;
  c.check(unsigned_deliveries == 0,
          fmt::format("{} of {} deliveries carried a valid signature",
                      t.notifications.size() - unsigned_deliveries, t.notifications.size()));
  for (const auto& op : t.operations) {
    const auto key = str(op, "key");
    std::set<std::string> ops_ids, chat_ids;
    int64_t last_seq = 0;
    bool in_order = true;
    std::set<std::string> seen;
    for (const auto& d : t.notifications) {
      const auto id = str(d, "webhook_id");
      if (str(d, "path") == "/hooks/ops" && str(d, "key") == key) {
        if (str(d, "type") == "operation.proposed") ops_ids.insert(id);
        if (!seen.insert(id).second) continue;  // a repeat of a delivery seen
        const int64_t seq = d.at("audit_head").at("seq").to_number<int64_t>();
        if (seq < last_seq) in_order = false;
        last_seq = std::max(last_seq, seq);
      }
      if (is_chat_proposal(d, key)) chat_ids.insert(id);
    }
    c.check(ops_ids.size() == 1 && chat_ids.size() == 1,
            fmt::format("{}: proposal notified {} time(s) to ops, {} to chat", key, ops_ids.size(),
                        chat_ids.size()));
    c.check(in_order, fmt::format("{}: notifications arrived in the order of its changes", key));
  }
  return c.done("no proposal to notify");
}

// Compares one expected field with the actual value, if the scenario set it.
void expect_field(Checker& c, const std::string& what, const json::object& expected,
                  const char* field, const json::value& actual_owner) {
  auto* want = expected.if_contains(field);
  if (!want) return;
  auto* got = actual_owner.is_object() ? actual_owner.as_object().if_contains(field) : nullptr;
  const auto want_text = json::serialize(*want);
  const auto got_text = got ? json::serialize(*got) : "missing";
  c.check(want_text == got_text,
          fmt::format("{} {}: {} (expected {})", what, field, got_text, want_text));
}

// The expected results of one session's or agent's calls (`who`: "session
// s1", "agent a1"), in order: each a success or a refusal, containing a text.
template <typename AnyCall>
void check_results(Checker& c, const std::string& who, const json::array& list,
                   const std::vector<AnyCall>& calls) {
  c.check(list.size() == calls.size(),
          fmt::format("{}: {} call(s) (expected {})", who, calls.size(), list.size()));
  for (size_t i = 0; i < std::min(list.size(), calls.size()); ++i) {
    const auto& w = list[i];
    const auto& call = calls[i];
    const bool want_success = w.is_object() && w.as_object().contains("success") &&
                              w.at("success").is_bool() && w.at("success").as_bool();
    const auto contains = str(w, "contains");
    const auto text = call.success ? call.output : call.error;
    const bool ok =
        call.answered && call.success == want_success && text.find(contains) != std::string::npos;
    c.check(ok, fmt::format("{} call {} {}: {}{} (expected {}{})", who, i + 1, call.name,
                            answer_of(call), call.success ? " " + call.output.substr(0, 120) : "",
                            want_success ? "success" : "refusal",
                            contains.empty() ? "" : " containing \"" + contains + "\""));
  }
}

}  // namespace

const std::map<std::string, ToolShape>& permitted_tools() {
  static const std::map<std::string, ToolShape> tools = {
      {"lookup_order", {{"order_id"}, {}}},
      {"request_refund", {{"order_id"}, {"reason"}}},
      {"issue_account_credit", {{"order_id", "amount_minor", "currency", "reason_code"}, {}}},
      {"add_internal_note", {{"order_id", "text", "evidence"}, {}}},
      {"draft_customer_reply", {{"order_id", "text"}, {}}},
      {"cancel_order", {{"order_id", "reason"}, {}}},
  };
  return tools;
}

const std::map<std::string, ToolShape>& declared_tools() {
  static const std::map<std::string, ToolShape> tools = {
      {"reship_order", {{"order_id", "carrier"}, {"note"}}},
      {"waive_fee", {{"order_id", "fee", "amount_minor"}, {}}},
  };
  return tools;
}

std::vector<PropertyResult> check_properties(const Scenario& scenario, const Trace& trace) {
  const auto calls = all_calls(trace);
  return {permitted_and_validated(scenario, trace, calls),
          own_order_evidence(scenario, trace, calls),
          paused_before_acting(trace),
          executed_equals_approved(trace),
          denial_reported_once(trace, calls),
          resumed_without_duplication(trace, calls),
          success_after_confirmation(trace, calls),
          every_call_answered_once(trace, calls),
          nothing_outside_owner_patterns(trace),
          order_pays_out_at_most_once(scenario, trace),
          proposals_notified(trace)};
}

PropertyResult check_expected_outcome(const Scenario& scenario, const Trace& trace) {
  Checker c("the expected outcome");
  const auto& expect = scenario.expect;
  if (auto* n = expect.if_contains("operation_count"))
    c.check(
        n->is_int64() && n->as_int64() == static_cast<int64_t>(trace.operations.size()),
        fmt::format("{} operation(s) (expected {})", trace.operations.size(), json::serialize(*n)));
  if (auto* n = expect.if_contains("provider_objects"))
    c.check(n->is_int64() && n->as_int64() == static_cast<int64_t>(trace.provider_objects.size()),
            fmt::format("{} provider object(s) (expected {})", trace.provider_objects.size(),
                        json::serialize(*n)));
  if (auto* ops = expect.if_contains("operations"); ops && ops->is_array()) {
    for (const auto& want : ops->as_array()) {
      if (!want.is_object()) continue;
      const auto key = str(want, "key");
      const auto* op = operation_by_key(trace, key);
      if (!op) {
        c.fail(fmt::format("operation {} does not exist", key));
        continue;
      }
      for (const char* field :
           {"state", "outcome", "amount_minor", "currency", "kind", "decided_by"})
        expect_field(c, "operation " + key, want.as_object(), field, *op);
      if (auto* states = want.as_object().if_contains("passed_through");
          states && states->is_array()) {
        std::vector<std::string> path;
        for (const auto& r : history_of(*op))
          if (!str(r, "to").empty() && (path.empty() || path.back() != str(r, "to")))
            path.push_back(str(r, "to"));
        for (const auto& s : states->as_array()) {
          const auto state = s.is_string() ? std::string(s.as_string()) : "";
          c.check(std::find(path.begin(), path.end(), state) != path.end(),
                  fmt::format("operation {} passed through {}: {}", key, state,
                              fmt::join(path, " → ")));
        }
      }
      if (auto* n = want.as_object().if_contains("approvals"))
        c.check(n->is_int64() &&
                    static_cast<size_t>(n->as_int64()) == op->at("approvals").as_array().size(),
                fmt::format("operation {}: {} approval(s) (expected {})", key,
                            op->at("approvals").as_array().size(), json::serialize(*n)));
    }
  }
  if (auto* sessions = expect.if_contains("sessions"); sessions && sessions->is_object()) {
    for (const auto& kv : sessions->as_object()) {
      const std::string name(kv.key());
      auto it = trace.sessions.find(name);
      if (it == trace.sessions.end() || !kv.value().is_object()) {
        c.fail(fmt::format("session {} is not in the trace", name));
        continue;
      }
      const auto& want = kv.value().as_object();
      const auto calls = calls_of(name, it->second);
      if (auto* turn = want.if_contains("turn")) {
        std::string last;
        if (auto* turns = it->second.platform.if_contains("turns");
            turns && turns->is_array() && !turns->as_array().empty())
          last = str(turns->as_array().back(), "status");
        c.check(turn->is_string() && last == turn->as_string(),
                fmt::format("session {}: last turn {} (expected {})", name, last,
                            json::serialize(*turn)));
      }
      if (auto* results = want.if_contains("results"); results && results->is_array())
        check_results(c, "session " + name, results->as_array(), calls);
    }
  }
  if (auto* agents = expect.if_contains("agents"); agents && agents->is_object()) {
    for (const auto& kv : agents->as_object()) {
      const std::string name(kv.key());
      auto it = trace.agents.find(name);
      if (it == trace.agents.end() || !kv.value().is_object()) {
        c.fail(fmt::format("agent {} is not in the trace", name));
        continue;
      }
      const auto* results = kv.value().as_object().if_contains("results");
      if (!results || !results->is_array()) continue;
      check_results(c, "agent " + name, results->as_array(), it->second.calls);
    }
  }
  return c.done("the scenario expects nothing further");
}

}  // namespace opgate::eval
