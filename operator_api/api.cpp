#include "operator_api/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <charconv>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "common/crypto.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/text.h"
#include "operations/agent_tokens.h"
#include "operations/audit.h"
#include "operations/decisions.h"
#include "operations/drafts.h"
#include "operations/evidence.h"
#include "operations/keys.h"
#include "operations/notes.h"
#include "operations/orders.h"
#include "operations/report.h"
#include "operations/step_up.h"
#include "operations/views.h"
#include "operator_api/auth.h"
#include "operator_api/charts.h"

namespace opgate::operator_api {

namespace json = boost::json;
using http::error_response;
using http::json_response;
using http::Request;
using http::Response;
using operations::Principal;

Response from_error(const Error& e) {
  if (e.is(errc::storage_unavailable) || e.is(errc::corrupt_record)) {
    auto r = error_response(errc::storage_unavailable, "The store is not available; retry later.");
    r.headers["Retry-After"] = "5";
    return r;
  }
  Error answered = e;
  if (answered.http_status < 400 || answered.http_status > 599) answered.http_status = 500;
  auto r = error_response(answered);
  if (answered.http_status == 503)
    r.headers["Retry-After"] =
        std::to_string(std::max<int64_t>(1, (e.retry_after_ms + 999) / 1000));
  return r;
}

namespace {

Result<json::object> body_object(const Request& req) {
  json::error_code ec;
  auto v = json::parse(req.body, ec);
  if (ec || !v.is_object()) return make_error(errc::bad_request, "The body must be a JSON object.");
  return v.as_object();
}

std::optional<std::string> string_field(const json::object& o, const char* k, size_t max = 500) {
  auto* p = o.if_contains(k);
  if (!p || !p->is_string() || p->as_string().empty() || p->as_string().size() > max)
    return std::nullopt;
  return std::string(p->as_string());
}

Response ok_json(const json::value& v) { return json_response(200, json::serialize(v)); }

Result<size_t> limit_param(const Request& req, size_t fallback, size_t max) {
  auto l = req.query_param("limit");
  if (!l) return fallback;
  size_t v = 0;
  const auto [end, ec] = std::from_chars(l->data(), l->data() + l->size(), v);
  if (ec != std::errc() || end != l->data() + l->size() || v < 1 || v > max)
    return make_error(errc::bad_request, fmt::format("limit must be a number from 1 to {}.", max));
  return v;
}

// A transcript is read in pages of this many items, up to these bounds; a
// longer one (or a platform whose paging loops) is shown cut, and says so.
constexpr int kTranscriptPageSize = 20;
constexpr size_t kTranscriptMaxBytes = 8 << 20;
constexpr int64_t kTranscriptDeadlineMs = 30'000;
// A session's view carries this many of its ledger rows, and a cursor
// for the rest.
constexpr size_t kSessionLedgerRows = 1000;
// At most this many approvals in one POST /v1/approvals.
constexpr size_t kMaxBatchApprovals = 100;

using Handler = std::function<Response(const Request&, const http::PathParams&, const Principal&)>;

class Api {
 public:
  explicit Api(ApiDeps& d) : d_(d) {}

  // Wraps a handler with authentication and a scope check (none for an
  // empty scope). Under the console's prefix a request without a bearer
  // token is authenticated by the console's session instead.
  http::RouteHandler guarded(std::string_view scope, Handler fn, bool console) {
    return [this, scope = std::string(scope), fn, console](const Request& req,
                                                           const http::PathParams& params) {
      auto principals = d_.principals.get();
      const Principal* p = nullptr;
      if (console && !req.header("Authorization")) {
        auto a = d_.console_auth(req, *principals);
        if (a.refusal) return *a.refusal;
        p = a.principal;
        if (!p) return error_response(errc::unauthorized, "Sign in to the console again.");
      }
      if (!p) p = authenticate(*principals, req.header("Authorization"));
      if (!p) {
        const auto presented = req.header("Authorization").value_or("");
        const bool short_token = presented.starts_with("Bearer ") &&
                                 presented.size() - 7 < operator_api::kMinTokenLength;
        auto r =
            error_response(errc::unauthorized,
                           short_token ? kShortTokenMessage
                                       : std::string_view("A valid bearer token is required."));
        r.headers["WWW-Authenticate"] = "Bearer";
        return r;
      }
      if (!scope.empty() && !p->has_scope(scope))
        return error_response(errc::forbidden,
                              fmt::format("This token lacks the {} scope.", scope));
      return fn(req, params, *p);
    };
  }

  bool attention(const pb::Operation& op) const {
    return operations::needs_attention(op, d_.clock.now_ms(), d_.attention);
  }

  // With, while it is pending, the approvals it needs under the current
  // policy.
  json::object op_json(const pb::Operation& op) const {
    auto o = operations::operation_json(op, attention(op));
    if (operations::is(op, operations::State::pending)) {
      const auto policy = d_.policy.get();
      o["approvals_needed"] = operations::approvals_needed(op.proposal(), *policy);
      o["step_up_required"] = operations::step_up_required(op.proposal(), policy->step_up);
    }
    return o;
  }

  // The session, if it exists and the principal may see its owner.
  Result<pb::Session> visible_session(const std::string& id, const Principal& p) {
    if (!operations::valid_identifier(id))
      return make_error(errc::bad_request,
                        "A session id is 1-64 characters from A-Z, a-z, 0-9, '.', '_' and '-'.");
    OPGATE_ASSIGN_OR_RETURN(auto s, d_.storage.reader().session(id));
    if (!s || !p.may_act_for(s->owner()))
      return make_error(errc::not_found, "No session with that id.");
    return std::move(*s);
  }

  Response bind(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto owner = string_field(*body, "owner", 64);
    if (!owner) return error_response(errc::bad_request, "owner is required.");
    if (!p.may_act_for(*owner))
      return error_response(errc::forbidden, "This token may not act for that owner.");
    Status s = d_.sessions.bind(params.at("id"), *owner, p.name);
    if (!s) return from_error(s.error());
    d_.wake_worker();
    return ok_json(json::object{{"session_id", params.at("id")}, {"owner", *owner}});
  }

  Response recover(const Request&, const http::PathParams& params, const Principal& p) {
    auto session = visible_session(params.at("id"), p);
    if (!session) return from_error(session.error());
    auto recovered = d_.sessions.recover(params.at("id"));
    if (!recovered) return from_error(recovered.error());
    d_.wake_worker();
    // Reopened whether or not the platform answered now: a 200 that says
    // why the sync failed, and the worker syncs it as the platform answers.
    auto view = session_json(params.at("id"), p);
    if (!view) return from_error(view.error());
    if (!*recovered) (*view)["sync_error"] = recovered->error().message;
    return ok_json(*view);
  }

  Response session_view(const std::string& id, const Principal& p) {
    auto view = session_json(id, p);
    if (!view) return from_error(view.error());
    return ok_json(*view);
  }

  // A session the principal may see: its calls, notes, operations and
  // ledger rows.
  Result<json::object> session_json(const std::string& id, const Principal& p) {
    auto session = visible_session(id, p);
    if (!session) return session.error();
    auto& reader = d_.storage.reader();
    auto calls = reader.calls_of(id);
    if (!calls) return calls.error();
    json::array call_rows, operations;
    std::set<std::string> op_keys;
    for (const auto& c : *calls) {
      call_rows.push_back(operations::call_json(c));
      if (!c.operation_key().empty()) op_keys.insert(c.operation_key());
    }
    for (const auto& k : op_keys) {
      auto op = reader.operation(k);
      if (!op) return op.error();
      if (*op) operations.push_back(op_json(**op));
    }
    auto notes = operations::notes_json(reader, *calls);
    if (!notes) return notes.error();
    // Its ledger rows are those of its operations that name it (read by
    // key, not by a scan of every row): the first page, and the rest from
    // GET /v1/ledger?session= from ledger_next_cursor.
    json::array rows;
    json::value ledger_next = nullptr;
    for (const auto& k : op_keys) {
      auto row = reader.ledger_entry(k);
      if (!row) return row.error();
      if (!*row || (*row)->session_id() != id || !p.may_act_for((*row)->owner())) continue;
      if (rows.size() == kSessionLedgerRows) {
        ledger_next = rows.back().at("operation_key");
        break;
      }
      rows.push_back(operations::ledger_json(**row));
    }
    return json::object{{"session_id", id},
                        {"owner", session->owner()},
                        {"bound_by", session->bound_by()},
                        {"closed", session->closed()},
                        {"last_sync_ms", session->last_sync_ms()},
                        {"last_sync_error", session->last_sync_error()},
                        {"calls", call_rows},
                        {"notes", std::move(*notes)},
                        {"operations", operations},
                        {"ledger", rows},
                        {"ledger_next_cursor", ledger_next}};
  }

