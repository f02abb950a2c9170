// The OpenAI event envelope {"id","object":"event","created_at","type","data"}.
// Pure parsing; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace opgate::ingress {

struct Envelope {
  std::string id;
  std::string type;
  std::string session_id;  // data.id for agent.session.* events
};

inline constexpr std::string_view kActionRequired = "agent.session.action_required";

Result<Envelope> parse_envelope(std::string_view body);

}  // namespace opgate::ingress
