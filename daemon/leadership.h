// Of the processes sharing a store, the one holding the "duties" lease
// expires pending operations and sweeps sessions for all (the others would
// only repeat it: both are safe twice, being transactions over locked
// records). It acts for two thirds of the lease after each renewal, so it
// stops before another can take the lease over. Dispatcher thread only.
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/result.h"

namespace opgate::daemon {

class Leadership {
 public:
  using Hold = std::function<Result<std::optional<int64_t>>(const std::string&, const std::string&,
                                                            int64_t)>;
  Leadership(Hold hold, int64_t ttl_ms, const Clock& clock)
      : hold_(std::move(hold)),
        holder_(fmt::format("{}-{}", ::getpid(), crypto::random_hex(6))),
        ttl_ms_(ttl_ms),
        clock_(clock) {}

  bool leads() {
    const int64_t now = clock_.monotonic_ms();
    if (now - last_try_ms_ >= ttl_ms_ / 3) {
      last_try_ms_ = now;
      auto token = hold_("duties", holder_, ttl_ms_);
      const bool held = token && token->has_value();
      if (held && **token != token_)
        spdlog::info("this node performs the shared duties (expiry, sweeps); lease token {}",
                     **token);
      if (!held && until_ms_ > now) spdlog::info("another node performs the shared duties now");
      if (!token) spdlog::warn("cannot renew the duties lease: {}", token.error().message);
      token_ = held ? **token : 0;
      until_ms_ = held ? now + ttl_ms_ * 2 / 3 : 0;
    }
    return now < until_ms_;
  }

 private:
  Hold hold_;
  std::string holder_;
  int64_t ttl_ms_;
  const Clock& clock_;
  int64_t last_try_ms_ = INT64_MIN / 2;
  int64_t until_ms_ = 0;
  int64_t token_ = 0;
};

}  // namespace opgate::daemon
