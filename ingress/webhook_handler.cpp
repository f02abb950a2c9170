#include "ingress/webhook_handler.h"

#include <chrono>
#include <future>

#include "common/logging.h"
#include "common/text.h"
#include "common/webhook_signature.h"

namespace opgate::ingress {

WebhookHandler::WebhookHandler(IngressConfig config, Inbox& inbox, const Clock& clock,
                               Metrics& metrics)
    : config_(Configured{}),
      inbox_(inbox),
      clock_(clock),
      metrics_(metrics),
      latency_(metrics.histogram("opgate_ingest_seconds",
                                 {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1})) {
  set_config(std::move(config));
}

WebhookHandler::Configured WebhookHandler::configure(IngressConfig config) {
  Configured c;
  for (const auto& s : config.sources) {
    const std::map<std::string, std::string> labels{{"source", s.name}};
    c.counters.push_back({&metrics_.counter("opgate_webhooks_received_total", labels),
                          &metrics_.counter("opgate_webhooks_accepted_total", labels),
                          &metrics_.counter("opgate_webhooks_duplicate_total", labels)});
  }
  c.config = std::move(config);
  return c;
}

http::Response WebhookHandler::reject(const std::string& source, const ErrorCode& code,
                                      std::string_view message, std::string_view webhook_id) {
  const int status = code.http_status;
  const std::string_view reason = code.name;
  metrics_.inc("opgate_webhooks_rejected_total",
               {{"source", source}, {"reason", std::string(reason)}});
  log_event(spdlog::level::warn, "webhook.rejected",
            fmt::format("webhook from {} refused: {} {}", source, status, reason),
            {{"source", source},
             {"reason", reason},
             {"status", std::to_string(status)},
             {"webhook_id", printable(webhook_id.substr(0, 64))}});
  auto r = http::error_response(code, message);
  if (status == 503) r.headers["Retry-After"] = "5";
  if (status == 400 || status == 401) r.cooldown = config_.get()->config.reject_cooldown;
  return r;
}

std::optional<http::Response> WebhookHandler::check(const http::Request& req,
                                                    const std::string& source_name,
                                                    Submission& submission, Counters& counters) {
  const auto configured = config_.get();  // one configuration for the whole check
  const IngressConfig* config = &configured->config;
  const Source* source = nullptr;
  for (size_t i = 0; i < config->sources.size(); ++i)
    if (config->sources[i].name == source_name) {
      source = &config->sources[i];
      counters = configured->counters[i];
    }
  if (!source) return reject("unknown", errc::unknown_source, "No webhook source by that name.");
  ++*counters.received;
  if (draining_) return reject(source->name, errc::shutting_down, "Shutting down; retry later.");

  auto content_type = req.header("Content-Type").value_or("");
  auto semi = content_type.find(';');
  std::string media(content_type.substr(0, semi));
  while (!media.empty() && media.back() == ' ') media.pop_back();
  for (auto& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media != "application/json")
    return reject(source->name, errc::unsupported_media_type,
                  "Content-Type must be application/json.");

  auto id = req.header("webhook-id");
  auto ts = req.header("webhook-timestamp");
  auto sig = req.header("webhook-signature");
  if (!id || !ts || !sig || id->empty() || id->size() > 256)
    return reject(source->name, errc::bad_headers,
                  "webhook-id, webhook-timestamp and webhook-signature are required.");
  for (char c : *id)
    if (c < 0x21 || c > 0x7e || c == '/')
      return reject(source->name, errc::bad_headers, "webhook-id has invalid characters.");

  Status verified = webhooks::verify({*id, *ts, *sig, req.body}, source->raw_keys, clock_.now_s(),
                                     config->timestamp_tolerance_s);
  if (!verified) {
    if (verified.error().is(errc::bad_timestamp))
      return reject(source->name, errc::bad_headers, verified.error().message, *id);
    return reject(source->name,
                  verified.error().is(errc::timestamp_out_of_tolerance)
                      ? errc::timestamp_out_of_tolerance
                      : errc::bad_signature,
                  verified.error().message, *id);
  }
  auto envelope = parse_envelope(req.body);
  if (!envelope) return reject(source->name, errc::bad_envelope, envelope.error().message, *id);
  if (inbox_.backlog() >= config->max_backlog)
    return reject(source->name, errc::backlog_full, "The inbox backlog is full; retry later.", *id);

  submission.source = source->name;
  submission.webhook_id = *id;
  submission.envelope = std::move(*envelope);
  return std::nullopt;
}

http::Response WebhookHandler::answer(const std::string& source, const Counters& counters,
                                      const Result<Accepted>& accepted, int64_t started_ns) {
  if (!accepted) {
    if (accepted.error().code == "conflict")
      return reject(source, errc::conflict, accepted.error().message);
    if (accepted.error().code == "overloaded")
      return reject(source, errc::overloaded, "Too many events are waiting; retry later.");
    if (accepted.error().code == "shutting_down")
      return reject(source, errc::shutting_down, "Shutting down; retry later.");
    return reject(source, errc::storage_unavailable, "The event could not be stored; retry later.");
  }
  latency_.observe(static_cast<double>(clock_.monotonic_ns() - started_ns) / 1e9);
  if (accepted->duplicate) {
    ++*counters.duplicate;
    return http::json_response(200, R"({"accepted":true,"duplicate":true})");
  }
  ++*counters.accepted;
  return http::json_response(200, R"({"accepted":true,"duplicate":false})");
}

void WebhookHandler::handle(http::Request&& req, const std::string& source, http::Respond respond) {
  const int64_t started = clock_.monotonic_ns();
  Submission submission;
  Counters counters{};
  if (auto rejected = check(req, source, submission, counters))
    return respond(std::move(*rejected));
  submission.body = std::move(req.body);
  std::string name = submission.source;
  inbox_.submit(std::move(submission), [this, name = std::move(name), counters, started,
                                        respond = std::move(respond)](Result<Accepted> accepted) {
    respond(answer(name, counters, accepted, started));
  });
}

http::Response WebhookHandler::handle(const http::Request& req, const std::string& source) {
  std::promise<http::Response> answered;
  auto future = answered.get_future();
  http::Request copy = req;
  handle(std::move(copy), source,
         [&answered](http::Response r) { answered.set_value(std::move(r)); });
  return future.get();
}

}  // namespace opgate::ingress
