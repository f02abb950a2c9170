// Running the daemon as a platform team does: reload on SIGHUP, TLS on both
// listeners, online backup and restore, structured logs, /metrics.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <csignal>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cluster.h"
#include "common/crypto.h"
#include "common/webhook_signature.h"

using namespace opgate;
using namespace opgate::testing;
namespace fs = std::filesystem;

namespace {

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string event_body(const std::string& id) {
  return fmt::format(
      R"({{"id":"evt_{}","object":"event","created_at":{},"type":"response.completed","data":{{"id":"resp_1"}}}})",
      id, now_s());
}

http::Headers signed_with(const std::string& secret, const std::string& id,
                          const std::string& body) {
  auto key = webhooks::decode_secret(secret);
  REQUIRE(key.ok());
  const auto ts = now_s();
  return {{"webhook-id", id},
          {"webhook-timestamp", std::to_string(ts)},
          {"webhook-signature", webhooks::sign(*key, id, ts, body)},
          {"Content-Type", "application/json"}};
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A throwaway CA and a server certificate for 127.0.0.1 signed by it.
struct Pki {
  fs::path dir;
  explicit Pki(const fs::path& where) : dir(where) {
    fs::create_directories(dir);
    run(fmt::format(
        "cd {} && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
        "-subj /CN=opgate-test-ca && openssl req -newkey rsa:2048 -nodes -keyout server.key "
        "-out server.csr -subj /CN=127.0.0.1 && printf 'subjectAltName=IP:127.0.0.1\\n' > "
        "san.ext && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile san.ext",
        dir.string()));
  }
  static void run(const std::string& cmd) {
    REQUIRE_MESSAGE(std::system((cmd + " >/dev/null 2>&1").c_str()) == 0, cmd);
  }
  fs::path ca() const { return dir / "ca.pem"; }
  fs::path cert() const { return dir / "server.pem"; }
  fs::path key() const { return dir / "server.key"; }
};

Result<http::Response> https_get(uint16_t port, const std::string& path, const fs::path& ca) {
  http::ClientRequest req;
  req.method = "GET";
  req.url = fmt::format("https://127.0.0.1:{}{}", port, path);
  req.ca_file = ca.string();
  req.timeout = std::chrono::seconds(10);
  // Each check is a handshake of its own: a kept connection would still
  // carry the certificate verified before a reload.
  req.headers["Connection"] = "close";
  return http::send(req);
}

}  // namespace

TEST_CASE("SIGHUP adds and revokes tokens and rotates a webhook secret, with no restart") {
  Cluster c;
  const std::string old_secret = c.webhook_secret();
  const std::string new_secret = "whsec_" + std::string("QmV0dGVyIGtlZXAgaXQgc2VjcmV0IQ==");
  auto config = read_file(c.config_file());
  replace_all(config, old_secret, new_secret);
  // Revoke reader's token, add newbie's.
  replace_all(config, crypto::sha256_hex("tok-reader-only-for-tests"),
              crypto::sha256_hex("tok-revoked-xyz"));
  config += fmt::format(R"(
[[operator.tokens]]
principal = "newbie"
token_sha256 = "{}"
scopes = ["operations:read"]
owners = ["*"]
)",
                        crypto::sha256_hex("tok-newbie-only-for-tests"));
  write_file(c.config_file(), config);
  CHECK(c.op("GET", "/v1/operations", "", "tok-newbie-only-for-tests").status == 401);
  c.signal_daemon(SIGHUP);
  CHECK(eventually([&] { return c.daemon_log().find("config.reloaded") != std::string::npos; }));
  CHECK(c.op("GET", "/v1/operations", "", "tok-newbie-only-for-tests").status == 200);
  CHECK(c.op("GET", "/v1/operations", "", kReaderToken).status == 401);
  const auto body = event_body("after-rotation");
  CHECK(c.webhook("agents", signed_with(old_secret, "msg_old", body), body).status == 401);
  CHECK(c.webhook("agents", signed_with(new_secret, "msg_new", body), body).status == 200);
  // An invalid file changes nothing and says why.
  auto broken = config;
  replace_all(broken, "approval_ttl_s = 86400", "approval_ttl_s = \"soon\"");
  REQUIRE(broken != config);
  write_file(c.config_file(), broken);
  c.signal_daemon(SIGHUP);
  CHECK(
      eventually([&] { return c.daemon_log().find("config.reload_failed") != std::string::npos; }));
  CHECK(c.daemon_log().find("policy.approval_ttl_s") != std::string::npos);
  CHECK(c.op("GET", "/v1/operations", "", "tok-newbie-only-for-tests").status == 200);
  CHECK(count_of(c.daemon_log(), "\"listening: ") == 1);  // never restarted
}

