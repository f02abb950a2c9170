// JSON-lines logging to stderr through spdlog: {"ts","level","msg"} per line,
// the message escaped so any text stays valid JSON. Thread-safe.
#pragma once

namespace opgate {

void init_json_logging();

}  // namespace opgate
