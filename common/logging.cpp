#include "common/logging.h"

#include <fmt/chrono.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>

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

class JsonStderrSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto level = spdlog::level::to_string_view(msg.level);
    boost::json::object line{{"ts", timestamp(msg.time)},
                             {"level", std::string(level.data(), level.size())}};
    std::string_view payload(msg.payload.data(), msg.payload.size());
    boost::json::error_code ec;
    boost::json::value event;
    if (!payload.empty() && payload.front() == kEventMark)
      event = boost::json::parse(payload.substr(1), ec);
    if (!ec && event.is_object()) {
      for (auto& [k, v] : event.as_object()) line[k] = std::move(v);
    } else {
      line["msg"] = std::string(payload);
    }
    std::string text = boost::json::serialize(line);
    text += '\n';
    std::fwrite(text.data(), 1, text.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
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
    if (!v.empty()) o[k] = v;
  spdlog::log(level, "{}{}", kEventMark, boost::json::serialize(o));
}

}  // namespace opgate
