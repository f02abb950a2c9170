#include "operator/api.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <set>

#include "common/crypto.h"
#include "operations/proposal.h"
#include "operations/repository.h"
#include "worker/orders.h"
#include "worker/policy.h"
#include "worker/tools.h"

namespace opgate::operator_api {

namespace json = boost::json;
using http::error_response;
using http::json_response;
using http::Request;
using http::Response;
using store::Cf;

namespace {

json::object operation_json(const pb::Operation& op, bool attention) {
  const auto& p = op.proposal();
  json::array approvals;
  for (const auto& a : op.approvals())
    approvals.push_back(json::object{{"principal", a.principal()}, {"at_ms", a.at_ms()}});
  json::array calls;
  for (const auto& c : op.calls())
    calls.push_back(json::object{
        {"session_id", c.session_id()}, {"turn_id", c.turn_id()}, {"call_id", c.call_id()}});
  json::object o{{"key", op.key()},
                 {"state", op.state()},
                 {"outcome", nullptr},
                 {"owner", p.owner()},
                 {"order_id", p.order_id()},
                 {"kind", p.kind()},
                 {"amount_minor", p.amount_minor()},
                 {"currency", p.currency()},
                 {"fingerprint", op.fingerprint()},
                 {"session_id", op.session_id()},
                 {"call_id", op.call_id()},
                 {"proposal", json::object{{"payment_intent", p.payment_intent()},
                                           {"customer", p.customer()},
                                           {"payment_method", p.payment_method()},
                                           {"reason", p.reason()},
                                           {"effect", p.effect()},
                                           {"tier", p.tier()}}},
                 {"approvals", approvals},
                 {"calls", calls},
                 {"decided_by", op.decided_by()},
                 {"decision_reason", op.decision_reason()},
                 {"attempts", op.attempts()},
                 {"last_error", op.last_error()},
                 {"provider_object_id", op.provider_object_id()},
                 {"idempotency_key", op.idempotency_key()},
                 {"created_at_ms", op.created_at_ms()},
                 {"updated_at_ms", op.updated_at_ms()},
                 {"expires_at_ms", op.expires_at_ms()}};
  if (!op.outcome().empty()) o["outcome"] = op.outcome();
  if (op.state() == "outcome_unknown") o["unknown_since_ms"] = op.unknown_since_ms();
  o["needs_attention"] = attention;
  return o;
}

json::object audit_json(const pb::AuditRecord& r) {
  json::error_code ec;
  json::value details = json::parse(r.details_json(), ec);
  if (ec) details = r.details_json();
  return json::object{{"seq", r.seq()},
                      {"at_ms", r.at_ms()},
                      {"principal", r.principal()},
                      {"operation_key", r.operation_key()},
                      {"action", r.action()},
                      {"from", r.from_state()},
                      {"to", r.to_state()},
                      {"fingerprint", r.fingerprint()},
                      {"details", details},
                      {"hash", crypto::to_hex(r.hash())}};
}

json::object ledger_json(const pb::LedgerEntry& l) {
  return json::object{{"operation_key", l.operation_key()},
                      {"session_id", l.session_id()},
                      {"owner", l.owner()},
                      {"order_id", l.order_id()},
                      {"kind", l.kind()},
                      {"amount_minor", l.amount_minor()},
                      {"currency", l.currency()},
                      {"provider_object_id", l.provider_object_id()},
                      {"at_ms", l.at_ms()},
                      {"recorded_by", l.recorded_by()}};
}

json::object call_json(const pb::ToolCall& c) {
  json::object o{{"session_id", c.session_id()},
                 {"turn_id", c.turn_id()},
                 {"call_id", c.call_id()},
                 {"name", c.name()},
                 {"arguments", c.arguments_json()},
                 {"operation_key", c.operation_key()},
                 {"result", nullptr},
                 {"delivery", c.delivery()},
                 {"delivery_error", c.delivery_error()}};
  if (c.result_saved())
    o["result"] = json::object{{"success", c.result().success()},
                               {"output", c.result().output()},
                               {"error", c.result().error()}};
  return o;
}

Response storage_failure(const Error& e) {
  auto r = error_response(503, "storage_unavailable", "The store is not available; retry later.");
  r.headers["Retry-After"] = "5";
  return r;
}

Response from_error(const Error& e) {
  int status = 400;
  if (e.code == "not_found")
    status = 404;
  else if (e.code == "forbidden" || e.code == "self_approval")
    status = 403;
  else if (e.code == "proposal_mismatch" || e.code == "invalid_state" || e.code == "conflict" ||
           e.code == "order_changed" || e.code == "invalid_transition")
    status = 409;
  else if (e.code == "storage_error" || e.code == "corrupt_record")
    return storage_failure(e);
  else if (e.code == "agents_unavailable")
    status = 502;
  return error_response(status, e.code, e.message);
}

Result<json::object> body_object(const Request& req) {
  json::error_code ec;
  auto v = json::parse(req.body, ec);
  if (ec || !v.is_object()) return make_error("bad_request", "The body must be a JSON object.");
  return v.as_object();
}

std::optional<std::string> string_field(const json::object& o, const char* k, size_t max = 500) {
  auto* p = o.if_contains(k);
  if (!p || !p->is_string() || p->as_string().empty() || p->as_string().size() > max)
    return std::nullopt;
  return std::string(p->as_string());
}

// Pages of saved items are fetched at this size; inspect prints each page.
constexpr int kTranscriptPageSize = 20;

class Api {
 public:
  explicit Api(ApiDeps& d) : d_(d) {}

