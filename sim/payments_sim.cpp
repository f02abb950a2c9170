#include "sim/payments_sim.h"

#include <boost/json.hpp>
#include <fstream>

#include "common/json_fields.h"
#include "sim/fault_replies.h"
#include "sim/form.h"
#include "sim/ids.h"
#include "sim/log.h"
#include "sim/sim_http.h"

namespace opgate::sim {
namespace json = boost::json;

namespace {

constexpr size_t kMaxIdempotencyKeyLength = 255;
constexpr size_t kMaxTrackedOperationKeys = 100'000;
constexpr std::string_view kOperationKeyParam = "metadata[operation_key]";

http::Response stripe_reply(const StripeError& error) {
  return json_reply(error.status, stripe_error_json(error));
}

StripeError error_of(int status, std::string type, std::string code, std::string message) {
  StripeError e;
  e.status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

http::Response api_error_500() {
  return stripe_reply(
      error_of(500, "api_error", "", "An unknown error occurred while processing your request."));
}

http::Response rate_limited_429() {
  return stripe_reply(error_of(429, "invalid_request_error", "rate_limit",
                               "Too many requests hit the API too quickly."));
}

constexpr FaultReplies kFaultReplies{api_error_500, rate_limited_429};

template <typename T>
const StripeError* error_in(const StripeResult<T>& r) {
  return std::get_if<StripeError>(&r);
}

bool is_form(const http::Request& request) {
  auto ct = request.header("Content-Type");
  if (!ct) return false;
  std::string v(ct->substr(0, ct->find(';')));
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v == "application/x-www-form-urlencoded";
}

std::optional<int64_t> json_int(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v->as_uint64());
  return std::nullopt;
}

json::object list_json(ListPage page, std::string url) {
  return json::object{{"object", "list"},
                      {"data", std::move(page.data)},
                      {"has_more", page.has_more},
                      {"url", std::move(url)}};
}

StripeResult<PaymentIntent> intent_from_json(const json::value& value) {
  if (!value.is_object()) return error_of(400, "invalid_request_error", "", "Expected an object.");
  const auto& o = value.as_object();
  PaymentIntent pi;
  pi.id = string_field(o, "id");
  pi.amount = json_int(o, "amount").value_or(0);
  pi.currency = string_field(o, "currency");
  pi.customer = string_field(o, "customer");
  return pi;
}

}  // namespace

PaymentsSim::PaymentsSim(PaymentsOptions options, const Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      ledger_(options_.max_objects),
      idempotency_(clock, options_.max_objects) {
  add_routes();
}

void PaymentsSim::add_routes() {
  api_.add("POST", "/v1/refunds", [this](const http::Request& r, const http::PathParams&) {
    return create(r, CreateKind::kRefund, {});
  });
  api_.add("GET", "/v1/refunds", [this](const http::Request& r, const http::PathParams&) {
    return guarded_get(r, [&] { return list_refunds(r); });
  });
  api_.add("GET", "/v1/refunds/{id}", [this](const http::Request& r, const http::PathParams& p) {
    return guarded_get(r, [&] { return get_refund(p.at("id")); });
  });
  api_.add("POST", "/v1/customers/{id}/balance_transactions",
           [this](const http::Request& r, const http::PathParams& p) {
             return create(r, CreateKind::kBalanceTransaction, p.at("id"));
           });
  api_.add("GET", "/v1/customers/{id}/balance_transactions",
           [this](const http::Request& r, const http::PathParams& p) {
             return guarded_get(r, [&] { return list_balance_transactions(r, p.at("id")); });
           });

  admin_.add(
      "POST", "/_sim/payment_intents",
      [this](const http::Request& r, const http::PathParams&) { return admin_register_intent(r); });
  admin_.add("POST", "/_sim/customers", [this](const http::Request& r, const http::PathParams&) {
    return admin_register_customer(r);
  });
  admin_.add("POST", "/_sim/refunds/{id}/settle",
             [this](const http::Request& r, const http::PathParams& p) {
               return admin_settle_refund(r, p.at("id"));
             });
  add_fault_admin_routes(
      admin_, faults_, kTransportFaults | fault_set({FaultAction::kDecline, FaultAction::kPending}),
      "operation_key");
  admin_.add("GET", "/_sim/ledger", [this](const http::Request&, const http::PathParams&) {
    return json_reply(200, ledger_.snapshot());
  });
  admin_.add("GET", "/_sim/stats",
             [this](const http::Request&, const http::PathParams&) { return admin_stats(); });
  admin_.add("POST", "/_sim/reset",
             [this](const http::Request&, const http::PathParams&) { return admin_reset(); });
}

Status PaymentsSim::load_orders(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(errc::orders_file, "cannot open orders file " + path);
  std::string line;
  size_t number = 0;
  size_t loaded = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto where = path + ":" + std::to_string(number) + ": ";
    auto value = parse_json(line);
    if (!value || !value->is_object())
      return make_error(errc::orders_file, where + "not a JSON object");
    const auto& o = value->as_object();
    PaymentIntent pi;
    pi.id = string_field(o, "payment_intent");
    pi.amount = json_int(o, "amount_minor").value_or(0);
    pi.currency = string_field(o, "currency");
    pi.customer = string_field(o, "customer");
    auto registered = ledger_.register_intent(std::move(pi));
    if (const auto* err = error_in(registered))
      return make_error(errc::orders_file, where + err->message);
    ++loaded;
  }
  log_info("orders loaded", {{"path", path}, {"orders", loaded}});
  return Status::Ok();
}

std::optional<std::string> PaymentsSim::authenticate(const http::Request& request) const {
  auto key = api_key_of(request);
  if (!key) return std::nullopt;
  if (options_.secret_key) {
    if (*key != *options_.secret_key) return std::nullopt;
  } else if (!key->starts_with("sk_")) {
    return std::nullopt;
  }
  return key;
}

http::Response PaymentsSim::handle(http::Request&& request) {
  try {
    const std::string path(request.path());
    if (path.starts_with("/_sim/")) return admin_.dispatch(request);
    if (!authenticate(request)) {
      auto r = stripe_reply(error_of(401, "invalid_request_error", "", "Invalid API Key provided"));
      r.headers["WWW-Authenticate"] = "Bearer realm=\"Stripe\"";
      return r;
    }
    auto response = api_.dispatch(request);
    if (is_router_miss(response))
      return reshaped_miss(
          response, stripe_reply(error_of(
                        response.status, "invalid_request_error", "",
                        "Unrecognized request URL (" + request.method + ": " + path + ").")));
    return response;
  } catch (const std::exception& e) {
    log_warn("payments handler failed", {{"error", e.what()}});
    return api_error_500();
  }
}

void PaymentsSim::count_post(const std::optional<std::string>& operation_key) {
  MutexLock lock(stats_mu_);
  ++post_requests_;
  if (!operation_key) return;
  auto it = by_operation_key_.find(*operation_key);
  if (it == by_operation_key_.end()) {
    if (by_operation_key_.size() >= kMaxTrackedOperationKeys) return;
    it = by_operation_key_.emplace(*operation_key, KeyStats{}).first;
  }
  ++it->second.posts;
}

void PaymentsSim::count_object(const std::optional<std::string>& operation_key) {
  if (!operation_key) return;
  MutexLock lock(stats_mu_);
  auto it = by_operation_key_.find(*operation_key);
  if (it != by_operation_key_.end()) ++it->second.objects;
}

http::Response PaymentsSim::create(const http::Request& request, CreateKind kind,
                                   const std::string& customer) {
  const std::string path(request.path());
  if (!request.body.empty() && !is_form(request)) {
    count_post(std::nullopt);
    return stripe_reply(error_of(400, "invalid_request_error", "",
                                 "Invalid request: the body must be "
                                 "application/x-www-form-urlencoded."));
  }
  auto parsed = parse_form(request.body);
  if (!parsed) {
    count_post(std::nullopt);
    return stripe_reply(error_of(400, "invalid_request_error", "", parsed.error().message));
  }
  const FormParams& params = parsed.value();
  std::optional<std::string> operation_key;
  if (auto it = params.find(std::string(kOperationKeyParam)); it != params.end())
    operation_key = it->second;
  count_post(operation_key);

  FaultActionSet supported = kTransportFaults | fault_bit(FaultAction::kDecline);
  if (kind == CreateKind::kRefund) supported |= fault_bit(FaultAction::kPending);
  std::optional<FaultRule> fault = faults_.take(
      {.method = "POST", .path = path, .subject = operation_key, .supported = supported});
  if (fault)
    log_info("fault", {{"action", to_string(fault->action)},
                       {"path", path},
                       {"operation_key", operation_key ? json::value(*operation_key) : nullptr}});
  if (is_before_commit(fault)) {
    apply_delay(fault);
    return before_commit_response(*fault, kFaultReplies);
  }

  // Idempotency, scoped to the API key.
  IdempotencyClaim claim;
  auto idem_key = request.header("Idempotency-Key");
  if (idem_key) {
    if (idem_key->empty() || idem_key->size() > kMaxIdempotencyKeyLength)
      return stripe_reply(error_of(400, "invalid_request_error", "",
                                   "Idempotency-Key must be 1 to 255 characters."));
    auto begun = idempotency_.begin(*api_key_of(request), *idem_key,
                                    request_fingerprint("POST", path, params));
    switch (begun.outcome) {
      case IdempotencyOutcome::kReplay: {
        apply_delay(fault);
        begun.saved.headers["Idempotent-Replayed"] = "true";
        begun.saved.headers["Request-Id"] = new_id("req_");
        return after_commit_response(fault, std::move(begun.saved), kFaultReplies);
      }
      case IdempotencyOutcome::kMismatch:
        return stripe_reply(error_of(
            400, "idempotency_error", "",
            "Keys for idempotent requests can only be used with the same parameters they were "
            "first used with. Try using a key other than '" +
                std::string(*idem_key) + "' if you meant to execute a different request."));
      case IdempotencyOutcome::kInFlight:
        return stripe_reply(error_of(
            409, "idempotency_error", "idempotency_key_in_use",
            "There is currently another in-progress request using this Idempotent Key "
            "(that probably means you submitted twice, and the other request is still going "
            "through): " +
                std::string(*idem_key) + ". Please try again later."));
      case IdempotencyOutcome::kFull:
        return stripe_reply(
            error_of(503, "api_error", "", "The simulator holds too many idempotency keys."));
      case IdempotencyOutcome::kStarted:
        claim = std::move(begun.claim);
        break;
    }
  }
  apply_delay(fault);

  auto finish = [&](http::Response response) {
    response.headers["Request-Id"] = new_id("req_");
    if (idem_key) response.headers["Idempotency-Key"] = *idem_key;
    if (claim.active()) claim.save(response);
    return response;
  };

  auto process = [&]() -> http::Response {
    // Parameter validation: a refusal here saves nothing under the key.
    const int64_t now_s = clock_.now_s();
    std::optional<RefundRequest> refund_request;
    std::optional<BalanceTransactionRequest> txn_request;
    if (kind == CreateKind::kRefund) {
      auto r = parse_refund_request(params);
      if (const auto* err = error_in(r)) return stripe_reply(*err);
      refund_request = std::get<RefundRequest>(std::move(r));
    } else {
      auto r = parse_balance_transaction_request(params);
      if (const auto* err = error_in(r)) return stripe_reply(*err);
      txn_request = std::get<BalanceTransactionRequest>(std::move(r));
    }

    if (fault && fault->action == FaultAction::kDecline) {
      StripeError e = error_of(402, "card_error", "card_declined", "Your card was declined.");
      e.decline_code = "generic_decline";
      return finish(stripe_reply(e));
    }

    json::object created;
    if (kind == CreateKind::kRefund) {
      const bool pending = fault && fault->action == FaultAction::kPending;
      auto r = ledger_.create_refund(*refund_request, pending ? "pending" : "succeeded", now_s);
      if (const auto* err = error_in(r)) {
        if (err->status >= 500) return stripe_reply(*err);  // not a definite refusal
        return finish(stripe_reply(*err));
      }
      created = to_json(std::get<Refund>(r));
    } else {
      auto r = ledger_.create_balance_transaction(customer, *txn_request, now_s);
      if (const auto* err = error_in(r)) {
        if (err->status >= 500) return stripe_reply(*err);
        return finish(stripe_reply(*err));
      }
      created = to_json(std::get<BalanceTransaction>(r));
    }
    count_object(operation_key);
    return finish(json_reply(200, created));
  };
  // An after-commit fault replaces whatever the server answered; what was
  // saved under the key stays saved.
  return after_commit_response(fault, process(), kFaultReplies);
}

http::Response PaymentsSim::guarded_get(const http::Request& request,
                                        const std::function<http::Response()>& produce) {
  return faulted_get(faults_, kFaultReplies, request, [&] {
    auto response = produce();
    response.headers["Request-Id"] = new_id("req_");
    return response;
  });
}

http::Response PaymentsSim::list_refunds(const http::Request& request) {
  auto query = parse_list_query(request.query_param("limit"), request.query_param("starting_after"),
                                request.query_param("ending_before"));
  if (const auto* err = error_in(query)) return stripe_reply(*err);
  auto pi = request.query_param("payment_intent");
  if (pi && pi->empty()) pi.reset();
  auto page = ledger_.list_refunds(pi, std::get<ListQuery>(query));
  if (const auto* err = error_in(page)) return stripe_reply(*err);
  return json_reply(200, list_json(std::get<ListPage>(std::move(page)), "/v1/refunds"));
}

http::Response PaymentsSim::get_refund(const std::string& id) {
  auto r = ledger_.get_refund(id);
  if (const auto* err = error_in(r)) return stripe_reply(*err);
  return json_reply(200, to_json(std::get<Refund>(r)));
}

http::Response PaymentsSim::list_balance_transactions(const http::Request& request,
                                                      const std::string& customer) {
  auto query = parse_list_query(request.query_param("limit"), request.query_param("starting_after"),
                                request.query_param("ending_before"));
  if (const auto* err = error_in(query)) return stripe_reply(*err);
  auto page = ledger_.list_balance_transactions(customer, std::get<ListQuery>(query));
  if (const auto* err = error_in(page)) return stripe_reply(*err);
  return json_reply(200, list_json(std::get<ListPage>(std::move(page)),
                                   "/v1/customers/" + customer + "/balance_transactions"));
}

http::Response PaymentsSim::admin_register_intent(const http::Request& request) {
  auto body = parse_json(request.body);
  if (!body)
    return stripe_reply(error_of(400, "invalid_request_error", "", "The body must be JSON."));
  auto pi = intent_from_json(*body);
  if (const auto* err = error_in(pi)) return stripe_reply(*err);
  auto registered = ledger_.register_intent(std::get<PaymentIntent>(std::move(pi)));
  if (const auto* err = error_in(registered)) return stripe_reply(*err);
  const auto& intent = std::get<PaymentIntent>(registered);
  return json_reply(
      200, json::object{{"id", intent.id},
                        {"object", "payment_intent"},
                        {"amount", intent.amount},
                        {"amount_refunded", intent.refunded},
                        {"currency", intent.currency},
                        {"customer", intent.customer.empty() ? json::value(nullptr)
                                                             : json::value(intent.customer)}});
}

http::Response PaymentsSim::admin_register_customer(const http::Request& request) {
  auto body = parse_json(request.body);
  if (!body || !body->is_object())
    return stripe_reply(
        error_of(400, "invalid_request_error", "", "The body must be a JSON object."));
  auto registered = ledger_.register_customer(string_field(body->as_object(), "id"));
  if (const auto* err = error_in(registered)) return stripe_reply(*err);
  return json_reply(
      200, json::object{{"id", std::get<std::string>(registered)}, {"object", "customer"}});
}

http::Response PaymentsSim::admin_settle_refund(const http::Request& request,
                                                const std::string& id) {
  auto body = parse_json(request.body);
  if (!body || !body->is_object())
    return stripe_reply(
        error_of(400, "invalid_request_error", "", "The body must be a JSON object."));
  auto settled = ledger_.settle_refund(id, string_field(body->as_object(), "status"));
  if (const auto* err = error_in(settled)) return stripe_reply(*err);
  return json_reply(200, to_json(std::get<Refund>(settled)));
}

http::Response PaymentsSim::admin_stats() {
  MutexLock lock(stats_mu_);
  json::object keys;
  for (const auto& [key, s] : by_operation_key_)
    keys[key] = json::object{{"posts", s.posts}, {"objects", s.objects}};
  return json_reply(
      200, json::object{{"post_requests", post_requests_}, {"by_operation_key", std::move(keys)}});
}

http::Response PaymentsSim::admin_reset() {
  ledger_.reset();
  idempotency_.clear();
  faults_.clear();
  {
    MutexLock lock(stats_mu_);
    post_requests_ = 0;
    by_operation_key_.clear();
  }
  return json_reply(200, json::object{{"reset", true}});
}

}  // namespace opgate::sim
