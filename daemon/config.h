// The daemon's configuration: the TOML keys of opgate.example.toml (a
// stable interface), parsed strictly. An unknown key, a wrong type or a bad
// value is an error naming the dotted key, so a typo never silently
// disables a control; errors never quote the file (a line may hold a
// secret). Currency keys must be upper-case ISO 4217 codes.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "console/options.h"
#include "http/server.h"
#include "ingress/webhook_handler.h"
#include "operations/attention.h"
#include "operations/authority.h"
#include "operations/policy.h"
#include "outbox/notifier.h"

namespace opgate::daemon {

// A listener's certificate and key (PEM). Both empty: plain HTTP.
using http::TlsFiles;

struct Config {
  // RocksDB directory; created 0700. The daemon refuses one that group or
  // others can read. Every acknowledgement follows a synced write here. A
  // relative path is relative to the config file's directory.
  std::string data_dir = "./data";
  bool data_dir_was_relative = false;

  // [store] where the records live: "rocksdb" (embedded, in data_dir, one
  // node) or "postgres" (a database any number of nodes share).
  struct Store {
    std::string backend = "rocksdb";
    // postgres: the libpq connection string, read from the variable named
    // by url_env (it may hold a password); TLS by its sslmode and sslrootcert.
    std::string url_env = "OPGATE_DATABASE_URL";
    std::string url;
    // About the database's cores: more connections than it can run at once
    // only add switching (docs/postgres.md).
    int64_t pool_size = 8;
    int64_t connect_timeout_s = 10;
    int64_t statement_timeout_ms = 30'000;
    // TLS to the database, overriding the connection string's settings
    // when set: sslmode (disable ... verify-full) and the PEM files (a
    // relative path is relative to the config file's directory).
    std::string sslmode, sslrootcert, sslcert, sslkey;
    // rocksdb: memory for the block cache shared by every column family,
    // and for each memtable (store/rocksdb/db.h).
    int64_t block_cache_bytes = 32 << 20;
    int64_t write_buffer_bytes = 64 << 20;
  };
  Store store;

  // [log] level: trace, debug, info, warn, error, critical, off.
  std::string log_level = "info";

  // Public webhook listener, with TLS if a certificate is configured.
  std::string ingress_listen = "127.0.0.1:8080";
  TlsFiles ingress_tls;
  size_t max_body_bytes = 262144;
  int64_t timestamp_tolerance_s = 300;
  // Over this many unprocessed events, new ones get 503 + Retry-After.
  size_t max_backlog = 100000;
  // Processed inbox events older than this are removed by compaction; a
  // sender's retry after that is treated as new. 0 keeps every event.
  int64_t inbox_retention_s = 7 * 86400;
  // A sender that has not delivered the headers (or the body) in time is
  // disconnected; connections past max_connections get one 503.
  int64_t header_timeout_ms = 10'000;
  int64_t body_timeout_ms = 30'000;
  int64_t max_connections = 4096;
  // After a request fails verification (400/401), its connection's next
  // request is read only after this pause: a flood of bad requests cannot
  // crowd out good senders.
  int64_t reject_cooldown_ms = 250;
  std::vector<ingress::Source> sources;

  // [mcp] The MCP front door (mcp/front_door.h): off unless listen is set.
  struct Mcp {
    std::string listen;  // empty: no MCP listener
    TlsFiles tls;
    // Browser origins allowed besides the listener's own; Host names
    // accepted (default: the loopback names when bound to loopback, else
    // any). Both guard against DNS rebinding.
    std::vector<std::string> allowed_origins;
    std::vector<std::string> allowed_hosts;
    bool hosts_from_listen = false;  // allowed_hosts not set: default_allowed_hosts(listen)
    // The MCP URL agent runtimes reach, for the capability URLs minted
    // tokens come with ("https://mcp.example.com"); empty: the listener's
    // own address.
    std::string public_url;
    bool enabled() const { return !listen.empty(); }
  };
  Mcp mcp;

  // Private operator listener (also /healthz, /readyz, /metrics).
  std::string operator_listen = "127.0.0.1:8081";
  TlsFiles operator_tls;
  std::vector<operations::Principal> principals;

  // An HTTP service opgate calls: [agent] (the Agents API) and [payments].
  struct Upstream {
    std::string base_url;
    std::string secret;  // read from the variable named by api_key_env / secret_key_env
    int timeout_ms;
    // https base URLs: trusted CA certificates (PEM); empty = system store.
    std::string ca_file;
  };
  Upstream agent{"http://127.0.0.1:9001/v1", "", 10000, ""};
  // [agent] every sweep_interval_s, sessions active within sweep_window_s
  // are re-synced, so a lost webhook delays nothing for long. 0 disables.
  int64_t sweep_interval_s = 30;
  int64_t sweep_window_s = 3600;
  Upstream payments{"http://127.0.0.1:9002", "", 5000, ""};

  // [orders] "embedded" (kept in the store: seed file, PUT /v1/orders) or
  // "http" (the business's order service at orders.base_url, with the
  // bearer token from the variable orders.token_env).
  std::string orders_source = "embedded";
  std::string orders_seed_file;  // relative paths are relative to the config file
  Upstream orders{"", "", 3000, ""};

  operations::PolicyConfig policy;

  // [outbox] when an outcome_unknown operation is flagged for a person.
  operations::AttentionPolicy attention;

  // [notify] and [[notify.endpoints]]: who is told about proposals,
  // decisions and operations that need a person.
  outbox::NotifyConfig notify;
  // [console] the approval console on the operator listener.
  console::Options console;
};

// Reads the file and the environment variables it names.
Result<Config> load_config(const std::string& path);

// Every key the parser accepts in the tables present in the file, dotted
// without array indices: what keeps opgate.example.toml complete.
Result<std::set<std::string>> accepted_keys(const std::string& path);

// Whether a daemon with this configuration can do its work: a webhook
// source, an operator token, the Agents API key and the payment provider's
// secret. An error names what is missing.
Status check_serviceable(const Config& config);

// How long one execution may take: a cancellation at the order service and
// then the refund, or a declared operation's executor. The outbox's claim
// lease is sized for it at start, and every executor call is held to it.
int64_t execution_budget_ms(const Config& config);

// The keys whose change a reload cannot apply (listen addresses, data_dir,
// limits of the listeners): a restart is needed for them. budget_ms is the
// execution budget the running daemon was started with.
std::vector<std::string> keys_needing_restart(const Config& running, const Config& next,
                                              int64_t budget_ms);

// Whether event ids are kept long enough that no delivery still valid is
// forgotten (retention_s 0 keeps every one): checked at start and on every
// reload, where the tolerance changes and the retention does not.
Status check_replay_window(int64_t retention_s, int64_t tolerance_s);

// The Host names the MCP listener accepts when allowed_hosts is not set:
// the loopback names when it listens on loopback, else any (empty).
std::vector<std::string> default_allowed_hosts(const std::string& listen);

}  // namespace opgate::daemon