  // Wraps a handler with authentication and a scope check.
  http::RouteHandler guarded(
      std::string scope,
      std::function<Response(const Request&, const http::PathParams&, const Principal&)> fn) {
    return [this, scope, fn](const Request& req, const http::PathParams& params) {
      const Principal* p = authenticate(d_.principals, req.header("Authorization"));
      if (!p) {
        auto r = error_response(401, "unauthorized", "A valid bearer token is required.");
        r.headers["WWW-Authenticate"] = "Bearer";
        return r;
      }
      if (!p->has_scope(scope))
        return error_response(403, "forbidden",
                              fmt::format("This token lacks the {} scope.", scope));
      return fn(req, params, *p);
    };
  }

  Response bind(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto owner = string_field(*body, "owner", 64);
    if (!owner) return error_response(400, "bad_request", "owner is required.");
    if (!p.may_act_for(*owner))
      return error_response(403, "forbidden", "This token may not act for that owner.");
    Status s = d_.sessions.bind(params.at("id"), *owner, p.name);
    if (!s) return from_error(s.error());
    d_.wake_worker();
    return json_response(
        200, json::serialize(json::object{{"session_id", params.at("id")}, {"owner", *owner}}));
  }

  Response recover(const Request&, const http::PathParams& params, const Principal&) {
    Status s = d_.sessions.sync(params.at("id"));
    if (!s) return from_error(s.error());
    d_.wake_worker();
    return session(params.at("id"));
  }

  Response session(const std::string& id) {
    auto& store = d_.journal.store();
    auto sess = store.get_message<pb::Session>(Cf::sessions, id);
    if (!sess) return from_error(sess.error());
    if (!sess->has_value()) return error_response(404, "not_found", "No session with that id.");
    json::array calls, operations;
    std::set<std::string> op_keys;
    Status s = store.scan(Cf::calls, id + "/", [&](std::string_view, std::string_view v) {
      pb::ToolCall c;
      if (c.ParseFromString(std::string(v))) {
        calls.push_back(call_json(c));
        if (!c.operation_key().empty()) op_keys.insert(c.operation_key());
      }
      return true;
    });
    if (!s) return from_error(s.error());
    for (const auto& k : op_keys) {
      auto op = operations::load(store, k);
      if (op && op->has_value()) operations.push_back(operation_json(**op, attention(**op)));
    }
    return json_response(
        200, json::serialize(json::object{{"session_id", id},
                                          {"owner", (*sess)->owner()},
                                          {"bound_by", (*sess)->bound_by()},
                                          {"last_sync_ms", (*sess)->last_sync_ms()},
                                          {"last_sync_error", (*sess)->last_sync_error()},
                                          {"calls", calls},
                                          {"operations", operations},
                                          {"ledger", ledger_rows(id, "")}}));
  }

