// Small helpers the simulators share for HTTP handling: JSON bodies without
// exceptions, bearer tokens, and acting out a fault rule's delay.
// Pure functions, thread-safe.
#pragma once

#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "http/message.h"
#include "sim/faults.h"

namespace opgate::sim {

// Parsed JSON, or nullopt if the text is not JSON.
std::optional<boost::json::value> parse_json(std::string_view text);

// JSON response with a serialized value.
http::Response json_reply(int status, const boost::json::value& body);

// The credential of "Authorization: Bearer X", or the user name of
// "Authorization: Basic base64(X:)"; nullopt if absent or malformed.
std::optional<std::string> api_key_of(const http::Request& request);

// Sleeps for the rule's delay, if any; returns early once shutdown begins.
void apply_delay(const std::optional<FaultRule>& rule);
// Wakes every apply_delay() so a draining server is not held up by a fault.
void interrupt_delays();

// True if the rule ends the request before anything is processed.
bool is_before_commit(const std::optional<FaultRule>& rule);

}  // namespace opgate::sim

namespace opgate::sim {

// True for the router's own 404/405 answers (an error object without a
// "type"), which each simulator reshapes into its provider's error format.
bool is_router_miss(const http::Response& response);
// The simulator's own reply for a router miss, keeping the miss's Allow.
http::Response reshaped_miss(const http::Response& miss, http::Response reply);

}  // namespace opgate::sim
