#include "cli/operator_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "common/crypto.h"
#include "common/files.h"
#include "common/text.h"
#include "http/client.h"
#include "operations/audit.h"
#include "operations/evidence.h"
#include "operations/orders.h"
#include "operations/policy.h"
#include "operations/policy_replay.h"
#include "operations/views.h"
#include "store/rocksdb/rocks_storage.h"

namespace opgate::cli {

namespace json = boost::json;

namespace {

struct Reply {
  int status = 0;
  json::value body;
  std::string raw;  // the body as it came
};

// Sends one request; prints a helpful error and returns nullopt on failure.
std::optional<Reply> call(const Context& c, const std::string& method, const std::string& path,
                          const std::string& body = "") {
  if (c.token.empty()) {
    std::cerr << "error: OPGATE_TOKEN is not set; export the bearer token you were issued.\n";
    return std::nullopt;
  }
  http::ClientRequest req;
  req.method = method;
  req.url = c.url + path;
  req.headers["Authorization"] = "Bearer " + c.token;
  req.ca_file = c.ca_file;
  if (!body.empty()) {
    req.headers["Content-Type"] = "application/json";
    req.body = body;
  }
  auto res = http::send(req);
  if (!res) {
    std::cerr << fmt::format(
        "error: cannot reach opgate at {}: {}\n"
        "hint: is the daemon running? Set OPGATE_URL to its operator "
        "listener.\n",
        c.url, res.error().message);
    return std::nullopt;
  }
  json::error_code ec;
  Reply r{res->status, json::parse(res->body, ec), res->body};
  if (ec) r.body = json::object{{"raw", res->body}};
  if (res->status >= 300) {
    std::string code = "error", message = res->body;
    if (auto* e = r.body.is_object() ? r.body.as_object().if_contains("error") : nullptr;
        e && e->is_object()) {
      if (auto* cd = e->as_object().if_contains("code"); cd && cd->is_string())
        code = cd->as_string().c_str();
      if (auto* m = e->as_object().if_contains("message"); m && m->is_string())
        message = m->as_string().c_str();
    }
    if (c.json) {
      std::cout << json::serialize(r.body) << "\n";
    } else {
      std::cerr << fmt::format("error ({} {}): {}\n", res->status, printable(code),
                               printable(message));
      if (res->status == 401) std::cerr << "hint: check OPGATE_TOKEN.\n";
      if (res->status == 403) std::cerr << "hint: ask for a token with the needed scope.\n";
    }
    return std::nullopt;
  }
  return r;
}

// A field as text for people: every control character escaped, since the
// field may hold what a customer or a model wrote.
std::string s(const json::value& v, const char* key) {
  if (!v.is_object()) return "";
  auto* p = v.as_object().if_contains(key);
  if (!p || p->is_null()) return "";
  if (p->is_string()) return printable(p->as_string());
  return printable(json::serialize(*p));
}

// Every page of a listing at `path` (which has a query), following
// next_cursor (given back as cursor=; the drafts' listing names them
// next_after and after=): the last answer, its `rows` field holding every
// page's.
std::optional<Reply> every_page(const Context& c, const std::string& path, const char* rows,
                                const char* next_field = "next_cursor",
                                const char* cursor_param = "cursor") {
  json::array all;
  std::string cursor;
  for (;;) {
    auto r = call(c, "GET",
                  cursor.empty()
                      ? path
                      : fmt::format("{}&{}={}", path, cursor_param, http::url_component(cursor)));
    if (!r) return std::nullopt;
    for (auto& row : r->body.as_object().at(rows).as_array()) all.push_back(row);
    const auto* next = r->body.as_object().if_contains(next_field);
    if (!next || !next->is_string() || next->as_string().empty()) {
      r->body.as_object()[rows] = std::move(all);
      r->body.as_object()[next_field] = nullptr;
      return r;
    }
    cursor = std::string(next->as_string());
  }
}

// Every operation of a listing, following next_cursor page by page.
std::optional<json::array> all_operations(const Context& c, const std::string& query) {
  auto r = every_page(c, fmt::format("/v1/operations?limit={}", c.page_size) + query, "operations");
  if (!r) return std::nullopt;
  return std::move(r->body.as_object()["operations"].as_array());
}

int64_t n(const json::value& v, const char* key) {
  auto* p = v.as_object().if_contains(key);
  return p && p->is_int64() ? p->as_int64() : 0;
}

std::string money(const json::value& op) {
  return operations::format_money(n(op, "amount_minor"), s(op, "currency"));
}

// "15", "15.5" or "15.00" in major units as minor units; nothing for
// anything else (a sign, a third decimal, letters, an absurd size).
std::optional<int64_t> parse_major_units(std::string_view text) {
  const auto dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view cents = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  auto digits = [](std::string_view d) {
    return std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  if (whole.empty() || whole.size() > 12 || !digits(whole) || cents.size() > 2 || !digits(cents) ||
      (dot != std::string_view::npos && cents.empty()))
    return std::nullopt;
  int64_t minor = std::stoll(std::string(whole)) * 100;
  if (cents.size() == 1) minor += (cents[0] - '0') * 10;
  if (cents.size() == 2) minor += (cents[0] - '0') * 10 + (cents[1] - '0');
  return minor;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "3d4h", "5h12m", "7m3s", "12s"; negative durations as "-".
std::string duration(int64_t ms) {
  if (ms < 0) return "-";
  const int64_t s = ms / 1000;
  if (s >= 86400) return fmt::format("{}d{}h", s / 86400, s % 86400 / 3600);
  if (s >= 3600) return fmt::format("{}h{}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

void print_operation_header() {
  std::cout << fmt::format("{:<48} {:<22} {:>14} {:>8} {:>8}  {}\n", "OPERATION", "STATE", "AMOUNT",
                           "AGE", "ATTEMPTS", "NOTES");
}

void print_operation_line(const json::value& op) {
  std::string state = s(op, "state");
  if (!s(op, "outcome").empty()) state += "/" + s(op, "outcome");
  // Age in the state that matters: unknown since, or since proposed.
  const int64_t since =
      s(op, "state") == "outcome_unknown" ? n(op, "unknown_since_ms") : n(op, "created_at_ms");
  std::string notes;
  if (s(op, "needs_attention") == "true") notes += "NEEDS-ATTENTION ";
  if (!s(op, "last_error").empty()) notes += "last_error=" + s(op, "last_error");
  std::cout << fmt::format("{:<48} {:<22} {:>14} {:>8} {:>8}  {}\n", s(op, "key"), state, money(op),
                           duration(now_ms() - since), n(op, "attempts"), notes);
}

void print_proposal(const json::value& op) {
  const auto& p = op.as_object().at("proposal");
  std::cout << fmt::format(
      "operation   {}\nstate       {}{}\nowner       {}\norder       {}\nkind        {}\n"
      "amount      {}\npayment     {}\neffect      {}\ntier        {}\nfingerprint {}\n",
      s(op, "key"), s(op, "state"), s(op, "outcome").empty() ? "" : "/" + s(op, "outcome"),
      s(op, "owner"), s(op, "order_id"), s(op, "kind"), money(op), s(p, "payment_method"),
      s(p, "effect"), s(p, "tier"), s(op, "fingerprint"));
  if (s(op, "state") == "pending")
    std::cout << fmt::format("age         {} (expires in {})\n",
                             duration(now_ms() - n(op, "created_at_ms")),
                             duration(n(op, "expires_at_ms") - now_ms()));
  if (const auto& a = op.as_object().at("approvals").as_array(); !a.empty()) {
    std::cout << "approvals  ";
    for (const auto& x : a) std::cout << " " << s(x, "principal");
    std::cout << "\n";
  }
}

// True if the operation was proposed by, or is linked to, a call of the session.
bool linked_to(const json::value& op, const std::string& session) {
  if (s(op, "session_id") == session) return true;
  for (const auto& ref : op.as_object().at("calls").as_array())
    if (s(ref, "session_id") == session) return true;
  return false;
}

// Fetches the operation; with a session given, it must belong to it.
std::optional<Reply> operation_of_session(const Context& c, const std::string& key,
                                          const std::string& session) {
  auto shown = call(c, "GET", "/v1/operations/" + http::url_component(key));
  if (!shown) return std::nullopt;
  if (!session.empty() && !linked_to(shown->body, session)) {
    std::cerr << fmt::format("error: operation {} does not belong to session {}\n", key, session);
    return std::nullopt;
  }
  return shown;
}

int print_json_or(const Context& c, const Reply& r, const std::function<void()>& human) {
  if (c.json)
    std::cout << json::serialize(r.body) << "\n";
  else
    human();
  return 0;
}

}  // namespace

int bind_session(const Context& c, const std::string& session, const std::string& owner) {
  auto r = call(c, "POST", "/v1/sessions/" + http::url_component(session) + "/bind",
                json::serialize(json::object{{"owner", owner}}));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format("session {} is bound to owner {}\n", session, owner);
  });
}

int recover_session(const Context& c, const std::string& session) {
  auto r = call(c, "POST", "/v1/sessions/" + http::url_component(session) + "/recover");
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    const auto* failed = r->body.as_object().if_contains("sync_error");
    if (failed && failed->is_string())
      std::cout << fmt::format(
          "session {} reopened; not synced yet ({}): the worker syncs it "
          "as the platform answers\n",
          session, printable(std::string(failed->as_string())));
    else
      std::cout << fmt::format("session {} synced: {} call(s) known\n", session,
                               r->body.as_object().at("calls").as_array().size());
  });
}

int inspect_session(const Context& c, const std::string& session) {
  auto state = call(c, "GET", "/v1/sessions/" + http::url_component(session));
  if (!state) return 1;
  auto transcript = call(c, "GET", "/v1/sessions/" + http::url_component(session) + "/transcript");
  if (!transcript) return 1;
  if (c.json) {
    std::cout << json::serialize(
                     json::object{{"session", state->body}, {"transcript", transcript->body}})
              << "\n";
    return 0;
  }
  std::cout << fmt::format("session {} (owner {})\n\nroot turns:\n", session,
                           s(state->body, "owner"));
  // The platform's own JSON, passed through: read as far as it has the
  // shape, never thrown on.
  const auto* body = transcript->body.if_object();
  const auto* turns = body ? body->if_contains("turns") : nullptr;
  const auto* turn_data =
      turns && turns->is_object() ? turns->as_object().if_contains("data") : nullptr;
  if (turn_data && turn_data->is_array())
    for (const auto& t : turn_data->as_array()) {
      const auto* sub = t.is_object() ? t.as_object().if_contains("subagent_id") : nullptr;
      if (!sub || sub->is_null()) std::cout << fmt::format("  {} {}\n", s(t, "id"), s(t, "status"));
    }
  std::cout << "\nitems:\n";
  int page_no = 0;
  const auto* pages = body ? body->if_contains("item_pages") : nullptr;
  static const json::array kNoPages;
  const json::array& item_pages = pages && pages->is_array() ? pages->as_array() : kNoPages;
  for (const auto& page : item_pages) {
    ++page_no;
    std::cout << fmt::format("  page {}\n", page_no);
    const auto* data = page.is_object() ? page.as_object().if_contains("data") : nullptr;
    if (data && data->is_array())
      for (const auto& item : data->as_array()) {
        std::string type = s(item, "type");
        std::string text =
            type == "message" ? s(item, "role") + ": " + s(item, "content")
            : type == "function_call"
                ? s(item, "name") + "(" + s(item, "arguments") + ") " + s(item, "call_id")
                : s(item, "call_id") + " -> " + s(item, "output");
        std::cout << fmt::format("    {:<22} {}\n", type, text);
      }
  }
  std::cout << "\ncalls:\n";
  for (const auto& call : state->body.as_object().at("calls").as_array()) {
    const auto& result = call.as_object().at("result");
    std::cout << fmt::format("  {} {} op={} result={} delivery={}\n", s(call, "call_id"),
                             s(call, "name"), s(call, "operation_key"),
                             result.is_null() ? "(none yet)" : printable(json::serialize(result)),
                             s(call, "delivery"));
  }
  std::cout << "\ninternal notes:\n";
  const auto* notes = state->body.as_object().if_contains("notes");
  if (!notes || !notes->is_array() || notes->as_array().empty()) std::cout << "  (none)\n";
  if (notes && notes->is_array())
    for (const auto& note : notes->as_array()) {
      std::vector<std::string> cited;
      for (const auto& e : note.at("evidence").as_array())
        cited.emplace_back(e.is_string() ? e.as_string() : "");
      std::cout << fmt::format("  {} order {} evidence [{}]: {}\n", s(note, "call_id"),
                               s(note, "order_id"), fmt::join(cited, ", "),
                               printable(s(note, "text")));
    }
  std::cout << "\nledger:\n";
  const auto& ledger = state->body.as_object().at("ledger").as_array();
  if (ledger.empty()) std::cout << "  (no rows)\n";
  for (const auto& row : ledger)
    std::cout << fmt::format("  {} {} {} provider={}\n", s(row, "operation_key"), s(row, "kind"),
                             money(row), s(row, "provider_object_id"));
  if (const auto* more = state->body.as_object().if_contains("ledger_next_cursor");
      more && more->is_string())
    std::cout << "  (more rows: opgate ledger --session " << printable(session) << ")\n";
  return 0;
}

int pending(const Context& c, const std::string& session) {
  auto all = all_operations(c, "&state=pending");
  if (!all) return 1;
  json::array ops;
  for (const auto& op : *all) {
    if (session.empty() || linked_to(op, session)) ops.push_back(op);
  }
  if (c.json) {
    std::cout << json::serialize(json::object{{"operations", ops}}) << "\n";
    return 0;
  }
  if (ops.empty()) std::cout << "no pending operations\n";
  for (const auto& op : ops) {
    print_proposal(op);
    std::cout << "\n";
  }
  return 0;
}

int approve(const Context& c, const std::string& key, const std::string& session,
            const std::optional<std::string>& amount, const std::string& reason) {
  std::optional<int64_t> lower;
  if (!amount && !reason.empty()) {
    std::cerr << "error: --reason goes with --amount (why the amount is lowered)\n";
    return 2;
  }
  if (amount) {
    lower = parse_major_units(*amount);
    if (!lower || *lower <= 0) {
      std::cerr << "error: --amount must be an amount above zero such as 15.00\n";
      return 2;
    }
    if (reason.empty()) {
      std::cerr << "error: --reason is required with --amount (the agent is told it)\n";
      return 2;
    }
  }
  auto shown = operation_of_session(c, key, session);
  if (!shown) return 1;
  const auto& op = shown->body;
  if (lower && *lower >= n(op, "amount_minor")) {
    std::cerr << fmt::format(
        "error: --amount must be below the proposed {}; an approval never "
        "raises an amount\n",
        money(op));
    return 2;
  }
  if (!c.json) {
    std::cout << "You are approving exactly this proposal:\n";
    print_proposal(op);
    if (lower)
      std::cout << fmt::format("  lowered to:  {} (the customer gets this, not the amount above)\n",
                               operations::format_money(*lower, s(op, "currency")));
  }
  if (!c.assume_yes && !isatty(STDIN_FILENO)) {
    std::cerr << "error: stdin is not a terminal, so nobody can confirm; pass --yes to approve "
                 "exactly what is shown above without asking\n";
    return 1;
  }
  if (!c.assume_yes) {
    std::cout << "Approve? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      std::cout << "not approved\n";
      return 1;
    }
  }
  // Send back exactly what was shown: the server refuses anything else.
  json::object body{{"amount_minor", lower.value_or(n(op, "amount_minor"))},
                    {"currency", s(op, "currency")},
                    {"fingerprint", s(op, "fingerprint")}};
  if (lower) body["edit_reason"] = reason;
  auto r = call(c, "POST", "/v1/operations/" + http::url_component(key) + "/approve",
                json::serialize(body));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format(
        "approved by you; operation is now {}{}\n", s(r->body, "state"),
        s(r->body, "state") == "pending" ? " (waiting for a second approver)" : "");
  });
}

