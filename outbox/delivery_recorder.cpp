#include "outbox/delivery_recorder.h"

#include <algorithm>
#include <utility>

#include "outbox/claim.h"

namespace opgate::outbox {

Status record_deliveries(store::Storage& storage, std::vector<const Delivered*> sorted) {
  // By item id: two transactions recording the same items lock them in
  // one order.
  std::sort(sorted.begin(), sorted.end(),
            [](const Delivered* a, const Delivered* b) { return a->entry.id < b->entry.id; });
  store::ReadAhead ahead;
  for (const auto* d : sorted) {
    ahead.outbox_items.push_back(d->entry.id);
    ahead.calls.push_back(d->entry.item.call());
  }
  return storage.transact([&](store::Transaction& txn) -> Status {
    OPGATE_TRY(txn.read_ahead(ahead));
    for (const auto* d : sorted) {
      OPGATE_ASSIGN_OR_RETURN(bool ours, unchanged(txn, d->entry));
      if (!ours) continue;  // another process delivered it (same key) and records it
      OPGATE_ASSIGN_OR_RETURN(auto call, txn.call(d->entry.item.call()));
      if (call) {
        call->set_delivery(d->delivery);
        call->set_delivery_error(d->error);
        call->set_delivered_at_ms(txn.now_ms());
        txn.put_call(*call);
      }
      txn.remove_outbox(d->entry.id);
    }
    return Status::Ok();
  });
}

DeliveryRecorder::DeliveryRecorder(store::Storage& storage, size_t max_batch)
    : storage_(storage), max_batch_(std::max<size_t>(1, max_batch)) {}

Status DeliveryRecorder::record(Delivered delivered) {
  Waiting me{std::move(delivered)};
  mu_.lock();
  waiting_.push_back(&me);
  while (!me.done) {
    if (committing_) {
      cv_.wait(mu_);
      continue;
    }
    // No record is committing: this caller commits what waits, its own
    // delivery among it unless more than a batch waited before it.
    committing_ = true;
    std::vector<Waiting*> batch;
    while (!waiting_.empty() && batch.size() < max_batch_) {
      batch.push_back(waiting_.front());
      waiting_.pop_front();
    }
    mu_.unlock();
    const size_t transactions = commit(batch);
    mu_.lock();
    for (auto* w : batch) {
      w->done = true;
      if (w->status) ++recorded_;
    }
    transactions_ += transactions;
    committing_ = false;
    cv_.notify_all();
  }
  Status status = me.status;
  mu_.unlock();
  return status;
}

// Sets each one's status; its waiter reads it once it is marked done.
size_t DeliveryRecorder::commit(const std::vector<Waiting*>& batch) {
  std::vector<const Delivered*> together;
  together.reserve(batch.size());
  for (const auto* w : batch) together.push_back(&w->delivered);
  Status s = record_deliveries(storage_, std::move(together));
  if (s || batch.size() == 1) {
    for (auto* w : batch) w->status = s;
    return 1;
  }
  for (auto* w : batch) w->status = record_deliveries(storage_, {&w->delivered});
  return 1 + batch.size();
}

size_t DeliveryRecorder::waiting() const {
  MutexLock lock(mu_);
  return waiting_.size();
}

size_t DeliveryRecorder::transactions() const {
  MutexLock lock(mu_);
  return transactions_;
}

size_t DeliveryRecorder::recorded() const {
  MutexLock lock(mu_);
  return recorded_;
}

}  // namespace opgate::outbox
