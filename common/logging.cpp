#include "common/logging.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace opgate {

namespace {

class JsonStderrSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    boost::json::object line{
        {"ts_ms", ms},
        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                              spdlog::level::to_string_view(msg.level).size())},
        {"msg", std::string(msg.payload.data(), msg.payload.size())}};
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

}  // namespace opgate
