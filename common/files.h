// Small file helpers. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/result.h"

namespace opgate {

// Writes `content` to `path` through a temporary file and a rename, so a
// reader never sees a partial file; synced, with its directory, before it
// returns, so a power loss leaves the old file or the new one.
Status write_file_atomically(const std::string& path, const std::string& content);

// Syncs `dir` (its entries' names), and first with `files` every file in
// it (not below it).
Status sync_directory(const std::string& dir, bool files = false);

}  // namespace opgate
