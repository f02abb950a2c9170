// Small file helpers. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/result.h"

namespace opgate {

// Writes `content` to `path` through a temporary file and a rename, so a
// reader never sees a partial file.
Status write_file_atomically(const std::string& path, const std::string& content);

}  // namespace opgate
