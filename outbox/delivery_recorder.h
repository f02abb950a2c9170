// Records what became of delivered tool results: the delivery on the call
// and the removal of its item, fenced like every outbox write (claim.h).
// Deliveries that end while a record is committing wait for it, and the
// next commit records them all in one transaction (a group commit): under
// load a delivery's record costs a share of one transaction, not one of
// its own, and alone it waits for nothing. Each caller waits for its own
// record; a batch that cannot commit is recorded one by one, so that one
// delivery's failure is no other's.
// Thread-safety: record() from any thread; the waiting is bounded by the
// callers (each waits for its own record).
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/result.h"
#include "store/port.h"

namespace opgate::outbox {

// One delivered result: the item that carried it, as dispatched, and what
// the agent platform said.
struct Delivered {
  store::OutboxEntry entry;
  pb::Delivery delivery = pb::DELIVERY_DELIVERED;
  std::string error;  // why it needs attention, if it does
};

// Records `batch` in one transaction: for each item still as dispatched,
// the delivery on its call (if the call is kept) and the item's removal.
// An item another process took over is left to it.
Status record_deliveries(store::Storage& storage, std::vector<const Delivered*> batch);

class DeliveryRecorder {
 public:
  // At most `max_batch` deliveries in one transaction.
  explicit DeliveryRecorder(store::Storage& storage, size_t max_batch = 64);

  // Records one delivery, with those waiting beside it; returns when it is
  // committed (or failed).
  Status record(Delivered delivered) EXCLUDES(mu_);

  // Deliveries waiting for a commit to take them.
  size_t waiting() const EXCLUDES(mu_);
  // Transactions run (a batch that fails is run again one by one), and
  // deliveries recorded by them.
  size_t transactions() const EXCLUDES(mu_);
  size_t recorded() const EXCLUDES(mu_);

 private:
  struct Waiting {
    Delivered delivered;
    bool done = false;
    Status status = Status::Ok();
  };
  // Commits `batch` (all, or each alone if together they fail), outside
  // the lock; returns how many transactions it took.
  size_t commit(const std::vector<Waiting*>& batch) EXCLUDES(mu_);

  store::Storage& storage_;
  const size_t max_batch_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Waiting*> waiting_ GUARDED_BY(mu_);
  bool committing_ GUARDED_BY(mu_) = false;
  size_t transactions_ GUARDED_BY(mu_) = 0;
  size_t recorded_ GUARDED_BY(mu_) = 0;
};

}  // namespace opgate::outbox
