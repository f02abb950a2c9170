#include "daemon/config.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <toml.hpp>

#include "common/crypto.h"

using namespace opgate;

namespace {
struct ConfigFile {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("opgate-config-" + crypto::random_hex(6) + ".toml");
  explicit ConfigFile(const std::string& text) { std::ofstream(path) << text; }
  ~ConfigFile() { std::filesystem::remove(path); }
};

const std::string kSource = R"(
[[ingress.sources]]
name = "agents"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
)";
}  // namespace

TEST_CASE("the documented keys load, with relative paths beside the config file") {
  ConfigFile f(R"(data_dir = "data"
[ingress]
listen = "127.0.0.1:9999"
max_body_bytes = 1024
)" + kSource + R"(
[operator]
listen = "127.0.0.1:9998"
[[operator.tokens]]
principal = "alice"
token_sha256 = ")" +
               crypto::sha256_hex("t") + R"("
scopes = ["operations:read", "operations:approve"]
owners = ["demo-*"]
max_amount_minor = { USD = 500 }
[payments]
base_url = "https://payments.example"
secret_key_env = "OPGATE_TEST_CONFIG_KEY"
timeout_ms = 1234
[policy]
approval_ttl_s = 60
credit_reason_codes = ["GOODWILL"]
[outbox]
attention_after_attempts = 3
)");
  setenv("OPGATE_TEST_CONFIG_KEY", "sk_test_x", 1);
  auto c = daemon::load_config(f.path.string());
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  CHECK(c->data_dir == (f.path.parent_path() / "data").string());
  CHECK(c->max_body_bytes == 1024);
  CHECK(c->sources.size() == 1);
  CHECK(c->principals.at(0).max_amount_minor.at("USD") == 500);
  CHECK(c->payments.secret == "sk_test_x");
  CHECK(c->payments.timeout_ms == 1234);
  CHECK(c->policy.approval_ttl_s == 60);
  CHECK(c->attention.after_attempts == 3);
}

TEST_CASE("an unknown key, a wrong type or a bad value is refused with its name") {
  auto error_of = [](const std::string& text) {
    ConfigFile f(text);
    auto c = daemon::load_config(f.path.string());
    REQUIRE_FALSE(c.ok());
    return c.error().message;
  };
  CHECK(error_of("data_dirr = \"x\"\n" + kSource).find("data_dirr") != std::string::npos);
  CHECK(error_of("[ingress]\nlisten = 80\n" + kSource).find("'ingress.listen' must be a string") !=
        std::string::npos);
  CHECK(error_of("[policy]\napproval_ttl_s = 0\n" + kSource).find("approval_ttl_s") !=
        std::string::npos);
  CHECK(error_of("[ingress]\nmax_backlog = -1\n" + kSource).find("ingress.max_backlog") !=
        std::string::npos);
  CHECK(error_of("[ingress]\ntimestamp_tolerance_s = 9223372036854775807\n" + kSource)
            .find("'ingress.timestamp_tolerance_s' must be an integer from 1 to 86400") !=
        std::string::npos);
  CHECK(error_of("[ingress]\nretention_s = 599\n" + kSource).find("at least twice") !=
        std::string::npos);
  CHECK(error_of("[ingress]\nretention_s = -1\n" + kSource).find("ingress.retention_s") !=
        std::string::npos);
  CHECK(error_of("[ingress]\nreject_cooldown_ms = -1\n" + kSource).find("reject_cooldown_ms") !=
        std::string::npos);
  CHECK(error_of(R"([[ingress.sources]]
name = "agents"
secrets = ["not-a-secret"]
)")
            .find("whsec_") != std::string::npos);
  CHECK(error_of(kSource + R"(
[[operator.tokens]]
principal = "p"
token_sha256 = "abc"
)")
            .find("64 hex") != std::string::npos);
  CHECK(error_of(kSource + R"(
[[operator.tokens]]
principal = "p"
token_sha256 = ")" +
                 crypto::sha256_hex("t") + R"("
scopes = ["operations:everything"]
)")
            .find("unknown scope") != std::string::npos);
  CHECK(error_of("this is not toml").find("not valid TOML") != std::string::npos);
}

