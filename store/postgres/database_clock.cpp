#include "store/postgres/database_clock.h"

#include "store/postgres/pg.h"

namespace opgate::store::pg {

Status DatabaseClock::sync(Conn& conn) {
  const int64_t sent = local_.now_ms();
  auto rows = conn.run("db_now", {});
  const int64_t received = local_.now_ms();
  if (!rows) return rows.error();
  if (rows->empty())
    return make_error(errc::storage_unavailable, "the database did not tell its time");
  offset_ms_ = rows->int8(0, 0) - (sent + received) / 2;
  const int64_t at = local_.monotonic_ms();
  synced_at_ms_ = at == 0 ? 1 : at;  // 0 means never
  return Status::Ok();
}

}  // namespace opgate::store::pg
