#include "daemon/config.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <toml.hpp>
#include <tuple>

#include "common/identifiers.h"
#include "common/logging.h"
#include "common/webhook_signature.h"
#include "operations/notifications.h"
#include "operations/views.h"

namespace opgate::daemon {

namespace {

constexpr int64_t kDay = 86'400;
constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kTenYears = 3650 * kDay;

// While accepted_keys() runs: every key the parser accepts in the tables it
// reads, dotted, with array indices dropped ("notify.endpoints.url").
thread_local std::set<std::string>* accepted_keys_seen = nullptr;

// A configuration problem; its message names the dotted key.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A table of the file and its dotted path, with typed accessors: a present
// key of the wrong type is an error, never the default.
class Section {
 public:
  Section(const toml::value& v, std::string path) : v_(v), path_(std::move(path)) {
    if (!v_.is_table()) throw ConfigError(fmt::format("'{}' must be a table", path_));
  }

  static std::string without_indices(const std::string& dotted) {
    std::string out;
    bool in_index = false;
    for (char c : dotted) {
      if (c == '[') in_index = true;
      if (!in_index) out += c;
      if (c == ']') in_index = false;
    }
    return out;
  }

  std::string key(std::string_view k) const {
    return path_.empty() ? std::string(k) : path_ + "." + std::string(k);
  }
  bool has(const char* k) const { return v_.contains(k); }

  void only(const std::set<std::string>& known) const {
    if (accepted_keys_seen)
      for (const auto& k : known) accepted_keys_seen->insert(without_indices(key(k)));
    for (const auto& [k, _] : v_.as_table())
      if (!known.count(k)) throw ConfigError(fmt::format("unknown key '{}'", key(k)));
  }

  // An integer from lo to hi, checked as written: a value is never narrowed
  // or multiplied before its range is known.
  int64_t integer(const char* k, int64_t fallback, int64_t lo, int64_t hi) const {
    if (!has(k)) return fallback;
    const auto& v = v_.at(k);
    if (!v.is_integer() || v.as_integer() < lo || v.as_integer() > hi)
      throw ConfigError(fmt::format("key '{}' must be an integer from {} to {}", key(k), lo, hi));
    return v.as_integer();
  }

  bool boolean(const char* k, bool fallback) const {
    if (!has(k)) return fallback;
    const auto& v = v_.at(k);
    if (!v.is_boolean()) throw ConfigError(fmt::format("key '{}' must be true or false", key(k)));
    return v.as_boolean();
  }

  std::string string(const char* k, const std::string& fallback) const {
    if (!has(k)) return fallback;
    const auto& v = v_.at(k);
    if (!v.is_string()) throw ConfigError(fmt::format("key '{}' must be a string", key(k)));
    return v.as_string();
  }

  std::string required_string(const char* k) const {
    if (!has(k)) throw ConfigError(fmt::format("key '{}' is required", key(k)));
    return string(k, "");
  }

  std::vector<std::string> strings(const char* k) const {
    std::vector<std::string> out;
    if (!has(k)) return out;
    const auto& v = v_.at(k);
    if (!v.is_array()) throw ConfigError(fmt::format("key '{}' must be a list of strings", key(k)));
    for (const auto& s : v.as_array()) {
      if (!s.is_string())
        throw ConfigError(fmt::format("key '{}' must be a list of strings", key(k)));
      out.push_back(s.as_string());
    }
    return out;
  }

  // { USD = 5000, GBP = 5000 }: upper-case ISO 4217 keys, amounts >= 0.
  std::map<std::string, int64_t> amounts(const char* k) const {
    std::map<std::string, int64_t> out;
    const Section t = table(k);
    for (const auto& [currency, amount] : t.v_.as_table()) {
      if (!operations::valid_currency(currency))
        throw ConfigError(
            fmt::format("key '{}': currency keys must be upper-case ISO 4217 codes "
                        "such as USD",
                        t.key(currency)));
      if (!amount.is_integer() || amount.as_integer() < 0)
        throw ConfigError(
            fmt::format("key '{}' must be an amount in minor units (>= 0)", t.key(currency)));
      out[currency] = amount.as_integer();
    }
    return out;
  }

  Section table(const char* k) const { return Section(v_.at(k), key(k)); }
  const toml::value& raw() const { return v_; }

  // The table's required "name": an identifier none of `taken` has yet
  // (added to it). `hint` ends the refusal.
  std::string unique_name(std::set<std::string>& taken, std::string_view hint = "") const {
    std::string name = required_string("name");
    if (!valid_identifier(name) || !taken.insert(name).second)
      throw ConfigError(fmt::format(
          "'{}' must be a unique name of 1-64 characters from A-Z, a-z, 0-9, '.', '_' and '-'{}",
          key("name"), hint));
    return name;
  }

  std::vector<Section> tables(const char* k) const {
    std::vector<Section> out;
    if (!has(k)) return out;
    const auto& v = v_.at(k);
    if (!v.is_array())
      throw ConfigError(fmt::format("key '{}' must be an array of tables", key(k)));
    size_t i = 0;
    for (const auto& t : v.as_array()) out.emplace_back(t, fmt::format("{}[{}]", key(k), i++));
    return out;
  }