int deny(const Context& c, const std::string& key, const std::string& reason,
         const std::string& session) {
  if (!session.empty() && !operation_of_session(c, key, session)) return 1;
  auto r = call(c, "POST", "/v1/operations/" + http::url_component(key) + "/deny",
                json::serialize(json::object{{"reason", reason}}));
  if (!r) return 1;
  // An operation past its time is settled expired, not denied.
  return print_json_or(c, *r, [&] {
    const std::string outcome = s(r->body, "outcome");
    if (outcome == "denied")
      std::cout << fmt::format("denied: {} is settled/denied; the session will be told\n", key);
    else
      std::cout << fmt::format("not denied: {} is {}/{}; the session will be told\n", key,
                               s(r->body, "state"), outcome);
  });
}

int list_operations(const Context& c, const std::string& state, bool attention) {
  auto all = all_operations(c, state.empty() ? "" : "&state=" + http::url_component(state));
  if (!all) return 1;
  json::array ops;
  for (const auto& op : *all)
    if (!attention || s(op, "needs_attention") == "true") ops.push_back(op);
  if (c.json) {
    std::cout << json::serialize(json::object{{"operations", ops}}) << "\n";
    return 0;
  }
  if (ops.empty()) {
    std::cout << "no operations\n";
    return 0;
  }
  print_operation_header();
  for (const auto& op : ops) print_operation_line(op);
  return 0;
}