  // Root turn statuses and every page of saved items, from the platform,
  // for a session opgate has bound and the principal may see.
  Response transcript(const Request&, const http::PathParams& params, const Principal& p) {
    const auto& id = params.at("id");
    auto session = visible_session(id, p);
    if (!session) return from_error(session.error());
    auto turns = d_.agents.get_turns(id);
    if (!turns) return error_response(errc::agents_unavailable, turns.error().message);
    json::array pages;
    std::string after;
    std::set<std::string> cursors;
    size_t bytes = 0;
    bool truncated = false;
    const int64_t deadline = d_.clock.monotonic_ms() + kTranscriptDeadlineMs;
    for (int i = 0;; ++i) {
      auto page = d_.agents.get_items(id, after, kTranscriptPageSize);
      if (!page) return error_response(errc::agents_unavailable, page.error().message);
      json::error_code ec;
      pages.push_back(json::parse(page->json, ec));
      bytes += page->json.size();
      if (!page->has_more || page->last_id.empty()) break;
      // A cursor seen before would fetch pages seen before, again and
      // again: the platform's paging is broken, and what came is shown.
      truncated = !cursors.insert(page->last_id).second || bytes >= kTranscriptMaxBytes ||
                  i + 1 >= 1000 || d_.clock.monotonic_ms() >= deadline;
      if (truncated) break;
      after = page->last_id;
    }
    json::error_code ec;
    return ok_json(json::object{
        {"turns", json::parse(*turns, ec)}, {"item_pages", pages}, {"truncated", truncated}});
  }

  // Operations in key order, or with sort=created_at (which needs a state
  // other than settled) oldest first; filtered by owner and tier.
  Response list_operations(const Request& req, const http::PathParams&, const Principal& p) {
    auto owner = req.query_param("owner").value_or("");
    auto tier = req.query_param("tier").value_or("");
    if (!tier.empty() && tier != "refund" && tier != "support" && tier != "supervisor")
      return error_response(errc::bad_request, "tier must be refund, support or supervisor.");
    const auto sort = req.query_param("sort").value_or("key");
    if (sort != "key" && sort != "created_at")
      return error_response(errc::bad_request, "sort must be key or created_at.");
    auto limit = limit_param(req, 100, 1000);
    if (!limit) return from_error(limit.error());
    store::OperationQuery q;
    q.after = req.query_param("cursor").value_or("");
    q.limit = *limit;
    if (auto state = req.query_param("state"); state && !state->empty()) {
      auto st = operations::parse_state(*state);
      if (!st)
        return error_response(errc::bad_request,
                              "state must be pending, approved, executing, outcome_unknown or "
                              "settled.");
      q.state = static_cast<pb::OperationState>(*st);
    }
    q.accept = [&](const pb::Operation& op) {
      return p.may_act_for(op.proposal().owner()) &&
             (owner.empty() || op.proposal().owner() == owner) &&
             (tier.empty() || op.proposal().tier() == tier);
    };
    json::object res{
        {"operations", json::array{}}, {"next_cursor", nullptr}, {"now_ms", d_.clock.now_ms()}};
    if (sort == "created_at") {
      // The queues are short; settled operations only grow, and sorting
      // them would read (and hold) every one on each page.
      if (!q.state || *q.state == pb::STATE_SETTLED)
        return error_response(errc::bad_request,
                              "sort=created_at needs a state other than settled (pending, "
                              "approved, executing or outcome_unknown); settled operations are "
                              "listed in key order.");
      auto page = sorted_by_creation(q);
      if (!page) return from_error(page.error());
      res["operations"] = std::move(page->first);
      if (!page->second.empty()) res["next_cursor"] = page->second;
      return ok_json(res);
    }
    auto page = d_.storage.reader().operations(q);
    if (!page) return from_error(page.error());
    json::array out;
    for (const auto& op : page->operations) out.push_back(op_json(op));
    res["operations"] = std::move(out);
    if (!page->next_after.empty()) res["next_cursor"] = page->next_after;
    return ok_json(res);
  }

  // Every operation the query accepts, oldest first (then by key), from
  // after the cursor "{created_at_ms}:{key}": one page and the next cursor.
  // The store keeps operations in key order, so this reads them all; it is
  // meant for the few in one state (the pending queue).
  Result<std::pair<json::array, std::string>> sorted_by_creation(store::OperationQuery q) {
    using Position = std::pair<int64_t, std::string>;
    std::optional<Position> after;
    if (!q.after.empty()) {
      const auto colon = q.after.find(':');
      const auto ms = colon == std::string::npos
                          ? std::nullopt
                          : whole_number(std::string_view(q.after).substr(0, colon));
      if (!ms) return make_error(errc::bad_request, "cursor is not valid.");
      after = Position{*ms, q.after.substr(colon + 1)};
    }
    const size_t limit = q.limit;
    constexpr size_t kMaxSorted = 100'000;
    std::vector<pb::Operation> all;
    q.after.clear();
    q.limit = 1000;
    for (;;) {
      OPGATE_ASSIGN_OR_RETURN(auto page, d_.storage.reader().operations(q));
      for (auto& op : page.operations)
        if (!after || Position{op.created_at_ms(), op.key()} > *after) all.push_back(std::move(op));
      if (all.size() > kMaxSorted)
        return make_error(errc::bad_request,
                          "Too many operations to sort by creation; filter by owner or tier.");
      if (page.next_after.empty()) break;
      q.after = page.next_after;
    }
    std::sort(all.begin(), all.end(), [](const pb::Operation& a, const pb::Operation& b) {
      return Position{a.created_at_ms(), a.key()} < Position{b.created_at_ms(), b.key()};
    });
    json::array out;
    std::string next;
    for (size_t i = 0; i < all.size() && i < limit; ++i) out.push_back(op_json(all[i]));
    if (all.size() > limit)
      next = fmt::format("{}:{}", all[limit - 1].created_at_ms(), all[limit - 1].key());
    return std::pair{std::move(out), std::move(next)};
  }

  // Who the caller is: what the console shows and offers depends on it.
  Response me(const Principal& p) {
    json::array scopes, owners, tiers;
    for (const auto& s : p.scopes) scopes.push_back(json::value(s));
    for (const auto& o : p.owners) owners.push_back(json::value(o));
    for (const auto& t : p.tiers) tiers.push_back(json::value(t));
    json::object limits;
    for (const auto& [currency, amount] : p.max_amount_minor) limits[currency] = amount;
    return ok_json(json::object{{"principal", p.name},
                                {"scopes", scopes},
                                {"owners", owners},
                                {"tiers", tiers},
                                {"max_amount_minor", limits}});
  }

  Response get_operation(const std::string& key, const Principal& p) {
    auto found = operations::visible_history(d_.storage.reader(), key, p);
    if (!found) return from_error(found.error());
    return history_response(*found);
  }

  // The operation with its history, as GET /v1/operations/{key} shows it.
  Response history_response(const store::OperationHistory& found) {
    auto o = op_json(found.operation);
    json::array rows;
    for (const auto& r : found.records) rows.push_back(operations::audit_json(r));
    o["history"] = std::move(rows);
    return ok_json(o);
  }

