#pragma once
// Reading fields out of JSON that others wrote.

#include <boost/json.hpp>
#include <string>
#include <string_view>

namespace opgate {

// The string at key, or "" when it is missing or not a string.
inline std::string string_field(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

}  // namespace opgate
