// JSON-lines logging to stderr through spdlog, one object a line:
//   {"ts","level","msg"}                        for plain messages
//   {"ts","level","msg","event", ...fields}     for business events
// Events are what an on-call engineer filters on: every state change, every
// decision, every rejected webhook, every provider answer and
// reconciliation, with the fields of that event (operation_key, session_id,
// principal, source, state, outcome, reason, ...). Values are escaped so any
// text stays valid JSON; callers never pass a secret, a token or a webhook
// body. Thread-safe.
#pragma once

#include <spdlog/common.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace opgate {

void init_json_logging();

// "trace" | "debug" | "info" | "warn" | "error" | "critical" | "off".
bool valid_log_level(std::string_view level);
void set_log_level(std::string_view level);

using LogFields = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// One event line: `event` names it ("operation.transition",
// "webhook.rejected", ...), `msg` says it for people. A field named "ts" or
// "level" is left out: those are the line's own.
void log_event(spdlog::level::level_enum level, std::string_view event, std::string_view msg,
               LogFields fields);

// The line (with its newline) for one message: `payload` is either an
// event's JSON object after its mark (log_event), whose fields follow ts
// and level, or plain text, which becomes msg. Pure.
std::string log_line(std::string_view ts, std::string_view level, std::string_view payload);

}  // namespace opgate
