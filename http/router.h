// Maps method + path to a handler, with "{name}" path parameters. Pure:
// no sockets, so routes are unit-tested directly. Thread-safe after setup.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "http/message.h"

namespace opgate::http {

using PathParams = std::map<std::string, std::string>;
using RouteHandler = std::function<Response(const Request&, const PathParams&)>;

class Router {
 public:
  // pattern like "/v1/operations/{key}/approve"
  void add(std::string method, std::string pattern, RouteHandler handler);
  // 404 for an unknown path, 405 (with Allow) for a known path and other method.
  Response dispatch(const Request& request) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    RouteHandler handler;
  };
  std::vector<Route> routes_;
};

// Splits a path into percent-decoded segments; false if it is malformed.
bool split_path(const std::string& path, std::vector<std::string>& out);

}  // namespace opgate::http
