#include "sim/log.h"

#include <boost/json/serialize.hpp>
#include <chrono>
#include <cstdio>

#include "common/mutex.h"

namespace opgate::sim {
namespace {

Mutex& log_mutex() {
  static Mutex mu;
  return mu;
}

void emit(std::string_view level, std::string_view msg, boost::json::object fields) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  boost::json::object line;
  line["ts_ms"] = now;
  line["level"] = level;
  line["msg"] = msg;
  for (auto& [k, v] : fields) line[k] = std::move(v);
  const std::string text = boost::json::serialize(line);
  MutexLock lock(log_mutex());
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace

void log_info(std::string_view msg, boost::json::object fields) {
  emit("info", msg, std::move(fields));
}
void log_warn(std::string_view msg, boost::json::object fields) {
  emit("warn", msg, std::move(fields));
}

}  // namespace opgate::sim