  json::array ledger_rows(const std::string& session, const std::string& owner) {
    json::array rows;
    Status s = d_.journal.store().scan(Cf::ledger, "", [&](std::string_view, std::string_view v) {
      pb::LedgerEntry l;
      if (l.ParseFromString(std::string(v)) && (session.empty() || l.session_id() == session) &&
          (owner.empty() || l.owner() == owner))
        rows.push_back(ledger_json(l));
      return true;
    });
    (void)s;
    return rows;
  }

  // Root turn statuses and every page of saved items, from the platform.
  Response transcript(const Request&, const http::PathParams& params, const Principal&) {
    const auto& id = params.at("id");
    auto turns = d_.agents.get_turns(id);
    if (!turns) return error_response(502, "agents_unavailable", turns.error().message);
    json::array pages;
    std::string after;
    for (int i = 0; i < 1000; ++i) {
      auto page = d_.agents.get_items(id, after, kTranscriptPageSize);
      if (!page) return error_response(502, "agents_unavailable", page.error().message);
      json::error_code ec;
      pages.push_back(json::parse(page->json, ec));
      if (!page->has_more || page->last_id.empty()) break;
      after = page->last_id;
    }
    json::error_code ec;
    return json_response(200, json::serialize(json::object{{"turns", json::parse(*turns, ec)},
                                                           {"item_pages", pages}}));
  }

  Response list_operations(const Request& req, const http::PathParams&, const Principal&) {
    auto state = req.query_param("state").value_or("");
    auto owner = req.query_param("owner").value_or("");
    auto cursor = req.query_param("cursor").value_or("");
    size_t limit = 100;
    if (auto l = req.query_param("limit")) {
      try {
        limit = std::clamp<size_t>(std::stoul(*l), 1, 1000);
      } catch (...) {
        return error_response(400, "bad_request", "limit must be a number from 1 to 1000.");
      }
    }
    auto& store = d_.journal.store();
    json::array out;
    std::string next;
    // Adds an operation that matches; false once one past the page is found.
    auto take = [&](const pb::Operation& op) {
      if (!owner.empty() && op.proposal().owner() != owner) return true;
      if (out.size() == limit) {
        next = out.back().as_object().at("key").as_string().c_str();
        return false;
      }
      out.push_back(operation_json(op, attention(op)));
      return true;
    };
    if (!state.empty()) {
      auto st = operations::parse_state(state);
      if (!st)
        return error_response(400, "bad_request",
                              "state must be pending, approved, executing, outcome_unknown or "
                              "settled.");
      auto keys = operations::keys_in_state(store, *st, SIZE_MAX, cursor);
      if (!keys) return from_error(keys.error());
      for (const auto& k : *keys) {
        auto op = operations::load(store, k);
        if (!op || !op->has_value()) continue;
        if (!take(**op)) break;
      }
    } else {
      // The records themselves, read once, until the page is full.
      std::string start = cursor.empty() ? "" : operations::record_key(cursor) + '\0';
      Status s = store.scan(
          Cf::operations, "o/",
          [&](std::string_view, std::string_view v) {
            pb::Operation op;
            if (!op.ParseFromArray(v.data(), static_cast<int>(v.size()))) return true;
            return take(op);
          },
          start);
      if (!s) return from_error(s.error());
    }
    json::object res{{"operations", out}, {"next_cursor", nullptr}};
    if (!next.empty()) res["next_cursor"] = next;
    return json_response(200, json::serialize(res));
  }

  Response get_operation(const std::string& key) {
    auto op = operations::load(d_.journal.store(), key);
    if (!op) return from_error(op.error());
    if (!op->has_value()) return error_response(404, "not_found", "No operation with that key.");
    auto o = operation_json(**op, attention(**op));
    o["history"] = audit_rows(key);
    return json_response(200, json::serialize(o));
  }

