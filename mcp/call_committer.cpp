#include "mcp/call_committer.h"

#include <algorithm>

#include "common/thread_name.h"
#include "operations/agent_tokens.h"

namespace opgate::mcp {

CallCommitter::CallCommitter(store::Storage& storage, CallCommitterOptions options)
    : storage_(storage), options_(options) {
  for (int i = 0; i < std::max(1, options_.committers); ++i)
    committers_.emplace_back([this] {
      name_this_thread("mcp-commit");
      run();
    });
}

CallCommitter::~CallCommitter() { stop(); }

void CallCommitter::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : committers_)
    if (t.joinable()) t.join();
}

void CallCommitter::submit(operations::AgentCall call,
                           std::shared_ptr<const operations::PolicyConfig> policy,
                           std::optional<operations::FetchedOrders> fetched,
                           CallAnswered answered) {
  std::optional<Error> refused;
  {
    MutexLock lock(mu_);
    if (stopping_)
      refused = make_error(errc::shutting_down, "The MCP front door is stopping.");
    else if (pending_.size() >= options_.max_pending)
      refused = make_error(errc::overloaded, "Too many tool calls are waiting to be stored.");
    else
      pending_.push_back({std::move(call), std::move(policy), std::move(fetched), answered});
  }
  if (refused) return answered(*refused);
  wake_.notify_one();
}

void CallCommitter::run() {
  std::vector<Pending> batch;
  for (;;) {
    {
      MutexLock lock(mu_);
      while (!stopping_ && pending_.empty()) wake_.wait(mu_);
      if (pending_.empty()) return;  // stopping, and every call answered
      while (!pending_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
    }
    auto results = commit(batch, 0, batch.size());
    if (results.size() == 1 && !results.front().ok() && batch.size() > 1) {
      // The batch failed as a whole: each call alone, so that the error is
      // only the failing call's.
      results.clear();
      for (size_t i = 0; i < batch.size(); ++i)
        results.push_back(std::move(commit(batch, i, 1).front()));
    }
    for (size_t i = 0; i < batch.size(); ++i) batch[i].answered(std::move(results[i]));
    batch.clear();
  }
}

std::vector<Result<CallAnswer>> CallCommitter::commit(const std::vector<Pending>& batch,
                                                      size_t first, size_t count) {
  std::vector<CallAnswer> answers;
  Status s = storage_.transact([&](store::Transaction& txn) -> Status {
    answers.clear();
    for (size_t i = first; i < first + count; ++i) {
      const Pending& p = batch[i];
      if (!p.call.agent_token_sha256.empty())
        OPGATE_TRY(
            operations::require_live_agent_token(txn, p.call.agent_token_sha256, txn.now_ms()));
      CallAnswer a;
      OPGATE_ASSIGN_OR_RETURN(
          a.answered,
          operations::answer_call(txn, p.call, *p.policy, p.fetched ? &*p.fetched : nullptr));
      if (!a.answered.call.operation_key().empty()) {
        OPGATE_ASSIGN_OR_RETURN(a.operation, txn.operation(a.answered.call.operation_key()));
      }
      answers.push_back(std::move(a));
    }
    return Status::Ok();
  });
  std::vector<Result<CallAnswer>> out;
  if (!s.ok()) {
    out.push_back(s.error());
    return out;
  }
  batches_++;
  calls_ += count;
  for (auto& a : answers) out.push_back(std::move(a));
  return out;
}

}  // namespace opgate::mcp
