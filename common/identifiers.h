// Identifiers that come from outside (owners, order ids, session, turn and
// call ids): [A-Za-z0-9._-], 1-64 characters, so they can never smuggle a
// separator into a key, a path or a log line. Pure; thread-safe.
#pragma once

#include <string_view>

namespace opgate {

inline bool valid_identifier(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace opgate