int show_operation(const Context& c, const std::string& key) {
  auto r = call(c, "GET", "/v1/operations/" + http::url_component(key));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    print_proposal(r->body);
    std::cout << fmt::format("attempts    {}\nlast error  {}\nprovider    {}\n\nhistory:\n",
                             n(r->body, "attempts"), s(r->body, "last_error"),
                             s(r->body, "provider_object_id"));
    for (const auto& h : r->body.as_object().at("history").as_array())
      std::cout << fmt::format("  #{} {} {} {} -> {} {}\n", s(h, "seq"), s(h, "principal"),
                               s(h, "action"), s(h, "from"), s(h, "to"), s(h, "details"));
  });
}

int reconcile(const Context& c, const std::string& key) {
  auto r = call(c, "POST", "/v1/operations/" + http::url_component(key) + "/reconcile");
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format("reconciled: {} is now {}{}\n", key, s(r->body, "state"),
                             s(r->body, "outcome").empty() ? "" : "/" + s(r->body, "outcome"));
  });
}

int resolve(const Context& c, const std::string& key, const std::string& outcome,
            const std::string& evidence, const std::string& provider_object_id) {
  json::object body{{"outcome", outcome}, {"evidence", evidence}};
  if (!provider_object_id.empty()) body["provider_object_id"] = provider_object_id;
  auto r = call(c, "POST", "/v1/operations/" + http::url_component(key) + "/resolve",
                json::serialize(body));
  if (!r) return 1;
  return print_json_or(
      c, *r, [&] { std::cout << fmt::format("resolved: {} is settled/{}\n", key, outcome); });
}

