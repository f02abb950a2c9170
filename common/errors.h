// The one catalogue of error codes: each with its stable snake_case name
// (what API bodies and logs carry) and the HTTP status it maps to. Every
// Error, and every error answer opgate gives (http::error_response), is made
// from one of these, so a code cannot be misspelt and its status is decided
// in one place. (The simulators speak the vocabularies of the services they
// stand in for: sim/sim_errors.h.) Pure; thread-safe.
#pragma once

#include <string_view>

namespace opgate {

struct ErrorCode {
  std::string_view name;
  int http_status;
};

namespace errc {
// Caller errors.
inline constexpr ErrorCode bad_request{"bad_request", 400};
inline constexpr ErrorCode unauthorized{"unauthorized", 401};
inline constexpr ErrorCode forbidden{"forbidden", 403};
inline constexpr ErrorCode self_approval{"self_approval", 403};
// The approval needs a passkey's assertion (console step-up), and none came
// with it (the API, the CLI); or the one that came does not verify.
inline constexpr ErrorCode step_up_required{"step_up_required", 403};
inline constexpr ErrorCode step_up_failed{"step_up_failed", 403};
inline constexpr ErrorCode not_found{"not_found", 404};
inline constexpr ErrorCode conflict{"conflict", 409};
inline constexpr ErrorCode proposal_mismatch{"proposal_mismatch", 409};
inline constexpr ErrorCode invalid_state{"invalid_state", 409};
inline constexpr ErrorCode invalid_transition{"invalid_transition", 409};
inline constexpr ErrorCode order_changed{"order_changed", 409};
inline constexpr ErrorCode expired{"expired", 409};
inline constexpr ErrorCode policy_refused{"policy_refused", 409};
inline constexpr ErrorCode not_bound{"not_bound", 409};
inline constexpr ErrorCode too_large{"too_large", 413};
inline constexpr ErrorCode header_too_large{"header_too_large", 431};
// An approval that would widen the proposal: a higher amount, another
// currency, order or kind (an approver may only lower the amount).
inline constexpr ErrorCode widening_refused{"widening_refused", 422};
inline constexpr ErrorCode method_not_allowed{"method_not_allowed", 405};
// Webhook ingress (its codes are also the reasons of the rejected counter).
inline constexpr ErrorCode unknown_source{"unknown_source", 404};
inline constexpr ErrorCode unsupported_media_type{"unsupported_media_type", 415};
inline constexpr ErrorCode bad_headers{"bad_headers", 400};
inline constexpr ErrorCode backlog_full{"backlog_full", 503};
inline constexpr ErrorCode bad_order{"bad_order", 400};
// Our own state or dependencies.
inline constexpr ErrorCode storage_unavailable{"storage_unavailable", 503};
inline constexpr ErrorCode not_ready{"not_ready", 503};
inline constexpr ErrorCode corrupt_record{"corrupt_record", 503};
inline constexpr ErrorCode overloaded{"overloaded", 503};
inline constexpr ErrorCode shutting_down{"shutting_down", 503};
inline constexpr ErrorCode agents_unavailable{"agents_unavailable", 502};
inline constexpr ErrorCode agents_refused{"agents_refused", 502};
inline constexpr ErrorCode session_not_found{"session_not_found", 404};
inline constexpr ErrorCode bad_response{"bad_response", 502};
// The business's order service is down, slow or answered nonsense.
inline constexpr ErrorCode orders_unavailable{"orders_unavailable", 503};
inline constexpr ErrorCode internal{"internal", 500};
// Network (HTTP client and server).
inline constexpr ErrorCode timeout{"timeout", 504};
inline constexpr ErrorCode connect_failed{"connect_failed", 502};
inline constexpr ErrorCode connection_lost{"connection_lost", 502};
inline constexpr ErrorCode tls_failed{"tls_failed", 502};
inline constexpr ErrorCode tls_setup{"tls_setup", 500};
inline constexpr ErrorCode bad_url{"bad_url", 400};
inline constexpr ErrorCode unsupported_scheme{"unsupported_scheme", 400};
inline constexpr ErrorCode bad_listen{"bad_listen", 500};
inline constexpr ErrorCode listen_failed{"listen_failed", 500};
// Webhook verification.
inline constexpr ErrorCode bad_signature{"bad_signature", 401};
inline constexpr ErrorCode bad_timestamp{"bad_timestamp", 400};
inline constexpr ErrorCode timestamp_out_of_tolerance{"timestamp_out_of_tolerance", 401};
inline constexpr ErrorCode bad_secret{"bad_secret", 400};
inline constexpr ErrorCode bad_envelope{"bad_envelope", 400};
// Start-up and files.
inline constexpr ErrorCode config{"config", 500};
inline constexpr ErrorCode data_dir{"data_dir", 500};
inline constexpr ErrorCode data_dir_permissions{"data_dir_permissions", 500};
inline constexpr ErrorCode no_data_dir{"no_data_dir", 500};
inline constexpr ErrorCode data_format{"data_format", 500};
inline constexpr ErrorCode file_write{"file_write", 500};
inline constexpr ErrorCode orders_file{"orders_file", 400};
}  // namespace errc

}  // namespace opgate