TEST_CASE("a reload is checked against what stays running: the replay window, MCP's hosts") {
  ClusterOptions o;
  o.extra_ingress = "retention_s = 600";
  Cluster c(o);
  const auto original = read_file(c.config_file());
  // Alone, this file is valid; but the retention is the store's, fixed at
  // start, and a tolerance of an hour against 600 s of kept ids would let a
  // delivery be replayed once its id was forgotten.
  auto wider = original;
  replace_all(wider, "timestamp_tolerance_s = 300", "timestamp_tolerance_s = 3600");
  replace_all(wider, "retention_s = 600", "retention_s = 7200");
  REQUIRE(wider != original);
  write_file(c.config_file(), wider);
  c.signal_daemon(SIGHUP);
  CHECK(
      eventually([&] { return c.daemon_log().find("config.reload_failed") != std::string::npos; }));
  CHECK(c.daemon_log().find("the running retention") != std::string::npos);
  // The tolerance in force is still 300 s: a delivery stamped 1,000 s ago
  // is refused.
  const auto body = event_body("stale");
  auto key = webhooks::decode_secret(c.webhook_secret());
  REQUIRE(key.ok());
  const int64_t stamped = now_s() - 1000;
  const http::Headers stale{{"webhook-id", "msg_stale"},
                            {"webhook-timestamp", std::to_string(stamped)},
                            {"webhook-signature", webhooks::sign(*key, "msg_stale", stamped, body)},
                            {"Content-Type", "application/json"}};
  CHECK(c.webhook("agents", stale, body).status == 401);
  // MCP's Host names, when not set, follow the address listened on, which a
  // reload does not change: listening on loopback, a foreign Host is still
  // refused after a reload that names 0.0.0.0.
  auto everywhere = original;
  const std::string loopback = "[mcp]\nlisten = \"127.0.0.1:0\"";  // an ephemeral port
  REQUIRE(everywhere.find(loopback) != std::string::npos);
  replace_all(everywhere, loopback, "[mcp]\nlisten = \"0.0.0.0:0\"");
  write_file(c.config_file(), everywhere);
  const size_t reloads = count_of(c.daemon_log(), "config.reloaded");
  c.signal_daemon(SIGHUP);
  CHECK(eventually([&] { return count_of(c.daemon_log(), "config.reloaded") > reloads; }));
  CHECK(c.daemon_log().find("mcp.listen") != std::string::npos);  // needs a restart
  const http::Headers rebound{{"Host", "evil.example.com"}, {"Content-Type", "application/json"}};
  CHECK(c.mcp("POST", "/mcp", R"({"jsonrpc":"2.0","id":1,"method":"ping"})", rebound).status ==
        403);
}

