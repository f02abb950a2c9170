#include "sim/webhook_sender.h"

#include "common/webhook_signature.h"
#include "http/client.h"
#include "sim/ids.h"
#include "sim/log.h"

namespace opgate::sim {

std::chrono::milliseconds webhook_backoff(int attempt, std::chrono::milliseconds first,
                                          std::chrono::milliseconds cap) {
  auto delay = first;
  for (int i = 2; i < attempt && delay < cap; ++i) delay *= 2;
  return std::min(delay, cap);
}

WebhookSender::WebhookSender(WebhookSenderOptions options, const Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      url_(options_.url),
      scheduler_(options_.threads, options_.max_backlog) {}

WebhookSender::~WebhookSender() { stop(); }

void WebhookSender::stop() { scheduler_.stop(); }

void WebhookSender::set_url(std::string url) {
  MutexLock lock(url_mu_);
  url_ = std::move(url);
}

std::string WebhookSender::url() const {
  MutexLock lock(url_mu_);
  return url_;
}

std::string WebhookSender::send(std::string body) {
  auto message = std::make_shared<Message>();
  message->webhook_id = new_id("msg_");
  message->body = std::move(body);
  const std::string id = message->webhook_id;
  if (!scheduler_.schedule_after(std::chrono::milliseconds(0),
                                 [this, message] { attempt(message); })) {
    ++dropped_;
    log_warn("webhook dropped: backlog full", {{"webhook_id", id}});
    return {};
  }
  ++sent_;
  return id;
}

void WebhookSender::attempt(std::shared_ptr<Message> message) {
  const std::string target = url();
  if (target.empty()) {
    // No target yet: wait without using up an attempt.
    scheduler_.schedule_after(
        options_.first_backoff, [this, message] { attempt(message); }, true);
    return;
  }
  ++message->attempt;
  ++attempts_;
  const int64_t ts = clock_.now_s();
  http::ClientRequest req;
  req.method = "POST";
  req.url = target;
  req.timeout = options_.timeout;
  req.headers["Content-Type"] = "application/json";
  req.headers["webhook-id"] = message->webhook_id;
  req.headers["webhook-timestamp"] = std::to_string(ts);
  req.headers["webhook-signature"] =
      webhooks::sign(options_.raw_key, message->webhook_id, ts, message->body);
  req.body = message->body;
  auto result = http::send(req);
  if (result && result->status >= 200 && result->status < 300) {
    ++acked_;
    log_info("webhook delivered", {{"webhook_id", message->webhook_id},
                                   {"status", result->status},
                                   {"attempt", message->attempt}});
    return;
  }
  boost::json::object fields{{"webhook_id", message->webhook_id}, {"attempt", message->attempt}};
  if (result)
    fields["status"] = result->status;
  else
    fields["error"] = result.error().code;
  if (message->attempt >= options_.max_attempts) {
    ++failed_;
    log_warn("webhook given up", std::move(fields));
    return;
  }
  log_warn("webhook failed; will retry", std::move(fields));
  auto delay = webhook_backoff(message->attempt + 1, options_.first_backoff, options_.max_backoff);
  scheduler_.schedule_after(
      delay, [this, message] { attempt(message); }, true);
}

WebhookStats WebhookSender::stats() const {
  WebhookStats s;
  s.sent = sent_;
  s.acked = acked_;
  s.attempts = attempts_;
  s.failed = failed_;
  s.dropped = dropped_;
  s.pending = s.sent - s.acked - s.failed;
  return s;
}

}  // namespace opgate::sim
