// Orders are server-owned data: parsed and validated strictly from JSON
// (seed file, PUT /v1/orders/{id}), stored in the "orders" column family.
// Pure parsing; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "opgate.pb.h"
#include "store/store.h"

namespace opgate::worker {

Result<pb::Order> parse_order(std::string_view json_text);
std::string order_to_json(const pb::Order& order);

// Every order of an NDJSON file (blank lines skipped); a bad line is an
// error naming the file and its line number.
Result<std::vector<pb::Order>> read_orders_file(const std::string& path);

// Upserts every order of an NDJSON file in one synced batch; a bad line
// names its line number and nothing is written.
Result<size_t> import_orders_file(store::Store& store, const std::string& path, int64_t now_ms);

}  // namespace opgate::worker