TEST_CASE("numbers are range-checked as written, before any narrowing or multiplying") {
  auto error_of = [](const std::string& text) {
    ConfigFile f(text + kSource);
    auto c = daemon::load_config(f.path.string());
    return c.ok() ? std::string() : c.error().message;
  };
  // Each of these loaded once: multiplied by 1000 or 86400 they wrapped to
  // a fraction of a second, narrowed to int they wrapped into range.
  for (const auto& [file_text, file_key] : std::vector<std::pair<std::string, std::string>>{
           {"[ingress]\nretention_s = 18446744073709552", "'ingress.retention_s'"},
           {"[policy]\napproval_ttl_s = 18446744073709552", "'policy.approval_ttl_s'"},
           {"[policy]\nrefund_window_days = 106751991167301", "'policy.refund_window_days'"},
           {"[outbox]\nattention_after_s = 9223372036854776", "'outbox.attention_after_s'"},
           {"[outbox]\nattention_after_attempts = 0", "'outbox.attention_after_attempts'"},
           {"[orders]\nsource = \"http\"\nbase_url = \"http://o\"\ntimeout_ms = 4294972296",
            "'orders.timeout_ms'"},
           {"[payments]\ntimeout_ms = 0", "'payments.timeout_ms'"},
           {"[payments]\ntimeout_ms = 2147483648", "'payments.timeout_ms'"},
           {"[agent]\ntimeout_ms = -1", "'agent.timeout_ms'"},
           {"[agent]\nsweep_interval_s = -5", "'agent.sweep_interval_s'"},
           {"[notify]\nretry_schedule_s = [60, 9223372036854775807]", "'notify.retry_schedule_s'"},
           {"[policy.escalation]\nremind_after_s = -1", "'policy.escalation.remind_after_s'"},
       }) {
    const std::string text = file_text, key = file_key;  // plain names: CAPTURE takes them
    CAPTURE(text);
    const std::string error = error_of(text + "\n");
    const bool named = error.find(key + " must be an integer from") != std::string::npos ||
                       error.find(key + " must be a list of seconds") != std::string::npos;
    CHECK_MESSAGE(named, error);
  }
  CHECK(error_of(R"([[notify.endpoints]]
name = "ops"
url = "https://hooks.example.com/x"
format = "slack"
max_in_flight = 4294967297
)")
            .find("'notify.endpoints[0].max_in_flight' must be an integer from 1 to 64") !=
        std::string::npos);
  // An upstream's URL is checked at load, not at the first approval.
  CHECK(error_of("[payments]\nbase_url = \"api.stripe.com\"\n")
            .find("'payments.base_url' must be an http:// or https:// URL") != std::string::npos);
  CHECK(error_of("[agent]\nbase_url = \"https://api.openai.com/v1 \"\n").find("'agent.base_url'") !=
        std::string::npos);
  CHECK(error_of("[payments]\nbase_url = \"https://api.stripe.com\"\ntimeout_ms = 100\n").empty());
}

TEST_CASE("webhook sources have unique names that a path can carry") {
  auto error_of = [](const std::string& text) {
    ConfigFile f(text);
    auto c = daemon::load_config(f.path.string());
    return c.ok() ? std::string() : c.error().message;
  };
  // Two sources of one name: the second was never tried, its secret never
  // accepted. A rotation lists both secrets in one source.
  CHECK(error_of(kSource + kSource).find("'ingress.sources[1].name' must be a unique name") !=
        std::string::npos);
  CHECK(error_of(R"([[ingress.sources]]
name = "a/b"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
)")
            .find("'ingress.sources[0].name'") != std::string::npos);
  CHECK(error_of(kSource).empty());
}