  // The operation's evidence pack (operations/evidence.h), exactly as it is
  // to be handed over; the export is audited.
  Response evidence(const std::string& key, const Principal& p) {
    // A pack holds its proof to the head in memory while it is built: one
    // at a time, and the others are told to come back.
    if (exporting_.exchange(true)) {
      Error busy = make_error(errc::overloaded,
                              "Another evidence pack is being built; ask again in a moment.");
      busy.retry_after_ms = 2'000;
      return from_error(busy);
    }
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(false); }
    } done{exporting_};
    auto pack = operations::export_evidence(d_.storage, key, p, *d_.policy.get());
    if (!pack) return from_error(pack.error());
    Response r = json_response(200, std::move(*pack));
    r.headers["Content-Disposition"] = "attachment; filename=\"evidence.json\"";
    return r;
  }

  // What an approver needs beside the proposal: the order and what opgate
  // moved for it, the policy it was checked against, and the other
  // operations on the same order.
  Response context(const std::string& key, const Principal& p) {
    auto& reader = d_.storage.reader();
    auto op = operations::visible_operation(reader, key, p);
    if (!op) return from_error(op.error());
    const auto& order_id = op->proposal().order_id();
    auto order = reader.order(order_id);
    if (!order) return from_error(order.error());
    auto funds = reader.funds(order_id);
    if (!funds) return from_error(funds.error());
    auto related = reader.operations_of_order(order_id);
    if (!related) return from_error(related.error());
    json::array others;
    for (const auto& r : *related)
      if (r.key() != key && p.may_act_for(r.proposal().owner())) others.push_back(op_json(r));
    auto policy = d_.policy.get();
    const auto& cur = op->proposal().currency();
    auto amount_of = [&](const std::map<std::string, int64_t>& m) -> json::value {
      auto it = m.find(cur);
      return it == m.end() ? json::value(nullptr) : json::value(it->second);
    };
    json::object o{
        {"operation", op_json(*op)},
        {"order", nullptr},
        {"money", nullptr},
        {"policy",
         json::object{
             {"refund_window_days", policy->refund_window_days},
             {"approval_ttl_s", policy->approval_ttl_s},
             {"two_person_threshold_minor", amount_of(policy->two_person_threshold_minor)},
             {"approvals_needed", operations::approvals_needed(op->proposal(), *policy)},
             {"credit_hard_cap_minor", amount_of(policy->credit_hard_cap_minor)},
             {"credit_support_limit_minor", amount_of(policy->credit_support_limit_minor)}}},
        {"related", others}};
    if (*order) {
      json::error_code ec;
      o["order"] = json::parse(operations::order_to_json(**order), ec);
      o["money"] = operations::funds_json(**order, *funds);
    }
    auto drafted = operations::latest_drafts(reader, op->proposal().order_id(), 50);
    if (!drafted) return from_error(drafted.error());
    json::array replies;
    for (const auto& d : *drafted)
      if (p.may_act_for(d.owner())) replies.push_back(draft_json(d));
    o["drafts"] = std::move(replies);
    return ok_json(o);
  }

  static json::object draft_json(const pb::Draft& d) {
    return json::object{{"id", d.id()},
                        {"owner", d.owner()},
                        {"order_id", d.order_id()},
                        {"text", d.text()},
                        {"session_id", d.session_id()},
                        {"call_id", d.call_id()},
                        {"drafted_by", d.principal()},
                        {"created_at_ms", d.created_at_ms()},
                        {"sent", false}};
  }

  // One chart of the report, as SVG: "outcomes", "kinds" or "approvers".
  Response report_chart(const Request& req, const http::PathParams& params, const Principal& p) {
    auto built = report_for_charts(req, p);
    if (!built) return from_error(built.error());
    const std::string& name = params.at("name");
    std::vector<std::pair<std::string, int64_t>> bars;
    std::string title;
    if (name == "outcomes.svg") {
      title = "Outcomes of the proposals";
      for (const auto& [what, count] : built->at("outcomes").as_object())
        bars.emplace_back(std::string(what), count.as_int64());
    } else if (name == "kinds.svg") {
      title = "Proposals by kind";
      for (const auto& [kind, k] : built->at("kinds").as_object())
        bars.emplace_back(std::string(kind), k.at("count").as_int64());
    } else if (name == "approvers.svg") {
      title = "Approvals by approver";
      for (const auto& [who, a] : built->at("approvers").as_object())
        bars.emplace_back(std::string(who), a.at("approved").as_int64());
    } else {
      return error_response(errc::not_found,
                            "The charts are outcomes.svg, kinds.svg and "
                            "approvers.svg.");
    }
    Response r;
    r.status = 200;
    r.headers["Content-Type"] = "image/svg+xml";
    r.body = bar_chart_svg(title, bars);
    return r;
  }

  static Result<int64_t> from_ms_of(const Request& req) {
    int64_t from_ms = 0;
    if (auto f = req.query_param("from_ms")) {
      const auto ms = whole_number(*f);
      if (!ms) return make_error(errc::bad_request, "from_ms must be Unix milliseconds.");
      from_ms = *ms;
    }
    return from_ms;
  }

  // The report a chart is drawn from: the one just built for the same
  // principal and window, or a new one.
  Result<json::object> report_for_charts(const Request& req, const Principal& p) {
    OPGATE_ASSIGN_OR_RETURN(const int64_t from_ms, from_ms_of(req));
    {
      MutexLock lock(reports_mu_);
      for (const auto& r : reports_)
        if (r.principal == p.name && r.from_ms == from_ms &&
            d_.clock.now_ms() - r.built_at_ms < kChartsReuseMs)
          return r.report;
    }
    return build_report(from_ms, p);
  }

  Result<json::object> build_report(int64_t from_ms, const Principal& p) {
    operations::DecisionReport report(from_ms);
    const bool every_owner = p.sees_every_owner();
    OPGATE_TRY(d_.storage.reader().visit_operations([&](const pb::Operation& op) {
      if (op.created_at_ms() >= from_ms && (every_owner || p.may_act_for(op.proposal().owner())))
        report.add(op);
      return true;
    }));
    json::object built = report.json();
    MutexLock lock(reports_mu_);
    reports_.push_back({p.name, from_ms, d_.clock.now_ms(), built});
    if (reports_.size() > kReportsKept) reports_.pop_front();
    return built;
  }

  // How approvals are going for the proposals made since from_ms (of the
  // owners the principal may see), read in pages.
  Response report(const Request& req, const Principal& p) {
    auto from_ms = from_ms_of(req);
    if (!from_ms) return from_error(from_ms.error());
    auto built = build_report(*from_ms, p);
    if (!built) return from_error(built.error());
    return ok_json(*built);
  }

  // Replies the agent drafted, for people to send: of one order, or of
  // every order the principal may see.
  Response list_drafts(const Request& req, const Principal& p) {
    auto limit = limit_param(req, 100, 1000);
    if (!limit) return from_error(limit.error());
    const std::string order_id = req.query_param("order_id").value_or("");
    if (!order_id.empty() && !operations::valid_identifier(order_id))
      return error_response(errc::bad_request, "order_id is not an order id.");
    auto page =
        operations::drafts(d_.storage.reader(), order_id, req.query_param("after").value_or(""),
                           *limit, [&](const pb::Draft& d) { return p.may_act_for(d.owner()); });
    if (!page) return from_error(page.error());
    json::array out;
    for (const auto& d : page->drafts) out.push_back(draft_json(d));
    return ok_json(
        json::object{{"drafts", std::move(out)},
                     {"next_after", page->next_after.empty() ? json::value(nullptr)
                                                             : json::value(page->next_after)}});
  }