TEST_CASE("an approval whose token a reload revoked no longer counts toward the two needed") {
  Cluster c;
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-300"}}])");
  const std::string key = "demo-user:ORDER-300:full-refund:v1";
  c.wait_operation(key, [](auto& x) { return str(x, "state") == "pending"; });
  REQUIRE(c.approve(key, kAliceToken).at("approvals").as_array().size() == 1);
  auto config = read_file(c.config_file());
  const std::string alice = crypto::sha256_hex(kAliceToken);
  REQUIRE(config.find(alice) != std::string::npos);
  replace_all(config, alice, crypto::sha256_hex("tok-alice-revoked"));
  write_file(c.config_file(), config);
  c.signal_daemon(SIGHUP);
  CHECK(eventually([&] { return c.daemon_log().find("config.reloaded") != std::string::npos; }));
  // bob's approval is the only one in force: the refund still waits.
  auto after = c.approve(key, kBobToken);
  CHECK(str(after, "state") == "pending");
  auto approvals = after.at("approvals").as_array();
  REQUIRE(approvals.size() == 1);
  CHECK(str(approvals[0], "principal") == "bob");
  auto audit = c.op("GET", "/v1/audit?operation=" + key).body.at("audit").as_array();
  CHECK(std::any_of(audit.begin(), audit.end(),
                    [](const auto& r) { return str(r, "action") == "approval_lapsed"; }));
  CHECK(c.payments_admin("GET", "/_sim/stats").body.at("post_requests").as_int64() == 0);
}

TEST_CASE("a request in flight during a reload is answered") {
  Cluster c;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket s(ioc);
  const boost::asio::ip::tcp::endpoint ep(boost::asio::ip::make_address("127.0.0.1"),
                                          c.ingress_port());
  s.connect(ep);
  const auto body = event_body("in-flight");
  auto headers = signed_with(c.webhook_secret(), "msg_in_flight", body);
  std::string head = "POST /v1/webhooks/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& [k, v] : headers) head += k + ": " + v + "\r\n";
  head += fmt::format("Content-Length: {}\r\n\r\n", body.size());
  boost::asio::write(s, boost::asio::buffer(head));  // the body is not sent yet
  c.signal_daemon(SIGHUP);
  CHECK(eventually([&] { return c.daemon_log().find("config.reloaded") != std::string::npos; }));
  boost::asio::write(s, boost::asio::buffer(body));
  boost::asio::streambuf reply;
  boost::asio::read_until(s, reply, "\r\n");
  std::string status_line;
  std::getline(std::istream(&reply), status_line);
  CHECK(status_line.find("200") != std::string::npos);
}

TEST_CASE("TLS on both listeners; the CLI verifies the operator's certificate; SIGHUP reloads it") {
  const fs::path tmp = fs::temp_directory_path() / ("opgate-tls-" + crypto::random_hex(6));
  Pki first(tmp / "first");
  const fs::path cert = tmp / "live.pem", key = tmp / "live.key";
  fs::copy_file(first.cert(), cert);
  fs::copy_file(first.key(), key);
  const std::string tls_lines =
      fmt::format("tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n", cert.string(), key.string());
  ClusterOptions o;
  o.extra_ingress = tls_lines;
  o.extra_operator = tls_lines;
  o.operator_ca_file = first.ca().string();
  Cluster c(o);
  CHECK(c.op("GET", "/v1/operations").status == 200);
  auto [rc, out] = c.cli({"ops", "list"});
  CHECK(rc == 0);
  // Plain HTTP to a TLS listener gets no answer.
  auto plain = eval::send_request(
      "GET", fmt::format("http://127.0.0.1:{}/healthz", c.ingress_port()), "", {});
  CHECK_FALSE(plain.ok());
  // The webhook listener speaks TLS too.
  auto webhook = https_get(c.ingress_port(), "/v1/webhooks/agents", first.ca());
  REQUIRE(webhook.ok());
  CHECK(webhook->status == 405);
  // A new certificate from another CA, loaded on SIGHUP.
  Pki second(tmp / "second");
  fs::copy_file(second.cert(), cert, fs::copy_options::overwrite_existing);
  fs::copy_file(second.key(), key, fs::copy_options::overwrite_existing);
  c.signal_daemon(SIGHUP);
  CHECK(eventually([&] { return c.daemon_log().find("config.reloaded") != std::string::npos; }));
  auto with_second = https_get(c.ingress_port(), "/healthz", second.ca());
  CHECK(with_second.ok());
  CHECK_FALSE(https_get(c.ingress_port(), "/healthz", first.ca()).ok());
  fs::remove_all(tmp);
}

