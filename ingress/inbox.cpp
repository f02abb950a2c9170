#include "ingress/inbox.h"

#include <fmt/format.h>

#include <future>
#include <optional>
#include <unordered_map>

#include "common/crypto.h"
#include "common/thread_name.h"
#include "opgate.pb.h"

namespace opgate::ingress {

using store::Cf;

std::string Inbox::event_key(const std::string& source, const std::string& webhook_id) {
  return fmt::format("e/{}/{}", source, webhook_id);
}
std::string Inbox::queue_key(uint64_t seq) { return fmt::format("q/{:016x}", seq); }
std::string Inbox::waiting_prefix(const std::string& session_id) {
  return fmt::format("w/{}/", session_id);
}
std::string Inbox::waiting_key(const std::string& session_id, uint64_t seq) {
  return fmt::format("{}{:016x}", waiting_prefix(session_id), seq);
}

Inbox::Inbox(store::Store& store, const Clock& clock, InboxOptions options)
    : store_(store), clock_(clock), options_(options) {
  // Sequence numbers start above both the clock (in µs) and any queued entry,
  // so they stay monotonic across restarts and clock steps.
  uint64_t start = static_cast<uint64_t>(clock.now_ms()) * 1000;
  auto last = store_.last_key(Cf::inbox, "q/");
  if (last && last->has_value())
    start = std::max<uint64_t>(start, std::stoull((*last)->substr(2), nullptr, 16) + 1);
  seq_ = start;
  size_t queued = 0;
  Status counted = store_.scan(Cf::inbox, "q/", [&](std::string_view, std::string_view) {
    ++queued;
    return true;
  });
  (void)counted;  // a store that cannot be read fails every later step anyway
  backlog_ = queued;
  committer_ = std::thread([this] {
    name_this_thread("inbox-commit");
    run();
  });
}

Inbox::~Inbox() { stop(); }

void Inbox::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (committer_.joinable()) committer_.join();
}

uint64_t Inbox::next_seq() { return seq_++; }

bool Inbox::needs_work(std::string_view type, std::string_view session_id) {
  return type == kActionRequired && !session_id.empty();
}

void Inbox::on_queued(std::function<void()> notify) {
  std::lock_guard lock(mu_);
  on_queued_ = std::move(notify);
}

void Inbox::submit(Submission submission, Committed committed) {
  // Hashed here, on the submitting thread, not on the one committer.
  std::string digest = crypto::sha256(submission.body);
  std::optional<Error> refused;
  {
    std::lock_guard lock(mu_);
    if (stopping_)
      refused = Error{"shutting_down", "The inbox is stopping."};
    else if (pending_.size() >= options_.max_pending)
      refused = Error{"overloaded", "Too many events are waiting to be stored."};
    else
      pending_.push_back({std::move(submission), std::move(digest), std::move(committed)});
  }
  if (refused) return committed(*refused);
  wake_.notify_one();
}

Result<Accepted> Inbox::accept(const std::string& source, const std::string& webhook_id,
                               const std::string& body, const Envelope& envelope) {
  std::promise<Result<Accepted>> result;
  auto future = result.get_future();
  submit({source, webhook_id, body, envelope},
         [&result](Result<Accepted> r) { result.set_value(std::move(r)); });
  return future.get();
}

void Inbox::run() {
  std::vector<Pending> batch;
  for (;;) {
    std::function<void()> notify;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, and nothing left to store
      while (!pending_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
      notify = on_queued_;
    }
    if (commit(batch) && notify) notify();
    batch.clear();
  }
}

bool Inbox::commit(std::vector<Pending>& batch) {
  struct Outcome {
    std::optional<Result<Accepted>> result;  // decided without this write
    std::string digest;
    size_t first = SIZE_MAX;  // an earlier copy in this batch
  };
  std::vector<Outcome> outcomes(batch.size());
  std::unordered_map<std::string, size_t> new_in_batch;  // event key -> index
  store::Batch write;
  size_t fresh = 0, queued_count = 0;
  const int64_t now_ms = clock_.now_ms();
  for (size_t i = 0; i < batch.size(); ++i) {
    auto& sub = batch[i].submission;
    auto& out = outcomes[i];
    out.digest = batch[i].digest;
    const std::string key = event_key(sub.source, sub.webhook_id);
    if (auto it = new_in_batch.find(key); it != new_in_batch.end()) {
      out.first = it->second;  // answered with the copy that this write stores
      continue;
    }
    auto existing = store_.get_message<pb::InboxEvent>(Cf::inbox, key);
    if (!existing) {
      out.result = existing.error();
      continue;
    }
    if (existing->has_value()) {
      if ((*existing)->body_sha256() == out.digest)
        out.result = Accepted{true};
      else
        out.result = Error{"conflict", "This webhook-id was already received with another body."};
      continue;
    }
    pb::InboxEvent ev;
    ev.set_source(sub.source);
    ev.set_webhook_id(sub.webhook_id);
    ev.set_body(std::move(sub.body));  // not needed again
    ev.set_body_sha256(out.digest);
    ev.set_received_at_ms(now_ms);
    ev.set_type(sub.envelope.type);
    ev.set_session_id(sub.envelope.session_id);
    // Only an action_required event for a session has work for the worker;
    // any other is stored (for deduplication and audit) already processed.
    const bool queued = needs_work(sub.envelope.type, sub.envelope.session_id);
    if (!queued) {
      ev.set_processed(true);
      ev.set_processed_at_ms(now_ms);
    }
    write.put(Cf::inbox, key, ev);
    if (queued) {
      write.put(Cf::inbox, queue_key(next_seq()), key);
      ++queued_count;
    }
    new_in_batch.emplace(key, i);
    ++fresh;
  }
  Status written = Status::Ok();
  if (fresh > 0) {
    // Counted before the write: the worker may process an entry as soon as
    // it is visible, and must never find the count below what it removes.
    backlog_ += queued_count;
    written = store_.commit(write);
    if (written) {
      group_commits_++;
      committed_events_ += fresh;
    } else {
      backlog_ -= queued_count;
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    auto& out = outcomes[i];
    Result<Accepted> result = Accepted{false};
    if (out.result) {
      result = std::move(*out.result);
    } else if (!written) {
      result = written.error();
    } else if (out.first != SIZE_MAX) {
      if (outcomes[out.first].digest == out.digest)
        result = Accepted{true};
      else
        result = Error{"conflict", "This webhook-id was already received with another body."};
    }
    batch[i].committed(std::move(result));
  }
  return written && queued_count > 0;
}

}  // namespace opgate::ingress