  json::array audit_rows(const std::string& key) {
    json::array rows;
    if (!key.empty()) {
      auto records = store::audit_records_for(d_.journal.store(), key);
      if (records)
        for (const auto& r : *records) rows.push_back(audit_json(r));
      return rows;
    }
    Status s = d_.journal.store().scan(Cf::audit, "", [&](std::string_view, std::string_view v) {
      pb::AuditRecord r;
      if (r.ParseFromString(std::string(v))) rows.push_back(audit_json(r));
      return true;
    });
    (void)s;
    return rows;
  }

  Response approve(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto* amount = body->if_contains("amount_minor");
    auto currency = string_field(*body, "currency", 8);
    auto fp = string_field(*body, "fingerprint", 128);
    if (!amount || !amount->is_int64() || !currency || !fp)
      return error_response(400, "bad_request",
                            "amount_minor (integer), currency and fingerprint are required: "
                            "approve exactly what the operation shows.");
    ApprovalRequest request{amount->as_int64(), *currency, *fp};
    const std::string key = params.at("key");
    std::optional<Error> refusal;
    Status s = d_.journal.run([&](store::Txn& txn) -> Status {
      auto loaded = operations::load(txn.store(), key);
      if (!loaded) return loaded.error();
      if (!loaded->has_value()) return make_error("not_found", "No operation with that key.");
      auto& op = **loaded;
      const auto& pol = d_.sessions.policy().two_person_threshold_minor;
      auto threshold = pol.find(op.proposal().currency());
      auto step = check_approval(
          op, p, request,
          threshold == pol.end() ? std::nullopt : std::optional<int64_t>(threshold->second));
      if (!step) return step.error();
      if (*step == ApprovalStep::repeat) return Status::Ok();  // same answer, nothing written
      // The order is read again: a change since the proposal rejects it.
      auto order = txn.store().get_message<pb::Order>(Cf::orders, op.proposal().order_id());
      if (!order) return order.error();
      if (!order->has_value() || worker::order_changed(op.proposal(), **order)) {
        op.set_decided_by(p.name);
        op.set_decision_reason("The order changed while the proposal awaited approval.");
        refusal = make_error("order_changed",
                             "The order changed since the proposal; the operation is rejected "
                             "and the session is told.");
        return d_.outbox.settle(txn, op, operations::Event::reject, p.name,
                                R"({"reason":"order changed since the proposal"})");
      }
      auto* approval = op.add_approvals();
      approval->set_principal(p.name);
      approval->set_at_ms(txn.now_ms());
      const std::string details = json::serialize(
          json::object{{"amount_minor", request.amount_minor}, {"currency", request.currency}});
      if (*step == ApprovalStep::recorded) {
        operations::save_with_audit(txn, op, "approval_recorded", p.name, details);
        return Status::Ok();
      }
      if (Status a = operations::apply(txn, op, operations::Event::approve, p.name, details); !a)
        return a;
      pb::OutboxItem item;
      item.set_kind(std::string(outbox::kExecute));
      item.set_operation_key(key);
      d_.outbox.enqueue(txn, std::move(item));
      return Status::Ok();
    });
    if (!s) {
      if (s.error().code == "invalid_state") return settled_conflict(key, s.error());
      return from_error(s.error());
    }
    d_.wake_worker();
    if (refusal) return from_error(*refusal);
    return get_operation(key);
  }

  // 409 with the operation's current state, so the caller sees what happened.
  Response settled_conflict(const std::string& key, const Error& e) {
    auto op = operations::load(d_.journal.store(), key);
    json::object body{{"error", json::object{{"code", e.code}, {"message", e.message}}}};
    if (op && op->has_value()) body["operation"] = operation_json(**op, attention(**op));
    return json_response(409, json::serialize(body));
  }

