// An operation's evidence pack against a real daemon: exported over the API
// and the CLI, verified offline with nothing but the file, a changed byte
// anywhere refused, an earlier pack still verifying after more records
// were appended, a notification's audit head as a witness, owner patterns.
#include "operations/evidence.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <iterator>

#include "common/crypto.h"
#include "http/server.h"
#include "tests/integration/cluster.h"

using namespace opgate;
using namespace opgate::testing;

namespace {

const std::string kKey = "demo-user:ORDER-100:full-refund:v1";
const std::string kLookupThenRefund =
    R"([{"name":"lookup_order","arguments":{"order_id":"ORDER-100"}},)"
    R"({"name":"request_refund","arguments":{"order_id":"ORDER-100","reason":"arrived broken"}}])";

std::string read_all(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("an evidence pack proves one operation offline; a changed byte anywhere fails it") {
  Cluster c;
  c.create_session(kLookupThenRefund);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "pending"; });
  c.approve(kKey, kAliceToken);
  c.wait_operation(kKey, [](auto& o) { return str(o, "state") == "settled"; });

  // Exported by the CLI, exactly as the API serves it.
  const auto file = c.dir() / "evidence.json";
  auto [rc, out] = c.cli({"audit", "export", "--operation", kKey, "--out", file.string()});
  const std::string exported = out;
  REQUIRE_MESSAGE(rc == 0, exported);
  const std::string pack = read_all(file);
  auto parsed = json::parse(pack.substr(0, pack.size() - 1)).as_object();
  const auto& body = parsed.at("body").as_object();
  // What it holds: the proposal and fingerprint, the calls and what the
  // agent was shown, the policy, every decision, the provider's side and the
  // result delivered.
  CHECK(str(body.at("operation"), "fingerprint") == str(c.operation(kKey), "fingerprint"));
  REQUIRE(body.at("calls").as_array().size() == 1);
  CHECK(str(body.at("calls").at(0), "name") == "request_refund");
  REQUIRE(body.at("transcript").as_array().size() == 1);
  CHECK(str(body.at("transcript").at(0), "name") == "lookup_order");
  CHECK(str(body.at("transcript").at(0).at("result"), "output").find("refund_policy") !=
        std::string::npos);
  const auto& decisions = body.at("decisions").as_array();
  REQUIRE(decisions.size() == 1);
  CHECK(str(decisions[0], "principal") == "alice");
  CHECK(decisions[0].at("details").at("amount_minor").as_int64() == 2500);
  CHECK(str(decisions[0].at("details"), "policy_sha256") == str(body, "policy_at_export_sha256"));
  CHECK_FALSE(decisions[0].at("narrowed").as_bool());
  CHECK(body.at("policy_recorded").as_array().size() == 2);  // at the proposal and the approval
  CHECK(body.at("provider").as_array().size() == 2);         // the claim and the provider's answer
  CHECK(str(body.at("result"), "status") == "succeeded");
  const auto& audit = parsed.at("audit").as_object();
  const auto& records = audit.at("records").as_array();
  CHECK(str(records.back(), "action") == "evidence_exported");
  CHECK(str(records.back(), "principal") == "admin");

  auto [vrc, verified] = c.cli({"audit", "verify-evidence", file.string()});
  const std::string verified_text = verified;
  CHECK_MESSAGE(vrc == 0, verified_text);
  CHECK(verified.find("evidence verifies: " + kKey) != std::string::npos);

  // One byte changed anywhere: it no longer verifies.
  size_t accepted = 0;
  for (size_t i = 0; i < pack.size(); ++i) {
    std::string changed = pack;
    changed[i] = static_cast<char>(changed[i] ^ 0x01);
    if (operations::verify_evidence(changed).ok) ++accepted;
  }
  CHECK(accepted == 0);
  std::string flipped = pack;
  const auto at = flipped.find("arrived broken");
  REQUIRE(at != std::string::npos);
  flipped[at] = 'A';
  std::ofstream(c.dir() / "flipped.json", std::ios::binary) << flipped;
  auto [frc, refused] = c.cli({"audit", "verify-evidence", (c.dir() / "flipped.json").string()});
  CHECK(frc == 1);
  CHECK(refused.find("EVIDENCE DOES NOT VERIFY") != std::string::npos);