int print_policy(const Context& c, const json::object& policy) {
  if (c.json) {
    std::cout << json::serialize(policy) << "\n";
    return 0;
  }
  auto amounts = [](const json::value& v) {
    std::string out;
    for (const auto& [currency, amount] : v.as_object())
      out += (out.empty() ? "" : ", ") +
             operations::format_money(amount.to_number<int64_t>(), std::string(currency));
    return out.empty() ? std::string("none") : out;
  };
  std::cout << fmt::format("{:<22} {:<8} {:<11} {:<28} {}\n", "TOOL", "ENABLED", "TIER",
                           "TIERS ALLOWED", "LIMITS");
  for (const auto& t : policy.at("tools").as_array()) {
    std::string allowed, limits;
    for (const auto& a : t.at("tiers_allowed").as_array())
      allowed += (allowed.empty() ? "" : ",") + std::string(a.as_string());
    for (const auto& [k, v] : t.at("limits").as_object())
      limits += fmt::format("{}{}={}", limits.empty() ? "" : " ", std::string(k),
                            v.is_object() ? amounts(v) : json::serialize(v));
    std::cout << fmt::format("{:<22} {:<8} {:<11} {:<28} {}\n", s(t, "name"),
                             t.at("enabled").as_bool() ? "yes" : "no", s(t, "tier"), allowed,
                             limits);
  }
  if (const auto* declared = policy.if_contains("declared");
      declared && !declared->as_array().empty()) {
    std::cout << "\ndeclared operations:\n";
    for (const auto& d : declared->as_array()) {
      std::string above;
      for (const auto& [tier, m] : d.at("tier_above_minor").as_object())
        above += fmt::format("; {} above {}", std::string(tier), amounts(m));
      std::cout << fmt::format(
          "  {}: money {}{}, tier {}{}, executor {}\n    effect: {}\n", s(d, "name"), s(d, "money"),
          s(d, "amount_argument").empty() ? std::string()
                                          : fmt::format(" (argument {})", s(d, "amount_argument")),
          s(d, "tier"), above, s(d.at("executor"), "url"), printable(s(d, "effect")));
    }
  }
  const auto& esc = policy.at("escalation").as_object();
  const auto& step_up = policy.at("step_up").as_object();
  std::string step_tiers;
  for (const auto& t : step_up.at("tiers").as_array())
    step_tiers += (step_tiers.empty() ? "" : ",") + std::string(t.as_string());
  std::cout << fmt::format(
      "\ntwo approvers above: {}\napproval time: {} s\nreminder after: {}\nescalation: "
      "{}\nstep-up (passkey) for tiers: {}; above: {}\n",
      amounts(policy.at("two_person_threshold_minor")), n(policy, "approval_ttl_s"),
      n(esc, "remind_after_s") ? std::to_string(n(esc, "remind_after_s")) + " s" : "off",
      n(esc, "escalate_after_s")
          ? fmt::format("to {} after {} s", s(esc, "escalate_to_tier"), n(esc, "escalate_after_s"))
          : "off",
      step_tiers.empty() ? "none" : step_tiers, amounts(step_up.at("above_minor")));
  return 0;
}

int allow_passkey(const Context& c, const std::string& principal) {
  auto r = call(c, "POST", "/v1/passkeys/enrolments",
                json::serialize(json::object{{"principal", principal}}));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format(
        "{} may register one passkey on the console's Passkeys page within 24 hours\n",
        printable(principal));
  });
}

int policy_show(const Context& c) {
  auto r = call(c, "GET", "/v1/policy");
  if (!r) return 1;
  return print_policy(c, r->body.as_object());
}

