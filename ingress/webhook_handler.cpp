#include "ingress/webhook_handler.h"

#include <chrono>

#include "ingress/signature.h"

namespace opgate::ingress {

WebhookHandler::WebhookHandler(IngressConfig config, Inbox& inbox, const Clock& clock,
                               Metrics& metrics)
    : config_(std::move(config)), inbox_(inbox), clock_(clock), metrics_(metrics) {}

http::Response WebhookHandler::reject(const std::string& source, int status,
                                      std::string_view reason, std::string_view message) {
  metrics_.inc("opgate_webhooks_rejected_total",
               {{"source", source}, {"reason", std::string(reason)}});
  auto r = http::error_response(status, reason, message);
  if (status == 503) r.headers["Retry-After"] = "5";
  return r;
}

http::Response WebhookHandler::handle(const http::Request& req, const std::string& source_name) {
  const auto started = std::chrono::steady_clock::now();
  const Source* source = nullptr;
  for (const auto& s : config_.sources)
    if (s.name == source_name) source = &s;
  if (!source) return reject("unknown", 404, "unknown_source", "No webhook source by that name.");
  metrics_.inc("opgate_webhooks_received_total", {{"source", source->name}});
  if (draining_) return reject(source->name, 503, "shutting_down", "Shutting down; retry later.");

  auto content_type = req.header("Content-Type").value_or("");
  auto semi = content_type.find(';');
  std::string media = content_type.substr(0, semi);
  while (!media.empty() && media.back() == ' ') media.pop_back();
  for (auto& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media != "application/json")
    return reject(source->name, 415, "unsupported_media_type",
                  "Content-Type must be application/json.");

  auto id = req.header("webhook-id");
  auto ts = req.header("webhook-timestamp");
  auto sig = req.header("webhook-signature");
  if (!id || !ts || !sig || id->empty() || id->size() > 256)
    return reject(source->name, 400, "bad_headers",
                  "webhook-id, webhook-timestamp and webhook-signature are required.");
  for (char c : *id)
    if (c < 0x21 || c > 0x7e || c == '/')
      return reject(source->name, 400, "bad_headers", "webhook-id has invalid characters.");

  Status verified = verify({*id, *ts, *sig, req.body}, source->raw_keys, clock_.now_s(),
                           config_.timestamp_tolerance_s);
  if (!verified) {
    if (verified.error().code == "bad_timestamp")
      return reject(source->name, 400, "bad_headers", verified.error().message);
    return reject(source->name, 401, verified.error().code, verified.error().message);
  }
  auto envelope = parse_envelope(req.body);
  if (!envelope) return reject(source->name, 400, "bad_envelope", envelope.error().message);
  if (inbox_.backlog() >= config_.max_backlog)
    return reject(source->name, 503, "backlog_full", "The inbox backlog is full; retry later.");

  auto accepted = inbox_.accept(source->name, *id, req.body, *envelope);
  if (!accepted) {
    if (accepted.error().code == "conflict")
      return reject(source->name, 409, "conflict", accepted.error().message);
    return reject(source->name, 503, "storage_unavailable",
                  "The event could not be stored; retry later.");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  metrics_
      .histogram("opgate_ingest_seconds",
                 {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1})
      .observe(seconds);
  if (accepted->duplicate) {
    metrics_.inc("opgate_webhooks_duplicate_total", {{"source", source->name}});
    return http::json_response(200, R"({"accepted":true,"duplicate":true})");
  }
  metrics_.inc("opgate_webhooks_accepted_total", {{"source", source->name}});
  return http::json_response(200, R"({"accepted":true,"duplicate":false})");
}

}  // namespace opgate::ingress
