#include "adapters/executors/http_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/pchars.hpp>
#include <optional>

#include "common/crypto.h"
#include "common/json_fields.h"
#include "common/text.h"
#include "http/client.h"

namespace opgate::adapters {

namespace {

namespace json = boost::json;
using operations::LookupResult;
using operations::PaymentRequest;
using operations::PaymentResult;
using operations::Verdict;

// An executor's body: succeeded, failed (a definite refusal) or anything
// else (it may have happened: indeterminate).
PaymentResult classify(const std::string& body) {
  PaymentResult out;
  json::error_code ec;
  auto v = json::parse(body, ec);
  if (ec || !v.is_object()) {
    out.error = "the executor's answer is not a JSON object";
    return out;
  }
  const auto& o = v.as_object();
  out.object_id = string_field(o, "id");
  out.provider_status = string_field(o, "status");
  const std::string detail = string_field(o, "detail");
  if (out.provider_status == "succeeded") {
    out.verdict = Verdict::succeeded;
  } else if (out.provider_status == "failed") {
    out.verdict = Verdict::refused;
    out.error =
        detail.empty() ? "the executor reports it failed" : std::string(utf8_prefix(detail, 500));
  } else {
    out.error =
        fmt::format("the executor answered status '{}'", utf8_prefix(out.provider_status, 64));
  }
  return out;
}

// Whether a body is a JSON object whose "operation_key" is `key`.
bool names_key(const std::string& body, const std::string& key) {
  json::error_code ec;
  auto v = json::parse(body, ec);
  return !ec && v.is_object() && string_field(v.as_object(), "operation_key") == key;
}

// Where a request goes: the executor its operation was first sent to, and
// before any, the declaration's (the policy in force).
const std::string& executor_url(const PaymentRequest& req,
                                const operations::DeclaredOperation& op) {
  return req.executor_url.empty() ? op.executor.url : req.executor_url;
}

// Why the declaration's token is not sent where the operation was first
// sent: a reload gave the declaration another token since, and a host is
// only ever sent the token it was given before (an operation recorded
// before the token's digest was kept: only while the URL is unchanged).
std::optional<std::string> token_withheld(const PaymentRequest& req,
                                          const operations::DeclaredOperation& op) {
  if (req.executor_url.empty()) return std::nullopt;
  const bool same = req.executor_token_sha256.empty()
                        ? req.executor_url == op.executor.url
                        : crypto::equal_constant_time(crypto::sha256_hex(op.executor.token),
                                                      req.executor_token_sha256);
  if (same) return std::nullopt;
  if (req.executor_token_sha256.empty())
    return fmt::format(
        "{}'s executor is no longer {}, where this operation was sent, and which token it was "
        "sent with is not known; no token is sent there and nothing was asked: point the "
        "declaration back, or resolve the operation by hand",
        op.name, req.executor_url);
  return fmt::format(
      "{}'s executor token is not the one this operation was sent with (to {}); the new one is "
      "not sent there and nothing was asked: restore the token it was sent with, or resolve the "
      "operation by hand",
      op.name, req.executor_url);
}

class DeclaredExecutors final : public operations::PaymentProvider {
 public:
  DeclaredExecutors(operations::PaymentProvider& provider,
                    const Live<operations::PolicyConfig>& policy, int64_t max_timeout_ms)
      : provider_(provider), policy_(policy), max_timeout_ms_(max_timeout_ms) {}