namespace {

// "90m", "2h", "1d", "30s": milliseconds; a bare number is seconds, and
// `bare_is_absolute` makes it a point in time (Unix seconds) instead.
std::optional<std::pair<int64_t, bool>> duration_ms(const std::string& text) {
  try {
    size_t used = 0;
    const int64_t n = std::stoll(text, &used);
    const std::string unit = text.substr(used);
    const int64_t scale = unit.empty()  ? 1000
                          : unit == "s" ? 1000
                          : unit == "m" ? 60'000
                          : unit == "h" ? 3'600'000
                          : unit == "d" ? 86'400'000
                                        : -1;
    if (n < 0 || scale < 0 || n > std::numeric_limits<int64_t>::max() / scale) return std::nullopt;
    return std::pair<int64_t, bool>{n * scale, unit.empty()};
  } catch (...) {
    return std::nullopt;
  }
}

// A window of minutes, hours or days ("90m", "12h", "30d") as milliseconds;
// nothing for anything else (a bare number, seconds, a sign, over 8 characters).
std::optional<int64_t> window_ms(const std::string& text) {
  if (text.size() < 2 || text.size() > 8 ||
      std::string_view("mhd").find(text.back()) == std::string_view::npos ||
      !std::all_of(text.begin(), text.end() - 1, [](char ch) { return ch >= '0' && ch <= '9'; }))
    return std::nullopt;
  auto d = duration_ms(text);
  return d ? std::optional<int64_t>(d->first) : std::nullopt;
}

// The proposal as recorded, from the operation's JSON.
pb::Proposal proposal_of(const json::value& op) {
  pb::Proposal p;
  const auto& detail = op.at("proposal");
  p.set_kind(s(op, "kind"));
  p.set_owner(s(op, "owner"));
  p.set_order_id(s(op, "order_id"));
  p.set_amount_minor(n(op, "amount_minor"));
  p.set_currency(s(op, "currency"));
  p.set_tier(s(detail, "tier"));
  p.set_reason(s(detail, "reason"));
  p.set_money(s(detail, "money"));  // declared operations
  return p;
}

// A stopped daemon's store, opened read-only; nullptr (the error printed)
// if it cannot be.
std::unique_ptr<store::rocks::RocksStorage> open_offline(const std::string& data_dir) {
  static const SystemClock clock;
  store::rocks::OpenOptions o;
  o.read_only = true;
  o.create_if_missing = false;
  auto st = store::rocks::RocksStorage::open(data_dir, o, clock);
  if (!st) {
    std::cerr << "error: " << st.error().message << "\n";
    return nullptr;
  }
  return std::move(*st);
}

// --head / --expect-head SEQ:HASH: false (the error printed) if malformed.
bool witnessed_head_option(const std::string& text, std::optional<operations::WitnessedHead>& out) {
  if (text.empty()) return true;
  auto parsed = operations::parse_head(text);
  if (!parsed) {
    std::cerr << "error: " << parsed.error().message << "\n";
    return false;
  }
  out = *parsed;
  return true;
}

// Every operation of a store directory opened read-only, as the API shows
// them.
std::optional<json::array> stored_operations(const std::string& data_dir) {
  auto st = open_offline(data_dir);
  if (!st) return std::nullopt;
  json::array out;
  Status read = st->reader().visit_operations([&](const pb::Operation& op) {
    out.push_back(operations::operation_json(op, false));
    return true;
  });
  if (!read) {
    std::cerr << "error: " << read.error().message << "\n";
    return std::nullopt;
  }
  return out;
}

// The recorded operations from where the source says: the daemon (its API),
// a stopped daemon's data directory, or a backup restored into a scratch
// directory that is removed afterwards.
std::optional<json::array> recorded_operations(const Context& c, const ReplaySource& source) {
  if (!source.data_dir.empty()) return stored_operations(source.data_dir);
  if (source.backup_dir.empty()) return all_operations(c, "");
  char scratch[] = "/tmp/opgate-replay-XXXXXX";
  if (!::mkdtemp(scratch)) {
    std::cerr << "error: cannot make a scratch directory for the backup\n";
    return std::nullopt;
  }
  const std::string dir = std::string(scratch) + "/data";
  SystemClock clock;
  std::optional<json::array> out;
  if (auto info = store::rocks::RocksStorage::restore(source.backup_dir, dir, clock); !info)
    std::cerr << "error: " << info.error().message << "\n";
  else
    out = stored_operations(dir);
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  return out;
}

}  // namespace

int policy_test(const Context& c, const operations::PolicyConfig& next, const std::string& since,
                const ReplaySource& source) {
  const auto window = window_ms(since);
  if (!window) {
    std::cerr << "error: --since must be a number and d, h or m: 30d, 12h, 90m\n";
    return 2;
  }
  const bool offline = !source.data_dir.empty() || !source.backup_dir.empty();
  if (offline && !source.current) {
    std::cerr << "error: --data-dir and --backup need --current FILE, the configuration the "
                 "recorded proposals were made under\n";
    return 2;
  }
  Result<operations::PolicyConfig> current =
      source.current ? *source.current : operations::PolicyConfig();
  if (!offline) {
    auto shown = call(c, "GET", "/v1/policy");
    if (!shown) return 1;
    current = operations::policy_from_json(shown->body.as_object());
  }
  if (!current) {
    std::cerr << "error: " << current.error().message << "\n";
    return 1;
  }
  auto all = recorded_operations(c, source);
  if (!all) return 1;
  const int64_t from = now_ms() - *window;
  json::array differing;
  size_t replayed = 0;
  std::map<std::string, size_t> totals;
  for (const auto& op : *all) {
    if (n(op, "created_at_ms") < from) continue;
    ++replayed;
    auto diffs = operations::replay_proposal(proposal_of(op), *current, next);
    if (diffs.empty()) continue;
    json::array listed;
    for (const auto& d : diffs) {
      ++totals[d.what];
      listed.push_back(json::object{{"what", d.what}, {"was", d.was}, {"would_be", d.would_be}});
    }
    differing.push_back(json::object{{"key", s(op, "key")},
                                     {"amount_minor", n(op, "amount_minor")},
                                     {"currency", s(op, "currency")},
                                     {"differences", std::move(listed)}});
  }
  json::object by_kind;
  for (const auto& [what, count] : totals) by_kind[what] = count;
  json::object report{{"since", since},
                      {"replayed", replayed},
                      {"differing", differing.size()},
                      {"totals", std::move(by_kind)},
                      {"operations", differing}};
  if (c.json) {
    std::cout << json::serialize(report) << "\n";
    return 0;
  }
  std::cout << fmt::format("{} proposals since {} replayed; {} would differ\n", replayed, since,
                           differing.size());
  for (const auto& [what, count] : totals) std::cout << fmt::format("  {}: {}\n", what, count);
  for (const auto& d : differing) {
    std::cout << fmt::format("{} {}\n", s(d, "key"), money(d));
    for (const auto& x : d.at("differences").as_array())
      std::cout << fmt::format("  {}: {} -> {}\n", s(x, "what"), s(x, "was"), s(x, "would_be"));
  }
  return 0;
}

