// The console's files (console/assets/*), compiled into the binary by the
// build (cmake/embed_assets.cmake writes the table). Immutable; thread-safe.
#pragma once

#include <string_view>

namespace opgate::console {

struct Asset {
  std::string_view name;  // the file's name, e.g. "console.js"
  std::string_view body;
};

// The file with this name; nullptr if there is none.
const Asset* find_asset(std::string_view name);

// Content-Type by the name's extension; application/octet-stream if unknown.
std::string_view content_type_of(std::string_view name);

}  // namespace opgate::console
