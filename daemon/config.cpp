#include "daemon/config.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <toml.hpp>
#include <tuple>

#include "ingress/signature.h"

namespace opgate::daemon {

namespace {

using Table = toml::value;

std::optional<Error> check_keys(const Table& table, const std::string& where,
                                const std::set<std::string>& known) {
  for (const auto& [k, _] : table.as_table())
    if (!known.count(k))
      return make_error("config",
                        fmt::format("unknown key '{}{}'", where.empty() ? "" : where + ".", k));
  return std::nullopt;
}

// A present key of the wrong type is an error, never the default.
struct WrongType : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t int_or(const Table& t, const char* key, int64_t fallback) {
  if (!t.contains(key)) return fallback;
  const auto& v = t.at(key);
  if (!v.is_integer()) throw WrongType(fmt::format("key '{}' must be an integer", key));
  return v.as_integer();
}

std::string string_or(const Table& t, const char* key, const std::string& fallback) {
  if (!t.contains(key)) return fallback;
  const auto& v = t.at(key);
  if (!v.is_string()) throw WrongType(fmt::format("key '{}' must be a string", key));
  return v.as_string();
}

std::map<std::string, int64_t> amount_map(const Table& v) {
  std::map<std::string, int64_t> out;
  for (const auto& [k, amount] : v.as_table()) out[k] = amount.as_integer();
  return out;
}

std::vector<std::string> string_list(const Table& v) {
  std::vector<std::string> out;
  for (const auto& s : v.as_array()) out.push_back(s.as_string());
  return out;
}

std::vector<std::string> split_env(const std::string& name) {
  std::vector<std::string> out;
  const char* v = std::getenv(name.c_str());
  if (!v) return out;
  std::string s(v);
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
    start = comma + 1;
  }
  return out;
}

std::string env_or_empty(const std::string& name) {
  const char* v = name.empty() ? nullptr : std::getenv(name.c_str());
  return v ? v : "";
}

Result<Config> parse(const Table& root, const std::filesystem::path& base_dir) {
  Config c;
  if (auto e = check_keys(
          root, "",
          {"data_dir", "ingress", "operator", "agent", "payments", "orders", "policy", "outbox"}))
    return *e;
  c.data_dir = string_or(root, "data_dir", c.data_dir);

  if (root.contains("ingress")) {
    const auto& in = toml::find(root, "ingress");
    if (auto e = check_keys(in, "ingress",
                            {"listen", "max_body_bytes", "timestamp_tolerance_s", "max_backlog",
                             "retention_s", "sources", "header_timeout_ms", "body_timeout_ms",
                             "max_connections", "reject_cooldown_ms"}))
      return *e;
    c.ingress_listen = string_or(in, "listen", c.ingress_listen);
    c.max_body_bytes = int_or(in, "max_body_bytes", c.max_body_bytes);
    c.timestamp_tolerance_s = int_or(in, "timestamp_tolerance_s", 300);
    c.max_backlog = int_or(in, "max_backlog", c.max_backlog);
    c.inbox_retention_s = int_or(in, "retention_s", c.inbox_retention_s);
    c.header_timeout_ms = int_or(in, "header_timeout_ms", c.header_timeout_ms);
    c.body_timeout_ms = int_or(in, "body_timeout_ms", c.body_timeout_ms);
    c.max_connections = int_or(in, "max_connections", c.max_connections);
    c.reject_cooldown_ms = int_or(in, "reject_cooldown_ms", c.reject_cooldown_ms);
    if (c.header_timeout_ms <= 0 || c.body_timeout_ms <= 0 || c.max_connections <= 0)
      return make_error("config", "ingress timeouts and max_connections must be positive");
    if (c.reject_cooldown_ms < 0 || c.reject_cooldown_ms > 60'000)
      return make_error("config", "ingress.reject_cooldown_ms must be between 0 and 60000");
    if (in.contains("sources")) {
      for (const auto& s : toml::find(in, "sources").as_array()) {
        if (auto e = check_keys(s, "ingress.sources", {"name", "secrets", "secrets_env"}))
          return *e;
        ingress::Source source;
        source.name = toml::find<std::string>(s, "name");
        std::vector<std::string> secrets;
        if (s.contains("secrets")) secrets = string_list(toml::find(s, "secrets"));
        if (s.contains("secrets_env"))
          for (auto& v : split_env(toml::find<std::string>(s, "secrets_env"))) secrets.push_back(v);
        if (secrets.empty())
          return make_error("config", fmt::format("webhook source '{}' has no secrets (set "
                                                  "secrets or the variable in secrets_env)",
                                                  source.name));
        for (const auto& secret : secrets) {
          auto key = ingress::decode_secret(secret);
          if (!key)
            return make_error(
                "config", fmt::format("webhook source '{}': {}", source.name, key.error().message));
          source.raw_keys.push_back(*key);
        }
        c.sources.push_back(std::move(source));
      }
    }
  }

  if (root.contains("operator")) {
    const auto& op = toml::find(root, "operator");
    if (auto e = check_keys(op, "operator", {"listen", "tokens"})) return *e;
    c.operator_listen = string_or(op, "listen", c.operator_listen);
    if (op.contains("tokens")) {
      for (const auto& t : toml::find(op, "tokens").as_array()) {
        if (auto e = check_keys(
                t, "operator.tokens",
                {"principal", "token_sha256", "scopes", "owners", "max_amount_minor", "tiers"}))
          return *e;
        operator_api::Principal p;
        p.name = toml::find<std::string>(t, "principal");
        p.token_sha256 = toml::find<std::string>(t, "token_sha256");
        for (auto& ch : p.token_sha256) ch = static_cast<char>(std::tolower(ch));
        if (p.token_sha256.size() != 64 ||
            p.token_sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
          return make_error("config", fmt::format("operator token '{}': token_sha256 must be 64 "
                                                  "hex digits",
                                                  p.name));
        if (t.contains("scopes")) p.scopes = string_list(toml::find(t, "scopes"));
        static const std::set<std::string> scopes = {"operations:read", "operations:approve",
                                                     "operations:resolve", "sessions:bind",
                                                     "admin"};
        for (const auto& s : p.scopes)
          if (!scopes.count(s))
            return make_error("config",
                              fmt::format("operator token '{}': unknown scope '{}'", p.name, s));
        if (t.contains("owners")) p.owners = string_list(toml::find(t, "owners"));
        if (t.contains("tiers")) {
          p.tiers = string_list(toml::find(t, "tiers"));
          for (const auto& tier : p.tiers)
            if (tier != "refund" && tier != "support" && tier != "supervisor")
              return make_error(
                  "config", fmt::format("operator token '{}': unknown tier '{}'", p.name, tier));
        }
        if (t.contains("max_amount_minor"))
          p.max_amount_minor = amount_map(toml::find(t, "max_amount_minor"));
        c.principals.push_back(std::move(p));
      }
    }
  }

  for (auto [section, key_env, default_env, upstream] :
       {std::tuple{"agent", "api_key_env", "OPENAI_API_KEY", &c.agent},
        std::tuple{"payments", "secret_key_env", "OPGATE_PAYMENTS_SECRET_KEY", &c.payments}}) {
    std::string env_name = default_env;
    if (root.contains(section)) {
      const auto& t = toml::find(root, section);
      std::set<std::string> known = {"base_url", key_env, "timeout_ms", "ca_file"};
      if (upstream == &c.agent) known.insert({"sweep_interval_s", "sweep_window_s"});
      if (auto e = check_keys(t, section, known)) return *e;
      if (upstream == &c.agent) {
        c.sweep_interval_s = int_or(t, "sweep_interval_s", c.sweep_interval_s);
        c.sweep_window_s = int_or(t, "sweep_window_s", c.sweep_window_s);
      }
      upstream->base_url = string_or(t, "base_url", upstream->base_url);
      env_name = string_or(t, key_env, env_name);
      upstream->timeout_ms = static_cast<int>(int_or(t, "timeout_ms", upstream->timeout_ms));
      upstream->ca_file = string_or(t, "ca_file", "");
    }
    upstream->secret = env_or_empty(env_name);
  }

  if (root.contains("orders")) {
    const auto& o = toml::find(root, "orders");
    if (auto e = check_keys(o, "orders", {"source", "seed_file", "base_url"})) return *e;
    c.orders_source = string_or(o, "source", "embedded");
    if (c.orders_source != "embedded")
      return make_error("config", "orders.source: only \"embedded\" is supported in this version");
    c.orders_seed_file = string_or(o, "seed_file", "");
    if (!c.orders_seed_file.empty() && std::filesystem::path(c.orders_seed_file).is_relative())
      c.orders_seed_file = (base_dir / c.orders_seed_file).string();
  }

  if (root.contains("policy")) {
    const auto& p = toml::find(root, "policy");
    if (auto e = check_keys(
            p, "policy",
            {"refund_window_days", "approval_ttl_s", "two_person_threshold_minor",
             "credit_reason_codes", "credit_hard_cap_minor", "credit_support_limit_minor"}))
      return *e;
    auto& pol = c.policy;
    pol.refund_window_days = int_or(p, "refund_window_days", pol.refund_window_days);
    pol.approval_ttl_s = int_or(p, "approval_ttl_s", pol.approval_ttl_s);
    if (p.contains("two_person_threshold_minor"))
      pol.two_person_threshold_minor = amount_map(toml::find(p, "two_person_threshold_minor"));
    if (p.contains("credit_reason_codes"))
      pol.credit_reason_codes = string_list(toml::find(p, "credit_reason_codes"));
    if (p.contains("credit_hard_cap_minor"))
      pol.credit_hard_cap_minor = amount_map(toml::find(p, "credit_hard_cap_minor"));
    if (p.contains("credit_support_limit_minor"))
      pol.credit_support_limit_minor = amount_map(toml::find(p, "credit_support_limit_minor"));
    if (pol.approval_ttl_s <= 0 || pol.refund_window_days < 0)
      return make_error("config",
                        "policy.approval_ttl_s must be positive and "
                        "policy.refund_window_days not negative");
  }
  if (root.contains("outbox")) {
    const auto& o = toml::find(root, "outbox");
    if (auto e = check_keys(o, "outbox", {"attention_after_attempts", "attention_after_s"}))
      return *e;
    c.attention.after_attempts =
        static_cast<int>(int_or(o, "attention_after_attempts", c.attention.after_attempts));
    c.attention.after_ms = int_or(o, "attention_after_s", c.attention.after_ms / 1000) * 1000;
  }
  if (c.max_body_bytes == 0 || c.max_body_bytes > 64 * 1024 * 1024)
    return make_error("config", "ingress.max_body_bytes must be between 1 and 64 MiB");
  if (c.timestamp_tolerance_s <= 0)
    return make_error("config", "ingress.timestamp_tolerance_s must be positive");
  if (c.data_dir.empty()) return make_error("config", "data_dir must not be empty");
  if (std::filesystem::path(c.data_dir).is_relative())
    c.data_dir = (base_dir / c.data_dir).string();
  return c;
}

}  // namespace

Result<Config> load_config(const std::string& path) {
  try {
    auto root = toml::parse(path);
    auto base = std::filesystem::absolute(path).parent_path();
    return parse(root, base);
  } catch (const toml::syntax_error& e) {
    return make_error("config", fmt::format("{} is not valid TOML: {}", path, e.what()));
  } catch (const WrongType& e) {
    return make_error("config", fmt::format("{}: {}", path, e.what()));
  } catch (const toml::type_error& e) {
    return make_error("config", fmt::format("{}: a key has the wrong type: {}", path, e.what()));
  } catch (const std::out_of_range& e) {
    return make_error("config", fmt::format("{}: a required key is missing: {}", path, e.what()));
  } catch (const std::exception& e) {
    return make_error("config", fmt::format("cannot read {}: {}", path, e.what()));
  }
}

}  // namespace opgate::daemon