  // 409 with the operation's current state, so the caller sees what happened.
  Response conflict_with_state(const std::string& key, const Error& e, const Principal& p) {
    json::object body{{"error", json::object{{"code", e.code}, {"message", e.message}}}};
    auto op = operations::visible_operation(d_.storage.reader(), key, p);
    if (op) body["operation"] = op_json(*op);
    return json_response(e.http_status, json::serialize(body));
  }

  // The answer to a decision: the operation as it is now, from `committed`
  // if its transaction read it after its commit.
  Response after_decision(const Status& s, const std::string& key, const Principal& p,
                          const store::CommittedRead* committed = nullptr) {
    if (!s) {
      if (s.error().http_status == 409) return conflict_with_state(key, s.error(), p);
      return from_error(s.error());
    }
    d_.wake_worker();
    if (committed && committed->read && committed->history &&
        p.may_act_for(committed->history->operation.proposal().owner()))
      return history_response(*committed->history);
    return get_operation(key, p);
  }

  Response approve(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto request = approval_request(*body, site_of(req));
    if (!request) return from_error(request.error());
    return approve_one(params.at("key"), *body, std::move(*request), p);
  }

  // Several approvals in one request, each in its own transaction: one
  // stale, unauthorised or refused item fails alone and says why. A
  // malformed item refuses the whole batch before any is approved.
  Response approve_many(const Request& req, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    const auto* items = body->if_contains("items");
    if (!items || !items->is_array() || items->as_array().empty() ||
        items->as_array().size() > kMaxBatchApprovals)
      return error_response(errc::bad_request,
                            fmt::format("items must be an array of 1 to {} approvals, each "
                                        "{{key, amount_minor, currency, fingerprint}}.",
                                        kMaxBatchApprovals));
    std::set<std::string> keys;
    std::vector<operations::ApprovalRequest> requests;
    const auto site = site_of(req);
    for (const auto& item : items->as_array()) {
      const auto* k = item.is_object() ? item.as_object().if_contains("key") : nullptr;
      if (!k || !k->is_string() || k->as_string().empty() || k->as_string().size() > 256)
        return error_response(errc::bad_request, "Every item needs its operation key.");
      if (!keys.insert(std::string(k->as_string())).second)
        return error_response(errc::bad_request, fmt::format("The operation {} is listed twice.",
                                                             utf8_prefix(k->as_string(), 64)));
      auto request = approval_request(item.as_object(), site);
      if (!request) {
        Error refused = request.error();
        refused.message = fmt::format("The item for {} is refused, and nothing was approved: {}",
                                      utf8_prefix(k->as_string(), 64), refused.message);
        return from_error(refused);
      }
      requests.push_back(std::move(*request));
    }
    json::array results;
    size_t approved = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto& item = items->as_array()[i];
      const std::string key(item.as_object().at("key").as_string());
      Response one = approve_one(key, item.as_object(), std::move(requests[i]), p);
      json::error_code ec;
      json::value answer = json::parse(one.body, ec);
      json::object result{{"key", key}, {"status", one.status}};
      if (one.status == 200) {
        ++approved;
        result["operation"] = std::move(answer);
      } else if (answer.is_object()) {
        for (const char* field : {"error", "operation"})
          if (const auto* v = answer.as_object().if_contains(field)) result[field] = *v;
      }
      results.push_back(std::move(result));
    }
    return ok_json(json::object{{"results", std::move(results)},
                                {"approved", approved},
                                {"refused", items->as_array().size() - approved}});
  }

  // An approval's fields: the amount, currency and fingerprint shown, an
  // edit_reason with a lower amount, and a passkey's step-up.
  Result<operations::ApprovalRequest> approval_request(
      const json::object& body, const Result<operations::PasskeySite>& site) {
    auto* amount = body.if_contains("amount_minor");
    auto currency = string_field(body, "currency", 8);
    auto fp = string_field(body, "fingerprint", 128);
    if (!amount || !amount->is_int64() || !currency || !fp)
      return make_error(errc::bad_request,
                        "amount_minor (integer), currency and fingerprint are required: "
                        "approve exactly what the operation shows.");
    std::string edit_reason;
    if (body.contains("edit_reason")) {
      auto r = string_field(body, "edit_reason", 500);
      if (!r) return make_error(errc::bad_request, "edit_reason must be 1-500 characters.");
      edit_reason = *r;
    }
    std::optional<operations::StepUpProof> step_up;
    if (const auto* proof = body.if_contains("step_up")) {
      OPGATE_ASSIGN_OR_RETURN(auto parsed, parse_step_up(*proof, site));
      step_up = std::move(parsed);
    }
    return operations::ApprovalRequest{amount->as_int64(), *currency, *fp, edit_reason,
                                       std::move(step_up)};
  }

  // One approval of `key`, as `request` asks (`body` holds its fields).
  Response approve_one(const std::string& key, const json::object& body,
                       operations::ApprovalRequest request, const Principal& p) {
    // The order is read ahead with the operation: the one its key names, or
    // with an order service, the one the operation names, read first to
    // source the order there.
    std::string order_id(operations::key_order(key));
    Result<std::optional<operations::SourcedOrder>> sourced =
        std::optional<operations::SourcedOrder>();
    if (d_.orders) {
      const auto shown = operations::visible_operation(d_.storage.reader(), key, p);
      if (shown) {
        if (Status own = names_only_its_own(*shown, body); !own) return from_error(own.error());
        order_id = shown->proposal().order_id();
      }
      sourced = source_order(shown);
      if (!sourced) return from_error(sourced.error());
    }
    auto policy = d_.policy.get();
    auto in_force = d_.principals.get();  // the approvals so far must still hold
    std::optional<Error> refusal;
    store::ReadAhead ahead;
    ahead.operations = {key};
    if (!order_id.empty()) ahead.orders = ahead.funds = {order_id};
    // The last approval claims the operation too, and this process calls
    // the provider: one transaction fewer than leaving the claim to a pass.
    const operations::ClaimAtOnce at_once = d_.drainer.claim_at_once();
    std::optional<pb::Operation> claimed;
    // The answer, and the execute item the provider call is made on, read
    // with the commit (not for a refusal).
    store::CommittedRead committed;
    committed.operation_key = key;
    Status s = d_.storage.transact([&](store::Transaction& txn) -> Status {
      claimed.reset();
      OPGATE_TRY(txn.read_ahead(ahead));
      // Checked on the operation as the transaction reads it.
      if (auto shown = operations::visible_operation(txn, key, p); shown)
        OPGATE_TRY(names_only_its_own(*shown, body));
      OPGATE_ASSIGN_OR_RETURN(
          auto approved,
          operations::approve(txn, key, p, request, *policy, *sourced, at_once, in_force.get()));
      refusal = approved.refusal;
      claimed = std::move(approved.claimed);
      // A refusal is answered with the state as it is (conflict_with_state).
      if (!refusal) txn.read_after_commit(&committed);
      return Status::Ok();
    });
    if (s && refusal) {
      d_.wake_worker();
      return conflict_with_state(key, *refusal, p);
    }
    if (s && claimed)
      d_.drainer.execute_claimed(
          std::move(*claimed), at_once.lease_token,
          committed.read ? std::optional(std::move(committed.items)) : std::nullopt);
    return after_decision(s, key, p, &committed);
  }

  // An approval never names another order, owner or kind: the key does.
  static Status names_only_its_own(const pb::Operation& op, const json::object& body) {
    const auto& proposal = op.proposal();
    for (const auto& [field, value] :
         {std::pair<const char*, const std::string&>{"order_id", proposal.order_id()},
          {"owner", proposal.owner()},
          {"kind", proposal.kind()}})
      if (auto* given = body.if_contains(field);
          given && !(given->is_string() && given->as_string() == value))
        return make_error(errc::widening_refused,
                          fmt::format("An approval cannot change the {}.", field));
    return Status::Ok();
  }

  // Where passkeys are registered and used for this request: the console.
  Result<operations::PasskeySite> site_of(const Request& req) const {
    if (!d_.passkey_site)
      return make_error(errc::step_up_failed,
                        "Passkeys are registered and used through the console, which is not "
                        "served here.");
    return d_.passkey_site(req);
  }

  // An approval's "step_up": the passkey's assertion, its fields base64url.
  Result<operations::StepUpProof> parse_step_up(const json::value& v,
                                                const Result<operations::PasskeySite>& site) {
    if (!site) return site.error();
    if (!v.is_object()) return make_error(errc::bad_request, "step_up must be an object.");
    operations::StepUpProof proof;
    proof.site = *site;
    for (auto [name, field, max] :
         {std::tuple<const char*, std::string*, size_t>{"challenge", &proof.challenge, 64},
          {"credential_id", &proof.credential_id, 1024},
          {"client_data_json", &proof.client_data_json, 4096},
          {"authenticator_data", &proof.authenticator_data, 4096},
          {"signature", &proof.signature, 256}}) {
      const auto* f = v.as_object().if_contains(name);
      auto raw = f && f->is_string() ? crypto::base64url_decode(f->as_string()) : std::nullopt;
      if (!raw || raw->empty() || raw->size() > max)
        return make_error(
            errc::bad_request,
            fmt::format("step_up.{} must be base64url, as the browser gave it.", name));
      *field = std::move(*raw);
    }
    return proof;
  }

  // A challenge for the approver's passkey to sign: this operation, as shown
  // with this fingerprint, approved by this principal.
  Response step_up_challenge(const Request& req, const http::PathParams& params,
                             const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto fp = string_field(*body, "fingerprint", 128);
    if (!fp) return error_response(errc::bad_request, "fingerprint (as shown) is required.");
    auto site = site_of(req);
    if (!site) return from_error(site.error());
    const std::string key = params.at("key");
    std::string challenge;
    std::vector<pb::Passkey> passkeys;
    Status s = d_.storage.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(auto op, operations::visible_operation(txn, key, p));
      if (!crypto::equal_constant_time(*fp, op.fingerprint()))
        return make_error(errc::proposal_mismatch,
                          "The operation changed since it was shown; fetch it again.");
      OPGATE_ASSIGN_OR_RETURN(passkeys, operations::passkeys_of(txn, p.name));
      if (passkeys.empty())
        return make_error(errc::step_up_required,
                          "You have no passkey: register one on the console's Passkeys page.");
      OPGATE_ASSIGN_OR_RETURN(
          challenge, operations::issue_passkey_challenge(txn, p.name, "approve", key, *fp));
      return Status::Ok();
    });
    if (!s) return from_error(s.error());
    json::array allow;
    for (const auto& k : passkeys) allow.push_back(json::value(operations::passkey_id(k)));
    return ok_json(json::object{{"challenge", crypto::base64url_encode(challenge)},
                                {"rp_id", site->rp_id},
                                {"allow_credentials", std::move(allow)},
                                {"timeout_ms", operations::kPasskeyChallengeTtlMs}});
  }

  static json::object passkey_json(const pb::Passkey& k) {
    return json::object{{"id", operations::passkey_id(k)},
                        {"label", k.label()},
                        {"created_at_ms", k.created_at_ms()},
                        {"last_used_at_ms", k.last_used_at_ms()}};
  }

  Response list_passkeys(const Principal& p) {
    auto keys = operations::passkeys_of(d_.storage.reader(), p.name);
    if (!keys) return from_error(keys.error());
    json::array out;
    for (const auto& k : *keys) out.push_back(passkey_json(k));
    return ok_json(json::object{{"passkeys", std::move(out)}});
  }

  // The options for navigator.credentials.create(): a fresh challenge, the
  // site, the principal, and the passkeys it holds already (not again).
  Response passkey_challenge(const Request& req, const Principal& p) {
    auto site = site_of(req);
    if (!site) return from_error(site.error());
    std::string challenge;
    std::vector<pb::Passkey> held;
    Status s = d_.storage.transact([&](store::Transaction& txn) -> Status {
      OPGATE_TRY(operations::require_passkey_enrolment(txn, p.name));
      OPGATE_ASSIGN_OR_RETURN(held, operations::passkeys_of(txn, p.name));
      OPGATE_ASSIGN_OR_RETURN(challenge,
                              operations::issue_passkey_challenge(txn, p.name, "register"));
      return Status::Ok();
    });
    if (!s) return from_error(s.error());
    json::array exclude;
    for (const auto& k : held) exclude.push_back(json::value(operations::passkey_id(k)));
    return ok_json(
        json::object{{"challenge", crypto::base64url_encode(challenge)},
                     {"rp", json::object{{"id", site->rp_id}, {"name", "opgate"}}},
                     {"user", json::object{{"id", crypto::base64url_encode(crypto::sha256(p.name))},
                                           {"name", p.name},
                                           {"display_name", p.name}}},
                     {"exclude_credentials", std::move(exclude)},
                     {"timeout_ms", operations::kPasskeyChallengeTtlMs}});
  }

  Response add_passkey(const Request& req, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto site = site_of(req);
    if (!site) return from_error(site.error());
    auto label = string_field(*body, "label", 64);
    if (!label) return error_response(errc::bad_request, "label is required (1-64 characters).");
    std::string fields[3];
    const char* names[3] = {"challenge", "client_data_json", "attestation_object"};
    for (int i = 0; i < 3; ++i) {
      const auto* f = body->if_contains(names[i]);
      auto raw = f && f->is_string() ? crypto::base64url_decode(f->as_string()) : std::nullopt;
      if (!raw || raw->empty() || raw->size() > 8192)
        return error_response(
            errc::bad_request,
            fmt::format("{} must be base64url, as the browser gave it.", names[i]));
      fields[i] = std::move(*raw);
    }
    pb::Passkey added;
    Status s = d_.storage.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(added, operations::register_passkey(txn, p.name, *label, fields[0],
                                                                  fields[1], fields[2], *site));
      return Status::Ok();
    });
    if (!s) return from_error(s.error());
    log_event(spdlog::level::info, "passkey.registered",
              fmt::format("{} registered a passkey ({})", p.name, *label),
              {{"principal", p.name}, {"passkey", operations::passkey_id(added)}});
    return json_response(201, json::serialize(passkey_json(added)));
  }

  // An administrator allows one principal to register one passkey (within a
  // day): a stolen approver's token alone cannot enrol one.
  Response allow_enrolment(const Request& req, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto principal = string_field(*body, "principal", 128);
    if (!principal) return error_response(errc::bad_request, "principal is required.");
    auto principals = d_.principals.get();
    if (std::none_of(principals->begin(), principals->end(),
                     [&](const Principal& q) { return q.name == *principal; }))
      return error_response(errc::not_found, "No operator token has that principal.");
    Status s = d_.storage.transact([&](store::Transaction& txn) {
      return operations::allow_passkey_enrolment(txn, *principal, p.name);
    });
    if (!s) return from_error(s.error());
    log_event(spdlog::level::info, "passkey.enrolment_allowed",
              fmt::format("{} allowed {} to register a passkey", p.name, *principal),
              {{"principal", p.name}, {"for", *principal}});
    return json_response(
        201, json::serialize(json::object{{"principal", *principal},
                                          {"expires_in_ms", operations::kPasskeyEnrolmentTtlMs}}));
  }

  Response remove_passkey(const http::PathParams& params, const Principal& p) {
    auto id = crypto::base64url_decode(params.at("id"));
    if (!id || id->empty())
      return error_response(errc::not_found, "You have no passkey with that id.");
    Status s = d_.storage.transact(
        [&](store::Transaction& txn) { return operations::remove_passkey(txn, p.name, *id); });
    if (!s) return from_error(s.error());
    log_event(spdlog::level::info, "passkey.removed", fmt::format("{} removed a passkey", p.name),
              {{"principal", p.name}, {"passkey", params.at("id")}});
    return list_passkeys(p);
  }

  // With an order service, the order of `op` (as the principal was shown
  // it) as it reads there now (operations::source_order). Nothing for an
  // operation the principal cannot see or that is no longer pending
  // (approve() answers those).
  Result<std::optional<operations::SourcedOrder>> source_order(const Result<pb::Operation>& op) {
    if (!d_.orders || !op || !operations::is(*op, operations::State::pending))
      return std::optional<operations::SourcedOrder>();
    return operations::source_order(d_.orders, op->proposal().order_id(), d_.metrics);
  }

  Response deny(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto reason = string_field(*body, "reason", 500);
    if (!reason) return error_response(errc::bad_request, "reason is required (1-500 characters).");
    const std::string key = params.at("key");
    Status s = d_.storage.transact(
        [&](store::Transaction& txn) { return operations::deny(txn, key, p, *reason); });
    return after_decision(s, key, p);
  }

  Response reconcile(const Request&, const http::PathParams& params, const Principal& p) {
    const std::string& key = params.at("key");
    return after_decision(d_.drainer.reconcile_now(key, p), key, p);
  }

  Response resolve(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto named = string_field(*body, "outcome", 16);
    const auto outcome =
        operations::parse_outcome(named.value_or("")).value_or(operations::Outcome::none);
    auto evidence = string_field(*body, "evidence", 2000);
    if ((outcome != operations::Outcome::succeeded && outcome != operations::Outcome::failed) ||
        !evidence)
      return error_response(errc::bad_request,
                            "outcome (succeeded or failed) and evidence are required.");
    operations::Resolution r;
    r.outcome = outcome;
    r.evidence = *evidence;
    if (body->contains("provider_object_id")) {
      auto id = string_field(*body, "provider_object_id", 255);
      if (!id)
        return error_response(errc::bad_request,
                              "provider_object_id must be a string of 1-255 characters.");
      r.provider_object_id = *id;
    }
    const std::string key = params.at("key");
    Status s = d_.storage.transact(
        [&](store::Transaction& txn) { return operations::resolve(txn, key, p, r); });
    return after_decision(s, key, p);
  }

  // Ledger rows in operation-key order, a page at a time (follow
  // next_cursor), or one operation's row.
  Response ledger(const Request& req, const Principal& p) {
    auto limit = limit_param(req, 1000, 1000);
    if (!limit) return from_error(limit.error());
    auto& reader = d_.storage.reader();
    json::array out;
    json::value next = nullptr;
    if (auto key = req.query_param("operation"); key && !key->empty()) {
      auto row = reader.ledger_entry(std::string(*key));
      if (!row) return from_error(row.error());
      if (*row && p.may_act_for((*row)->owner())) out.push_back(operations::ledger_json(**row));
    } else {
      // Rows of owners the principal may not see neither fill the page nor
      // become its cursor (which would name them): read on past them.
      store::LedgerQuery q{req.query_param("session").value_or(""),
                           req.query_param("owner").value_or(""), "",
                           req.query_param("cursor").value_or(""), *limit};
      for (;;) {
        auto rows = reader.ledger(q);
        if (!rows) return from_error(rows.error());
        for (const auto& l : *rows) {
          if (!p.may_act_for(l.owner())) continue;
          out.push_back(operations::ledger_json(l));
          if (out.size() == *limit) break;
        }
        if (out.size() == *limit) {
          next = out.back().at("operation_key");
          break;
        }
        if (rows->size() < q.limit) break;
        q.after = rows->back().operation_key();
      }
    }
    return ok_json(json::object{{"ledger", out}, {"next_cursor", next}});
  }

  Response audit(const Request& req, const Principal& p) {
    auto& reader = d_.storage.reader();
    json::array rows;
    if (auto key = req.query_param("operation"); key && !key->empty()) {
      // A principal's passkey records are its own, and those of a token
      // that sees every owner; an operation's, of those who may see it.
      Result<std::vector<pb::AuditRecord>> records = std::vector<pb::AuditRecord>();
      if (key->starts_with("passkey:")) {
        if (*key != "passkey:" + p.name && !p.sees_every_owner())
          return error_response(errc::not_found, "No operation with that key.");
        records = reader.audit_of(*key);
      } else {
        auto found = operations::visible_history(reader, *key, p);
        if (!found) return from_error(found.error());
        records = std::move(found->records);
      }
      if (!records) return from_error(records.error());
      for (const auto& r : *records) rows.push_back(operations::audit_json(r));
      return ok_json(json::object{{"audit", rows}, {"next_after", nullptr}});
    }
    auto limit = limit_param(req, 1000, 10000);
    if (!limit) return from_error(limit.error());
    uint64_t after = 0;
    if (auto a = req.query_param("after")) {
      const auto seq = whole_number(*a);
      if (!seq) return error_response(errc::bad_request, "after must be a sequence number.");
      after = static_cast<uint64_t>(*seq);
    }
    auto records = reader.audit(after, *limit);
    if (!records) return from_error(records.error());
    // A record is visible if its operation's owner (or, for a record of
    // something else, such as an order change, a note or a draft, the owner
    // its details name) matches the principal's patterns.
    std::map<std::string, std::optional<bool>> visible_ops;
    for (const auto& r : *records) {
      std::optional<bool> visible;
      if (!r.operation_key().empty()) {
        auto [it, fresh] = visible_ops.try_emplace(r.operation_key());
        if (fresh) {
          auto op = reader.operation(r.operation_key());
          if (!op) return from_error(op.error());
          if (*op) it->second = p.may_act_for((*op)->proposal().owner());
        }
        visible = it->second;
      }
      if (!visible) {
        json::error_code ec;
        auto details = json::parse(r.details_json(), ec);
        const auto* owner =
            !ec && details.is_object() ? details.as_object().if_contains("owner") : nullptr;
        visible = owner && owner->is_string() && p.may_act_for(std::string(owner->as_string()));
      }
      if (*visible) rows.push_back(operations::audit_json(r));
    }
    json::object res{{"audit", rows}, {"next_after", nullptr}};
    if (records->size() == *limit) res["next_after"] = records->back().seq();
    return ok_json(res);
  }

  // The chain spans every owner: a principal whose patterns do not cover
  // them all hears only whether it verifies, not its length, its head or
  // the problem found (which names another owner's record).
  Response verify(const Request& req, const Principal& p) {
    std::optional<operations::WitnessedHead> expect;
    if (auto head = req.query_param("expect_head")) {
      auto parsed = operations::parse_head(*head);
      if (!parsed) return from_error(parsed.error());
      expect = *parsed;
    }
    auto report = operations::verify_audit(d_.storage, expect);
    if (!report) return from_error(report.error());
    if (!p.sees_every_owner())
      return ok_json(json::object{{"ok", report->chain.ok}, {"scope", "owners"}});
    return ok_json(operations::to_json(*report));
  }

  Response put_order(const Request& req, const http::PathParams& params, const Principal& p) {
    if (d_.orders)
      return error_response(errc::conflict,
                            "Orders come from the order service (orders.source = \"http\"); "
                            "change them there.");
    auto order = operations::parse_order(req.body);
    if (!order) return from_error(order.error());
    if (order->order_id() != params.at("order_id"))
      return error_response(errc::bad_request, "The body's order_id must match the path.");
    if (!p.may_act_for(order->owner()))
      return error_response(errc::forbidden, "This token may not act for that owner.");
    Status s = d_.storage.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(auto stored, txn.order(order->order_id()));
      if (stored && !p.may_act_for(stored->owner()))
        return make_error(errc::forbidden, "This token may not act for the order's owner.");
      return operations::upsert_order(txn, *order, p.name);
    });
    if (!s) return from_error(s.error());
    return get_order(order->order_id(), p);
  }

  // An online copy of the store, written by the daemon into `dir` on its
  // own host (admin only: the copy holds every owner's records).
  Response backup(const Request& req) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto dir = string_field(*body, "dir", 4096);
    if (!dir) return error_response(errc::bad_request, "dir (an absolute path) is required.");
    auto info = d_.storage.backup_to(*dir);
    if (!info) {
      if (info.error().is(errc::storage_unavailable)) return from_error(info.error());
      return error_response(info.error());
    }
    log_event(spdlog::level::info, "backup.created", "backup written to " + info->dir,
              {{"dir", info->dir}, {"audit_seq", std::to_string(info->audit_head.seq)}});
    return ok_json(json::object{
        {"dir", info->dir},
        {"created_at_ms", info->created_at_ms},
        {"format_version", info->format_version},
        {"audit_head", json::object{{"seq", info->audit_head.seq},
                                    {"hash", crypto::to_hex(info->audit_head.hash)}}}});
  }

  // The notification endpoints and how they stand. URLs are shown as scheme
  // and host only: a Slack webhook URL is itself a secret.
  Response notify_endpoints() {
    if (!d_.notify) return ok_json(json::object{{"endpoints", json::array{}}});
    json::array out;
    for (const auto& e : d_.notify->get()->endpoints) {
      auto state = d_.storage.reader().endpoint_state(e.name);
      if (!state) return from_error(state.error());
      const auto scheme_end = e.url.find("://");
      const auto host_end = e.url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
      json::array events;
      for (const auto& t : e.events) events.push_back(json::value(t));
      out.push_back(json::object{
          {"name", e.name},
          {"url", e.url.substr(0, host_end)},
          {"format", e.format == outbox::NotifyEndpoint::Format::slack ? "slack" : "standard"},
          {"events", events},
          {"state", state->disabled()  ? "disabled"
                    : state->failing() ? "failing"
                                       : "ok"},
          {"disabled_at_ms", state->disabled_at_ms()},
          {"failing_since_ms", state->failing_since_ms()},
          {"last_error", state->last_error()},
          {"last_success_ms", state->last_success_ms()},
          {"backlog", state->backlog()}});
    }
    // Endpoints this node does not know whose deliveries wait: held.
    json::array held;
    auto states = d_.storage.reader().endpoint_states();
    if (!states) return from_error(states.error());
    for (const auto& st : *states) {
      bool known = false;
      for (const auto& e : d_.notify->get()->endpoints) known = known || e.name == st.name();
      if (!known && st.backlog() > 0)
        held.push_back(json::object{{"name", st.name()}, {"backlog", st.backlog()}});
    }
    return ok_json(json::object{{"endpoints", out}, {"held", held}});
  }

  // Held deliveries of an endpoint this node does not know: replayed to a
  // configured endpoint ({"to": NAME}) or discarded (no "to").
  Response notify_release_held(const Request& req, const std::string& name, const Principal& who) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    std::string to;
    if (auto* t = body->if_contains("to")) {
      if (!t->is_string() || t->as_string().empty())
        return error_response(errc::bad_request, "to must name a configured endpoint.");
      to = std::string(t->as_string());
    }
    if (!d_.notifier) return error_response(errc::not_found, "No notification endpoints.");
    auto moved = d_.notifier->release_held(name, to, who.name);
    if (!moved) return from_error(moved.error());
    d_.wake_worker();
    return ok_json(json::object{
        {"endpoint", name}, {to.empty() ? "discarded" : "replayed", *moved}, {"to", to}});
  }

  Response notify_replay(const Request& req, const std::string& name, const Principal& who) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto* since = body->if_contains("since_ms");
    if (!since || !since->is_int64() || since->as_int64() < 0)
      return error_response(errc::bad_request, "since_ms (Unix milliseconds) is required.");
    if (!d_.notifier) return error_response(errc::not_found, "No notification endpoints.");
    auto queued = d_.notifier->replay(name, since->as_int64(), who.name);
    if (!queued) return from_error(queued.error());
    d_.wake_worker();
    return ok_json(json::object{{"endpoint", name}, {"queued", *queued}});
  }

  Response notify_enable(const std::string& name) {
    if (!d_.notifier) return error_response(errc::not_found, "No notification endpoints.");
    bool known = false;
    for (const auto& e : d_.notify->get()->endpoints) known = known || e.name == name;
    if (!known) return error_response(errc::not_found, "No notification endpoint by that name.");
    if (Status s = d_.notifier->enable(name); !s) return from_error(s.error());
    return notify_endpoints();
  }

  // Agent tokens: minted for an owner the caller may act for, shown once.
  Response create_agent_token(const Request& req, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto owner = string_field(*body, "owner", 64);
    if (!owner) return error_response(errc::bad_request, "owner is required.");
    if (!p.may_act_for(*owner))
      return error_response(errc::forbidden, "This token may not act for that owner.");
    std::string label;
    if (body->contains("label")) {
      auto l = string_field(*body, "label", 200);
      if (!l) return error_response(errc::bad_request, "label is a string of 1-200 characters.");
      label = *l;
    }
    int64_t ttl_s = 0;
    if (auto* t = body->if_contains("ttl_s")) {
      if (!t->is_int64() || t->as_int64() < 1 || t->as_int64() > 10LL * 365 * 86400)
        return error_response(errc::bad_request, "ttl_s is a number of seconds, at most 10 years.");
      ttl_s = t->as_int64();
    }
    std::optional<operations::MintedToken> minted;
    Status s = d_.storage.transact([&](store::Transaction& txn) -> Status {
      OPGATE_ASSIGN_OR_RETURN(minted,
                              operations::mint_agent_token(txn, *owner, label, ttl_s, p.name));
      return Status::Ok();
    });
    if (!s) return from_error(s.error());
    log_event(
        spdlog::level::info, "agent_token.minted",
        fmt::format("agent token {} minted for {} by {}", minted->record.id(), *owner, p.name),
        {{"principal", p.name}, {"owner", *owner}});
    json::object out = operations::agent_token_json(minted->record, d_.clock.now_ms());
    out["token"] = minted->token;
    const std::string base = d_.mcp_url ? d_.mcp_url() : "";
    out["mcp_url"] =
        base.empty() ? json::value(nullptr) : json::value(base + "/mcp/" + minted->token);
    out["expires_at"] = minted->record.expires_at_ms() == 0
                            ? json::value(nullptr)
                            : json::value(minted->record.expires_at_ms() / 1000);
    return json_response(201, json::serialize(out));
  }

  // Tokens by id, a page at a time (follow next_cursor).
  Response list_agent_tokens(const Request& req, const Principal& p) {
    auto limit = limit_param(req, 100, 1000);
    if (!limit) return from_error(limit.error());
    auto page = operations::agent_tokens(
        d_.storage.reader(), std::string(req.query_param("cursor").value_or("")), *limit,
        [&](const pb::AgentToken& t) { return p.may_act_for(t.owner()); });
    if (!page) return from_error(page.error());
    json::array out;
    for (const auto& t : page->tokens)
      out.push_back(operations::agent_token_json(t, d_.clock.now_ms()));
    return ok_json(
        json::object{{"agent_tokens", std::move(out)},
                     {"next_cursor", page->next_after.empty() ? json::value(nullptr)
                                                              : json::value(page->next_after)}});
  }

  Response revoke_agent_token(const std::string& id, const Principal& p) {
    std::optional<pb::AgentToken> revoked;
    Status s = d_.storage.transact([&](store::Transaction& txn) -> Status {
      // Outside the caller's owners a token does not exist (no oracle).
      OPGATE_ASSIGN_OR_RETURN(
          revoked, operations::revoke_agent_token(txn, id, p.name, [&](const pb::AgentToken& t) {
            return p.may_act_for(t.owner());
          }));
      return Status::Ok();
    });
    if (!s) return from_error(s.error());
    log_event(spdlog::level::info, "agent_token.revoked",
              fmt::format("agent token {} revoked by {}", id, p.name),
              {{"principal", p.name}, {"owner", revoked->owner()}});
    return ok_json(operations::agent_token_json(*revoked, d_.clock.now_ms()));
  }

  Response get_order(const std::string& id, const Principal& p) {
    auto order = d_.storage.reader().order(id);
    if (!order) return from_error(order.error());
    if (!*order || !p.may_act_for((*order)->owner()))
      return error_response(errc::not_found, "No order with that id.");
    return json_response(200, operations::order_to_json(**order));
  }

  ApiDeps& d_;
  // The reports built last, which the charts that accompany one (the same
  // principal, the same window, within kChartsReuseMs) are drawn from: a
  // page of figures and charts reads the history once, and its charts show
  // its figures.
  struct BuiltReport {
    std::string principal;
    int64_t from_ms = 0;
    int64_t built_at_ms = 0;
    json::object report;
  };
  static constexpr int64_t kChartsReuseMs = 10'000;
  std::atomic<bool> exporting_{false};  // an evidence pack is being built
  static constexpr size_t kReportsKept = 16;
  Mutex reports_mu_;
  std::deque<BuiltReport> reports_ GUARDED_BY(reports_mu_);
};

}  // namespace

