// The gauges /metrics reads when it is scraped: each a counter kept in step
// with the writes or an in-memory value, never a scan of history. A gauge
// whose records cannot be read is NaN (an alert on it neither fires nor
// clears by mistake), logged and counted. Thread-safe.
#pragma once

#include "common/clock.h"
#include "common/live.h"
#include "common/metrics.h"
#include "ingress/inbox.h"
#include "operations/attention.h"
#include "outbox/notifier.h"
#include "store/port.h"

namespace opgate::store::rocks {
class RocksStorage;
}

namespace opgate::daemon {

// The inbox, the store's writes and syncs, the operations by state and the
// oldest pending and unknown ones; `rocks` (when the backend is RocksDB)
// adds its journal's group commits.
void register_gauges(Metrics& metrics, store::Storage& storage, store::rocks::RocksStorage* rocks,
                     ingress::Inbox& inbox, const Clock& clock,
                     operations::AttentionPolicy attention);

// Per configured endpoint (as reloaded): its backlog and whether it is
// healthy; and the deliveries held for endpoints this node does not know.
void register_notify_gauges(Metrics& metrics, store::Storage& storage,
                            Live<outbox::NotifyConfig>& notify);

}  // namespace opgate::daemon
