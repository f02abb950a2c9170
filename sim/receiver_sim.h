// `opgate-sim receiver`: a notification endpoint (a team's webhook receiver
// or a Slack incoming webhook) that verifies each delivery's Standard
// Webhooks signature and keeps every delivery it received, in order, with
// fault injection (delay, drops, 500, 429 with Retry-After, 410 Gone). Any
// path outside /_sim/ receives; the path tells endpoints apart.
// Admin: GET /_sim/received, POST /_sim/reset, POST|GET|DELETE /_sim/faults
// (subject: the delivery's webhook-id). Thread-safe.
#pragma once

#include <boost/json/array.hpp>
#include <string>

#include "common/clock.h"
#include "common/mutex.h"
#include "http/message.h"
#include "http/router.h"
#include "sim/faults.h"

namespace opgate::sim {

class ReceiverSim {
 public:
  ReceiverSim(std::string raw_key, const Clock& clock);
  http::Response handle(http::Request&& request) EXCLUDES(mu_);

 private:
  http::Response receive(const http::Request& request) EXCLUDES(mu_);
  std::string raw_key_;
  const Clock& clock_;
  FaultTable faults_;
  http::Router admin_;
  Mutex mu_;
  boost::json::array received_ GUARDED_BY(mu_);
};

}  // namespace opgate::sim
