// What a fault rule makes a simulated service answer, in that service's own
// error dialect (OpenAI's or Stripe's). Pure; thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "http/message.h"
#include "http/router.h"
#include "sim/faults.h"

namespace opgate::sim {

struct FaultReplies {
  http::Response (*server_error)();  // a 500 in the service's format
  http::Response (*rate_limited)();  // a 429 body; Retry-After is added here
};

// The answer for a fault that strikes before anything is processed.
http::Response before_commit_response(const FaultRule& rule, const FaultReplies& replies);
// What the client sees after the request was processed into `processed`.
http::Response after_commit_response(const std::optional<FaultRule>& rule, http::Response processed,
                                     const FaultReplies& replies);

// A read (GET) under the fault table: the matching rule, if any, delays it,
// answers for it before `produce` runs, or replaces what it produced.
http::Response faulted_get(FaultTable& faults, const FaultReplies& replies,
                           const http::Request& request,
                           const std::function<http::Response()>& produce);

// The fault admin API on `admin`: POST /_sim/faults adds rules (only actions
// in `allowed`), GET lists them, DELETE clears them. `subject_field` names
// the rule field matched against each request's subject.
void add_fault_admin_routes(http::Router& admin, FaultTable& faults, FaultActionSet allowed,
                            std::string_view subject_field);

}  // namespace opgate::sim