int report(const Context& c, const std::string& since) {
  const auto window = window_ms(since);
  if (!window) {
    std::cerr << "error: --since must be a number and d, h or m: 7d, 12h, 90m\n";
    return 2;
  }
  auto r = call(c, "GET", fmt::format("/v1/report?from_ms={}", now_ms() - *window));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    const auto& o = r->body.as_object();
    auto ms = [](const json::value& v) {
      return v.is_int64() ? fmt::format("{:.1f} s", static_cast<double>(v.as_int64()) / 1000.0)
                          : std::string("—");
    };
    std::cout << fmt::format("{} proposals in the last {}\n", n(o, "proposals"), since);
    for (const auto& [kind, k] : o.at("kinds").as_object()) {
      std::string tiers;
      for (const auto& [tier, count] : k.at("by_tier").as_object())
        tiers +=
            fmt::format("{}{} {}", tiers.empty() ? "" : ", ", count.as_int64(), std::string(tier));
      std::cout << fmt::format("  {}: {} ({})\n", std::string(kind), n(k, "count"), tiers);
    }
    std::string outcomes;
    for (const auto& [what, count] : o.at("outcomes").as_object())
      outcomes +=
          fmt::format("{}{} {}", outcomes.empty() ? "" : ", ", count.as_int64(), std::string(what));
    std::cout << fmt::format("outcomes: {}\n", outcomes.empty() ? "none" : outcomes);
    const auto& t = o.at("time_to_decision_ms").as_object();
    std::cout << fmt::format("time to decision: p50 {}, p95 {}\n", ms(t.at("p50")),
                             ms(t.at("p95")));
    std::cout << fmt::format("reminded {}, escalated {}, lowered by the approver {}\n",
                             n(o, "reminded"), n(o, "escalated"), n(o.at("narrowed"), "count"));
    const auto& u = o.at("outcome_unknown").as_object();
    std::cout << fmt::format("outcome_unknown: {} of {} executed; resolved in p50 {}, p95 {}\n",
                             n(u, "count"), n(u, "of_executed"),
                             ms(u.at("time_to_resolution_ms").at("p50")),
                             ms(u.at("time_to_resolution_ms").at("p95")));
    for (const auto& [reason, count] : o.at("denial_reasons").as_object())
      std::cout << fmt::format("denied {}x: {}\n", count.as_int64(),
                               printable(std::string(reason)));
    if (const int64_t other = n(o, "denials_for_other_reasons"); other > 0)
      std::cout << fmt::format("denied {}x for other reasons\n", other);
    for (const auto& [who, a] : o.at("approvers").as_object())
      std::cout << fmt::format("{}: approved {}, denied {}\n", printable(std::string(who)),
                               n(a, "approved"), n(a, "denied"));
  });
}

int list_drafts(const Context& c, const std::string& order_id) {
  auto r = every_page(c,
                      "/v1/drafts?limit=1000" +
                          (order_id.empty() ? "" : "&order_id=" + http::url_component(order_id)),
                      "drafts", "next_after", "after");
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    const auto& drafts = r->body.as_object().at("drafts").as_array();
    if (drafts.empty()) std::cout << "no drafts\n";
    for (const auto& d : drafts) {
      // The model's text: control characters escaped, never interpreted.
      std::cout << fmt::format("{}  order {}  owner {}  drafted by {} at {}\n  {}\n", s(d, "id"),
                               s(d, "order_id"), s(d, "owner"), s(d, "drafted_by"),
                               s(d, "created_at_ms"), s(d, "text"));
    }
  });
}

int ledger(const Context& c, const std::string& session, const std::string& owner) {
  std::string path = "/v1/ledger?limit=1000";
  if (!session.empty()) path += "&session=" + http::url_component(session);
  if (!owner.empty()) path += "&owner=" + http::url_component(owner);
  auto r = every_page(c, path, "ledger");
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    const auto& rows = r->body.as_object().at("ledger").as_array();
    std::cout << fmt::format("{:<48} {:<16} {:>14}  {:<28} {}\n", "OPERATION", "KIND", "AMOUNT",
                             "PROVIDER OBJECT", "RECORDED BY");
    for (const auto& row : rows)
      std::cout << fmt::format("{:<48} {:<16} {:>14}  {:<28} {}\n", s(row, "operation_key"),
                               s(row, "kind"), money(row), s(row, "provider_object_id"),
                               s(row, "recorded_by"));
    if (rows.empty()) std::cout << "(no rows)\n";
  });
}

