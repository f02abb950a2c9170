// Plain HTTP request and response values, free of Beast types so that
// handlers and routing stay pure and cheap to compile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace opgate::http {

struct CaseInsensitiveLess {
  bool operator()(std::string_view a, std::string_view b) const;
  using is_transparent = void;
};
using Headers = std::map<std::string, std::string, CaseInsensitiveLess>;

// A request's header fields in the order they came, names compared without
// case, a repeated name's values joined with ", ". A request has a handful:
// a vector is searched sooner than a tree of them is built.
class Fields {
 public:
  using value_type = std::pair<std::string, std::string>;
  using const_iterator = std::vector<value_type>::const_iterator;

  Fields() = default;
  Fields(std::initializer_list<value_type> fields);
  Fields(const Headers& headers);  // NOLINT(google-explicit-constructor)

  // Adds a field; a name already present gets ", " and the value appended.
  void add(std::string_view name, std::string_view value);
  // The value of `name`, added empty if absent.
  std::string& operator[](std::string_view name);
  const std::string& at(std::string_view name) const;  // throws if absent
  const_iterator find(std::string_view name) const;
  size_t count(std::string_view name) const { return find(name) == end() ? 0 : 1; }
  void reserve(size_t n) { fields_.reserve(n); }
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  const_iterator begin() const { return fields_.begin(); }
  const_iterator end() const { return fields_.end(); }

 private:
  // The field named `name`, or size() if none is.
  size_t index_of(std::string_view name) const;
  std::vector<value_type> fields_;
};

// `s` as one URL path segment or query value: every byte but the unreserved
// characters (RFC 3986) percent-encoded.
std::string url_component(std::string_view s);

// A TCP port written in digits, 0 to 65535; none for anything else (a
// larger number is never cut to 16 bits, onto another port).
std::optional<uint16_t> port_number(std::string_view digits);

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path plus optional query, as received
  Fields headers;
  std::string body;
  // The peer's IP address as the server accepted it ("" when unknown).
  std::string remote_address;

  // Views into this request: valid while it lives and is unchanged.
  std::optional<std::string_view> header(std::string_view name) const;
  std::string_view path() const;  // target without the query
  // Decoded value of one query parameter.
  std::optional<std::string> query_param(std::string_view name) const;
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  bool close = false;  // close the connection after writing
  bool drop = false;   // close without answering (simulated faults only)
  // Wait this long before reading the connection's next request: a sender
  // that failed authentication gets one try per cooldown, so a flood of bad
  // requests cannot crowd out good senders.
  std::chrono::milliseconds cooldown{0};
};

// Answers a request that a handler finished later, possibly on another
// thread. Call it exactly once; dropping it unanswered closes the connection.
using Respond = std::function<void(Response)>;

// The response's bytes on the wire, HTTP/1.1: status line, headers,
// Content-Length, "Connection: close" unless keep_alive, then the body.
// Content-Length and Connection among the headers are replaced, and a
// header whose name or value would break the framing (CR, LF, NUL; a name
// that is not a token) is left out. A 1xx, 204 or 304 goes without body
// or Content-Length. `header_only` (the answer to a HEAD) leaves the body
// out and keeps its Content-Length.
std::string serialize(const Response& r, std::string_view reason, bool keep_alive,
                      bool header_only = false);

Response json_response(int status, std::string body);
// {"error":{"code","message"}}; the message must never carry a secret.
// An error answer from the catalogue (common/errors.h): its status and code.
Response error_response(const ErrorCode& code, std::string_view message);
// The same for an Error made from the catalogue.
Response error_response(const Error& error);
// A status and code of another service's vocabulary: the simulators only.
Response error_response(int status, std::string_view code, std::string_view message);

}  // namespace opgate::http