TEST_CASE("webhook secrets may come from the environment, comma-separated") {
  setenv("OPGATE_TEST_SECRETS",
         "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", 1);
  ConfigFile f(R"([[ingress.sources]]
name = "agents"
secrets_env = "OPGATE_TEST_SECRETS"
)");
  auto c = daemon::load_config(f.path.string());
  REQUIRE(c.ok());
  CHECK(c->sources.at(0).raw_keys.size() == 2);
}

TEST_CASE("the example configuration in the repository loads") {
  setenv("OPGATE_AGENTS_WEBHOOK_SECRETS", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
  setenv("OPGATE_NOTIFY_SUPPORT_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
  auto c = daemon::load_config(OPGATE_SOURCE_DIR "/opgate.example.toml");
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  CHECK(c->principals.size() == 3);
  CHECK(c->principals.at(1).tiers == std::vector<std::string>{"support"});
}

TEST_CASE("every key the parser accepts is in opgate.example.toml, set or commented out") {
  setenv("OPGATE_AGENTS_WEBHOOK_SECRETS", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
  setenv("OPGATE_NOTIFY_SUPPORT_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
  const std::string path = OPGATE_SOURCE_DIR "/opgate.example.toml";
  auto keys = daemon::accepted_keys(path);
  REQUIRE_MESSAGE(keys.ok(), keys.error().message);
  CHECK(keys->count("notify.endpoints.max_in_flight") == 1);  // the recorder reaches nested tables
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto file = toml::parse(path);
  // Present: set in the file (in any table of an array of tables), or a
  // commented-out line "# name = ..." (or "# [[name]]") documenting it.
  std::function<bool(const toml::value&, const std::string&)> set_in =
      [&](const toml::value& v, const std::string& rest) {
        if (v.is_array()) {
          for (const auto& item : v.as_array())
            if (set_in(item, rest)) return true;
          return false;
        }
        const auto dot = rest.find('.');
        const std::string part = rest.substr(0, dot);
        if (!v.is_table() || !v.contains(part)) return false;
        return dot == std::string::npos || set_in(v.as_table().at(part), rest.substr(dot + 1));
      };
  auto present = [&](const std::string& dotted) {
    const std::string name = dotted.substr(dotted.rfind('.') + 1);
    return set_in(file, dotted) ||
           std::regex_search(text,
                             std::regex("(^|\n)#\\s*(" + name + "\\s*=|\\[\\[" + name + "\\]\\])"));
  };
  for (const auto& key : *keys) CHECK_MESSAGE(present(key), key);
}

namespace {
// The message of the error loading `text` (then the minimal source) gives.
std::string error_of(const std::string& text) {
  ConfigFile f(text + kSource);
  auto c = daemon::load_config(f.path.string());
  REQUIRE_FALSE(c.ok());
  return c.error().message;
}
}  // namespace

TEST_CASE("currency keys must be upper-case ISO 4217 codes; the daemon names the key") {
  CHECK(error_of("[policy]\ntwo_person_threshold_minor = { usd = 50000 }\n")
            .find("policy.two_person_threshold_minor.usd") != std::string::npos);
  CHECK(error_of("[policy]\ncredit_hard_cap_minor = { DOLLARS = 5 }\n")
            .find("credit_hard_cap_minor.DOLLARS") != std::string::npos);
  CHECK(error_of("[policy]\ncredit_support_limit_minor = { USD = \"lots\" }\n")
            .find("credit_support_limit_minor.USD") != std::string::npos);
  CHECK(error_of(R"([[operator.tokens]]
principal = "p"
token_sha256 = ")" +
                 crypto::sha256_hex("t") + R"("
max_amount_minor = { Usd = 5 }
)")
            .find("operator.tokens[0].max_amount_minor.Usd") != std::string::npos);
}

TEST_CASE("[policy.escalation]: a known tier, times not negative and below the approval time") {
  CHECK(error_of("[policy.escalation]\nescalate_to_tier = \"boss\"\n")
            .find("policy.escalation.escalate_to_tier") != std::string::npos);
  CHECK(error_of("[policy.escalation]\nremind_after_s = -1\n")
            .find("policy.escalation.remind_after_s") != std::string::npos);
  CHECK(error_of("[policy]\napproval_ttl_s = 600\n[policy.escalation]\nescalate_after_s = 600\n")
            .find("expire first") != std::string::npos);
  CHECK(error_of("[policy.escalation]\nremind_after = 60\n").find("remind_after") !=
        std::string::npos);
  ConfigFile ok(
      "[policy]\napproval_ttl_s = 7200\n[policy.escalation]\nremind_after_s = 600\n"
      "escalate_after_s = 3600\nescalate_to_tier = \"support\"\n" +
      std::string(kSource));
  auto c = daemon::load_config(ok.path.string());
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  CHECK(c->policy.escalation.remind_after_s == 600);
  CHECK(c->policy.escalation.escalate_after_s == 3600);
  CHECK(c->policy.escalation.escalate_to_tier == "support");
}

TEST_CASE("a config error never quotes the file: a secret on the bad line stays out of it") {
  const std::string secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  for (const std::string& text :
       {"[[ingress.sources]]\nname = \"agents\"\nsecrets = \"" + secret + "\"\n",
        "[[ingress.sources]]\nname = \"agents\"\nsecrets = [\"" + secret + "\", 5]\n",
        "[[ingress.sources]]\nname = \"agents\"\nsecrets = [\"" + secret + "\"\n"}) {
    ConfigFile f(text);
    auto c = daemon::load_config(f.path.string());
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().message.find(secret) == std::string::npos);
    CHECK(c.error().message.find("MfKQ9r8") == std::string::npos);
  }
}

TEST_CASE("a token without owner patterns is loaded with none: it sees nothing") {
  ConfigFile f(kSource + R"(
[[operator.tokens]]
principal = "p"
token_sha256 = ")" +
               crypto::sha256_hex("t") + R"("
scopes = ["operations:read"]
)");
  auto c = daemon::load_config(f.path.string());
  REQUIRE(c.ok());
  CHECK(c->principals.at(0).owners.empty());
  CHECK_FALSE(c->principals.at(0).may_act_for("demo-user"));
}

TEST_CASE("[store] chooses the backend; postgres reads its connection string from url_env") {
  auto load = [](const std::string& text) {
    ConfigFile f(text + kSource);
    return daemon::load_config(f.path.string());
  };
  auto rocks = load("");
  REQUIRE(rocks.ok());
  CHECK(rocks->store.backend == "rocksdb");
  setenv("OPGATE_TEST_DB_URL", "host=/run/pg dbname=opgate sslmode=disable", 1);
  auto pg = load(R"([store]
backend = "postgres"
url_env = "OPGATE_TEST_DB_URL"
pool_size = 4
statement_timeout_ms = 5000
)");
  REQUIRE_MESSAGE(pg.ok(), pg.error().message);
  CHECK(pg->store.backend == "postgres");
  CHECK(pg->store.url == "host=/run/pg dbname=opgate sslmode=disable");
  CHECK(pg->store.pool_size == 4);
  CHECK(pg->store.statement_timeout_ms == 5000);
  CHECK(pg->store.sslmode.empty());  // the connection string decides
  setenv("OPGATE_TEST_DB_URL", "host=db.internal dbname=opgate", 1);
  ConfigFile tls(std::string(R"([store]
backend = "postgres"
url_env = "OPGATE_TEST_DB_URL"
sslmode = "verify-full"
sslrootcert = "db-ca.pem"
sslcert = "/etc/opgate/client.pem"
sslkey = "/etc/opgate/client.key"
)") + kSource);
  auto with_tls = daemon::load_config(tls.path.string());
  REQUIRE_MESSAGE(with_tls.ok(), with_tls.error().message);
  CHECK(with_tls->store.sslmode == "verify-full");
  CHECK(with_tls->store.sslrootcert == (tls.path.parent_path() / "db-ca.pem").string());
  CHECK(with_tls->store.sslcert == "/etc/opgate/client.pem");
  auto error_of = [&](const std::string& text) {
    auto c = load(text);
    REQUIRE_FALSE(c.ok());
    return c.error().message;
  };
  CHECK(error_of("[store]\nbackend = \"mysql\"\n").find("store.backend") != std::string::npos);
  CHECK(error_of("[store]\npool_size = \"8\"\n").find("'store.pool_size' must be an integer") !=
        std::string::npos);
  CHECK(error_of("[store]\npool_size = 0\n").find("store.pool_size") != std::string::npos);
  CHECK(error_of("[store]\nurl = \"x\"\n").find("'store.url'") != std::string::npos);
  CHECK(error_of("[store]\nsslmode = \"on\"\n").find("store.sslmode") != std::string::npos);
  CHECK(error_of("[store]\nsslcert = \"c.pem\"\n").find("store.sslkey") != std::string::npos);
  unsetenv("OPGATE_TEST_DB_URL_MISSING");
  CHECK(error_of("[store]\nbackend = \"postgres\"\nurl_env = \"OPGATE_TEST_DB_URL_MISSING\"\n")
            .find("OPGATE_TEST_DB_URL_MISSING is not set") != std::string::npos);
}

TEST_CASE("a daemon that could not do its work is refused, naming what is missing") {
  setenv("OPGATE_TEST_AGENT_KEY", "sk-agent", 1);
  setenv("OPGATE_TEST_PAY_KEY", "sk_test_pay", 1);
  const std::string upstreams = R"(
[agent]
api_key_env = "OPGATE_TEST_AGENT_KEY"
[payments]
secret_key_env = "OPGATE_TEST_PAY_KEY"
)";
  const std::string token = R"(
[[operator.tokens]]
principal = "p"
token_sha256 = ")" + crypto::sha256_hex("t") +
                            R"("
scopes = ["admin"]
owners = ["*"]
)";
  auto problem = [](const std::string& text) -> std::string {
    ConfigFile f(text);
    auto c = daemon::load_config(f.path.string());
    REQUIRE_MESSAGE(c.ok(), c.error().message);
    auto s = daemon::check_serviceable(*c);
    return s.ok() ? "" : s.error().message;
  };
  CHECK(problem(kSource + token + upstreams).empty());
  CHECK(problem(token + upstreams).find("no webhook source") != std::string::npos);
  CHECK(problem(kSource + upstreams).find("no operator token") != std::string::npos);
  CHECK(problem(kSource + token + "[agent]\napi_key_env = \"OPGATE_TEST_UNSET_X\"\n" +
                "[payments]\nsecret_key_env = \"OPGATE_TEST_PAY_KEY\"\n")
            .find("Agents API key") != std::string::npos);
  CHECK(problem(kSource + token + "[agent]\napi_key_env = \"OPGATE_TEST_AGENT_KEY\"\n" +
                "[payments]\nsecret_key_env = \"OPGATE_TEST_UNSET_Y\"\n")
            .find("payment provider") != std::string::npos);
}

TEST_CASE("a relative data_dir resolves next to the config file; the loader says it was relative") {
  ConfigFile f("data_dir = \"data\"\n" + kSource);
  auto c = daemon::load_config(f.path.string());
  REQUIRE(c.ok());
  CHECK(c->data_dir_was_relative);
  CHECK(c->data_dir == (f.path.parent_path() / "data").string());
}

TEST_CASE("a reload names the keys it cannot apply without a restart") {
  daemon::Config a, b;
  const int64_t budget = daemon::execution_budget_ms(a);
  b.ingress_listen = "127.0.0.1:9999";
  b.policy.approval_ttl_s = 60;  // reloadable
  auto keys = daemon::keys_needing_restart(a, b, budget);
  REQUIRE(keys.size() == 1);
  CHECK(keys[0] == "ingress.listen");
  // The console is built once: its settings (but step_up) need a restart.
  daemon::Config proxied = a;
  proxied.console.trusted_proxies = {"127.0.0.1"};
  proxied.policy.step_up.tiers = {"supervisor"};  // reloadable
  auto console_keys = daemon::keys_needing_restart(a, proxied, budget);
  REQUIRE(console_keys.size() == 1);
  CHECK(console_keys[0].starts_with("console"));
  // The session sweep and the attention rule are copied into the engine at
  // start: named, not silently kept.
  daemon::Config swept = a;
  swept.sweep_interval_s = 5;
  swept.attention.after_attempts = 3;
  auto engine_keys = daemon::keys_needing_restart(a, swept, budget);
  REQUIRE(engine_keys.size() == 2);
  CHECK(engine_keys[0].starts_with("agent.sweep_interval_s"));
  CHECK(engine_keys[1].starts_with("outbox.attention_after_attempts"));
  // A declared executor's timeout past the longest execution at start: the
  // claim lease was sized then, and the calls are held to it.
  daemon::Config declared = a;
  declared.policy.declared.emplace_back().executor.timeout_ms = 20'000;
  REQUIRE(daemon::execution_budget_ms(declared) > budget);
  auto longer = daemon::keys_needing_restart(a, declared, budget);
  REQUIRE(longer.size() == 1);
  CHECK(longer[0].starts_with("operations.executor.timeout_ms"));
  // The reload applied the policy, so the running configuration now holds
  // the longer timeout: a second reload of the same file still names it.
  CHECK(daemon::keys_needing_restart(declared, declared, budget) == longer);
  daemon::Config shorter = declared;
  shorter.policy.declared[0].executor.timeout_ms = 500;
  CHECK(daemon::keys_needing_restart(declared, shorter, budget).empty());
}

TEST_CASE("log level and TLS files are checked where they are read") {
  auto error_of = [](const std::string& text) {
    ConfigFile f(text + kSource);
    auto c = daemon::load_config(f.path.string());
    return c.ok() ? std::string() : c.error().message;
  };
  CHECK(error_of("[log]\nlevel = \"loud\"\n").find("log.level") != std::string::npos);
  CHECK(error_of("[operator]\ntls_cert_file = \"c.pem\"\n").find("tls_key_file") !=
        std::string::npos);
}

TEST_CASE("[console]: session lifetimes, size and origin, checked strictly") {
  ConfigFile f(kSource + R"(
[console]
idle_timeout_s = 60
absolute_timeout_s = 600
max_sessions = 5
origin = "https://ops.example.com"
trusted_proxies = ["127.0.0.1", "::1"]
)");
  auto c = daemon::load_config(f.path.string());
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  CHECK(c->console.trusted_proxies == std::vector<std::string>{"127.0.0.1", "::1"});
  CHECK(c->console.enabled);
  CHECK(c->console.sessions.idle_ms == 60'000);
  CHECK(c->console.sessions.absolute_ms == 600'000);
  CHECK(c->console.sessions.max_sessions == 5);
  CHECK(c->console.origin == "https://ops.example.com");

  ConfigFile defaults(kSource);
  auto d = daemon::load_config(defaults.path.string());
  REQUIRE(d.ok());
  CHECK(d->console.enabled);
  CHECK(d->console.sessions.idle_ms == 30 * 60'000);
  CHECK(d->console.sessions.absolute_ms == 12 * 3600'000);
  CHECK(d->console.origin.empty());

  auto error_of = [](const std::string& text) {
    ConfigFile bad(kSource + "[console]\n" + text);
    auto r = daemon::load_config(bad.path.string());
    REQUIRE_FALSE(r.ok());
    return r.error().message;
  };
  CHECK(error_of("idle_timeout = 5\n").find("console.idle_timeout") != std::string::npos);
  CHECK(error_of("enabled = \"yes\"\n").find("'console.enabled' must be true or false") !=
        std::string::npos);
  CHECK(error_of("idle_timeout_s = 0\n").find("console.idle_timeout_s") != std::string::npos);
  CHECK(error_of("idle_timeout_s = 600\nabsolute_timeout_s = 60\n")
            .find("console.absolute_timeout_s") != std::string::npos);
  CHECK(error_of("absolute_timeout_s = 999999999\n").find("console.absolute_timeout_s") !=
        std::string::npos);
  CHECK(error_of("max_sessions = 0\n").find("console.max_sessions") != std::string::npos);
  for (const char* origin : {"ops.example.com", "https://ops.example.com/", "ftp://ops.example",
                             "https://ops.example.com/console", "https://"})
    CHECK(error_of(fmt::format("origin = \"{}\"\n", origin)).find("console.origin") !=
          std::string::npos);
  CHECK(error_of("trusted_proxies = [\"proxy.internal\"]\n").find("console.trusted_proxies") !=
        std::string::npos);
}

TEST_CASE(
    "[policy.tools.NAME]: enabled, tier and limits per tool; unknown tools and tiers refused") {
  ConfigFile f(kSource + R"(
[policy]
refund_window_days = 30
[policy.tools.cancel_order]
enabled = false
[policy.tools.request_refund]
tier = "supervisor"
window_days = 14
[policy.tools.issue_account_credit]
tier = "supervisor"
support_limit_minor = { USD = 1000 }
hard_cap_minor = { USD = 5000 }
reason_codes = ["GOODWILL"]
delivery_delay_after_days = 5
[policy.tools.add_internal_note]
max_evidence = 3
)");
  auto c = daemon::load_config(f.path.string());
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  CHECK_FALSE(c->policy.enabled("cancel_order"));
  CHECK(c->policy.enabled("lookup_order"));
  CHECK(c->policy.tier("request_refund") == "supervisor");
  CHECK(c->policy.tier("issue_account_credit") == "supervisor");
  CHECK(c->policy.tier("add_internal_note") == "evidence");
  CHECK(c->policy.refund_window_days == 14);
  CHECK(c->policy.credit_support_limit_minor.at("USD") == 1000);
  CHECK(c->policy.credit_hard_cap_minor.at("USD") == 5000);
  CHECK(c->policy.credit_reason_codes == std::vector<std::string>{"GOODWILL"});
  CHECK(c->policy.delivery_delay_after_days == 5);
  CHECK(c->policy.note_max_evidence == 3);

  auto refused = [](const std::string& text, const std::string& needle) {
    ConfigFile bad(kSource + text);
    auto r = daemon::load_config(bad.path.string());
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.error().message.find(needle) != std::string::npos, r.error().message);
  };
  refused("[policy.tools.delete_account]\nenabled = true\n", "policy.tools.delete_account");
  refused("[policy.tools.cancel_order]\ntier = \"auto\"\n", "unknown tier 'auto'");
  refused("[policy.tools.lookup_order]\ntier = \"root\"\n", "unknown tier 'root'");
  refused("[policy.tools.lookup_order]\nwindow_days = 3\n",
          "policy.tools.lookup_order.window_days");
  refused("[policy.tools.add_internal_note]\nmax_evidence = 0\n", "max_evidence");
  refused("[policy.tools.cancel_order]\nenabled = \"no\"\n", "policy.tools.cancel_order.enabled");
}

TEST_CASE("notification endpoints: URLs checked at load and never quoted; Slack needs no secret") {
  auto load = [](const std::string& endpoint) {
    ConfigFile f(kSource + "[[notify.endpoints]]\n" + endpoint);
    return daemon::load_config(f.path.string());
  };
  // A Slack webhook URL is a secret: a bad one is named by its key only.
  const std::string secret_path = "/services/T000/B000/XXXXSECRETXXXX";
  for (const std::string& url : {"https://hooks.slack.test" + secret_path + " ",
                                 "https://" + secret_path, "ftp://hooks.slack.test" + secret_path,
                                 std::string("https://hooks.slack.test/services/\tT0")}) {
    auto bad = load("name = \"chat\"\nformat = \"slack\"\nurl = \"" + url + "\"\n");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.find("notify.endpoints[0].url") != std::string::npos);
    CHECK(bad.error().message.find("SECRET") == std::string::npos);
    CHECK(bad.error().message.find("hooks.slack.test") == std::string::npos);
  }
  auto slack = load("name = \"chat\"\nformat = \"slack\"\nurl = \"https://hooks.slack.test" +
                    secret_path + "\"\n");
  REQUIRE_MESSAGE(slack.ok(), slack.error().message);
  CHECK(slack->notify.endpoints.at(0).raw_key.empty());
  CHECK_FALSE(slack->notify.endpoints.at(0).include_evidence);
  // A standard endpoint signs: its secret is required, and a missing one
  // names both the key and the variable to set.
  ::unsetenv("OPGATE_TEST_OPS_SECRET");
  auto unset = load(
      "name = \"ops\"\nurl = \"https://ops.test/hooks\"\nsecret_env = "
      "\"OPGATE_TEST_OPS_SECRET\"\n");
  REQUIRE_FALSE(unset.ok());
  CHECK(unset.error().message.find("OPGATE_TEST_OPS_SECRET") != std::string::npos);
  CHECK(unset.error().message.find("notify.endpoints[0].secret_env") != std::string::npos);
  CHECK(unset.error().message.find("not set") != std::string::npos);
  auto none = load("name = \"ops\"\nurl = \"https://ops.test/hooks\"\n");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message.find("notify.endpoints[0].secret") != std::string::npos);
  auto evidence = load(
      "name = \"ops\"\nurl = \"https://ops.test/hooks\"\nsecret = "
      "\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\ninclude_evidence = true\n");
  REQUIRE_MESSAGE(evidence.ok(), evidence.error().message);
  CHECK(evidence->notify.endpoints.at(0).include_evidence);
}

namespace {
constexpr const char* kDeclared = R"(
[[operations]]
name = "reship_order"
description = "Ship an order again."
tier = "support"
effect = "Order {order_id} is shipped again."
[operations.parameters]
required = ["order_id"]
[operations.executor]
url = "http://127.0.0.1:9/reship"
token_env = "OPGATE_TEST_EXECUTOR_TOKEN"
)";
}  // namespace

TEST_CASE("[[operations]]: a declared tool loads, with its executor's token from the environment") {
  setenv("OPGATE_TEST_EXECUTOR_TOKEN", "tok-executor", 1);
  ConfigFile ok(std::string(kDeclared) + kSource);
  auto c = daemon::load_config(ok.path.string());
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  REQUIRE(c->policy.declared.size() == 1);
  CHECK(c->policy.declared[0].executor.token == "tok-executor");
  CHECK(c->policy.offers("reship_order"));

  // Bad declarations refuse to start, naming the key.
  unsetenv("OPGATE_TEST_EXECUTOR_TOKEN");
  CHECK(error_of(kDeclared).find("operations[0].executor.token_env") != std::string::npos);
  setenv("OPGATE_TEST_EXECUTOR_TOKEN", "tok-executor", 1);
  CHECK(error_of(std::string(kDeclared) + kDeclared).find("declared twice") != std::string::npos);
  CHECK(error_of("operations = 3\n").find("[[operations]]") != std::string::npos);
  std::string bad_type(kDeclared);
  bad_type.replace(bad_type.find("[operations.executor]"), 0,
                   "[operations.parameters.properties.when]\ntype = \"date\"\n");
  CHECK(error_of(bad_type).find("operations[0].parameters.properties.when.type") !=
        std::string::npos);
  std::string bad_tier(kDeclared);
  bad_tier.replace(bad_tier.find("\"support\""), 9, "\"boss\"");
  CHECK(error_of(bad_tier).find("operations[0].tier") != std::string::npos);
}
