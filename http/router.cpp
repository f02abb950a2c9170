#include "http/router.h"

#include <boost/url/decode_view.hpp>
#include <boost/url/pct_string_view.hpp>

namespace opgate::http {

bool split_path(const std::string& path, std::vector<std::string>& out) {
  out.clear();
  if (path.empty() || path[0] != '/') return false;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view raw(path.data() + start, end - start);
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
  Route r{std::move(method), {}, std::move(handler)};
  split_path(pattern, r.segments);
  routes_.push_back(std::move(r));
}

Response Router::dispatch(const Request& request) const {
  std::vector<std::string> segments;
  if (!split_path(request.path(), segments))
    return error_response(400, "bad_path", "The request path is malformed.");
  std::string allowed;
  for (const auto& route : routes_) {
    if (route.segments.size() != segments.size()) continue;
    PathParams params;
    bool match = true;
    for (size_t i = 0; i < segments.size() && match; ++i) {
      const auto& pat = route.segments[i];
      if (pat.size() > 2 && pat.front() == '{' && pat.back() == '}') {
        if (segments[i].empty()) match = false;
        params[pat.substr(1, pat.size() - 2)] = segments[i];
      } else if (pat != segments[i]) {
        match = false;
      }
    }
    if (!match) continue;
    if (route.method == request.method) return route.handler(request, params);
    if (!allowed.empty()) allowed += ", ";
    allowed += route.method;
  }
  if (!allowed.empty()) {
    auto r = error_response(405, "method_not_allowed", "This method is not allowed here.");
    r.headers["Allow"] = allowed;
    return r;
  }
  return error_response(404, "not_found", "No such route.");
}

}  // namespace opgate::http
