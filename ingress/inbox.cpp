#include "ingress/inbox.h"

#include <future>
#include <optional>

#include "common/crypto.h"
#include "common/thread_name.h"
#include "opgate.pb.h"

namespace opgate::ingress {

Result<std::unique_ptr<Inbox>> Inbox::open(store::Storage& storage, const Clock& clock,
                                           InboxOptions options) {
  auto queued = storage.reader().queued_count();
  if (!queued) return queued.error();
  std::unique_ptr<Inbox> inbox(new Inbox(storage, clock, options));
  inbox->backlog_ = *queued;
  inbox->committer_ = std::thread([raw = inbox.get()] {
    name_this_thread("inbox-commit");
    raw->run();
  });
  return inbox;
}

Inbox::Inbox(store::Storage& storage, const Clock& clock, InboxOptions options)
    : storage_(storage), clock_(clock), options_(options) {}

Inbox::~Inbox() { stop(); }

void Inbox::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (committer_.joinable()) committer_.join();
}

void Inbox::processed(size_t n) {
  size_t current = backlog_.load();
  while (!backlog_.compare_exchange_weak(current, current - std::min(n, current))) {
  }
}

std::optional<uint64_t> Inbox::quiet() const {
  MutexLock lock(count_mu_);
  if (commits_begun_ != commits_done_) return std::nullopt;
  return commits_begun_;
}

void Inbox::counted(size_t queued, uint64_t quiet_token) {
  if (options_.shared_store) return;
  MutexLock lock(count_mu_);
  if (commits_begun_ == quiet_token && commits_done_ == quiet_token) backlog_ = queued;
}

void Inbox::recount() {
  if (!options_.shared_store) return;
  if (auto n = storage_.reader().queued_count()) backlog_ = *n;
}

bool Inbox::needs_work(std::string_view type, std::string_view session_id) {
  return type == kActionRequired && !session_id.empty();
}

void Inbox::on_queued(std::function<void()> notify) {
  MutexLock lock(mu_);
  on_queued_ = std::move(notify);
}

void Inbox::answer_with(AnswerRunner run) {
  MutexLock lock(mu_);
  answer_with_ = std::move(run);
}

namespace {
Error overloaded() {
  return make_error(errc::overloaded, "Too many events are waiting to be stored.");
}

// The event's record, stored as it is built here; received now.
store::NewEvent prepare(Submission&& sub, int64_t now_ms) {
  store::NewEvent ne;
  auto& ev = ne.event;
  ev.set_source(std::move(sub.source));
  ev.set_webhook_id(std::move(sub.webhook_id));
  ev.set_body_sha256(crypto::sha256(sub.body));
  ev.set_body(std::move(sub.body));
  ev.set_received_at_ms(now_ms);
  // Only an action_required event for a session has work for the worker;
  // any other is stored (for deduplication and audit) already processed.
  ne.queue = Inbox::needs_work(sub.envelope.type, sub.envelope.session_id);
  ev.set_type(std::move(sub.envelope.type));
  ev.set_session_id(std::move(sub.envelope.session_id));
  if (!ne.queue) {
    ev.set_processed(true);
    ev.set_processed_at_ms(now_ms);
  }
  ne.record = ev.SerializeAsString();
  return ne;
}
}  // namespace

void Inbox::submit(Submission submission, Committed committed) {
  // Refused before any work when the queue is full already: overload is when
  // CPU is short. The check under the lock below is the one that counts.
  if (waiting_.load(std::memory_order_relaxed) >= options_.max_pending)
    return committed(overloaded());
  // Hashed and serialized here, on the submitting thread, not on the one
  // committer.
  store::NewEvent event = prepare(std::move(submission), clock_.now_ms());
  std::optional<Error> refused;
  {
    MutexLock lock(mu_);
    if (stopping_)
      refused = make_error(errc::shutting_down, "The inbox is stopping.");
    else if (pending_.size() >= options_.max_pending)
      refused = overloaded();
    else
      pending_.push_back({std::move(event), std::move(committed)});
    waiting_.store(pending_.size(), std::memory_order_relaxed);
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
    AnswerRunner answer;
    {
      MutexLock lock(mu_);
      while (!stopping_ && pending_.empty()) wake_.wait(mu_);
      if (pending_.empty()) return;  // stopping, and nothing left to store
      while (!pending_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
      waiting_.store(pending_.size(), std::memory_order_relaxed);
      notify = on_queued_;
      answer = answer_with_;
    }
    if (commit(batch, answer) && notify) notify();
    batch.clear();
  }
}

bool Inbox::commit(std::vector<Pending>& batch, const AnswerRunner& answer) {
  std::vector<store::NewEvent> events;
  events.reserve(batch.size());
  size_t queued = 0;
  for (auto& pending : batch) events.push_back(std::move(pending.event));
  // Counted before the write: the worker may process an entry as soon as it
  // is visible, and must never find the count below what it removes. A copy
  // stored earlier is not queued again, so what this write did not queue is
  // taken back below.
  for (const auto& e : events) queued += e.queue ? 1 : 0;
  {
    MutexLock lock(count_mu_);
    ++commits_begun_;
    backlog_ += queued;
  }
  auto appended = storage_.append_events(events);
  size_t fresh = 0, fresh_queued = 0;
  if (appended) {
    for (size_t i = 0; i < events.size(); ++i)
      if ((*appended)[i] == store::Appended::stored) {
        ++fresh;
        fresh_queued += events[i].queue ? 1 : 0;
      }
  }
  processed(queued - fresh_queued);
  {
    MutexLock lock(count_mu_);
    ++commits_done_;
  }
  if (fresh > 0) {
    group_commits_++;
    committed_events_ += fresh;
  }
  std::vector<Result<Accepted>> results;
  std::vector<Committed> callbacks;
  results.reserve(batch.size());
  callbacks.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    Result<Accepted> result = Accepted{false};
    if (!appended)
      result = appended.error();
    else if ((*appended)[i] == store::Appended::duplicate)
      result = Accepted{true};
    else if ((*appended)[i] == store::Appended::conflict)
      result =
          make_error(errc::conflict, "This webhook-id was already received with another body.");
    results.push_back(std::move(result));
    callbacks.push_back(std::move(batch[i].committed));
  }
  auto answers = [results = std::move(results), callbacks = std::move(callbacks)]() mutable {
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i](std::move(results[i]));
  };
  if (answer)
    answer(std::move(answers));
  else
    answers();
  return fresh_queued > 0;
}

}  // namespace opgate::ingress