http::Router make_router(ApiDeps& deps) {
  auto api = std::make_shared<Api>(deps);
  http::Router r;
  using P = http::PathParams;
  namespace scope = operations::scope;
  r.add("GET", "/healthz",
        [](const Request&, const P&) { return json_response(200, R"({"ok":true})"); });
  r.add("GET", "/readyz", [api](const Request&, const P&) {
    if (!api->d_.ready) return error_response(errc::not_ready, "Starting or draining.");
    if (Status s = api->d_.storage.check_writable(); !s)
      return error_response(errc::storage_unavailable, "The store cannot be written.");
    return json_response(200, R"({"ready":true})");
  });
  r.add("GET", "/metrics", [api](const Request&, const P&) {
    Response res;
    res.headers["Content-Type"] = "text/plain; version=0.0.4";
    res.body = api->d_.metrics.render();
    return res;
  });
  auto route = [&](const char* method, const char* path, std::string_view scope, Handler handler) {
    r.add(method, path, api->guarded(scope, handler, false));
    if (deps.console_auth)
      r.add(method, std::string(kConsoleApiPrefix) + path, api->guarded(scope, handler, true));
  };
  route("GET", "/v1/me", "", [api](auto&, auto&, auto& who) { return api->me(who); });
  route("POST", "/v1/sessions/{id}/bind", scope::bind,
        [api](auto& q, auto& p, auto& who) { return api->bind(q, p, who); });
  route("POST", "/v1/sessions/{id}/recover", scope::bind,
        [api](auto& q, auto& p, auto& who) { return api->recover(q, p, who); });
  route("GET", "/v1/sessions/{id}", scope::read,
        [api](auto&, auto& p, auto& who) { return api->session_view(p.at("id"), who); });
  route("GET", "/v1/sessions/{id}/transcript", scope::read,
        [api](auto& q, auto& p, auto& who) { return api->transcript(q, p, who); });
  route("GET", "/v1/operations", scope::read,
        [api](auto& q, auto& p, auto& who) { return api->list_operations(q, p, who); });
  route("GET", "/v1/operations/{key}", scope::read,
        [api](auto&, auto& p, auto& who) { return api->get_operation(p.at("key"), who); });
  route("GET", "/v1/operations/{key}/evidence", scope::read,
        [api](auto&, auto& p, auto& who) { return api->evidence(p.at("key"), who); });
  route("GET", "/v1/operations/{key}/context", scope::read,
        [api](auto&, auto& p, auto& who) { return api->context(p.at("key"), who); });
  route("POST", "/v1/operations/{key}/step-up", scope::approve,
        [api](auto& q, auto& p, auto& who) { return api->step_up_challenge(q, p, who); });
  route("GET", "/v1/passkeys", scope::approve,
        [api](auto&, auto&, auto& who) { return api->list_passkeys(who); });
  route("POST", "/v1/passkeys/enrolments", scope::admin,
        [api](auto& q, auto&, auto& who) { return api->allow_enrolment(q, who); });
  route("POST", "/v1/passkeys/challenge", scope::approve,
        [api](auto& q, auto&, auto& who) { return api->passkey_challenge(q, who); });
  route("POST", "/v1/passkeys", scope::approve,
        [api](auto& q, auto&, auto& who) { return api->add_passkey(q, who); });
  route("DELETE", "/v1/passkeys/{id}", scope::approve,
        [api](auto&, auto& p, auto& who) { return api->remove_passkey(p, who); });
  route("GET", "/v1/policy", scope::read, [api](auto&, auto&, auto&) {
    return ok_json(operations::policy_json(*api->d_.policy.get()));
  });
  route("GET", "/v1/report", scope::read,
        [api](auto& q, auto&, auto& who) { return api->report(q, who); });
  route("GET", "/v1/report/charts/{name}", scope::read,
        [api](auto& q, auto& p, auto& who) { return api->report_chart(q, p, who); });
  route("GET", "/v1/drafts", scope::read,
        [api](auto& q, auto&, auto& who) { return api->list_drafts(q, who); });
  route("POST", "/v1/approvals", scope::approve,
        [api](auto& q, auto&, auto& who) { return api->approve_many(q, who); });
  route("POST", "/v1/operations/{key}/approve", scope::approve,
        [api](auto& q, auto& p, auto& who) { return api->approve(q, p, who); });
  route("POST", "/v1/operations/{key}/deny", scope::approve,
        [api](auto& q, auto& p, auto& who) { return api->deny(q, p, who); });
  route("POST", "/v1/operations/{key}/reconcile", scope::resolve,
        [api](auto& q, auto& p, auto& who) { return api->reconcile(q, p, who); });
  route("POST", "/v1/operations/{key}/resolve", scope::resolve,
        [api](auto& q, auto& p, auto& who) { return api->resolve(q, p, who); });
  route("GET", "/v1/ledger", scope::read,
        [api](auto& q, auto&, auto& who) { return api->ledger(q, who); });
  route("GET", "/v1/audit", scope::read,
        [api](auto& q, auto&, auto& who) { return api->audit(q, who); });
  route("GET", "/v1/audit/verify", scope::read,
        [api](auto& q, auto&, auto& p) { return api->verify(q, p); });
  route("PUT", "/v1/orders/{order_id}", scope::admin,
        [api](auto& q, auto& p, auto& who) { return api->put_order(q, p, who); });
  route("GET", "/v1/notify/endpoints", scope::admin,
        [api](auto&, auto&, auto&) { return api->notify_endpoints(); });
  route("POST", "/v1/notify/endpoints/{name}/replay", scope::admin,
        [api](auto& q, auto& p, auto& who) { return api->notify_replay(q, p.at("name"), who); });
  route("POST", "/v1/notify/endpoints/{name}/enable", scope::admin,
        [api](auto&, auto& p, auto&) { return api->notify_enable(p.at("name")); });
  route("POST", "/v1/notify/held/{name}/release", scope::admin, [api](auto& q, auto& p, auto& who) {
    return api->notify_release_held(q, p.at("name"), who);
  });
  route("POST", "/v1/agent-tokens", scope::bind,
        [api](auto& q, auto&, auto& who) { return api->create_agent_token(q, who); });
  route("GET", "/v1/agent-tokens", scope::bind,
        [api](auto& q, auto&, auto& who) { return api->list_agent_tokens(q, who); });
  route("DELETE", "/v1/agent-tokens/{id}", scope::bind,
        [api](auto&, auto& p, auto& who) { return api->revoke_agent_token(p.at("id"), who); });
  route("POST", "/v1/backups", scope::admin,
        [api](auto& q, auto&, auto&) { return api->backup(q); });
  route("GET", "/v1/orders/{order_id}", scope::admin,
        [api](auto&, auto& p, auto& who) { return api->get_order(p.at("order_id"), who); });
  return r;
}

}  // namespace opgate::operator_api
