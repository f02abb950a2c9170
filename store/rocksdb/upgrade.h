// Upgrades a data directory written in an older data format to the
// current one, in place, in batches that each commit whole; an upgrade cut
// short by a crash resumes where it stopped at the next open.
#pragma once

#include <functional>

#include "common/result.h"
#include "store/rocksdb/db.h"

namespace opgate::store::rocks {

// Format 1 -> 2: each inbox event moves from under its webhook-id into
// `events` under a sequence number (in the order of their keys; older than
// any number a running store hands out), an index entry takes its place,
// and queue and parked entries point at the new key. Then the directory
// records format 2. Nothing to do on a directory already at 2. `progress`
// (if set) hears the count moved when the upgrade starts, after every
// `every` events (rounded up to whole batches of 1,000), and after each
// batch of entries repointed.
Status upgrade_inbox(Db& db, const std::function<void(size_t moved)>& progress = {},
                     size_t every = 100'000);

}  // namespace opgate::store::rocks
