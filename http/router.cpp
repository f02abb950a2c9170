#include "http/router.h"

#include <algorithm>
#include <boost/url/decode_view.hpp>
#include <boost/url/params_view.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/pct_string_view.hpp>

#include "common/text.h"

namespace opgate::http {

bool split_path(std::string_view path, std::vector<std::string>& out) {
  out.clear();
  out.reserve(8);
  if (path.empty() || path[0] != '/') return false;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view raw = path.substr(start, end - start);
    auto pct = boost::urls::make_pct_string_view(raw);
    if (!pct) return false;
    std::string decoded;
    for (char c : pct->decode()) decoded.push_back(c);
    out.push_back(std::move(decoded));
    start = end + 1;
  }
  return true;
}

void Router::add(std::string method, std::string pattern, RouteHandler handler) {
  Route r{std::move(method), {}, std::move(handler), {}};
  split_path(pattern, r.segments);
  routes_.push_back(std::move(r));
}

void Router::add_async(std::string method, std::string pattern, AsyncRouteHandler handler) {
  Route r{std::move(method), {}, {}, std::move(handler)};
  split_path(pattern, r.segments);
  routes_.push_back(std::move(r));
}

const Router::Route* Router::match(const Request& request, PathParams& params,
                                   Response& miss) const {
  std::vector<std::string> segments;
  if (!split_path(request.path(), segments)) {
    miss = error_response(errc::bad_request, "The request path is malformed.");
    return nullptr;
  }
  // What a handler reads (keys, cursors) may go to a database as text:
  // decoded, the path and the query are UTF-8 without NUL, or refused here.
  const bool text_path = std::all_of(segments.begin(), segments.end(),
                                     [](const std::string& s) { return utf8_text(s); });
  bool text_query = true;
  if (request.target.find('?') != std::string::npos) {  // most requests have none
    auto query = boost::urls::parse_origin_form(request.target);
    text_query = query.has_value();
    if (query)
      for (auto param : query->params())
        text_query = text_query && utf8_text(param.key) && utf8_text(param.value);
  }
  if (!text_path || !text_query) {
    miss = error_response(errc::bad_request,
                          "The request's path and query must be UTF-8 text, without NUL.");
    return nullptr;
  }
  std::string allowed;
  for (const auto& route : routes_) {
    if (route.segments.size() != segments.size()) continue;
    PathParams candidate;
    bool matched = true;
    for (size_t i = 0; i < segments.size() && matched; ++i) {
      const auto& pat = route.segments[i];
      if (pat.size() > 2 && pat.front() == '{' && pat.back() == '}') {
        if (segments[i].empty()) matched = false;
        candidate[pat.substr(1, pat.size() - 2)] = segments[i];
      } else if (pat != segments[i]) {
        matched = false;
      }
    }
    if (!matched) continue;
    // A HEAD is answered as its GET, whose body the server leaves out.
    if (route.method == request.method || (request.method == "HEAD" && route.method == "GET")) {
      params = std::move(candidate);
      return &route;
    }
    if (!allowed.empty()) allowed += ", ";
    allowed += route.method;
    if (route.method == "GET") allowed += ", HEAD";
  }
  if (!allowed.empty()) {
    miss = error_response(errc::method_not_allowed, "This method is not allowed here.");
    miss.headers["Allow"] = allowed;
  } else {
    miss = error_response(errc::not_found, "No such route.");
  }
  return nullptr;
}

Response Router::dispatch(const Request& request) const {
  PathParams params;
  Response miss;
  const Route* route = match(request, params, miss);
  if (!route) return miss;
  if (!route->handler) return error_response(errc::internal, "This route answers asynchronously.");
  return route->handler(request, params);
}

void Router::dispatch(Request&& request, Respond respond) const {
  PathParams params;
  Response miss;
  const Route* route = match(request, params, miss);
  if (!route) return respond(std::move(miss));
  if (route->async_handler)
    return route->async_handler(std::move(request), params, std::move(respond));
  respond(route->handler(request, params));
}

}  // namespace opgate::http