  PaymentResult execute(const PaymentRequest& req) override {
    if (req.kind != PaymentRequest::Kind::declared) return provider_.execute(req);
    auto policy = policy_.get();
    const auto* op = policy->declared_operation(req.operation);
    if (!op) {
      PaymentResult out;
      out.verdict = Verdict::refused;
      out.error = fmt::format("{} is no longer declared; nothing was sent", req.operation);
      return out;
    }
    if (auto why = token_withheld(req, *op)) {
      PaymentResult out;  // indeterminate: it may have run where it was sent
      out.error = std::move(*why);
      return out;
    }
    json::error_code ec;
    auto arguments = json::parse(req.arguments_json, ec);
    if (ec) arguments = json::object();
    http::ClientRequest http_req = base(*op, "POST", executor_url(req, *op));
    http_req.headers["Content-Type"] = "application/json";
    http_req.headers["Idempotency-Key"] = req.operation_key;
    http_req.body = json::serialize(json::object{{"operation_key", req.operation_key},
                                                 {"owner", req.owner},
                                                 {"order_id", req.order_id},
                                                 {"arguments", std::move(arguments)},
                                                 {"amount_minor", req.amount_minor},
                                                 {"currency", req.currency}});
    auto res = http::send(http_req);
    PaymentResult out;
    if (!res) {
      // Whether it reached the executor or not, only its answer settles it.
      out.error = res.error().message;
      return out;
    }
    if (res->status >= 200 && res->status < 300) return classify(res->body);
    if (res->status == 400 || res->status == 404 || res->status == 422) {
      out.verdict = Verdict::refused;
      out.error = fmt::format("the executor refused it ({})", res->status);
      return out;
    }
    out.error = fmt::format("the executor answered {}", res->status);
    return out;
  }

  LookupResult find(const PaymentRequest& req) override {
    if (req.kind != PaymentRequest::Kind::declared) return provider_.find(req);
    LookupResult out;
    auto policy = policy_.get();
    const auto* op = policy->declared_operation(req.operation);
    if (!op) {
      out.error = fmt::format(
          "{} is no longer declared; restore its declaration so that it can be reconciled",
          req.operation);
      return out;
    }
    if (auto why = token_withheld(req, *op)) {
      out.error = std::move(*why);
      return out;
    }
    const std::string url =
        fmt::format("{}/{}", executor_url(req, *op),
                    boost::urls::encode(req.operation_key, boost::urls::pchars));
    auto res = http::send(base(*op, "GET", url));
    if (!res) {
      out.error = res.error().message;
      return out;
    }
    if (res->status == 404) {
      // The proof that it never ran, on which it is carried out again, is
      // the executor's own answer, naming the key it looked for. A proxy's
      // or a gateway's 404 (a page, nothing, or JSON of its own, such as
      // "no route matched") says only that the request found no route.
      if (names_key(res->body, req.operation_key)) {
        out.lookup = operations::Lookup::absent;
        return out;
      }
      out.error =
          "the executor's lookup answered 404 without naming the operation key, which is not "
          "taken as proof that it never ran";
      return out;
    }
    if (res->status != 200) {
      out.error = fmt::format("the executor's lookup answered {}", res->status);
      return out;
    }
    out.object = classify(res->body);
    if (out.object.verdict == Verdict::indeterminate) {
      out.error = out.object.error;
      return out;
    }
    out.lookup = operations::Lookup::found;
    return out;
  }

 private:
  http::ClientRequest base(const operations::DeclaredOperation& op, const char* method,
                           std::string url) const {
    http::ClientRequest r;
    r.method = method;
    r.url = std::move(url);
    r.headers["Authorization"] = "Bearer " + op.executor.token;
    r.headers["Accept"] = "application/json";
    r.timeout = std::chrono::milliseconds(std::min(op.executor.timeout_ms, max_timeout_ms_));
    return r;
  }

  operations::PaymentProvider& provider_;
  const Live<operations::PolicyConfig>& policy_;
  int64_t max_timeout_ms_;
};

}  // namespace

std::unique_ptr<operations::PaymentProvider> make_declared_executors(
    operations::PaymentProvider& provider, const Live<operations::PolicyConfig>& policy,
    int64_t max_timeout_ms) {
  return std::make_unique<DeclaredExecutors>(provider, policy, max_timeout_ms);
}

}  // namespace opgate::adapters