  Response deny(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto reason = string_field(*body, "reason", 500);
    if (!reason)
      return error_response(400, "bad_request", "reason is required (1-500 characters).");
    const std::string key = params.at("key");
    Status s = d_.journal.run([&](store::Txn& txn) -> Status {
      auto loaded = operations::load(txn.store(), key);
      if (!loaded) return loaded.error();
      if (!loaded->has_value()) return make_error("not_found", "No operation with that key.");
      auto& op = **loaded;
      if (!p.may_act_for(op.proposal().owner()))
        return make_error("forbidden", "This token may not act for the operation's owner.");
      if (op.outcome() == "denied" && op.decided_by() == p.name) return Status::Ok();
      if (op.state() != "pending")
        return make_error("invalid_state", "Only pending operations can be denied.");
      op.set_decided_by(p.name);
      op.set_decision_reason(*reason);
      return d_.outbox.settle(txn, op, operations::Event::deny, p.name,
                              json::serialize(json::object{{"reason", *reason}}));
    });
    if (!s) {
      if (s.error().code == "invalid_state") return settled_conflict(key, s.error());
      return from_error(s.error());
    }
    d_.wake_worker();
    return get_operation(key);
  }

  Response reconcile(const Request&, const http::PathParams& params, const Principal&) {
    Status s = d_.drainer.reconcile_now(params.at("key"));
    if (!s) {
      if (s.error().code == "invalid_state") return settled_conflict(params.at("key"), s.error());
      return from_error(s.error());
    }
    d_.wake_worker();
    return get_operation(params.at("key"));
  }

  Response resolve(const Request& req, const http::PathParams& params, const Principal& p) {
    auto body = body_object(req);
    if (!body) return from_error(body.error());
    auto outcome = string_field(*body, "outcome", 16);
    auto evidence = string_field(*body, "evidence", 2000);
    if (!outcome || (*outcome != "succeeded" && *outcome != "failed") || !evidence)
      return error_response(400, "bad_request",
                            "outcome (succeeded or failed) and evidence are required.");
    const std::string key = params.at("key");
    Status s = d_.journal.run([&](store::Txn& txn) -> Status {
      auto loaded = operations::load(txn.store(), key);
      if (!loaded) return loaded.error();
      if (!loaded->has_value()) return make_error("not_found", "No operation with that key.");
      auto& op = **loaded;
      if (op.state() != "outcome_unknown")
        return make_error("invalid_state", "Only operations in outcome_unknown can be resolved.");
      op.set_decided_by(p.name);
      op.set_decision_reason(*evidence);
      const bool ok = *outcome == "succeeded";
      return d_.outbox.settle(
          txn, op, ok ? operations::Event::resolve_succeeded : operations::Event::resolve_failed,
          p.name, json::serialize(json::object{{"evidence", *evidence}}));
    });
    if (!s) {
      if (s.error().code == "invalid_state") return settled_conflict(key, s.error());
      return from_error(s.error());
    }
    d_.wake_worker();
    return get_operation(key);
  }

  Response put_order(const Request& req, const http::PathParams& params, const Principal&) {
    auto order = worker::parse_order(req.body);
    if (!order) return from_error(order.error());
    if (order->order_id() != params.at("order_id"))
      return error_response(400, "bad_request", "The body's order_id must match the path.");
    Status s = d_.journal.run([&](store::Txn& txn) -> Status {
      order->set_updated_at_ms(txn.now_ms());
      txn.batch().put(Cf::orders, order->order_id(), *order);
      return Status::Ok();
    });
    if (!s) return from_error(s.error());
    return json_response(200, worker::order_to_json(*order));
  }

  Response get_order(const std::string& id) {
    auto order = d_.journal.store().get_message<pb::Order>(Cf::orders, id);
    if (!order) return from_error(order.error());
    if (!order->has_value()) return error_response(404, "not_found", "No order with that id.");
    return json_response(200, worker::order_to_json(**order));
  }

  Response verify() {
    auto v = store::verify_audit(d_.journal.store());
    if (!v) return from_error(v.error());
    json::object o{{"ok", v->ok}, {"records", v->records}};
    if (!v->ok) {
      o["first_bad_seq"] = v->first_bad_seq;
      o["problem"] = v->problem;
    }
    return json_response(200, json::serialize(o));
  }

