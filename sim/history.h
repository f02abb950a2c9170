// Months of history, made in minutes: fills a store with settled refunds
// (order, bound session, the request_refund call, the operation with its
// four audit records and its ledger row) through the storage port and the
// domain's own functions, as if each had gone the whole way, plus a few
// operations left in outcome_unknown. For scripts/bench-history, which then
// measures whether the present slows down.
#pragma once

#include <cstddef>
#include <functional>

#include "common/clock.h"
#include "common/result.h"
#include "store/port.h"

namespace opgate::sim {

struct HistoryOptions {
  size_t settled = 1'000'000;
  size_t outcome_unknown = 10;
  size_t per_transaction = 500;
};

// `clock` is the store's clock: the history is dated from its time on, one
// operation per simulated second. Outbox items the history would leave
// (result deliveries, notifications, reconciliations) are removed: they
// were delivered long ago. `progress` gets the operations written so far.
Status fill_history(store::Storage& storage, ManualClock& clock, const HistoryOptions& options,
                    const std::function<void(size_t)>& progress = {});

}  // namespace opgate::sim
