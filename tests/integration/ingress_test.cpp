// The webhook ingress, every status it answers, against the real daemon.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <boost/asio.hpp>
#include <chrono>
#include <csignal>
#include <thread>

#include "cluster.h"
#include "common/webhook_signature.h"

using namespace opgate;
using namespace opgate::testing;

namespace {

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string envelope(const std::string& session = "sess_demo") {
  return fmt::format(
      R"({{"id":"evt_1","object":"event","created_at":{},"type":"agent.session.action_required","data":{{"id":"{}"}}}})",
      now_s(), session);
}

http::Headers signed_headers(const Cluster& c, const std::string& id, const std::string& body,
                             int64_t ts = now_s()) {
  auto key = webhooks::decode_secret(c.webhook_secret());
  return {{"webhook-id", id},
          {"webhook-timestamp", std::to_string(ts)},
          {"webhook-signature", webhooks::sign(*key, id, ts, body)},
          {"Content-Type", "application/json"}};
}

std::string error_code(const http::Response& r) {
  return str(json::parse(r.body).at("error"), "code");
}

}  // namespace

TEST_CASE("the webhook ingress answers every row of the status table") {
  Cluster c;
  const auto body = envelope();

  auto first = c.webhook("agents", signed_headers(c, "msg_1", body), body);
  CHECK(first.status == 200);
  CHECK(first.body == R"({"accepted":true,"duplicate":false})");

  auto again = c.webhook("agents", signed_headers(c, "msg_1", body), body);
  CHECK(again.status == 200);
  CHECK(again.body == R"({"accepted":true,"duplicate":true})");

  const auto other_body = envelope("sess_other");
  auto conflict = c.webhook("agents", signed_headers(c, "msg_1", other_body), other_body);
  CHECK(conflict.status == 409);

  auto headers = signed_headers(c, "msg_2", body);
  headers["webhook-signature"] = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=";
  auto forged = c.webhook("agents", headers, body);
  CHECK(forged.status == 401);
  CHECK(forged.body.find("whsec_") == std::string::npos);

  auto stale = c.webhook("agents", signed_headers(c, "msg_3", body, now_s() - 3600), body);
  CHECK(stale.status == 401);
  CHECK(error_code(stale) == "timestamp_out_of_tolerance");

  headers = signed_headers(c, "msg_4", body);
  headers.erase("webhook-id");
  CHECK(c.webhook("agents", headers, body).status == 400);

  const std::string not_envelope = R"({"hello":"world"})";
  auto bad_body = c.webhook("agents", signed_headers(c, "msg_5", not_envelope), not_envelope);
  CHECK(bad_body.status == 400);
  CHECK(error_code(bad_body) == "bad_envelope");

  CHECK(c.webhook("nobody", signed_headers(c, "msg_6", body), body).status == 404);

  headers = signed_headers(c, "msg_7", body);
  headers["Content-Type"] = "text/plain";
  CHECK(c.webhook("agents", headers, body).status == 415);

  std::string huge = R"({"id":"evt_1","object":"event","created_at":1,"type":"x","data":{"pad":")" +
                     std::string(300 * 1024, 'a') + R"("}})";
  CHECK(c.webhook("agents", signed_headers(c, "msg_8", huge), huge).status == 413);

  // Unknown event types are stored and acknowledged, then ignored.
  const std::string unknown = fmt::format(
      R"({{"id":"evt_9","object":"event","created_at":{},"type":"response.completed","data":{{"id":"resp_1"}}}})",
      now_s());
  CHECK(c.webhook("agents", signed_headers(c, "msg_9", unknown), unknown).status == 200);

  // Nothing that was refused was stored: the daemon's counters agree.
  auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find(R"(opgate_webhooks_accepted_total{source="agents"} 2)") != std::string::npos);
  CHECK(metrics.find(R"(opgate_webhooks_duplicate_total{source="agents"} 1)") != std::string::npos);
  // Two new events, each in a synced write of its own (they came one by one).
  CHECK(metrics.find("opgate_inbox_group_commit_events_total 2\n") != std::string::npos);
  CHECK(metrics.find("opgate_inbox_group_commits_total 2\n") != std::string::npos);
  CHECK(metrics.find("opgate_inbox_events_per_group_commit 1\n") != std::string::npos);
  CHECK(metrics.find("# TYPE opgate_inbox_group_commits_total counter") != std::string::npos);
}

