// Looking up a host's addresses within a time limit. getaddrinfo cannot be
// interrupted, and the system resolver's own limits (a timeout per server
// and attempt, search domains) add up to tens of seconds when DNS is down:
// each lookup runs on a thread of its own, and its caller stops waiting at
// its deadline; a lookup left behind ends on its own and is forgotten. At
// most kLookupsAtOnce run at once, those left behind included. Thread-safe.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "common/result.h"

namespace opgate::http {

using Addresses = boost::asio::ip::tcp::resolver::results_type;

inline constexpr int kLookupsAtOnce = 64;

using LookUp = std::function<Result<Addresses>(const std::string& host, const std::string& port)>;

// The system's lookup (getaddrinfo), as long as it takes.
Result<Addresses> system_look_up(const std::string& host, const std::string& port);

// `look_up(host, port)`, waited for at most `within`. Every failure, the
// deadline's included, is errc::connect_failed: nothing was sent.
Result<Addresses> look_up_within(const std::string& host, const std::string& port,
                                 std::chrono::milliseconds within,
                                 const LookUp& look_up = system_look_up);

}  // namespace opgate::http
