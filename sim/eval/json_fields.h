// Reading fields of the JSON records the gate collects, leniently: a missing
// field reads as "" or 0, so a check can report what it found. Pure.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <string>
#include <string_view>

namespace opgate::eval {

// A string field as is, any other field as JSON text, "" if absent or null.
inline std::string str(const boost::json::value& v, std::string_view key) {
  if (!v.is_object()) return "";
  auto* p = v.as_object().if_contains(key);
  if (!p || p->is_null()) return "";
  if (p->is_string()) return std::string(p->as_string());
  return boost::json::serialize(*p);
}

// An integer field, or `fallback`.
inline int64_t i64(const boost::json::value& v, std::string_view key, int64_t fallback = 0) {
  if (!v.is_object()) return fallback;
  auto* p = v.as_object().if_contains(key);
  return p && p->is_int64() ? p->as_int64() : fallback;
}

// A delivery the notification receiver recorded that is the chat
// endpoint's message about operation `key`'s proposal.
inline bool is_chat_proposal(const boost::json::value& delivery, const std::string& key) {
  if (str(delivery, "path") != "/hooks/chat") return false;
  const auto text = str(delivery, "text");
  return text.find(key) != std::string::npos &&
         text.find("operation.proposed") != std::string::npos;
}

}  // namespace opgate::eval
