#include "common/logging.h"

#include <fmt/chrono.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>

#include "common/mutex.h"

namespace opgate {

namespace {

// An event's payload starts with this byte and carries its JSON object.
constexpr char kEventMark = '\x1e';

std::string timestamp(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", tm, ms % 1000);
}

// Each line is made outside any lock and written by one fwrite under the
// sink's own lock (stderr is unbuffered: one write a line), so lanes that
// log a transition do not queue behind each other's formatting.
class JsonStderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto level = spdlog::level::to_string_view(msg.level);
    const std::string text =
        log_line(timestamp(msg.time), std::string_view(level.data(), level.size()),
                 std::string_view(msg.payload.data(), msg.payload.size()));
    MutexLock lock(write_mu_);
    std::fwrite(text.data(), 1, text.size(), stderr);
  }
  void flush_() override {
    MutexLock lock(write_mu_);
    std::fflush(stderr);
  }

 private:
  Mutex write_mu_;
};

}  // namespace

void init_json_logging() {
  auto logger = std::make_shared<spdlog::logger>("opgate", std::make_shared<JsonStderrSink>());
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

bool valid_log_level(std::string_view level) {
  return level == "off" || spdlog::level::from_str(std::string(level)) != spdlog::level::off;
}

void set_log_level(std::string_view level) {
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

void log_event(spdlog::level::level_enum level, std::string_view event, std::string_view msg,
               LogFields fields) {
  if (!spdlog::should_log(level)) return;
  boost::json::object o{{"msg", msg}, {"event", event}};
  for (const auto& [k, v] : fields)
    if (!v.empty() && k != "ts" && k != "level") o[k] = v;
  std::string payload(1, kEventMark);
  payload += boost::json::serialize(o);
  spdlog::log(level, "{}", payload);
}

std::string log_line(std::string_view ts, std::string_view level, std::string_view payload) {
  std::string line = "{\"ts\":";
  line += boost::json::serialize(boost::json::string(ts));
  line += ",\"level\":";
  line += boost::json::serialize(boost::json::string(level));
  // An event's object, as log_event serialised it: its fields follow.
  if (payload.size() > 3 && payload.front() == kEventMark && payload[1] == '{' &&
      payload.back() == '}') {
    line += ',';
    line += payload.substr(2);
  } else {
    line += ",\"msg\":";
    line += boost::json::serialize(boost::json::string(payload));
    line += '}';
  }
  line += '\n';
  return line;
}

}  // namespace opgate
