// Tool calls over MCP reach the store by group commit, as webhooks do:
// submit() queues a call and returns at once; a committer thread answers
// everything queued in one transaction and, once it is durable, hands each
// call its answer. A few committers take turns, so that one builds the next
// batch while another's is being synced: the calls per write grow with the
// load, and the store's group commit is never idle waiting for a batch.
// Calls in one batch see each other in order: the same call twice links to
// one operation. If a batch's transaction fails, each of its calls is tried
// again alone, so one call's error is never another's.
//
// Thread-safe. The queue is bounded: past `max_pending` a submission is
// answered at once with "overloaded".
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/result.h"
#include "operations/policy.h"
#include "operations/tool_calls.h"
#include "store/port.h"

namespace opgate::mcp {

struct CallAnswer {
  operations::AnsweredCall answered;
  std::optional<pb::Operation> operation;  // the one it proposed or links to
};
// Called on a committer thread once the call's answer is durable (or
// failed): keep it short.
using CallAnswered = std::function<void(Result<CallAnswer>)>;

struct CallCommitterOptions {
  size_t max_pending = 8192;  // calls waiting for the committer
  size_t max_batch = 256;     // calls in one transaction
  int committers = 3;
};

class CallCommitter {
 public:
  explicit CallCommitter(store::Storage& storage, CallCommitterOptions options = {});
  // stop()s.
  ~CallCommitter();
  CallCommitter(const CallCommitter&) = delete;
  CallCommitter& operator=(const CallCommitter&) = delete;

  // `fetched`: the order service's answers for the call (none for embedded
  // orders), read before, outside any transaction.
  void submit(operations::AgentCall call, std::shared_ptr<const operations::PolicyConfig> policy,
              std::optional<operations::FetchedOrders> fetched, CallAnswered answered)
      EXCLUDES(mu_);
  // Answers what was submitted, then stops the committer; later submissions
  // fail with "shutting_down". Idempotent.
  void stop() EXCLUDES(mu_);

  // Transactions written, and the calls they held.
  uint64_t batches() const { return batches_.load(); }
  uint64_t calls() const { return calls_.load(); }

 private:
  struct Pending {
    operations::AgentCall call;
    std::shared_ptr<const operations::PolicyConfig> policy;
    std::optional<operations::FetchedOrders> fetched;
    CallAnswered answered;
  };
  void run() EXCLUDES(mu_);
  // Answers the batch's calls in one transaction; their results in order.
  std::vector<Result<CallAnswer>> commit(const std::vector<Pending>& batch, size_t first,
                                         size_t count);

  store::Storage& storage_;
  CallCommitterOptions options_;
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> calls_{0};

  Mutex mu_;
  CondVar wake_;
  std::deque<Pending> pending_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> committers_;  // last: start after everything they use
};

}  // namespace opgate::mcp
