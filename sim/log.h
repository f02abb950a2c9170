// One-line JSON logs on stderr for the simulators: {"ts","level","msg",...fields}.
// Thread-safe: a process-wide mutex keeps lines whole.
#pragma once

#include <boost/json/object.hpp>
#include <string_view>

namespace opgate::sim {

void log_info(std::string_view msg, boost::json::object fields = {});
void log_warn(std::string_view msg, boost::json::object fields = {});

}  // namespace opgate::sim
