#include "http/message.h"

#include <strings.h>

#include <boost/json.hpp>
#include <boost/url/params_view.hpp>
#include <boost/url/parse.hpp>

namespace opgate::http {

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  const size_t n = std::min(a.size(), b.size());
  int c = strncasecmp(a.data(), b.data(), n);
  if (c != 0) return c < 0;
  return a.size() < b.size();
}

std::optional<std::string> Request::header(std::string_view name) const {
  auto it = headers.find(name);
  if (it == headers.end()) return std::nullopt;
  return it->second;
}

std::string Request::path() const {
  auto q = target.find('?');
  return q == std::string::npos ? target : target.substr(0, q);
}

std::optional<std::string> Request::query_param(std::string_view name) const {
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) return std::nullopt;
  for (auto param : parsed->params()) {
    if (param.key == name) return std::string(param.value);
  }
  return std::nullopt;
}

Response json_response(int status, std::string body) {
  Response r;
  r.status = status;
  r.headers["Content-Type"] = "application/json";
  r.body = std::move(body);
  return r;
}

Response error_response(int status, std::string_view code, std::string_view message) {
  boost::json::object err{{"code", code}, {"message", message}};
  return json_response(status, boost::json::serialize(boost::json::object{{"error", err}}));
}

}  // namespace opgate::http
