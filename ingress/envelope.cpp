#include "ingress/envelope.h"

#include <boost/json.hpp>

#include "common/identifiers.h"

namespace opgate::ingress {

namespace json = boost::json;

Result<Envelope> parse_envelope(std::string_view body) {
  // The parsed tree lives in this buffer (more of it from the heap only for
  // a large body): nothing of it outlives the call.
  unsigned char buffer[8192];
  json::monotonic_resource arena(buffer, sizeof buffer);
  json::error_code ec;
  auto v = json::parse(body, ec, &arena);
  if (ec || !v.is_object()) return make_error(errc::bad_envelope, "The body is not a JSON object.");
  auto& o = v.as_object();
  auto str = [&](const char* k) -> const json::string* {
    auto* p = o.if_contains(k);
    return p && p->is_string() ? &p->as_string() : nullptr;
  };
  auto* id = str("id");
  auto* object = str("object");
  auto* type = str("type");
  auto* created = o.if_contains("created_at");
  auto* data = o.if_contains("data");
  if (!id || id->empty() || !type || type->empty() || !object || *object != "event" || !created ||
      !created->is_number() || !data || !data->is_object())
    return make_error(errc::bad_envelope,
                      "The body must be an event envelope with id, object \"event\", "
                      "created_at, type and data.");
  Envelope e{std::string(*id), std::string(*type), {}};
  if (e.type.rfind("agent.session.", 0) == 0) {
    auto* sid = data->as_object().if_contains("id");
    if (!sid || !sid->is_string() || !valid_identifier(sid->as_string()))
      return make_error(errc::bad_envelope,
                        "data.id must be a session id of 1-64 characters "
                        "from A-Z, a-z, 0-9, '.', '_' and '-'.");
    e.session_id = std::string(sid->as_string());
  }
  return e;
}

}  // namespace opgate::ingress