// "; the witnessed head #N is in it", when the caller gave one to check.
static std::string witnessed_note(const std::string& expect_head) {
  if (expect_head.empty()) return "";
  return fmt::format("; the witnessed head #{} is in it",
                     expect_head.substr(0, expect_head.find(':')));
}

int audit_verify_online(const Context& c, const std::string& expect_head) {
  std::string path = "/v1/audit/verify";
  if (!expect_head.empty()) path += "?expect_head=" + http::url_component(expect_head);
  auto r = call(c, "GET", path);
  if (!r) return 1;
  bool ok = r->body.as_object().at("ok").as_bool();
  const bool whole = r->body.as_object().contains("records");  // a token of every owner
  print_json_or(c, *r, [&] {
    if (!whole)
      std::cout << (ok ? "audit chain verifies (this token's owner patterns do not cover every "
                         "owner: ask one that does for its length and head)\n"
                       : "AUDIT CHAIN BROKEN (ask a token of every owner for where)\n");
    else if (ok)
      std::cout << fmt::format(
          "audit chain verifies: {} records, head #{} {}; {} operations agree "
          "with their records{}\n",
          s(r->body, "records"), s(r->body.at("head"), "seq"), s(r->body.at("head"), "hash"),
          s(r->body, "operations_checked"), witnessed_note(expect_head));
    else
      std::cout << fmt::format("AUDIT CHAIN BROKEN at record {}: {}\n", s(r->body, "first_bad_seq"),
                               s(r->body, "problem"));
  });
  return ok ? 0 : 3;
}

int audit_export(const Context& c, const std::string& key, const std::string& out_file) {
  auto r = call(c, "GET", "/v1/operations/" + http::url_component(key) + "/evidence");
  if (!r) return 1;
  // Checked before it is kept: a pack that does not verify (changed on its
  // way here) is no evidence, and is not written.
  auto check = operations::verify_evidence(r->raw);
  if (!check.ok) {
    std::cerr << "error: EVIDENCE DOES NOT VERIFY: " << printable(check.problem) << "\n";
    return 1;
  }
  // Written whole or not at all: a pack cut short would not verify.
  if (auto written = write_file_atomically(out_file, r->raw); !written) {
    std::cerr << fmt::format("error: cannot write {}: {}\n", out_file, written.error().message);
    return 1;
  }
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format("{}: evidence for {} ({} audit records, proven to head #{})\n",
                             out_file, printable(check.operation_key), check.records,
                             check.head.seq);
  });
}

int verify_evidence_file(const std::string& file, bool as_json, const std::string& witnessed_head) {
  std::optional<operations::WitnessedHead> witness;
  if (!witnessed_head_option(witnessed_head, witness)) return 2;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::cerr << fmt::format("error: cannot read {}\n", file);
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto check = operations::verify_evidence(text, witness);
  if (as_json) {
    json::object o{
        {"ok", check.ok},
        {"operation_key", check.operation_key},
        {"records", check.records},
        {"head", json::object{{"seq", check.head.seq}, {"hash", crypto::to_hex(check.head.hash)}}},
        {"witness_checked", check.witness_checked}};
    if (!check.ok) o["problem"] = check.problem;
    std::cout << json::serialize(o) << "\n";
  } else if (check.ok) {
    std::cout << fmt::format("evidence verifies: {}, {} audit records, proven to head #{} {}{}\n",
                             printable(check.operation_key), check.records, check.head.seq,
                             crypto::to_hex(check.head.hash),
                             check.witness_checked ? "; it passes through the witnessed head" : "");
  } else {
    std::cout << "EVIDENCE DOES NOT VERIFY: " << printable(check.problem) << "\n";
  }
  return check.ok ? 0 : 1;
}

int audit_verify_offline(const std::string& data_dir, bool as_json,
                         const std::string& expect_head) {
  std::optional<operations::WitnessedHead> expect;
  if (!witnessed_head_option(expect_head, expect)) return 2;
  auto st = open_offline(data_dir);
  if (!st) return 1;
  auto report = operations::verify_audit(*st, expect);
  if (!report) {
    std::cerr << "error: " << report.error().message << "\n";
    return 1;
  }
  const auto& v = report->chain;
  if (as_json) {
    std::cout << json::serialize(operations::to_json(*report)) << "\n";
  } else if (v.ok) {
    std::cout << fmt::format(
        "audit chain verifies: {} records, head #{} {}; {} operations agree with their records{}\n",
        v.records, v.head.seq, crypto::to_hex(v.head.hash), report->operations_checked,
        witnessed_note(expect_head));
  } else {
    std::cout << fmt::format("AUDIT CHAIN BROKEN at record {}: {}\n", v.first_bad_seq, v.problem);
  }
  return v.ok ? 0 : 3;
}

int import_orders(const Context& c, const std::string& file) {
  // Validate the whole file first: a line that is not an order imports
  // nothing. Each order is then its own PUT: one the server refuses (an
  // owner this token may not act for) stops the import, and says how far
  // it went; a PUT repeated writes the same order, so importing the fixed
  // file again is safe.
  auto read = operations::read_orders_file(file);
  if (!read) {
    std::cerr << "error: " << read.error().message << "\n";
    return 1;
  }
  const auto& orders = *read;
  for (size_t i = 0; i < orders.size(); ++i)
    if (!call(c, "PUT", "/v1/orders/" + http::url_component(orders[i].order_id()),
              operations::order_to_json(orders[i]))) {
      std::cerr << fmt::format(
          "stopped at order {} ({} of {}): the {} before it were imported; importing the "
          "file again once it is fixed writes them again, unchanged\n",
          printable(orders[i].order_id()), i + 1, orders.size(), i);
      return 1;
    }
  std::cout << fmt::format("imported {} order(s)\n", orders.size());
  return 0;
}

