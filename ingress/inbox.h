// The durable inbox: webhook events keyed by source and webhook-id, plus a
// queue of events the worker has not processed yet. accept() returns only
// after the event is on disk. Thread-safe: a striped lock per webhook-id
// makes "check, then store" atomic, so two copies racing store one event.
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "ingress/envelope.h"
#include "store/store.h"

namespace opgate::ingress {

struct Accepted {
  bool duplicate = false;
};

class Inbox {
 public:
  Inbox(store::Store& store, const Clock& clock);

  // Errors: "conflict" (same id, other body), "storage_error".
  Result<Accepted> accept(const std::string& source, const std::string& webhook_id,
                          const std::string& body, const Envelope& envelope);

  // Events waiting for the worker.
  size_t backlog() const { return backlog_.load(); }
  void processed(size_t n) { backlog_ -= std::min(n, backlog_.load()); }
  void set_backlog(size_t n) { backlog_ = n; }

  // Allocates a queue sequence number (monotonic across restarts).
  uint64_t next_seq();

  static std::string event_key(const std::string& source, const std::string& webhook_id);
  static std::string queue_key(uint64_t seq);
  static std::string waiting_key(const std::string& session_id, uint64_t seq);

 private:
  store::Store& store_;
  const Clock& clock_;
  std::array<std::mutex, 64> stripes_;
  std::atomic<uint64_t> seq_;
  std::atomic<size_t> backlog_{0};
};

}  // namespace opgate::ingress
