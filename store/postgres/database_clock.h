// The database's wall clock as this node sees it: the node's own clock plus
// an offset measured against PostgreSQL's clock_timestamp() (half the round
// trip taken off), measured again now and then. Nodes that share a
// database then agree on the time to within their round trips, whatever
// their own clocks say, so a claim's lease or an approval's expiry that one
// node writes ends when every other node thinks it ends. Monotonic time
// stays the node's own. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/clock.h"
#include "common/result.h"

namespace opgate::store::pg {

class Conn;

class DatabaseClock final : public Clock {
 public:
  explicit DatabaseClock(const Clock& local) : local_(local) {}
  int64_t now_ms() const override { return local_.now_ms() + offset_ms_.load(); }
  int64_t monotonic_ns() const override { return local_.monotonic_ns(); }

  // One measurement over `conn` (its statement "db_now" prepared); an error
  // leaves the offset as it was.
  Status sync(Conn& conn);
  // The database's clock minus this node's, as last measured.
  int64_t offset_ms() const { return offset_ms_.load(); }
  // The monotonic time of the last measurement (0: never).
  int64_t synced_at_ms() const { return synced_at_ms_.load(); }

 private:
  const Clock& local_;
  std::atomic<int64_t> offset_ms_{0};
  std::atomic<int64_t> synced_at_ms_{0};
};

}  // namespace opgate::store::pg