 private:
  const toml::value& v_;
  std::string path_;
};

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

TlsFiles parse_tls(const Section& s, const std::filesystem::path& base_dir) {
  TlsFiles tls{s.string("tls_cert_file", ""), s.string("tls_key_file", "")};
  if (tls.cert_file.empty() != tls.key_file.empty())
    throw ConfigError(fmt::format("'{}' and '{}' go together: set both or neither",
                                  s.key("tls_cert_file"), s.key("tls_key_file")));
  for (auto* f : {&tls.cert_file, &tls.key_file})
    if (!f->empty() && std::filesystem::path(*f).is_relative()) *f = (base_dir / *f).string();
  return tls;
}

void parse_ingress(const Section& in, Config& c, const std::filesystem::path& base_dir) {
  in.only({"listen", "max_body_bytes", "timestamp_tolerance_s", "max_backlog", "retention_s",
           "sources", "header_timeout_ms", "body_timeout_ms", "max_connections",
           "reject_cooldown_ms", "tls_cert_file", "tls_key_file"});
  c.ingress_listen = in.string("listen", c.ingress_listen);
  c.ingress_tls = parse_tls(in, base_dir);
  c.max_body_bytes = in.integer("max_body_bytes", c.max_body_bytes, 1, 64 << 20);
  c.timestamp_tolerance_s = in.integer("timestamp_tolerance_s", c.timestamp_tolerance_s, 1, kDay);
  c.max_backlog = static_cast<size_t>(
      in.integer("max_backlog", static_cast<int64_t>(c.max_backlog), 0, 100'000'000));
  c.inbox_retention_s = in.integer("retention_s", c.inbox_retention_s, 0, kTenYears);
  c.header_timeout_ms = in.integer("header_timeout_ms", c.header_timeout_ms, 1, kHourMs);
  c.body_timeout_ms = in.integer("body_timeout_ms", c.body_timeout_ms, 1, kHourMs);
  c.max_connections = in.integer("max_connections", c.max_connections, 1, 1'000'000);
  c.reject_cooldown_ms = in.integer("reject_cooldown_ms", c.reject_cooldown_ms, 0, 60'000);
  std::set<std::string> names;
  for (const auto& s : in.tables("sources")) {
    s.only({"name", "secrets", "secrets_env"});
    ingress::Source source;
    // The name is the path's last segment (/webhooks/{name}); a second
    // source of the same name would never be tried. Rotation lists both
    // secrets in one source.
    source.name =
        s.unique_name(names, " (to rotate a secret, list the new and the old in one source)");
    std::vector<std::string> secrets = s.strings("secrets");
    if (s.has("secrets_env"))
      for (auto& v : split_env(s.string("secrets_env", ""))) secrets.push_back(v);
    if (secrets.empty())
      throw ConfigError(
          fmt::format("webhook source '{}' has no secrets (set secrets or the "
                      "variable in secrets_env)",
                      source.name));
    for (const auto& secret : secrets) {
      auto key = webhooks::decode_secret(secret);
      if (!key)
        throw ConfigError(fmt::format("webhook source '{}': {}", source.name, key.error().message));
      source.raw_keys.push_back(*key);
    }
    c.sources.push_back(std::move(source));
  }
}

void parse_operator(const Section& op, Config& c, const std::filesystem::path& base_dir) {
  op.only({"listen", "tokens", "tls_cert_file", "tls_key_file"});
  c.operator_listen = op.string("listen", c.operator_listen);
  c.operator_tls = parse_tls(op, base_dir);
  for (const auto& t : op.tables("tokens")) {
    t.only({"principal", "token_sha256", "scopes", "owners", "max_amount_minor", "tiers"});
    operations::Principal p;
    p.name = t.required_string("principal");
    p.token_sha256 = t.required_string("token_sha256");
    for (auto& ch : p.token_sha256) ch = static_cast<char>(std::tolower(ch));
    if (p.token_sha256.size() != 64 ||
        p.token_sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw ConfigError(
          fmt::format("operator token '{}': token_sha256 must be 64 hex digits", p.name));
    p.scopes = t.strings("scopes");
    static const std::set<std::string> scopes = {
        std::string(operations::scope::read), std::string(operations::scope::approve),
        std::string(operations::scope::resolve), std::string(operations::scope::bind),
        std::string(operations::scope::admin)};
    for (const auto& s : p.scopes)
      if (!scopes.count(s))
        throw ConfigError(fmt::format("operator token '{}': unknown scope '{}'", p.name, s));
    p.owners = t.strings("owners");
    p.tiers = t.strings("tiers");
    for (const auto& tier : p.tiers)
      if (tier != "refund" && tier != "support" && tier != "supervisor")
        throw ConfigError(fmt::format("operator token '{}': unknown tier '{}'", p.name, tier));
    if (t.has("max_amount_minor")) p.max_amount_minor = t.amounts("max_amount_minor");
    c.principals.push_back(std::move(p));
  }
}

bool valid_origin(const std::string& origin);

void parse_mcp(const Section& m, Config& c, const std::filesystem::path& base_dir) {
  m.only({"listen", "tls_cert_file", "tls_key_file", "allowed_origins", "allowed_hosts",
          "public_url"});
  c.mcp.listen = m.required_string("listen");
  if (c.mcp.listen.rfind(':') == std::string::npos)
    throw ConfigError(fmt::format("'{}' must be host:port", m.key("listen")));
  c.mcp.tls = parse_tls(m, base_dir);
  c.mcp.allowed_origins = m.strings("allowed_origins");
  for (const auto& origin : c.mcp.allowed_origins)
    if (!valid_origin(origin))
      throw ConfigError(fmt::format("'{}' holds '{}': an origin is scheme://host[:port]",
                                    m.key("allowed_origins"), origin));
  c.mcp.hosts_from_listen = !m.has("allowed_hosts");
  c.mcp.allowed_hosts =
      c.mcp.hosts_from_listen ? default_allowed_hosts(c.mcp.listen) : m.strings("allowed_hosts");
  c.mcp.public_url = m.string("public_url", "");
  while (!c.mcp.public_url.empty() && c.mcp.public_url.back() == '/') c.mcp.public_url.pop_back();
  if (!c.mcp.public_url.empty() && !valid_origin(c.mcp.public_url))
    throw ConfigError(fmt::format("'{}' must be scheme://host[:port]", m.key("public_url")));
}

// [policy.tools.NAME]: every tool may be disabled and given one of its
// tiers; its limits override the [policy] keys they name.
void parse_tools(const Section& tools, operations::PolicyConfig& pol) {
  for (const auto& [name, _] : tools.raw().as_table()) {
    if (!operations::known_tool(name))
      throw ConfigError(
          fmt::format("unknown tool '{}': the tools are lookup_order, "
                      "add_internal_note, draft_customer_reply, request_refund, "
                      "issue_account_credit and cancel_order",
                      tools.key(name)));
    const Section t = tools.table(name.c_str());
    std::set<std::string> known = {"enabled", "tier"};
    if (name == "request_refund" || name == "cancel_order") known.insert("window_days");
    if (name == "issue_account_credit")
      known.insert(
          {"reason_codes", "hard_cap_minor", "support_limit_minor", "delivery_delay_after_days"});
    if (name == "add_internal_note") known.insert("max_evidence");
    t.only(known);
    auto& tool = pol.tools[name];
    tool.enabled = t.boolean("enabled", tool.enabled);
    tool.tier = t.string("tier", tool.tier);
    const auto tiers = operations::tiers_of_tool(name);
    if (std::find(tiers.begin(), tiers.end(), tool.tier) == tiers.end())
      throw ConfigError(fmt::format("key '{}': unknown tier '{}' for this tool (it may be {})",
                                    t.key("tier"), tool.tier, fmt::join(tiers, ", ")));
    if (name == "request_refund")
      pol.refund_window_days = t.integer("window_days", pol.refund_window_days, 0, 3650);
    if (name == "cancel_order")
      pol.cancel_window_days = t.integer("window_days", pol.cancel_window_days, 0, 3650);
    if (t.has("reason_codes")) pol.credit_reason_codes = t.strings("reason_codes");
    if (t.has("hard_cap_minor")) pol.credit_hard_cap_minor = t.amounts("hard_cap_minor");
    if (t.has("support_limit_minor"))
      pol.credit_support_limit_minor = t.amounts("support_limit_minor");
    pol.delivery_delay_after_days =
        t.integer("delivery_delay_after_days", pol.delivery_delay_after_days, 0, 3650);
    pol.note_max_evidence = t.integer("max_evidence", pol.note_max_evidence, 1, 100);
  }
}

// [policy.escalation]: reminders and escalation of proposals nobody decides.
void parse_escalation(const Section& e, operations::PolicyConfig& pol) {
  e.only({"remind_after_s", "escalate_after_s", "escalate_to_tier"});
  auto& esc = pol.escalation;
  esc.remind_after_s = e.integer("remind_after_s", esc.remind_after_s, 0, kTenYears);
  esc.escalate_after_s = e.integer("escalate_after_s", esc.escalate_after_s, 0, kTenYears);
  esc.escalate_to_tier = e.string("escalate_to_tier", esc.escalate_to_tier);
  if (operations::tier_rank(esc.escalate_to_tier) == 0)
    throw ConfigError(fmt::format("key '{}': unknown tier '{}' (refund, support or supervisor)",
                                  e.key("escalate_to_tier"), esc.escalate_to_tier));
  for (const auto& [key, v] :
       {std::pair<const char*, int64_t>{"remind_after_s", esc.remind_after_s},
        {"escalate_after_s", esc.escalate_after_s}}) {
    if (v >= pol.approval_ttl_s)
      throw ConfigError(fmt::format(
          "key '{}' is {} s, not below policy.approval_ttl_s ({} s): the proposal would expire "
          "first",
          e.key(key), v, pol.approval_ttl_s));
  }
}

void parse_policy(const Section& p, operations::PolicyConfig& pol) {
  p.only({"refund_window_days", "approval_ttl_s", "two_person_threshold_minor",
          "credit_reason_codes", "credit_hard_cap_minor", "credit_support_limit_minor", "tools",
          "escalation"});
  pol.refund_window_days = p.integer("refund_window_days", pol.refund_window_days, 0, 3650);
  pol.approval_ttl_s = p.integer("approval_ttl_s", pol.approval_ttl_s, 1, 365 * kDay);
  if (p.has("two_person_threshold_minor"))
    pol.two_person_threshold_minor = p.amounts("two_person_threshold_minor");
  if (p.has("credit_reason_codes")) pol.credit_reason_codes = p.strings("credit_reason_codes");
  if (p.has("credit_hard_cap_minor"))
    pol.credit_hard_cap_minor = p.amounts("credit_hard_cap_minor");
  if (p.has("credit_support_limit_minor"))
    pol.credit_support_limit_minor = p.amounts("credit_support_limit_minor");
  if (p.has("tools")) parse_tools(p.table("tools"), pol);
  if (p.has("escalation")) parse_escalation(p.table("escalation"), pol);
}

// A TOML value as JSON, for the pure core's parsers. Dates and times have
// no place in a declaration: they are refused where they stand.
boost::json::value to_json(const toml::value& v, const std::string& path) {
  if (v.is_boolean()) return v.as_boolean();
  if (v.is_integer()) return static_cast<int64_t>(v.as_integer());
  if (v.is_floating()) return static_cast<double>(v.as_floating());
  if (v.is_string()) return boost::json::string(v.as_string().str);
  if (v.is_array()) {
    boost::json::array out;
    size_t i = 0;
    for (const auto& item : v.as_array())
      out.push_back(to_json(item, fmt::format("{}[{}]", path, i++)));
    return out;
  }
  if (v.is_table()) {
    boost::json::object out;
    for (const auto& [k, item] : v.as_table()) out[k] = to_json(item, path + "." + k);
    return out;
  }
  throw ConfigError(fmt::format("key '{}' must not be a date or time", path));
}

// [[operations]]: tools declared without code (operations/declared.h). The
// executor's token is read from its environment variable now, so a missing
// one stops the start, not the first approval.
void parse_operations(const toml::value& list, operations::PolicyConfig& pol) {
  if (!list.is_array())
    throw ConfigError("'operations' must be an array of tables: write [[operations]]");
  size_t i = 0;
  for (const auto& table : list.as_array()) {
    const std::string path = fmt::format("operations[{}]", i++);
    auto op = operations::parse_declared_operation(to_json(table, path), path);
    if (!op) throw ConfigError(op.error().message);
    if (pol.declared_operation(op->name))
      throw ConfigError(fmt::format("key '{}.name': '{}' is declared twice", path, op->name));
    op->executor.token = env_or_empty(op->executor.token_env);
    if (op->executor.token.empty())
      throw ConfigError(
          fmt::format("key '{}.executor.token_env': the environment variable {} is "
                      "not set (the executor's bearer token)",
                      path, op->executor.token_env));
    pol.declared.push_back(std::move(*op));
  }
}

void parse_store(const Section& st, Config::Store& s, const std::filesystem::path& base_dir) {
  st.only({"backend", "url_env", "pool_size", "connect_timeout_s", "statement_timeout_ms",
           "sslmode", "sslrootcert", "sslcert", "sslkey", "block_cache_bytes",
           "write_buffer_bytes"});
  s.block_cache_bytes =
      st.integer("block_cache_bytes", s.block_cache_bytes, 1 << 20, int64_t{1} << 40);
  s.write_buffer_bytes =
      st.integer("write_buffer_bytes", s.write_buffer_bytes, 1 << 20, int64_t{1} << 32);
  s.sslmode = st.string("sslmode", s.sslmode);
  static const std::set<std::string> kModes = {"disable", "allow",     "prefer",
                                               "require", "verify-ca", "verify-full"};
  if (!s.sslmode.empty() && !kModes.count(s.sslmode))
    throw ConfigError(
        "key 'store.sslmode' must be one of disable, allow, prefer, require, verify-ca, "
        "verify-full");
  for (auto [key, file] : {std::pair{"sslrootcert", &s.sslrootcert},
                           std::pair{"sslcert", &s.sslcert}, std::pair{"sslkey", &s.sslkey}}) {
    *file = st.string(key, *file);
    if (!file->empty() && std::filesystem::path(*file).is_relative())
      *file = (base_dir / *file).string();
  }
  if (s.sslcert.empty() != s.sslkey.empty())
    throw ConfigError("keys 'store.sslcert' and 'store.sslkey' go together");
  s.backend = st.string("backend", s.backend);
  if (s.backend != "rocksdb" && s.backend != "postgres")
    throw ConfigError("key 'store.backend' must be \"rocksdb\" or \"postgres\"");
  s.url_env = st.string("url_env", s.url_env);
  s.pool_size = st.integer("pool_size", s.pool_size, 1, 1000);
  s.connect_timeout_s = st.integer("connect_timeout_s", s.connect_timeout_s, 1, 3600);
  s.statement_timeout_ms =
      st.integer("statement_timeout_ms", s.statement_timeout_ms, 0, 24 * kHourMs);
  if (s.backend == "postgres") {
    if (s.url_env.empty()) throw ConfigError("key 'store.url_env' must name a variable");
    s.url = env_or_empty(s.url_env);
    if (s.url.empty())
      throw ConfigError(
          fmt::format("store.url_env: the variable {} is not set (it must hold "
                      "the PostgreSQL connection string)",
                      s.url_env));
  }
}

// A list of waits in seconds, each from 1 s to a week.
std::vector<int64_t> waits_s(const Section& s, const char* k) {
  std::vector<int64_t> out;
  const auto& v = s.raw().at(k);
  if (!v.is_array())
    throw ConfigError(fmt::format("key '{}' must be a list of seconds from 1 to 604800", s.key(k)));
  // Read through strings() would refuse integers: one pass of our own.
  for (const auto& item : v.as_array()) {
    if (!item.is_integer() || item.as_integer() <= 0 || item.as_integer() > 7 * kDay)
      throw ConfigError(
          fmt::format("key '{}' must be a list of seconds from 1 to 604800", s.key(k)));
    out.push_back(item.as_integer());
  }
  return out;
}

// An absolute http(s) URL with a host, and no whitespace or control
// character anywhere (a trailing space is enough to fail at send time).
bool http_url_ok(const std::string& url) {
  if (!url.starts_with("http://") && !url.starts_with("https://")) return false;
  for (unsigned char c : url)
    if (c <= 0x20 || c == 0x7f) return false;
  auto parsed = boost::urls::parse_uri(url);
  return parsed && !parsed->host().empty();
}

void parse_notify(const Section& n, outbox::NotifyConfig& notify) {
  n.only({"retry_schedule_s", "console_url", "endpoints"});
  if (n.has("retry_schedule_s")) {
    notify.retry_schedule_s = waits_s(n, "retry_schedule_s");
    if (notify.retry_schedule_s.empty())
      throw ConfigError("notify.retry_schedule_s must list at least one wait");
  }
  notify.console_url = n.string("console_url", "");
  std::set<std::string> names;
  for (const auto& e : n.tables("endpoints")) {
    e.only({"name", "url", "secret", "secret_env", "events", "format", "timeout_ms",
            "max_in_flight", "include_evidence"});
    outbox::NotifyEndpoint endpoint;
    endpoint.name = e.unique_name(names);
    endpoint.url = e.required_string("url");
    // Checked here, whole: a URL that fails only when sent would leave an
    // error behind, and a notification URL (a Slack webhook's path) is a
    // secret, so no message ever shows more of it than its key.
    if (!http_url_ok(endpoint.url))
      throw ConfigError(fmt::format(
          "'{}' must be an http:// or https:// URL with a host and no spaces (not shown here: "
          "such a URL can be a secret)",
          e.key("url")));
    const std::string format = e.string("format", "standard");
    if (format == "slack")
      endpoint.format = outbox::NotifyEndpoint::Format::slack;
    else if (format != "standard")
      throw ConfigError(fmt::format("'{}' must be \"standard\" or \"slack\"", e.key("format")));
    std::string secret = e.string("secret", "");
    const std::string variable = e.string("secret_env", "");
    if (e.has("secret_env")) secret = env_or_empty(variable);
    // Slack reads no signature (its URL is the secret): a secret is optional.
    const bool optional = endpoint.format == outbox::NotifyEndpoint::Format::slack &&
                          !e.has("secret") && !e.has("secret_env");
    if (!optional) {
      auto key = webhooks::decode_secret(secret);
      if (!key)
        throw ConfigError(
            e.has("secret_env")
                ? fmt::format("notification endpoint '{}': the variable {} (named by '{}') must "
                              "hold a whsec_ secret{}",
                              endpoint.name, variable, e.key("secret_env"),
                              secret.empty() ? ", and it is not set" : "")
                : fmt::format("notification endpoint '{}': '{}' must be a whsec_ secret (or set "
                              "'{}' to the name of a variable holding one)",
                              endpoint.name, e.key("secret"), e.key("secret_env")));
      endpoint.raw_key = *key;
    }
    endpoint.include_evidence = e.boolean("include_evidence", false);
    for (const auto& type : e.strings("events")) {
      const auto& all = operations::notify::all_events();
      if (std::find(all.begin(), all.end(), type) == all.end())
        throw ConfigError(fmt::format("'{}': unknown event '{}'", e.key("events"), type));
      endpoint.events.insert(type);
    }
    endpoint.timeout_ms = e.integer("timeout_ms", endpoint.timeout_ms, 1, 60'000);
    endpoint.max_in_flight =
        static_cast<int>(e.integer("max_in_flight", endpoint.max_in_flight, 1, 64));
    notify.endpoints.push_back(std::move(endpoint));
  }
}

// An origin as browsers send it: http(s)://host[:port], nothing more.
bool valid_origin(const std::string& origin) {
  std::string rest;
  if (origin.rfind("https://", 0) == 0)
    rest = origin.substr(8);
  else if (origin.rfind("http://", 0) == 0)
    rest = origin.substr(7);
  else
    return false;
  if (rest.empty()) return false;
  for (char c : rest)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '[' || c == ']'))
      return false;
  return true;
}

// [console.step_up]: which approvals need a passkey (operations/step_up.h).
void parse_step_up(const Section& t, operations::StepUpPolicy& step_up) {
  t.only({"tiers", "above_minor"});
  step_up.tiers = t.strings("tiers");
  for (const auto& tier : step_up.tiers)
    if (operations::tier_rank(tier) == 0)
      throw ConfigError(
          fmt::format("key '{}' holds '{}': the tiers are refund, support and "
                      "supervisor",
                      t.key("tiers"), tier));
  if (t.has("above_minor")) step_up.above_minor = t.amounts("above_minor");
}

void parse_console(const Section& t, console::Options& c, operations::PolicyConfig& policy) {
  t.only({"enabled", "idle_timeout_s", "absolute_timeout_s", "max_sessions", "origin", "step_up",
          "trusted_proxies"});
  if (t.has("step_up")) parse_step_up(t.table("step_up"), policy.step_up);
  c.enabled = t.boolean("enabled", c.enabled);
  constexpr int64_t kWeek = 7 * kDay;
  const int64_t idle_s = t.integer("idle_timeout_s", c.sessions.idle_ms / 1000, 1, kWeek);
  const int64_t absolute_s =
      t.integer("absolute_timeout_s", c.sessions.absolute_ms / 1000, 1, kWeek);
  const int64_t max_sessions =
      t.integer("max_sessions", static_cast<int64_t>(c.sessions.max_sessions), 1, 1'000'000);
  if (absolute_s < idle_s)
    throw ConfigError(
        "console.absolute_timeout_s must be at least console.idle_timeout_s and at most 604800");
  c.sessions.idle_ms = idle_s * 1000;
  c.sessions.absolute_ms = absolute_s * 1000;
  c.sessions.max_sessions = static_cast<size_t>(max_sessions);
  c.origin = t.string("origin", "");
  if (!c.origin.empty() && !valid_origin(c.origin))
    throw ConfigError(
        "console.origin must be a scheme and host as browsers send it, such as "
        "\"https://ops.example.com\" (no path, no trailing slash)");
  if (t.has("trusted_proxies")) c.trusted_proxies = t.strings("trusted_proxies");
  for (const auto& a : c.trusted_proxies) {
    unsigned char parsed[sizeof(in6_addr)];
    if (inet_pton(AF_INET, a.c_str(), parsed) != 1 && inet_pton(AF_INET6, a.c_str(), parsed) != 1)
      throw ConfigError(fmt::format(
          "console.trusted_proxies: '{}' is not an IP address (a proxy's address as the "
          "listener sees it, such as \"127.0.0.1\")",
          a));
  }
}

Config parse(const toml::value& file, const std::filesystem::path& base_dir) {
  Config c;
  const Section root(file, "");
  root.only({"data_dir", "log", "store", "ingress", "operator", "mcp", "agent", "payments",
             "orders", "policy", "outbox", "notify", "console", "operations"});
  c.data_dir = root.string("data_dir", c.data_dir);
  if (root.has("log")) {
    const Section log = root.table("log");
    log.only({"level"});
    c.log_level = log.string("level", c.log_level);
    if (!valid_log_level(c.log_level))
      throw ConfigError("log.level must be one of trace, debug, info, warn, error, critical, off");
  }
  if (root.has("store")) parse_store(root.table("store"), c.store, base_dir);
  if (root.has("ingress")) parse_ingress(root.table("ingress"), c, base_dir);
  if (root.has("operator")) parse_operator(root.table("operator"), c, base_dir);
  if (root.has("mcp")) parse_mcp(root.table("mcp"), c, base_dir);

  for (auto [section, key_env, default_env, upstream] :
       {std::tuple{"agent", "api_key_env", "OPENAI_API_KEY", &c.agent},
        std::tuple{"payments", "secret_key_env", "OPGATE_PAYMENTS_SECRET_KEY", &c.payments}}) {
    std::string env_name = default_env;
    if (root.has(section)) {
      const Section t = root.table(section);
      std::set<std::string> known = {"base_url", key_env, "timeout_ms", "ca_file"};
      if (upstream == &c.agent) known.insert({"sweep_interval_s", "sweep_window_s"});
      t.only(known);
      if (upstream == &c.agent) {
        c.sweep_interval_s = t.integer("sweep_interval_s", c.sweep_interval_s, 0, kDay);
        c.sweep_window_s = t.integer("sweep_window_s", c.sweep_window_s, 0, 30 * kDay);
      }
      upstream->base_url = t.string("base_url", upstream->base_url);
      // Checked here: a URL that fails only when called would send every
      // approved operation to outcome_unknown.
      if (!http_url_ok(upstream->base_url))
        throw ConfigError(
            fmt::format("'{}' must be an http:// or https:// URL with a host", t.key("base_url")));
      env_name = t.string(key_env, env_name);
      upstream->timeout_ms =
          static_cast<int>(t.integer("timeout_ms", upstream->timeout_ms, 100, 60'000));
      upstream->ca_file = t.string("ca_file", "");
    }
    upstream->secret = env_or_empty(env_name);
  }

  if (root.has("orders")) {
    const Section o = root.table("orders");
    o.only({"source", "seed_file", "base_url", "token_env", "timeout_ms", "ca_file"});
    c.orders_source = o.string("source", "embedded");
    if (c.orders_source != "embedded" && c.orders_source != "http")
      throw ConfigError("orders.source must be \"embedded\" or \"http\"");
    const bool http = c.orders_source == "http";
    c.orders_seed_file = o.string("seed_file", "");
    if (http && !c.orders_seed_file.empty())
      throw ConfigError(
          "orders.seed_file is for embedded orders; with source = \"http\" the order service "
          "is the truth");
    if (!c.orders_seed_file.empty() && std::filesystem::path(c.orders_seed_file).is_relative())
      c.orders_seed_file = (base_dir / c.orders_seed_file).string();
    c.orders.base_url = o.string("base_url", "");
    if (http && !http_url_ok(c.orders.base_url))
      throw ConfigError(
          "orders.base_url must be an http:// or https:// URL with a host with source = "
          "\"http\"");
    if (!http && (o.has("base_url") || o.has("token_env") || o.has("timeout_ms")))
      throw ConfigError("orders.base_url, token_env and timeout_ms need source = \"http\"");
    c.orders.timeout_ms =
        static_cast<int>(o.integer("timeout_ms", c.orders.timeout_ms, 100, 60'000));
    c.orders.ca_file = o.string("ca_file", "");
    if (!c.orders.ca_file.empty() && std::filesystem::path(c.orders.ca_file).is_relative())
      c.orders.ca_file = (base_dir / c.orders.ca_file).string();
    if (http) c.orders.secret = env_or_empty(o.string("token_env", "OPGATE_ORDERS_TOKEN"));
  }
  if (root.has("policy")) parse_policy(root.table("policy"), c.policy);
  if (root.has("operations")) parse_operations(file.at("operations"), c.policy);
  if (root.has("notify")) parse_notify(root.table("notify"), c.notify);
  if (root.has("outbox")) {
    const Section o = root.table("outbox");
    o.only({"attention_after_attempts", "attention_after_s"});
    c.attention.after_attempts = static_cast<int>(
        o.integer("attention_after_attempts", c.attention.after_attempts, 1, 1'000'000));
    c.attention.after_ms =
        o.integer("attention_after_s", c.attention.after_ms / 1000, 1, kTenYears) * 1000;
  }
  if (root.has("console")) parse_console(root.table("console"), c.console, c.policy);
  if (Status s = check_replay_window(c.inbox_retention_s, c.timestamp_tolerance_s); !s)
    throw ConfigError(s.error().message);
  if (c.data_dir.empty()) throw ConfigError("data_dir must not be empty");
  if (std::filesystem::path(c.data_dir).is_relative()) {
    c.data_dir_was_relative = true;
    c.data_dir = (base_dir / c.data_dir).lexically_normal().string();
  }
  std::set<std::string> names;
  for (const auto& p : c.principals)
    if (!names.insert(p.name).second)
      throw ConfigError(fmt::format("operator token principal '{}' appears twice", p.name));
  c.policy.sha256 = operations::policy_sha256(c.policy);
  return c;
}

// toml11's messages quote the offending line, which may hold a secret: keep
// the first line and the line number only.
std::string without_quoted_lines(const std::string& what) {
  std::string first = what.substr(0, what.find('\n'));
  std::string line;
  size_t pos = 0;
  while ((pos = what.find('\n', pos)) != std::string::npos) {
    ++pos;
    size_t digits = pos;
    while (digits < what.size() && what[digits] == ' ') ++digits;
    size_t end = digits;
    while (end < what.size() && std::isdigit(static_cast<unsigned char>(what[end]))) ++end;
    size_t bar = end;
    while (bar < what.size() && what[bar] == ' ') ++bar;
    if (end > digits && bar < what.size() && what[bar] == '|') {
      line = what.substr(digits, end - digits);
      break;
    }
  }
  return line.empty() ? first : first + " (line " + line + ")";
}

}  // namespace

std::vector<std::string> default_allowed_hosts(const std::string& listen) {
  // The host of "host:port" ("[::1]:port" keeps its brackets).
  const std::string host = listen.substr(0, listen.rfind(':'));
  if (host == "127.0.0.1" || host == "localhost" || host == "[::1]" || host == "::1")
    return {"127.0.0.1", "localhost", "[::1]"};
  return {};
}

Status check_replay_window(int64_t retention_s, int64_t tolerance_s) {
  // A delivery is valid for a tolerance either side of its timestamp: an
  // event's id must be kept at least that long, or a captured delivery
  // could be replayed once its id was forgotten.
  if (retention_s == 0 || retention_s >= 2 * tolerance_s) return Status::Ok();
  return make_error(
      errc::config,
      fmt::format("ingress.retention_s ({} s) must be 0 (keep every event) or at least twice "
                  "ingress.timestamp_tolerance_s ({} s), so that no delivery still valid is "
                  "forgotten",
                  retention_s, tolerance_s));
}

Status check_serviceable(const Config& c) {
  if (c.sources.empty())
    return make_error(errc::config,
                      "no webhook source: add an [[ingress.sources]] with its secrets, or the "
                      "agent platform's webhooks have nowhere to go");
  if (c.principals.empty())
    return make_error(errc::config,
                      "no operator token: add an [[operator.tokens]] entry, or nobody can "
                      "approve anything");
  if (c.agent.secret.empty())
    return make_error(errc::config,
                      "the Agents API key is empty: set the variable named by agent.api_key_env");
  if (c.payments.secret.empty())
    return make_error(errc::config,
                      "the payment provider's secret key is empty: set the variable named by "
                      "payments.secret_key_env");
  if (c.orders_source == "http" && c.orders.secret.empty())
    return make_error(errc::config,
                      "the order service's token is empty: set the variable named by "
                      "orders.token_env");
  return Status::Ok();
}

int64_t execution_budget_ms(const Config& config) {
  int64_t budget =
      config.payments.timeout_ms + (config.orders_source == "http" ? config.orders.timeout_ms : 0);
  for (const auto& op : config.policy.declared) budget = std::max(budget, op.executor.timeout_ms);
  return budget;
}

std::vector<std::string> keys_needing_restart(const Config& a, const Config& b, int64_t budget_ms) {
  std::vector<std::string> keys;
  auto check = [&](bool same, const char* key) {
    if (!same) keys.push_back(key);
  };
  check(a.data_dir == b.data_dir, "data_dir");
  check(a.ingress_listen == b.ingress_listen, "ingress.listen");
  check(a.operator_listen == b.operator_listen, "operator.listen");
  check(a.ingress_tls.enabled() == b.ingress_tls.enabled(), "ingress.tls_cert_file (on or off)");
  check(a.operator_tls.enabled() == b.operator_tls.enabled(), "operator.tls_cert_file (on or off)");
  check(a.mcp.listen == b.mcp.listen, "mcp.listen");
  check(a.mcp.tls.enabled() == b.mcp.tls.enabled(), "mcp.tls_cert_file (on or off)");
  check(a.mcp.public_url == b.mcp.public_url, "mcp.public_url");
  check(a.max_body_bytes == b.max_body_bytes, "ingress.max_body_bytes");
  check(a.max_connections == b.max_connections, "ingress.max_connections");
  check(a.header_timeout_ms == b.header_timeout_ms, "ingress.header_timeout_ms");
  check(a.body_timeout_ms == b.body_timeout_ms, "ingress.body_timeout_ms");
  check(a.inbox_retention_s == b.inbox_retention_s, "ingress.retention_s");
  // The claim lease was sized at start: a longer executor timeout is held to it.
  check(execution_budget_ms(b) <= budget_ms,
        "operations.executor.timeout_ms (above the longest at start)");
  check(a.sweep_interval_s == b.sweep_interval_s && a.sweep_window_s == b.sweep_window_s,
        "agent.sweep_interval_s, agent.sweep_window_s");
  check(a.attention.after_attempts == b.attention.after_attempts &&
            a.attention.after_ms == b.attention.after_ms,
        "outbox.attention_after_attempts, outbox.attention_after_s");
  check(a.agent.base_url == b.agent.base_url && a.agent.secret == b.agent.secret &&
            a.agent.timeout_ms == b.agent.timeout_ms && a.agent.ca_file == b.agent.ca_file,
        "agent");
  check(a.payments.base_url == b.payments.base_url && a.payments.secret == b.payments.secret &&
            a.payments.timeout_ms == b.payments.timeout_ms &&
            a.payments.ca_file == b.payments.ca_file,
        "payments");
  check(a.orders_source == b.orders_source && a.orders_seed_file == b.orders_seed_file &&
            a.orders.base_url == b.orders.base_url && a.orders.secret == b.orders.secret &&
            a.orders.timeout_ms == b.orders.timeout_ms && a.orders.ca_file == b.orders.ca_file,
        "orders");
  check(a.store.backend == b.store.backend && a.store.url == b.store.url &&
            a.store.pool_size == b.store.pool_size &&
            a.store.connect_timeout_s == b.store.connect_timeout_s &&
            a.store.statement_timeout_ms == b.store.statement_timeout_ms &&
            a.store.sslmode == b.store.sslmode && a.store.sslrootcert == b.store.sslrootcert &&
            a.store.sslcert == b.store.sslcert && a.store.sslkey == b.store.sslkey &&
            a.store.block_cache_bytes == b.store.block_cache_bytes &&
            a.store.write_buffer_bytes == b.store.write_buffer_bytes,
        "store");
  check(a.console.enabled == b.console.enabled && a.console.origin == b.console.origin &&
            a.console.trusted_proxies == b.console.trusted_proxies &&
            a.console.sessions.idle_ms == b.console.sessions.idle_ms &&
            a.console.sessions.absolute_ms == b.console.sessions.absolute_ms &&
            a.console.sessions.max_sessions == b.console.sessions.max_sessions,
        "console (its step_up is applied)");
  return keys;
}

Result<Config> load_config(const std::string& path) {
  try {
    auto root = toml::parse(path);
    auto base = std::filesystem::absolute(path).parent_path();
    return parse(root, base);
  } catch (const ConfigError& e) {
    return make_error(errc::config, fmt::format("{}: {}", path, e.what()));
  } catch (const toml::syntax_error& e) {
    return make_error(errc::config, fmt::format("{} is not valid TOML: {}", path,
                                                without_quoted_lines(e.what())));
  } catch (const std::exception& e) {
    return make_error(errc::config,
                      fmt::format("cannot read {}: {}", path, without_quoted_lines(e.what())));
  }
}

Result<std::set<std::string>> accepted_keys(const std::string& path) {
  std::set<std::string> seen;
  accepted_keys_seen = &seen;
  auto loaded = load_config(path);
  accepted_keys_seen = nullptr;
  if (!loaded) return loaded.error();
  return seen;
}

}  // namespace opgate::daemon
