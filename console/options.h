// The console's settings: [console] in the daemon's configuration.
#pragma once

#include <string>
#include <vector>

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
  // Addresses of the reverse proxies in front of the console: a request
  // from one of them is from the client its X-Forwarded-For names last
  // (what that proxy appended), so the sign-in limiter counts each client
  // apart. From any other peer the header is ignored.
  std::vector<std::string> trusted_proxies;
};

}  // namespace opgate::console
