// Errors as values: every fallible call across a module boundary returns
// Status or Result<T>. An Error carries a code from the catalogue
// (common/errors.h) and a message that is safe to show to the caller
// (never a secret, never internals). OPGATE_TRY and OPGATE_ASSIGN_OR_RETURN
// propagate errors with flat checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "common/errors.h"

namespace opgate {

struct Error {
  std::string code;     // a catalogue name: "not_found", "proposal_mismatch"
  std::string message;  // one sentence for people
  // For retryable errors: how long the peer asked us to wait (Retry-After).
  int64_t retry_after_ms = 0;
  int http_status = 500;

  bool is(const ErrorCode& c) const { return code == c.name; }
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::get<0>(std::move(v_)); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}
  static Status Ok() { return {}; }
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

inline Error make_error(const ErrorCode& code, std::string message) {
  return Error{std::string(code.name), std::move(message), 0, code.http_status};
}

namespace detail {
inline Error error_of(const Status& s) { return s.error(); }
template <typename T>
Error error_of(const Result<T>& r) {
  return r.error();
}
}  // namespace detail

}  // namespace opgate

#define OPGATE_CONCAT_INNER(a, b) a##b
#define OPGATE_CONCAT(a, b) OPGATE_CONCAT_INNER(a, b)

// Returns the error of a Status or Result expression from the enclosing
// function (which returns Status or Result<U>).
#define OPGATE_TRY(expr)                                          \
  do {                                                            \
    if (auto&& opgate_try_value = (expr); !opgate_try_value.ok()) \
      return ::opgate::detail::error_of(opgate_try_value);        \
  } while (false)

// `lhs` = the value of a Result expression, or return its error.
#define OPGATE_ASSIGN_OR_RETURN(lhs, expr)                  \
  auto OPGATE_CONCAT(opgate_result_, __LINE__) = (expr);    \
  if (!OPGATE_CONCAT(opgate_result_, __LINE__).ok())        \
    return OPGATE_CONCAT(opgate_result_, __LINE__).error(); \
  lhs = std::move(*OPGATE_CONCAT(opgate_result_, __LINE__))
