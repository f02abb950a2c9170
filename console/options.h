// The console's settings: [console] in the daemon's configuration.
#pragma once

#include <string>

#include "console/sessions.h"

namespace opgate::console {

struct Options {
  bool enabled = true;
  SessionLimits sessions;
  // The origin browsers reach the console at ("https://ops.example.com"),
  // which state-changing requests must come from; empty: the request's Host
  // with http, or https under TLS.
  std::string origin;
  // The operator listener serves TLS: cookies are Secure. A configured
  // https origin makes them Secure too.
  bool tls = false;
};

}  // namespace opgate::console