int notify_list(const Context& c) {
  auto r = call(c, "GET", "/v1/notify/endpoints");
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    const auto& endpoints = r->body.as_object().at("endpoints").as_array();
    if (endpoints.empty()) {
      std::cout << "no notification endpoints configured\n";
      return;
    }
    std::cout << fmt::format("{:<16} {:<9} {:<9} {:>7}  {:<36} {}\n", "ENDPOINT", "FORMAT", "STATE",
                             "BACKLOG", "URL", "LAST ERROR");
    for (const auto& e : endpoints)
      std::cout << fmt::format("{:<16} {:<9} {:<9} {:>7}  {:<36} {}\n", s(e, "name"),
                               s(e, "format"), s(e, "state"), s(e, "backlog"), s(e, "url"),
                               s(e, "last_error"));
    if (auto* held = r->body.as_object().if_contains("held"))
      for (const auto& h : held->as_array())
        std::cout << fmt::format(
            "{:<16} {:<9} {:<9} {:>7}  not configured here: `opgate notify release --from {} "
            "--to NAME` replays them, without --to discards them\n",
            s(h, "name"), "-", "held", s(h, "backlog"), s(h, "name"));
  });
}

int notify_release_held(const Context& c, const std::string& from, const std::string& to) {
  json::object body;
  if (!to.empty()) body["to"] = to;
  auto r = call(c, "POST", "/v1/notify/held/" + http::url_component(from) + "/release",
                json::serialize(body));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    if (to.empty())
      std::cout << fmt::format("{} held delivery(ies) to {} discarded\n", s(r->body, "discarded"),
                               from);
    else
      std::cout << fmt::format("{} held delivery(ies) to {} replayed to {}\n",
                               s(r->body, "replayed"), from, to);
  });
}

int notify_replay(const Context& c, const std::string& endpoint, const std::string& since) {
  auto d = duration_ms(since);
  if (!d) {
    std::cerr << "error: --since takes Unix seconds or a duration such as 90m, 2h or 1d\n";
    return 2;
  }
  const int64_t since_ms = d->second ? d->first : now_ms() - d->first;
  auto r = call(c, "POST", "/v1/notify/endpoints/" + http::url_component(endpoint) + "/replay",
                json::serialize(json::object{{"since_ms", since_ms}}));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format("{} notification(s) queued again for {}\n", s(r->body, "queued"),
                             endpoint);
  });
}

int notify_enable(const Context& c, const std::string& endpoint) {
  auto r = call(c, "POST", "/v1/notify/endpoints/" + http::url_component(endpoint) + "/enable");
  if (!r) return 1;
  return print_json_or(c, *r, [&] { std::cout << fmt::format("{} enabled\n", endpoint); });
}

int backup_create(const Context& c, const std::string& dir) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(dir, ec).lexically_normal().string();
  auto r = call(c, "POST", "/v1/backups", json::serialize(json::object{{"dir", absolute}}));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format("backup written to {} (audit chain head #{})\n", s(r->body, "dir"),
                             s(r->body.at("audit_head"), "seq"));
  });
}

int backup_restore(const std::string& backup_dir, const std::string& data_dir, bool as_json) {
  SystemClock clock;
  auto info = store::rocks::RocksStorage::restore(backup_dir, data_dir, clock);
  if (!info) {
    std::cerr << "error: " << info.error().message << "\n";
    return 1;
  }
  if (as_json)
    std::cout << json::serialize(
                     json::object{{"data_dir", info->dir}, {"audit_seq", info->audit_head.seq}})
              << "\n";
  else
    std::cout << fmt::format(
        "restored into {}: format {}, audit chain verifies to record #{}\n"
        "start the daemon with data_dir = \"{}\"\n",
        info->dir, info->format_version, info->audit_head.seq, info->dir);
  return 0;
}

int agent_token_create(const Context& c, const std::string& owner, const std::string& label,
                       const std::optional<std::string>& ttl) {
  json::object body{{"owner", owner}};
  if (!label.empty()) body["label"] = label;
  if (ttl) {
    auto d = duration_ms(*ttl);
    if (!d || d->first < 1000) {
      std::cerr << "error: --ttl takes seconds or a duration such as 12h or 30d\n";
      return 2;
    }
    body["ttl_s"] = d->first / 1000;
  }
  auto r = call(c, "POST", "/v1/agent-tokens", json::serialize(body));
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    std::cout << fmt::format(
        "agent token {} for {} (shown once; keep it secret):\n  token    {}\n  MCP URL  {}\n",
        s(r->body, "id"), s(r->body, "owner"), s(r->body, "token"),
        r->body.at("mcp_url").is_null() ? std::string("(no [mcp] listener configured)")
                                        : s(r->body, "mcp_url"));
  });
}

int agent_token_list(const Context& c) {
  auto r = every_page(c, "/v1/agent-tokens?limit=1000", "agent_tokens");
  if (!r) return 1;
  return print_json_or(c, *r, [&] {
    const auto& tokens = r->body.as_object().at("agent_tokens").as_array();
    std::cout << fmt::format("{:<20} {:<24} {:<8} {:<16} {}\n", "ID", "OWNER", "STATE",
                             "CREATED BY", "LABEL");
    for (const auto& t : tokens)
      std::cout << fmt::format("{:<20} {:<24} {:<8} {:<16} {}\n", s(t, "id"), s(t, "owner"),
                               s(t, "state"), s(t, "created_by"), s(t, "label"));
    if (tokens.empty()) std::cout << "(no agent tokens)\n";
  });
}

int agent_token_revoke(const Context& c, const std::string& id) {
  auto r = call(c, "DELETE", "/v1/agent-tokens/" + http::url_component(id));
  if (!r) return 1;
  return print_json_or(c, *r, [&] { std::cout << fmt::format("{} revoked\n", id); });
}

}  // namespace opgate::cli