TEST_CASE("a backup taken while webhooks and approvals flow restores without loss or repeat") {
  Cluster c;
  const std::string executed = "demo-user:ORDER-100:full-refund:v1";
  const std::string waiting = "demo-user:ORDER-400:full-refund:v1";
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])");
  c.wait_operation(executed, [](auto& o) { return str(o, "state") == "pending"; });
  c.approve(executed, kAliceToken);
  c.wait_operation(executed, [](auto& o) { return str(o, "outcome") == "succeeded"; });
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-400"}}])");
  c.wait_operation(waiting, [](auto& o) { return str(o, "state") == "pending"; });
  const auto posts_before = c.payments_admin("GET", "/_sim/stats")
                                .body.at("by_operation_key")
                                .at(executed)
                                .at("posts")
                                .as_int64();

  // Webhooks and approvals keep flowing while the backup is taken.
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> acked;  // id, body
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    for (int i = 0; !stop; ++i) {
      const std::string id = fmt::format("msg_flow_{}", i);
      const auto body = event_body(id);
      auto r = c.webhook("agents", signed_with(c.webhook_secret(), id, body), body);
      if (r.status == 200) {
        std::lock_guard lock(mu);
        acked.emplace_back(id, body);
      }
    }
  });
  std::thread approver([&] {
    for (const char* order : {"ORDER-500", "ORDER-200"}) {
      if (stop) break;
      c.create_session(
          fmt::format(R"([{{"name":"request_refund","arguments":{{"order_id":"{}"}}}}])", order),
          std::string(order) == "ORDER-200" ? "other-user" : "demo-user");
    }
  });
  CHECK(eventually([&] {
    std::lock_guard lock(mu);
    return acked.size() >= 20;
  }));
  std::vector<std::pair<std::string, std::string>> before_backup;
  {
    std::lock_guard lock(mu);
    before_backup = acked;
  }
  const fs::path backup = c.dir() / "backup";
  auto [brc, bout] = c.cli({"backup", "create", "--to", backup.string()});
  stop = true;
  sender.join();
  approver.join();
  if (c.store() == "postgres") {  // copied by the database's own tools, not by opgate
    CHECK(brc != 0);
    CHECK_FALSE(fs::exists(backup));
    auto refused = c.op("POST", "/v1/backups",
                        json::serialize(json::object{{"dir", backup.string()}}), kAdminToken);
    CHECK(refused.status == 400);
    CHECK(json::serialize(refused.body).find("pg_basebackup") != std::string::npos);
    return;
  }
  const std::string backup_out = bout;  // doctest cannot capture a binding
  CHECK_MESSAGE(brc == 0, backup_out);

  // Restore into a new data directory and start the daemon on it.
  c.stop_daemon_gracefully();
  fs::rename(c.dir() / "data", c.dir() / "data-before");
  auto [rrc, rout] = c.cli(
      {"backup", "restore", "--from", backup.string(), "--data-dir", (c.dir() / "data").string()});
  const std::string restore_out = rout;
  CHECK_MESSAGE(rrc == 0, restore_out);
  c.start_daemon();

  // Every webhook acknowledged before the backup began is in the copy: the
  // same id and body again is a duplicate.
  for (const auto& event : before_backup) {
    const std::string& id = event.first;
    auto r = c.webhook("agents", signed_with(c.webhook_secret(), id, event.second), event.second);
    CHECK_MESSAGE(r.body.find("\"duplicate\":true") != std::string::npos, id);
  }
  CHECK(c.op("GET", "/v1/audit/verify").body.at("ok").as_bool());
  // The pending operation can be approved, and settles.
  c.approve(waiting, kAliceToken);
  c.wait_operation(waiting, [](auto& o) { return str(o, "outcome") == "succeeded"; });
  // The operation executed before the backup is not executed again.
  CHECK(str(c.operation(executed), "outcome") == "succeeded");
  auto stats = c.payments_admin("GET", "/_sim/stats").body;
  CHECK(stats.at("by_operation_key").at(executed).at("posts").as_int64() == posts_before);
  CHECK(stats.at("by_operation_key").at(executed).at("objects").as_int64() == 1);
}