TEST_CASE("every acknowledged webhook survives kill -9") {
  Cluster c;
  std::vector<std::string> acked, bodies;
  for (int i = 0; i < 50; ++i) {
    const std::string id = fmt::format("msg_kill_{}", i);
    bodies.push_back(envelope(fmt::format("sess_k{}", i)));
    if (c.webhook("agents", signed_headers(c, id, bodies[i]), bodies[i]).status == 200)
      acked.push_back(id);
  }
  REQUIRE(acked.size() == 50);
  c.restart_daemon(/*kill9=*/true);
  for (int i = 0; i < 50; ++i) {
    // The sender retries the same event: stored before the kill, so a duplicate.
    auto r = c.webhook("agents", signed_headers(c, acked[i], bodies[i]), bodies[i]);
    CHECK(r.status == 200);
    CHECK(r.body == R"({"accepted":true,"duplicate":true})");
  }
}

TEST_CASE("SIGTERM: unready at once, the request in flight is answered, exit 0") {
  Cluster c;
  CHECK(c.op("GET", "/readyz", "", "").status == 200);
  CHECK(c.op("GET", "/healthz", "", "").status == 200);
  // A request whose body is still arriving when the signal comes.
  const auto body = envelope("sess_drain");
  auto headers = signed_headers(c, "msg_drain", body);
  std::string head = fmt::format(
      "POST /v1/webhooks/agents HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n", body.size());
  for (const auto& [k, v] : headers) head += k + ": " + v + "\r\n";
  head += "\r\n";
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket in_flight(ioc);
  in_flight.connect({boost::asio::ip::make_address("127.0.0.1"), c.ingress_port()});
  boost::asio::write(in_flight, boost::asio::buffer(head + body.substr(0, 10)));
  // The daemon has accepted it (its bytes are there to read) before the signal.
  REQUIRE(eventually([&] {
    return c.op("GET", "/metrics", "", "").raw.find("opgate_ingress_connections 1") !=
           std::string::npos;
  }));
  c.signal_daemon(SIGTERM);
  CHECK(eventually([&] { return c.op("GET", "/readyz", "", "").status == 503; }));
  // The sender finishes; it gets an answer (a refusal to retry), not a reset.
  boost::asio::write(in_flight, boost::asio::buffer(body.substr(10)));
  std::string answer;
  boost::system::error_code ec;
  char buf[4096];
  for (;;) {
    size_t n = in_flight.read_some(boost::asio::buffer(buf), ec);
    answer.append(buf, n);
    if (ec) break;
  }
  CHECK(answer.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(answer.find("Retry-After") != std::string::npos);
  CHECK(c.wait_daemon_exit() == 0);
  CHECK(c.daemon_log().find("drained") != std::string::npos);
}

TEST_CASE("two copies of an event at the same moment: one stored, both acknowledged") {
  Cluster c;
  const auto body = envelope("sess_twin");
  for (int round = 0; round < 20; ++round) {
    const std::string id = fmt::format("msg_twin_{}", round);
    std::vector<http::Response> answers(2);
    std::vector<std::thread> senders;
    for (int i = 0; i < 2; ++i)
      senders.emplace_back(
          [&, i] { answers[i] = c.webhook("agents", signed_headers(c, id, body), body); });
    for (auto& t : senders) t.join();
    CHECK(answers[0].status == 200);
    CHECK(answers[1].status == 200);
    CHECK(answers[0].body != answers[1].body);  // one new, one duplicate
  }
  auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find(R"(opgate_webhooks_accepted_total{source="agents"} 20)") != std::string::npos);
  CHECK(metrics.find(R"(opgate_webhooks_duplicate_total{source="agents"} 20)") !=
        std::string::npos);
}

