// The error codes of the simulators and the release gate: the vocabularies
// of the services they stand in for and of the gate itself, kept apart from
// opgate's own catalogue (common/errors.h). Pure; thread-safe.
#pragma once

#include "common/errors.h"

namespace opgate::sim_errc {

inline constexpr ErrorCode invalid{"invalid", 400};
inline constexpr ErrorCode invalid_event{"invalid_event", 400};
inline constexpr ErrorCode invalid_script{"invalid_script", 400};
inline constexpr ErrorCode invalid_fault_rule{"invalid_fault_rule", 400};
inline constexpr ErrorCode too_many_turns{"too_many_turns", 400};
inline constexpr ErrorCode too_many_rules{"too_many_rules", 400};
inline constexpr ErrorCode session_busy{"session_busy", 409};
inline constexpr ErrorCode malformed_form{"malformed_form", 400};
inline constexpr ErrorCode bad_scenario{"bad_scenario", 400};
inline constexpr ErrorCode cluster_failed{"cluster_failed", 500};
inline constexpr ErrorCode step_failed{"step_failed", 500};

}  // namespace opgate::sim_errc