  bool attention(const pb::Operation& op) const {
    return outbox::needs_attention(op, d_.journal.clock().now_ms(), d_.attention);
  }

  ApiDeps& d_;
};

}  // namespace

http::Router make_router(ApiDeps& deps) {
  auto api = std::make_shared<Api>(deps);
  http::Router r;
  using P = http::PathParams;
  r.add("GET", "/healthz",
        [](const Request&, const P&) { return json_response(200, R"({"ok":true})"); });
  r.add("GET", "/readyz", [api](const Request&, const P&) {
    return api->d_.ready ? json_response(200, R"({"ready":true})")
                         : error_response(503, "not_ready", "Starting or draining.");
  });
  r.add("GET", "/metrics", [api](const Request&, const P&) {
    Response res;
    res.headers["Content-Type"] = "text/plain; version=0.0.4";
    res.body = api->d_.metrics.render();
    return res;
  });
  r.add("POST", "/v1/sessions/{id}/bind",
        api->guarded("sessions:bind",
                     [api](auto& q, auto& p, auto& who) { return api->bind(q, p, who); }));
  r.add("POST", "/v1/sessions/{id}/recover",
        api->guarded("sessions:bind",
                     [api](auto& q, auto& p, auto& who) { return api->recover(q, p, who); }));
  r.add("GET", "/v1/sessions/{id}", api->guarded("operations:read", [api](auto&, auto& p, auto&) {
    return api->session(p.at("id"));
  }));
  r.add("GET", "/v1/sessions/{id}/transcript",
        api->guarded("operations:read",
                     [api](auto& q, auto& p, auto& who) { return api->transcript(q, p, who); }));
  r.add("GET", "/v1/operations",
        api->guarded("operations:read", [api](auto& q, auto& p, auto& who) {
          return api->list_operations(q, p, who);
        }));
  r.add("GET", "/v1/operations/{key}",
        api->guarded("operations:read",
                     [api](auto&, auto& p, auto&) { return api->get_operation(p.at("key")); }));
  r.add("POST", "/v1/operations/{key}/approve",
        api->guarded("operations:approve",
                     [api](auto& q, auto& p, auto& who) { return api->approve(q, p, who); }));
  r.add("POST", "/v1/operations/{key}/deny",
        api->guarded("operations:approve",
                     [api](auto& q, auto& p, auto& who) { return api->deny(q, p, who); }));
  r.add("POST", "/v1/operations/{key}/reconcile",
        api->guarded("operations:resolve",
                     [api](auto& q, auto& p, auto& who) { return api->reconcile(q, p, who); }));
  r.add("POST", "/v1/operations/{key}/resolve",
        api->guarded("operations:resolve",
                     [api](auto& q, auto& p, auto& who) { return api->resolve(q, p, who); }));
  r.add("GET", "/v1/ledger", api->guarded("operations:read", [api](auto& q, auto&, auto&) {
    return json_response(
        200, json::serialize(
                 json::object{{"ledger", api->ledger_rows(q.query_param("session").value_or(""),
                                                          q.query_param("owner").value_or(""))}}));
  }));
  r.add("GET", "/v1/audit", api->guarded("operations:read", [api](auto& q, auto&, auto&) {
    return json_response(200,
                         json::serialize(json::object{
                             {"audit", api->audit_rows(q.query_param("operation").value_or(""))}}));
  }));
  r.add("GET", "/v1/audit/verify",
        api->guarded("operations:read", [api](auto&, auto&, auto&) { return api->verify(); }));
  r.add("PUT", "/v1/orders/{order_id}", api->guarded("admin", [api](auto& q, auto& p, auto& who) {
    return api->put_order(q, p, who);
  }));
  r.add("GET", "/v1/orders/{order_id}", api->guarded("admin", [api](auto&, auto& p, auto&) {
    return api->get_order(p.at("order_id"));
  }));
  return r;
}

}  // namespace opgate::operator_api
