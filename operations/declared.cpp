#include "operations/declared.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <set>

#include "common/identifiers.h"
#include "common/text.h"
#include "operations/policy.h"

namespace opgate::operations {

namespace json = boost::json;

std::string_view to_string(Money money) {
  switch (money) {
    case Money::none:
      return "none";
    case Money::refund:
      return "refund";
    case Money::credit:
      return "credit";
  }
  return "none";
}

bool reserved_operation_name(std::string_view name) {
  return known_tool(name) || name == "get_operation" || name == "full_refund" ||
         name == "account_credit";
}

namespace {

constexpr int64_t kMaxStringLength = 4000;
constexpr size_t kMaxParameters = 32;
constexpr size_t kMaxEnumValues = 100;

// A problem in a declaration; the message names the dotted key.
Error bad(std::string message) { return make_error(errc::bad_request, std::move(message)); }

bool name_like(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool env_name(std::string_view s) {
  if (s.empty() || s.size() > 128 || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Typed reads of one table; every error names `path.key`.
class Fields {
 public:
  Fields(const json::object& o, std::string path) : o_(o), path_(std::move(path)) {}
  std::string key(std::string_view k) const { return fmt::format("{}.{}", path_, k); }

  Status only(std::initializer_list<std::string_view> known, std::string_view hint = {}) const {
    for (const auto& [k, _] : o_)
      if (std::find(known.begin(), known.end(), std::string_view(k)) == known.end())
        return bad(fmt::format("unknown key '{}'{}", key(k), hint));
    return Status::Ok();
  }
  const json::value* find(std::string_view k) const { return o_.if_contains(k); }

  Result<std::string> string(std::string_view k, std::optional<std::string> fallback) const {
    const auto* v = find(k);
    if (!v) {
      if (fallback) return *fallback;
      return bad(fmt::format("key '{}' is required", key(k)));
    }
    if (!v->is_string()) return bad(fmt::format("key '{}' must be a string", key(k)));
    return std::string(v->as_string());
  }
  Result<std::optional<int64_t>> integer(std::string_view k) const {
    const auto* v = find(k);
    if (!v) return std::optional<int64_t>();
    if (!v->is_int64()) return bad(fmt::format("key '{}' must be an integer", key(k)));
    return std::optional<int64_t>(v->as_int64());
  }
  Result<const json::object*> table(std::string_view k, bool required) const {
    const auto* v = find(k);
    if (!v) {
      if (required) return bad(fmt::format("key '{}' is required", key(k)));
      return static_cast<const json::object*>(nullptr);
    }
    if (!v->is_object()) return bad(fmt::format("key '{}' must be a table", key(k)));
    return &v->as_object();
  }

 private:
  const json::object& o_;
  std::string path_;
};

Result<DeclaredParameter> parse_parameter(const std::string& name, const json::value& value,
                                          const std::string& path) {
  if (!value.is_object()) return bad(fmt::format("key '{}' must be a table", path));
  const Fields f(value.as_object(), path);
  OPGATE_TRY(f.only({"type", "description", "enum", "minLength", "maxLength", "minimum", "maximum"},
                    " (the schema subset is type, description, enum, minLength, maxLength, "
                    "minimum and maximum)"));
  DeclaredParameter p;
  p.name = name;
  OPGATE_ASSIGN_OR_RETURN(const std::string type, f.string("type", std::nullopt));
  if (type == "string") {
    p.type = DeclaredParameter::Type::string;
  } else if (type == "integer") {
    p.type = DeclaredParameter::Type::integer;
  } else if (type == "boolean") {
    p.type = DeclaredParameter::Type::boolean;
  } else {
    return bad(fmt::format("key '{}' must be \"string\", \"integer\" or \"boolean\", not \"{}\"",
                           f.key("type"), type));
  }
  OPGATE_ASSIGN_OR_RETURN(p.description, f.string("description", std::string()));
  if (p.description.size() > 1000)
    return bad(fmt::format("key '{}' must be at most 1000 characters", f.key("description")));
  const bool is_string = p.type == DeclaredParameter::Type::string;
  const bool is_integer = p.type == DeclaredParameter::Type::integer;
  for (auto k : {"enum", "minLength", "maxLength"})
    if (f.find(k) && !is_string)
      return bad(fmt::format("key '{}' applies to strings only", f.key(k)));
  for (auto k : {"minimum", "maximum"})
    if (f.find(k) && !is_integer)
      return bad(fmt::format("key '{}' applies to integers only", f.key(k)));
  if (const auto* e = f.find("enum")) {
    if (!e->is_array() || e->as_array().empty() || e->as_array().size() > kMaxEnumValues)
      return bad(fmt::format("key '{}' must list 1 to {} strings", f.key("enum"), kMaxEnumValues));
    for (const auto& v : e->as_array()) {
      if (!v.is_string() || v.as_string().empty() || v.as_string().size() > 200)
        return bad(fmt::format("key '{}' must list strings of 1 to 200 characters", f.key("enum")));
      p.values.emplace_back(v.as_string());
    }
  }
  OPGATE_ASSIGN_OR_RETURN(auto min_length, f.integer("minLength"));
  OPGATE_ASSIGN_OR_RETURN(auto max_length, f.integer("maxLength"));
  p.min_length = min_length.value_or(0);
  p.max_length = max_length.value_or(500);
  if (p.min_length < 0 || p.max_length < 1 || p.max_length > kMaxStringLength ||
      p.min_length > p.max_length)
    return bad(fmt::format("keys '{}' and '{}' must satisfy 0 <= minLength <= maxLength <= {}",
                           f.key("minLength"), f.key("maxLength"), kMaxStringLength));
  OPGATE_ASSIGN_OR_RETURN(p.minimum, f.integer("minimum"));
  OPGATE_ASSIGN_OR_RETURN(p.maximum, f.integer("maximum"));
  if (p.minimum && p.maximum && *p.minimum > *p.maximum)
    return bad(fmt::format("key '{}' is below '{}'", f.key("maximum"), f.key("minimum")));
  return p;
}

Status parse_parameters(const Fields& top, DeclaredOperation& op) {
  OPGATE_ASSIGN_OR_RETURN(const json::object* schema, top.table("parameters", true));
  const Fields f(*schema, top.key("parameters"));
  OPGATE_TRY(f.only({"type", "properties", "required", "additionalProperties"},
                    " (the schema subset is an object of properties, required and "
                    "additionalProperties = false)"));
  OPGATE_ASSIGN_OR_RETURN(const std::string type, f.string("type", std::string("object")));
  if (type != "object") return bad(fmt::format("key '{}' must be \"object\"", f.key("type")));
  if (const auto* extra = f.find("additionalProperties");
      extra && !(extra->is_bool() && !extra->as_bool()))
    return bad(fmt::format("key '{}' must be false: a declared tool accepts no other arguments",
                           f.key("additionalProperties")));
  OPGATE_ASSIGN_OR_RETURN(const json::object* listed, f.table("properties", false));
  static const json::object kNone;
  const json::object* properties = listed ? listed : &kNone;
  if (properties->size() > kMaxParameters)
    return bad(fmt::format("key '{}' declares more than {} properties", f.key("properties"),
                           kMaxParameters));
  std::vector<std::string> names;
  for (const auto& [k, _] : *properties) names.emplace_back(k);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    const std::string path = fmt::format("{}.{}", f.key("properties"), name);
    if (!name_like(name, 64))
      return bad(
          fmt::format("property '{}': names are a-z, 0-9 and '_', starting with a letter", path));
    // The effect's own fields: an argument of that name would be shown as
    // the order's value, not the one the agent sent.
    if (name == "amount" || name == "customer" || name == "payment_method")
      return bad(fmt::format(
          "property '{}': '{}' is a field of the effect (the {}); name the argument otherwise",
          path, name, name == "amount" ? "amount that moves" : "order's " + name));
    OPGATE_ASSIGN_OR_RETURN(auto p, parse_parameter(name, properties->at(name), path));
    op.parameters.push_back(std::move(p));
  }
  std::set<std::string> required;
  if (const auto* r = f.find("required")) {
    if (!r->is_array())
      return bad(fmt::format("key '{}' must be a list of property names", f.key("required")));
    for (const auto& v : r->as_array()) {
      // order_id, the subject, is always a property (added when not listed).
      if (!v.is_string() || (!properties->contains(v.as_string()) && v.as_string() != "order_id"))
        return bad(fmt::format("key '{}' names '{}', which is not a property", f.key("required"),
                               v.is_string() ? std::string(v.as_string()) : json::serialize(v)));
      required.emplace(v.as_string());
    }
  }
  for (auto& p : op.parameters) p.required = required.count(p.name) > 0;
  // The subject: order_id, first, required, an identifier.
  auto order = std::find_if(op.parameters.begin(), op.parameters.end(),
                            [](const auto& p) { return p.name == "order_id"; });
  if (order == op.parameters.end()) {
    DeclaredParameter p;
    p.name = "order_id";
    p.description = "The order id.";
    op.parameters.insert(op.parameters.begin(), std::move(p));
    order = op.parameters.begin();
  } else if (order->type != DeclaredParameter::Type::string || !order->values.empty()) {
    return bad(fmt::format("property '{}.order_id' must be a plain string (the subject order)",
                           f.key("properties")));
  }
  order->required = true;
  order->min_length = 1;
  order->max_length = 64;
  if (order->description.empty()) order->description = "The order id.";
  std::rotate(op.parameters.begin(), order, order + 1);
  return Status::Ok();
}

Status parse_money(const Fields& f, DeclaredOperation& op) {
  OPGATE_ASSIGN_OR_RETURN(const std::string money, f.string("money", std::string("none")));
  if (money == "none") {
    op.money = Money::none;
  } else if (money == "refund") {
    op.money = Money::refund;
  } else if (money == "credit") {
    op.money = Money::credit;
  } else {
    return bad(fmt::format("key '{}' must be \"none\", \"refund\" or \"credit\", not \"{}\"",
                           f.key("money"), money));
  }
  OPGATE_ASSIGN_OR_RETURN(op.amount_argument, f.string("amount_argument", std::string()));
  if (op.money == Money::none) {
    if (!op.amount_argument.empty())
      return bad(
          fmt::format("key '{}' needs money = \"refund\" or \"credit\"", f.key("amount_argument")));
    return Status::Ok();
  }
  if (op.amount_argument.empty())
    return bad(
        fmt::format("key '{}' is required when money is \"{}\": the integer argument that "
                    "carries the amount in minor units",
                    f.key("amount_argument"), money));
  auto amount = std::find_if(op.parameters.begin(), op.parameters.end(),
                             [&](const auto& p) { return p.name == op.amount_argument; });
  if (amount == op.parameters.end() || amount->type != DeclaredParameter::Type::integer ||
      !amount->required)
    return bad(fmt::format("key '{}' must name a required integer property, not '{}'",
                           f.key("amount_argument"), op.amount_argument));
  // Money moves in positive amounts only.
  amount->minimum = std::max<int64_t>(1, amount->minimum.value_or(1));
  if (amount->maximum && *amount->maximum < 1)
    return bad(fmt::format("property '{}' has a maximum below 1", op.amount_argument));
  return Status::Ok();
}

Status parse_tiers(const Fields& f, DeclaredOperation& op) {
  OPGATE_ASSIGN_OR_RETURN(op.tier, f.string("tier", std::nullopt));
  if (tier_rank(op.tier) == 0)
    return bad(fmt::format("key '{}': unknown tier '{}' (refund, support or supervisor)",
                           f.key("tier"), op.tier));
  OPGATE_ASSIGN_OR_RETURN(const json::object* above, f.table("tier_above_minor", false));
  if (!above) return Status::Ok();
  if (op.money == Money::none)
    return bad(
        fmt::format("key '{}' needs money = \"refund\" or \"credit\"", f.key("tier_above_minor")));
  for (const auto& [tier, amounts] : *above) {
    const std::string path = fmt::format("{}.{}", f.key("tier_above_minor"), std::string(tier));
    if (tier_rank(tier) <= tier_rank(op.tier))
      return bad(
          fmt::format("key '{}': a threshold must raise the tier above '{}'", path, op.tier));
    if (!amounts.is_object() || amounts.as_object().empty())
      return bad(fmt::format("key '{}' must be a table of amounts such as {{ USD = 2000 }}", path));
    auto& out = op.tier_above_minor[std::string(tier)];
    for (const auto& [currency, amount] : amounts.as_object()) {
      if (!valid_currency(std::string(currency)))
        return bad(fmt::format("key '{}.{}': currency keys are upper-case ISO 4217 codes", path,
                               std::string(currency)));
      if (!amount.is_int64() || amount.as_int64() < 0)
        return bad(fmt::format("key '{}.{}' must be an amount in minor units (>= 0)", path,
                               std::string(currency)));
      out[std::string(currency)] = amount.as_int64();
    }
  }
  return Status::Ok();
}

// The effect's fields: "{name}" for amount, order_id, customer,
// payment_method and the parameters; "{{" and "}}" are literal braces.
Status parse_effect(const Fields& f, DeclaredOperation& op) {
  OPGATE_ASSIGN_OR_RETURN(op.effect, f.string("effect", std::nullopt));
  if (op.effect.empty() || op.effect.size() > 1000)
    return bad(fmt::format("key '{}' must be 1 to 1000 characters", f.key("effect")));
  for (size_t i = 0; i < op.effect.size(); ++i) {
    const char c = op.effect[i];
    if ((c == '{' || c == '}') && i + 1 < op.effect.size() && op.effect[i + 1] == c) {
      ++i;
      continue;
    }
    if (c == '}') return bad(fmt::format("key '{}': a '}}' closes nothing", f.key("effect")));
    if (c != '{') continue;
    const size_t end = op.effect.find('}', i);
    if (end == std::string::npos)
      return bad(fmt::format("key '{}': a '{{' is never closed", f.key("effect")));
    const std::string field = op.effect.substr(i + 1, end - i - 1);
    const bool known = field == "order_id" || field == "customer" || field == "payment_method" ||
                       (field == "amount" && op.money != Money::none) ||
                       std::any_of(op.parameters.begin(), op.parameters.end(),
                                   [&](const auto& p) { return p.name == field; });
    if (!known)
      return bad(fmt::format(
          "key '{}': unknown field '{{{}}}' (amount when money moves, order_id, customer, "
          "payment_method, or an argument's name)",
          f.key("effect"), field));
    i = end;
  }
  return Status::Ok();
}

Status parse_executor(const Fields& top, DeclaredOperation& op) {
  OPGATE_ASSIGN_OR_RETURN(const json::object* table, top.table("executor", true));
  const Fields f(*table, top.key("executor"));
  OPGATE_TRY(f.only({"url", "token_env", "timeout_ms"}));
  auto& e = op.executor;
  OPGATE_ASSIGN_OR_RETURN(e.url, f.string("url", std::nullopt));
  while (!e.url.empty() && e.url.back() == '/') e.url.pop_back();
  auto url = boost::urls::parse_absolute_uri(e.url);
  if (!url || (url->scheme() != "http" && url->scheme() != "https") || url->host().empty() ||
      url->has_query() || url->has_fragment() || url->has_userinfo())
    return bad(
        fmt::format("key '{}' must be an http:// or https:// URL without query, fragment or user",
                    f.key("url")));
  OPGATE_ASSIGN_OR_RETURN(e.token_env, f.string("token_env", std::nullopt));
  if (!env_name(e.token_env))
    return bad(fmt::format("key '{}' must name an environment variable (A-Z, 0-9, '_')",
                           f.key("token_env")));
  OPGATE_ASSIGN_OR_RETURN(auto timeout, f.integer("timeout_ms"));
  e.timeout_ms = timeout.value_or(e.timeout_ms);
  if (e.timeout_ms < 1 || e.timeout_ms > kExecutorMaxTimeoutMs)
    return bad(
        fmt::format("key '{}' must be 1 to {} ms", f.key("timeout_ms"), kExecutorMaxTimeoutMs));
  return Status::Ok();
}

json::object parameter_schema(const DeclaredParameter& p) {
  json::object s;
  switch (p.type) {
    case DeclaredParameter::Type::string:
      s["type"] = "string";
      if (p.name == "order_id") s["pattern"] = "^[A-Za-z0-9._-]{1,64}$";
      if (!p.values.empty()) {
        json::array values;
        for (const auto& v : p.values) values.push_back(json::string(v));
        s["enum"] = std::move(values);
      } else {
        if (p.min_length > 0) s["minLength"] = p.min_length;
        s["maxLength"] = p.max_length;
      }
      break;
    case DeclaredParameter::Type::integer:
      s["type"] = "integer";
      if (p.minimum) s["minimum"] = *p.minimum;
      if (p.maximum) s["maximum"] = *p.maximum;
      break;
    case DeclaredParameter::Type::boolean:
      s["type"] = "boolean";
      break;
  }
  if (!p.description.empty()) s["description"] = p.description;
  return s;
}

std::string argument_text(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  return json::serialize(v);
}

}  // namespace

Result<DeclaredOperation> parse_declared_operation(const json::value& table,
                                                   std::string_view path) {
  if (!table.is_object()) return bad(fmt::format("'{}' must be a table", path));
  const Fields f(table.as_object(), std::string(path));
  OPGATE_TRY(f.only({"name", "description", "subject", "money", "amount_argument", "tier",
                     "tier_above_minor", "effect", "parameters", "executor"}));
  DeclaredOperation op;
  OPGATE_ASSIGN_OR_RETURN(op.name, f.string("name", std::nullopt));
  if (!name_like(op.name, 48))
    return bad(fmt::format(
        "key '{}' must be 1 to 48 characters of a-z, 0-9 and '_', starting with a letter",
        f.key("name")));
  if (reserved_operation_name(op.name))
    return bad(fmt::format("key '{}': '{}' is a built-in tool's name", f.key("name"), op.name));
  OPGATE_ASSIGN_OR_RETURN(op.description, f.string("description", std::nullopt));
  if (op.description.empty() || op.description.size() > 2000)
    return bad(fmt::format("key '{}' must be 1 to 2000 characters", f.key("description")));
  OPGATE_ASSIGN_OR_RETURN(const std::string subject, f.string("subject", std::string("order")));
  if (subject != "order")
    return bad(
        fmt::format("key '{}' must be \"order\" (the only subject today)", f.key("subject")));
  OPGATE_TRY(parse_parameters(f, op));
  OPGATE_TRY(parse_money(f, op));
  OPGATE_TRY(parse_tiers(f, op));
  OPGATE_TRY(parse_effect(f, op));
  OPGATE_TRY(parse_executor(f, op));
  return op;
}

json::object declared_tool_definition(const DeclaredOperation& op) {
  json::object properties;
  json::array required;
  for (const auto& p : op.parameters) {
    properties[p.name] = parameter_schema(p);
    if (p.required) required.push_back(json::string(p.name));
  }
  return json::object{{"type", "function"},
                      {"name", op.name},
                      {"description", op.description},
                      {"parameters", json::object{{"type", "object"},
                                                  {"properties", std::move(properties)},
                                                  {"required", std::move(required)},
                                                  {"additionalProperties", false}}},
                      {"strict", false}};
}

std::variant<json::object, std::string> check_declared_arguments(const DeclaredOperation& op,
                                                                 std::string_view arguments_json) {
  json::error_code ec;
  auto value = json::parse(arguments_json, ec);
  if (ec || !value.is_object()) return std::string("The arguments must be a JSON object.");
  const auto& args = value.as_object();
  for (const auto& kv : args) {
    const std::string_view k = kv.key();
    if (std::none_of(op.parameters.begin(), op.parameters.end(),
                     [&](const auto& p) { return p.name == k; }))
      return fmt::format("Unknown argument '{}'; this tool does not accept it.",
                         utf8_prefix(k, 64));
  }
  json::object out;
  for (const auto& p : op.parameters) {
    const auto* v = args.if_contains(p.name);
    if (!v) {
      if (p.required) return fmt::format("Missing required argument '{}'.", p.name);
      continue;
    }
    switch (p.type) {
      case DeclaredParameter::Type::string: {
        if (!v->is_string()) return fmt::format("{} must be a string.", p.name);
        const auto& s = v->as_string();
        if (p.name == "order_id" && !valid_identifier(s))
          return std::string(
              "order_id must be 1-64 characters from A-Z, a-z, 0-9, '.', '_' and '-'.");
        if (!p.values.empty()) {
          if (std::find(p.values.begin(), p.values.end(), s) == p.values.end())
            return fmt::format("{} must be one of: {}.", p.name, fmt::join(p.values, ", "));
        } else if (const auto n = static_cast<int64_t>(character_count(s));
                   n < p.min_length || n > p.max_length) {
          return fmt::format("{} must be {} to {} characters.", p.name, p.min_length, p.max_length);
        }
        break;
      }
      case DeclaredParameter::Type::integer: {
        if (!v->is_int64() && !(v->is_uint64() && v->as_uint64() <= INT64_MAX))
          return fmt::format("{} must be an integer.", p.name);
        const int64_t n = v->to_number<int64_t>();
        if ((p.minimum && n < *p.minimum) || (p.maximum && n > *p.maximum))
          return p.maximum ? fmt::format("{} must be between {} and {}.", p.name,
                                         p.minimum.value_or(INT64_MIN), *p.maximum)
                           : fmt::format("{} must be at least {}.", p.name, *p.minimum);
        out[p.name] = n;
        continue;
      }
      case DeclaredParameter::Type::boolean:
        if (!v->is_bool()) return fmt::format("{} must be true or false.", p.name);
        break;
    }
    out[p.name] = *v;
  }
  return out;
}

Result<json::object> with_amount(const DeclaredOperation& op, std::string_view arguments_json,
                                 int64_t amount_minor) {
  json::error_code ec;
  auto arguments = json::parse(arguments_json, ec);
  if (ec || !arguments.is_object())
    return make_error(errc::corrupt_record, "the proposal's arguments are not a JSON object");
  arguments.as_object()[op.amount_argument] = amount_minor;
  return std::move(arguments.as_object());
}

std::string declared_tier(const DeclaredOperation& op, int64_t amount_minor,
                          const std::string& currency) {
  std::string tier = op.tier;
  for (const auto& [above, amounts] : op.tier_above_minor) {
    auto threshold = amounts.find(currency);
    const bool applies = threshold == amounts.end() || amount_minor > threshold->second;
    if (applies && tier_rank(above) > tier_rank(tier)) tier = above;
  }
  return tier;
}

std::string render_effect(const DeclaredOperation& op, const json::object& arguments,
                          std::string_view amount, std::string_view order_id,
                          std::string_view customer, std::string_view payment_method) {
  std::string out;
  const std::string& t = op.effect;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    const size_t end = c == '{' ? t.find('}', i) : std::string::npos;
    if (end == std::string::npos) {
      out += c;
      continue;
    }
    const std::string field = t.substr(i + 1, end - i - 1);
    if (field == "amount") {
      out += amount;
    } else if (field == "order_id") {
      out += order_id;
    } else if (field == "customer") {
      out += customer;
    } else if (field == "payment_method") {
      out += payment_method;
    } else if (const auto* v = arguments.if_contains(field)) {
      out += argument_text(*v);
    }
    i = end;
  }
  return out;
}

json::object declared_to_json(const DeclaredOperation& op) {
  json::object above;
  for (const auto& [tier, amounts] : op.tier_above_minor) {
    json::object a;
    for (const auto& [currency, amount] : amounts) a[currency] = amount;
    above[tier] = std::move(a);
  }
  auto definition = declared_tool_definition(op);
  return json::object{{"name", op.name},
                      {"description", op.description},
                      {"subject", "order"},
                      {"money", to_string(op.money)},
                      {"amount_argument", op.amount_argument},
                      {"tier", op.tier},
                      {"tier_above_minor", std::move(above)},
                      {"effect", op.effect},
                      {"parameters", definition.at("parameters")},
                      {"executor", json::object{{"url", op.executor.url},
                                                {"token_env", op.executor.token_env},
                                                {"timeout_ms", op.executor.timeout_ms}}}};
}

}  // namespace opgate::operations
