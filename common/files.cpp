#include "common/files.h"

#include <filesystem>
#include <fstream>

namespace opgate {

Status write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    out.flush();
    if (!out) return make_error(errc::file_write, "cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(errc::file_write, "cannot rename " + tmp + ": " + ec.message());
  return Status::Ok();
}

}  // namespace opgate