  // A forgery: the body changed and its hash with it, and a second copy of
  // the first record, made to vouch for the new hash, added behind it. The
  // chain still walks the genuine records; the copy must not count.
  auto forged_pack = parsed;
  auto& forged_body = forged_pack.at("body").as_object();
  forged_body["result"] = json::object{{"status", "failed"}};
  const std::string forged_sha = crypto::sha256_hex(json::serialize(forged_body));
  forged_pack["body_sha256"] = forged_sha;
  auto& forged_records = forged_pack.at("audit").as_object().at("records").as_array();
  auto vouching = forged_records.at(0).as_object();
  vouching["action"] = "evidence_exported";
  vouching["details_json"] = json::serialize(json::object{{"body_sha256", forged_sha}});
  forged_records.push_back(vouching);
  const std::string forged_text = json::serialize(forged_pack) + "\n";
  const auto forged_check = operations::verify_evidence(forged_text);
  CHECK_FALSE(forged_check.ok);
  CHECK(forged_check.problem.find("appears twice") != std::string::npos);

  // The CLI keeps no pack that does not verify: here one changed on its way.
  http::Server tampering({}, [&](http::Request&&) {
    http::Response r;
    r.status = 200;
    r.headers["Content-Type"] = "application/json";
    r.body = flipped;
    return r;
  });
  auto tampering_port = tampering.start();
  REQUIRE(tampering_port.ok());
  const auto kept = c.dir() / "tampered.json";
  auto [trc, tampered_out] =
      c.cli({"audit", "export", "--operation", kKey, "--out", kept.string()}, kAdminToken,
            "http://127.0.0.1:" + std::to_string(*tampering_port));
  CHECK(trc == 1);
  CHECK_FALSE(std::filesystem::exists(kept));
  tampering.stop();

  // More records appended (another export, another operation): the first
  // pack still verifies, and a later one passes through its head.
  c.create_session(R"([{"name":"request_refund","arguments":{"order_id":"ORDER-300"}}])");
  c.wait_operation("demo-user:ORDER-300:full-refund:v1",
                   [](auto& o) { return str(o, "state") == "pending"; });
  CHECK(operations::verify_evidence(pack).ok);
  auto later = c.op("GET", "/v1/operations/" + kKey + "/evidence");
  REQUIRE(later.status == 200);
  const auto first_head = audit.at("head");
  const auto witnessed =
      fmt::format("{}:{}", first_head.at("seq").as_int64(), str(first_head, "hash"));
  std::ofstream(c.dir() / "later.json", std::ios::binary) << later.raw;
  auto [wrc, witnessed_out] =
      c.cli({"audit", "verify-evidence", (c.dir() / "later.json").string(), "--head", witnessed});
  const std::string witnessed_text = witnessed_out;
  CHECK_MESSAGE(wrc == 0, witnessed_text);
  CHECK(witnessed_out.find("passes through the witnessed head") != std::string::npos);
  std::string forged = str(first_head, "hash");
  forged[0] = forged[0] == '0' ? '1' : '0';
  CHECK(c.cli({"audit", "verify-evidence", (c.dir() / "later.json").string(), "--head",
               fmt::format("{}:{}", first_head.at("seq").as_int64(), forged)})
            .first == 1);
  // The other operation's records are in the proof by digest only.
  CHECK(later.raw.find("ORDER-300") == std::string::npos);

  // Owner patterns apply: another owner's token finds nothing.
  CHECK(c.op("GET", "/v1/operations/" + kKey + "/evidence", "", kOutsiderToken).status == 404);
  CHECK(c.op("GET", "/v1/operations/nope:x:full-refund:v1/evidence").status == 404);
  // The chain as a whole still verifies with the exports in it.
  CHECK(c.cli({"audit", "verify"}).first == 0);
}