TEST_CASE("a slow sender is disconnected and does not hold up others; a full backlog is a 503") {
  ClusterOptions o;
  o.extra_ingress = "header_timeout_ms = 300\nmax_backlog = 0";
  Cluster c(o);
  // A sender that starts a request and never finishes its headers.
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket slow(ioc);
  slow.connect({boost::asio::ip::make_address("127.0.0.1"), c.ingress_port()});
  const std::string partial = "POST /v1/webhooks/agents HTTP/1.1\r\nHost: x\r\n";
  boost::asio::write(slow, boost::asio::buffer(partial));
  // Meanwhile a good request is answered (here: refused for the backlog bound).
  const auto body = envelope();
  auto busy = c.webhook("agents", signed_headers(c, "msg_busy", body), body);
  CHECK(busy.status == 503);
  CHECK(busy.headers.count("Retry-After") == 1);
  // The slow connection is closed by the server: the read ends, not by us.
  char buf[256];
  boost::system::error_code ec;
  slow.read_some(boost::asio::buffer(buf), ec);
  CHECK(ec == boost::asio::error::eof);
}

TEST_CASE("a connection that failed verification waits its cooldown; other senders do not") {
  ClusterOptions o;
  o.extra_ingress = "reject_cooldown_ms = 60000";
  Cluster c(o);
  namespace net = boost::asio;
  net::io_context ioc;
  auto raw = [](const std::string& body, const http::Headers& headers) {
    std::string text = "POST /v1/webhooks/agents HTTP/1.1\r\nHost: x\r\n";
    for (const auto& [k, v] : headers) text += k + ": " + v + "\r\n";
    text += fmt::format("Content-Length: {}\r\n\r\n{}", body.size(), body);
    return text;
  };
  const auto body = envelope();
  auto forged = signed_headers(c, "msg_forged", body);
  forged["webhook-signature"] = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
  // One connection: a forged request, then a good one right behind it.
  net::ip::tcp::socket attacker(ioc);
  attacker.connect({net::ip::make_address("127.0.0.1"), c.ingress_port()});
  net::write(attacker,
             net::buffer(raw(body, forged) + raw(body, signed_headers(c, "msg_behind", body))));
  std::string received;
  char buf[4096];
  REQUIRE(eventually([&] {
    boost::system::error_code ec;
    if (attacker.available(ec) > 0) received.append(buf, attacker.read_some(net::buffer(buf), ec));
    return received.find("\r\n\r\n") != std::string::npos &&
           received.find("}") != std::string::npos;
  }));
  CHECK(received.starts_with("HTTP/1.1 401"));
  // Another sender is served at once, while the first connection cools down.
  auto good = c.webhook("agents", signed_headers(c, "msg_other", body), body);
  CHECK(good.status == 200);
  boost::system::error_code ec;
  CHECK(attacker.available(ec) == 0);  // the request behind the forged one waits
  CHECK(received.find("HTTP/1.1 200") == std::string::npos);
  auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find(R"(opgate_webhooks_accepted_total{source="agents"} 1)") != std::string::npos);
}

TEST_CASE("short of file descriptors, the daemon caps connections below its limit and serves") {
  ClusterOptions o;
  o.extra_ingress = "max_connections = 100000";
  o.daemon_open_files = 256;
  Cluster c(o);
  CHECK(c.daemon_log().find("file descriptors are available") != std::string::npos);
  // Far more idle connections than the daemon has descriptors for.
  boost::asio::io_context ioc;
  std::vector<boost::asio::ip::tcp::socket> idle;
  const boost::asio::ip::tcp::endpoint ep(boost::asio::ip::make_address("127.0.0.1"),
                                          c.ingress_port());
  for (int i = 0; i < 300; ++i) {
    boost::asio::ip::tcp::socket s(ioc);
    boost::system::error_code ec;
    s.connect(ep, ec);
    if (!ec) idle.push_back(std::move(s));
  }
  // The operator listener and the store still work: the daemon is not out
  // of descriptors.
  CHECK(c.op("GET", "/readyz").status == 200);
  // A sender beyond the cap is told to come back, not left hanging: with
  // 503 once the flood's own refusals are out (until then, past the few
  // refused at once, a connection is closed unanswered).
  const auto body = envelope();
  CHECK(eventually([&] {
    http::ClientRequest req;
    req.method = "POST";
    req.url = fmt::format("http://127.0.0.1:{}/v1/webhooks/agents", c.ingress_port());
    req.headers = signed_headers(c, "msg_fd_1", body);
    req.body = body;
    req.timeout = std::chrono::seconds(5);
    auto refused = http::send(req);
    return refused.ok() && refused->status == 503;
  }));
  idle.clear();
  CHECK(eventually([&] {
    return c.webhook("agents", signed_headers(c, "msg_fd_2", body), body).status == 200;
  }));
}
