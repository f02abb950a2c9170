// Outbound notifications against the real daemon and the simulators' receiver:
// nothing lost across kill -9 (a repeat keeps its webhook-id), every
// delivery signed, each operation's events in order, the receiver a witness
// of the audit chain's head, and the endpoints visible to on-call.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <set>

#include "tests/integration/cluster.h"

using namespace opgate;
using namespace opgate::testing;

namespace {

const std::string kKey = "demo-user:ORDER-100:full-refund:v1";
const std::string kRefund = R"([{"name":"request_refund","arguments":{"order_id":"ORDER-100"}}])";

json::array received(Cluster& c) {
  return c.receiver_admin("GET", "/_sim/received").body.as_object().at("deliveries").as_array();
}

// The deliveries to one endpoint about one operation, in arrival order.
std::vector<json::object> deliveries(Cluster& c, const std::string& path, const std::string& key) {
  std::vector<json::object> out;
  for (const auto& r : received(c))
    if (str(r, "path") == path && str(r, "key") == key) out.push_back(r.as_object());
  return out;
}

bool has_type(const std::vector<json::object>& ds, const std::string& type) {
  for (const auto& d : ds)
    if (str(d, "type") == type) return true;
  return false;
}

}  // namespace

TEST_CASE("kill -9 while deliveries are in flight loses none; a repeat keeps its webhook-id") {
  Cluster c;
  // The receiver keeps every delivery but never answers: opgate cannot know
  // it arrived, so it is still owed when the daemon dies.
  REQUIRE(
      c.receiver_admin(
           "POST", "/_sim/faults",
           R"({"rules":[{"path_prefix":"/hooks/ops","action":"drop_after_commit","times":-1}]})")
          .status == 200);
  c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  REQUIRE(eventually(
      [&] { return has_type(deliveries(c, "/hooks/ops", kKey), "operation.proposed"); }));
  c.restart_daemon(/*kill9=*/true);
  c.receiver_admin("DELETE", "/_sim/faults");

  c.approve(kKey);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "settled"; });
  REQUIRE(
      eventually([&] { return has_type(deliveries(c, "/hooks/ops", kKey), "operation.settled"); }));

  const auto ds = deliveries(c, "/hooks/ops", kKey);
  std::map<std::string, std::set<std::string>> ids_of;  // event type -> webhook-ids
  std::vector<std::string> first_seen;
  int proposed_arrivals = 0;
  for (const auto& d : ds) {
    CHECK(d.at("verified").as_bool());
    const auto type = str(d, "type");
    if (type == "operation.proposed") ++proposed_arrivals;
    if (ids_of[type].empty()) first_seen.push_back(type);
    ids_of[type].insert(str(d, "webhook_id"));
  }
  CHECK(proposed_arrivals >= 2);  // sent before the kill and again after it
  for (const auto& entry : ids_of) CHECK_MESSAGE(entry.second.size() == 1, entry.first);
  REQUIRE(first_seen.size() >= 3);
  CHECK(first_seen.front() == "operation.proposed");
  CHECK(first_seen.at(1) == "operation.approved");
  CHECK(first_seen.back() == "operation.settled");
  // Every endpoint drained: on-call sees no backlog and no failure.
  REQUIRE(eventually([&] {
    auto [rc, out] = c.cli({"notify", "list", "--json"});
    if (rc != 0) return false;
    auto v = json::parse(out).as_object().at("endpoints").as_array();
    for (const auto& e : v)
      if (e.at("backlog").to_number<int64_t>() != 0) return false;
    return v.size() == 2;
  }));
  // The chat endpoint took the proposal under one webhook-id. It was never
  // faulted, but the kill may land after a delivery arrived and before it
  // was recorded, so it may arrive twice. Checked once every endpoint
  // drained: its queue is its own, and after the restart it may still hold
  // the proposal when the ops one has settled.
  std::set<std::string> chat_ids;
  for (const auto& r : received(c))
    if (str(r, "path") == "/hooks/chat" && str(r, "text").find("ORDER-100") != std::string::npos)
      chat_ids.insert(str(r, "webhook_id"));
  CHECK(chat_ids.size() == 1);
  CHECK(chat_ids.count("") == 0);
  auto [rc, table] = c.cli({"notify", "list"});
  CHECK(rc == 0);
  CHECK(table.find("ops") != std::string::npos);
  CHECK(table.find("chat") != std::string::npos);
  // And so does /metrics, per endpoint.
  const auto metrics = c.op("GET", "/metrics").raw;
  CHECK(metrics.find("opgate_notification_backlog{endpoint=\"ops\"} 0") != std::string::npos);
  CHECK(metrics.find("opgate_notification_endpoint_healthy{endpoint=\"chat\"} 1") !=
        std::string::npos);
  CHECK(metrics.find("opgate_notifications_sent_total{endpoint=\"ops\"} 0") == std::string::npos);
  CHECK(metrics.find("# TYPE opgate_notifications_retried_total counter") != std::string::npos);
}

TEST_CASE(
    "a receiver's audit head is a witness: verify --expect-head holds it, a forged one fails") {
  Cluster c;
  c.create_session(kRefund);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "pending"; });
  c.approve(kKey);
  c.wait_operation(kKey, [](auto& x) { return str(x, "state") == "settled"; });
  REQUIRE(
      eventually([&] { return has_type(deliveries(c, "/hooks/ops", kKey), "operation.settled"); }));
  json::object head;
  for (const auto& d : deliveries(c, "/hooks/ops", kKey))
    if (str(d, "type") == "operation.settled") head = d.at("audit_head").as_object();
  const auto seq = head.at("seq").to_number<uint64_t>();
  const auto hash = str(head, "hash");
  REQUIRE(seq > 0);
  REQUIRE(hash.size() == 64);
  const auto witnessed = fmt::format("{}:{}", seq, hash);

  auto [ok_rc, ok_out] = c.cli({"audit", "verify", "--expect-head", witnessed});
  const std::string ok_text = ok_out;  // doctest cannot capture a binding
  CHECK_MESSAGE(ok_rc == 0, ok_text);
  CHECK(ok_out.find("audit chain verifies") != std::string::npos);

  std::string forged = hash;
  forged[0] = forged[0] == '0' ? '1' : '0';
  auto [bad_rc, bad_out] =
      c.cli({"audit", "verify", "--expect-head", fmt::format("{}:{}", seq, forged)});
  CHECK(bad_rc == 3);
  CHECK(bad_out.find("AUDIT CHAIN BROKEN") != std::string::npos);
  auto [far_rc, far_out] =
      c.cli({"audit", "verify", "--expect-head", fmt::format("{}:{}", seq + 1000, hash)});
  CHECK(far_rc == 3);
  CHECK(far_out.find("records were removed") != std::string::npos);
  auto [junk_rc, junk_out] = c.cli({"audit", "verify", "--expect-head", "not-a-head"});
  CHECK(junk_rc != 0);
  CHECK(junk_rc != 3);

  // Offline, on the stopped daemon's directory, the same witness holds
  // (RocksDB: a PostgreSQL store has no data directory; online is the way).
  if (c.store() != "rocksdb") return;
  c.stop_daemon_gracefully();
  auto [off_rc, off_out] = c.cli(
      {"audit", "verify", "--data-dir", (c.dir() / "data").string(), "--expect-head", witnessed});
  const std::string off_text = off_out;
  CHECK_MESSAGE(off_rc == 0, off_text);
}
