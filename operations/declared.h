// Operations a team declares in configuration ([[operations]]): a narrow
// tool with a strict schema, a subject order owned by the caller, a money
// class counted against the order, a tier (by amount, when it moves money),
// an effect shown to the approver and an HTTP executor. Everything here is
// pure: parsing a declaration (from JSON; the config file's tables are
// converted by the daemon), the tool's published schema, checking a call's
// arguments and rendering the effect. Thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/result.h"

namespace opgate::operations {

// One property of the arguments object (JSON Schema subset).
struct DeclaredParameter {
  enum class Type { string, integer, boolean };
  std::string name;
  Type type = Type::string;
  std::string description;
  bool required = false;
  std::vector<std::string> values;  // enum (strings only)
  int64_t min_length = 0;           // strings
  int64_t max_length = 500;         // strings: always bounded
  std::optional<int64_t> minimum;   // integers
  std::optional<int64_t> maximum;
};

enum class Money { none, refund, credit };
std::string_view to_string(Money money);

// Where the operation is carried out: POST {url} with Idempotency-Key, and
// GET {url}/{operation_key} to reconcile. `token` is read from the
// environment variable `token_env` when the configuration is loaded; it is
// never shown.
struct Executor {
  std::string url;
  std::string token_env;
  std::string token;
  int64_t timeout_ms = 5000;
};

struct DeclaredOperation {
  std::string name;  // the tool's name, and the kind in its operation keys
  std::string description;
  std::vector<DeclaredParameter> parameters;  // order_id first
  Money money = Money::none;
  std::string amount_argument;  // an integer parameter, when money is not none
  std::string tier;             // refund | support | supervisor
  // Amounts above a currency's threshold need that tier; a currency without
  // an entry needs it too (fails closed). The highest matching tier wins.
  std::map<std::string, std::map<std::string, int64_t>> tier_above_minor;
  std::string effect;  // template: {amount} {order_id} {customer} {payment_method} {argument}
  Executor executor;
};

// The longest executor timeout accepted, in ms.
inline constexpr int64_t kExecutorMaxTimeoutMs = 30'000;

// Names a declaration may not take: the built-in tools and kinds, and the
// MCP front door's own tool.
bool reserved_operation_name(std::string_view name);

// One [[operations]] entry, converted to JSON; `path` (such as
// "operations[1]") prefixes every key an error names. The executor's token
// is not read here (the caller reads the environment).
Result<DeclaredOperation> parse_declared_operation(const boost::json::value& table,
                                                   std::string_view path);

// The published tool: {"type":"function","name","description","parameters"
// with additionalProperties false, "strict":false}. Not the platform's strict
// mode, which needs every parameter required: a declaration may leave some
// out, and the server checks the arguments whatever the model sent.
boost::json::object declared_tool_definition(const DeclaredOperation& op);

// The call's arguments checked against the declaration: the canonical
// object (keys in declaration order), or the refusal to give the model.
std::variant<boost::json::object, std::string> check_declared_arguments(
    const DeclaredOperation& op, std::string_view arguments_json);

// The checked arguments with the amount argument set to `amount_minor`
// (an approver lowered it), keys in the same order.
Result<boost::json::object> with_amount(const DeclaredOperation& op,
                                        std::string_view arguments_json, int64_t amount_minor);

// The tier a proposal of `amount_minor` in `currency` needs.
std::string declared_tier(const DeclaredOperation& op, int64_t amount_minor,
                          const std::string& currency);

// The effect template with its fields filled in; `amount` is the money text
// ("25.00 USD"). Unknown fields cannot occur: the template was checked.
std::string render_effect(const DeclaredOperation& op, const boost::json::object& arguments,
                          std::string_view amount, std::string_view order_id,
                          std::string_view customer, std::string_view payment_method);

// The declaration as `opgate tools` and GET /v1/policy show it (no token).
boost::json::object declared_to_json(const DeclaredOperation& op);

}  // namespace opgate::operations