TEST_CASE("logs: one JSON event line per state change and rejected webhook, never a secret") {
  Cluster c;
  const std::string key = "demo-user:ORDER-100:full-refund:v1";
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])");
  c.wait_operation(key, [](auto& o) { return str(o, "state") == "pending"; });
  c.approve(key, kAliceToken);
  c.wait_operation(key, [](auto& o) { return str(o, "outcome") == "succeeded"; });
  const auto body = event_body("forged");
  c.webhook("agents", signed_with("whsec_" + std::string(32, 'A'), "msg_forged", body), body);
  const std::vector<std::string> expected = {"operation.propose", "operation.approve",
                                             "operation.claim", "operation.provider_succeeded",
                                             "webhook.rejected"};
  // A change's line is written once its commit returns, which on PostgreSQL
  // is after its flush, and the API may show the change before that.
  CHECK(eventually([&] {
    const auto log = c.daemon_log();
    return std::all_of(expected.begin(), expected.end(), [&](const std::string& e) {
      return log.find("\"event\":\"" + e + "\"") != std::string::npos;
    });
  }));
  std::set<std::string> events;
  std::istringstream lines(c.daemon_log());
  std::string line;
  while (std::getline(lines, line)) {
    auto v = json::parse(line);  // every line is one JSON object
    REQUIRE(v.is_object());
    CHECK(v.as_object().contains("ts"));
    CHECK(v.as_object().contains("level"));
    if (v.as_object().contains("event")) {
      events.insert(str(v, "event"));
      if (str(v, "event") == "operation.approve") {
        CHECK(str(v, "operation_key") == key);
        CHECK(str(v, "principal") == "alice");
        CHECK(str(v, "state") == "approved");
      }
      if (str(v, "event") == "webhook.rejected") CHECK(str(v, "source") == "agents");
    }
  }
  for (const auto& e : expected) CHECK_MESSAGE(events.count(e), e);
  const auto log = c.daemon_log();
  CHECK(log.find(c.webhook_secret()) == std::string::npos);
  CHECK(log.find("MfKQ9r8") == std::string::npos);
  CHECK(log.find(kAliceToken) == std::string::npos);
  CHECK(log.find("resp_1") == std::string::npos);  // no webhook body
}

TEST_CASE("/metrics: every family has HELP and TYPE; process and business gauges are there") {
  Cluster c;
  auto text = c.op("GET", "/metrics").raw;
  std::istringstream lines(text);
  std::string line;
  std::set<std::string> helped, typed, sampled;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      helped.insert(line.substr(7, line.find(' ', 7) - 7));
    } else if (line.rfind("# TYPE ", 0) == 0) {
      const auto name = line.substr(7, line.find(' ', 7) - 7);
      CHECK_MESSAGE(helped.count(name), name);
      typed.insert(name);
    } else if (!line.empty()) {
      std::string name = line.substr(0, line.find_first_of("{ "));
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (name.ends_with(suffix) && !typed.count(name))
          name = name.substr(0, name.size() - std::string_view(suffix).size());
      CHECK_MESSAGE(typed.count(name), name);
      sampled.insert(name);
    }
  }
  for (const char* name :
       {"opgate_build_info", "process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_open_fds", "process_start_time_seconds", "opgate_oldest_pending_seconds",
        "opgate_oldest_outcome_unknown_seconds", "opgate_operations_settled", "opgate_ready",
        "opgate_webhooks_rejected_total"})
    CHECK_MESSAGE(sampled.count(name), name);
  // Counters exist at 0 before anything happened.
  CHECK(text.find("opgate_webhooks_rejected_total{reason=\"bad_signature\",source=\"agents\"} 0") !=
        std::string::npos);
  CHECK(text.find("opgate_ready 1") != std::string::npos);
}
