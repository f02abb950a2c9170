// The PostgreSQL schema as numbered migrations (SQL embedded in the
// binary), applied in order under a session advisory lock so that several
// nodes starting at once apply each exactly once. schema_migrations records
// what is applied; a database migrated by a newer opgate is refused.
#pragma once

#include <climits>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/postgres/pg.h"

namespace opgate::store::pg {

struct Migration {
  int version;
  const char* description;
  const char* sql;
  // Run after `sql`, in the same transaction: fills new columns from the
  // records' protobuf bytes, which SQL cannot read. May be null.
  Status (*backfill)(Conn& conn) = nullptr;
};

// Every migration, in order.
const std::vector<Migration>& migrations();

struct MigrationReport {
  int from_version = 0;
  int to_version = 0;
  std::vector<std::string> applied;  // "version: description"
};

// Brings the schema up to date, or up to version `up_to` (tests of a
// migration start from the version before it), creating options.schema if
// set.
Result<MigrationReport> migrate(const ConnOptions& options, int up_to = INT_MAX);

}  // namespace opgate::store::pg
