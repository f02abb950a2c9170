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
// A route that answers later through `respond` (e.g. after a group commit).
using AsyncRouteHandler = std::function<void(Request&&, const PathParams&, Respond)>;

class Router {
 public:
  // pattern like "/v1/operations/{key}/approve"
  void add(std::string method, std::string pattern, RouteHandler handler);
  void add_async(std::string method, std::string pattern, AsyncRouteHandler handler);
  // 404 for an unknown path, 405 (with Allow) for a known path and other
  // method. Synchronous routes only (an asynchronous one answers 500).
  Response dispatch(const Request& request) const;
  // Every route; synchronous ones answer at once.
  void dispatch(Request&& request, Respond respond) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    RouteHandler handler;             // set for a synchronous route
    AsyncRouteHandler async_handler;  // set for an asynchronous one
  };
  // The route for the request, or the 400/404/405 answer in `miss`.
  const Route* match(const Request& request, PathParams& params, Response& miss) const;
  std::vector<Route> routes_;
};

// Splits a path into percent-decoded segments; false if it is malformed.
bool split_path(std::string_view path, std::vector<std::string>& out);

}  // namespace opgate::http
