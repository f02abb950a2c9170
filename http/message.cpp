#include "http/message.h"

#include <strings.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/params_view.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>
#include <cctype>
#include <charconv>
#include <stdexcept>

namespace opgate::http {

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  const size_t n = std::min(a.size(), b.size());
  int c = strncasecmp(a.data(), b.data(), n);
  if (c != 0) return c < 0;
  return a.size() < b.size();
}

namespace {
bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}
}  // namespace

Fields::Fields(std::initializer_list<value_type> fields) {
  for (const auto& [name, value] : fields) add(name, value);
}

Fields::Fields(const Headers& headers) {
  fields_.reserve(headers.size());
  for (const auto& [name, value] : headers) add(name, value);
}

size_t Fields::index_of(std::string_view name) const {
  size_t i = 0;
  while (i < fields_.size() && !same_name(fields_[i].first, name)) ++i;
  return i;
}

void Fields::add(std::string_view name, std::string_view value) {
  const size_t i = index_of(name);
  if (i < fields_.size())
    fields_[i].second.append(", ").append(value);
  else
    fields_.emplace_back(name, value);
}

std::string& Fields::operator[](std::string_view name) {
  const size_t i = index_of(name);
  if (i < fields_.size()) return fields_[i].second;
  return fields_.emplace_back(name, std::string()).second;
}

const std::string& Fields::at(std::string_view name) const {
  auto it = find(name);
  if (it == end()) throw std::out_of_range("no header field " + std::string(name));
  return it->second;
}

Fields::const_iterator Fields::find(std::string_view name) const {
  return begin() + static_cast<std::ptrdiff_t>(index_of(name));
}

std::optional<std::string_view> Request::header(std::string_view name) const {
  auto it = headers.find(name);
  if (it == headers.end()) return std::nullopt;
  return std::string_view(it->second);
}

std::string_view Request::path() const {
  return std::string_view(target).substr(0, target.find('?'));
}

std::string url_component(std::string_view s) {
  return boost::urls::encode(s, boost::urls::unreserved_chars);
}

std::optional<uint16_t> port_number(std::string_view digits) {
  uint16_t port = 0;
  const char* end = digits.data() + digits.size();
  auto [at, ec] = std::from_chars(digits.data(), end, port);
  if (digits.empty() || ec != std::errc() || at != end) return std::nullopt;
  return port;
}

std::optional<std::string> Request::query_param(std::string_view name) const {
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) return std::nullopt;
  for (auto param : parsed->params()) {
    if (param.key == name) return std::string(param.value);
  }
  return std::nullopt;
}

namespace {
bool token_char(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}
bool safe_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), token_char);
}
bool safe_value(std::string_view value) {
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}
}  // namespace

std::string serialize(const Response& r, std::string_view reason, bool keep_alive,
                      bool header_only) {
  std::string out;
  out.reserve(128 + r.body.size());
  out.append("HTTP/1.1 ").append(std::to_string(r.status)).append(" ").append(reason);
  out.append("\r\n");
  for (const auto& [name, value] : r.headers) {
    if (!safe_name(name) || !safe_value(value)) continue;
    if (strcasecmp(name.c_str(), "Content-Length") == 0 ||
        strcasecmp(name.c_str(), "Connection") == 0)
      continue;
    out.append(name).append(": ").append(value).append("\r\n");
  }
  // A 1xx, 204 or 304 has no body and no Content-Length (RFC 9110 8.6).
  const bool bodiless = r.status / 100 == 1 || r.status == 204 || r.status == 304;
  if (!bodiless)
    out.append("Content-Length: ").append(std::to_string(r.body.size())).append("\r\n");
  if (!keep_alive) out.append("Connection: close\r\n");
  out.append("\r\n");
  if (!bodiless && !header_only) out.append(r.body);
  return out;
}

Response json_response(int status, std::string body) {
  Response r;
  r.status = status;
  r.headers["Content-Type"] = "application/json";
  r.body = std::move(body);
  return r;
}

Response error_response(const ErrorCode& code, std::string_view message) {
  return error_response(code.http_status, code.name, message);
}

Response error_response(const Error& error) {
  return error_response(error.http_status, error.code, error.message);
}

Response error_response(int status, std::string_view code, std::string_view message) {
  boost::json::object err{{"code", code}, {"message", message}};
  return json_response(status, boost::json::serialize(boost::json::object{{"error", err}}));
}

}  // namespace opgate::http
