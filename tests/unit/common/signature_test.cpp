#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "common/webhook_signature.h"
#include "ingress/envelope.h"

using namespace opgate::webhooks;
using opgate::ingress::parse_envelope;
namespace json = boost::json;

namespace {
json::object vectors() {
  std::ifstream in(std::string(OPGATE_VECTORS_DIR) + "/webhook-signatures.json");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str()).as_object();
}
std::string str(const json::object& o, const char* k) { return std::string(o.at(k).as_string()); }
}  // namespace

TEST_CASE("every published valid vector verifies at its own timestamp") {
  auto v = vectors();
  for (const auto& c : v.at("valid").as_array()) {
    const auto& o = c.as_object();
    auto key = decode_secret(str(o, "secret"));
    REQUIRE(key.ok());
    const int64_t ts = o.at("timestamp").as_int64();
    auto id = str(o, "webhook_id"), payload = str(o, "payload"), sig = str(o, "signature");
    auto ts_text = std::to_string(ts);
    CAPTURE(str(o, "origin"));
    CHECK(verify({id, ts_text, sig, payload}, {*key}, ts, 300).ok());
    CHECK(sign(*key, id, ts, payload) == sig);
  }
}

TEST_CASE("a header with several signatures passes if any v1 one matches") {
  auto m = vectors().at("multi_signature_header_must_pass").as_object();
  auto key = decode_secret(str(m, "secret"));
  const int64_t ts = m.at("timestamp").as_int64();
  auto id = str(m, "webhook_id"), payload = str(m, "payload"), header = str(m, "header");
  auto ts_text = std::to_string(ts);
  CHECK(verify({id, ts_text, header, payload}, {*key}, ts, 300).ok());
}

TEST_CASE("signatures sent in repeated headers, as HTTP combines them, pass") {
  // A sender that repeats webhook-signature: the server joins the fields
  // with ", " (RFC 9110), and the valid one may come first.
  auto v = vectors().at("valid").as_array().at(0).as_object();
  auto key = decode_secret(str(v, "secret"));
  REQUIRE(key.ok());
  const int64_t ts = v.at("timestamp").as_int64();
  auto id = str(v, "webhook_id"), payload = str(v, "payload"), sig = str(v, "signature");
  auto ts_text = std::to_string(ts);
  const std::string other = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
  CHECK(verify({id, ts_text, sig + ", " + other, payload}, {*key}, ts, 300).ok());
  CHECK(verify({id, ts_text, other + ", " + sig, payload}, {*key}, ts, 300).ok());
  CHECK_FALSE(verify({id, ts_text, other + ", " + other, payload}, {*key}, ts, 300).ok());
}

TEST_CASE("every published invalid signature is rejected") {
  auto v = vectors();
  const auto& first = v.at("valid").as_array()[0].as_object();
  auto key = decode_secret(str(first, "secret"));
  const int64_t ts = first.at("timestamp").as_int64();
  auto id = str(first, "webhook_id"), payload = str(first, "payload");
  auto ts_text = std::to_string(ts);
  for (const auto& bad : v.at("invalid_signatures_for_first_valid_case").as_array()) {
    std::string sig(bad.as_string());
    CAPTURE(sig);
    auto s = verify({id, ts_text, sig, payload}, {*key}, ts, 300);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code == "bad_signature");
  }
}

TEST_CASE("the timestamp must be within tolerance of the injected clock") {
  auto first = vectors().at("valid").as_array()[0].as_object();
  auto key = decode_secret(str(first, "secret"));
  const int64_t ts = first.at("timestamp").as_int64();
  auto id = str(first, "webhook_id"), payload = str(first, "payload"),
       sig = str(first, "signature");
  auto ts_text = std::to_string(ts);
  CHECK(verify({id, ts_text, sig, payload}, {*key}, ts + 300, 300).ok());
  CHECK(verify({id, ts_text, sig, payload}, {*key}, ts - 300, 300).ok());
  auto late = verify({id, ts_text, sig, payload}, {*key}, ts + 301, 300);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code == "timestamp_out_of_tolerance");
  CHECK_FALSE(verify({id, ts_text, sig, payload}, {*key}, ts - 301, 300).ok());
  CHECK(verify({id, "12x", sig, payload}, {*key}, ts, 300).error().code == "bad_timestamp");
  CHECK(verify({id, "", sig, payload}, {*key}, ts, 300).error().code == "bad_timestamp");
}

TEST_CASE("a rotated secret list verifies with either secret; a changed body fails") {
  auto first = vectors().at("valid").as_array()[0].as_object();
  auto key = decode_secret(str(first, "secret"));
  auto other = decode_secret("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
  const int64_t ts = first.at("timestamp").as_int64();
  auto id = str(first, "webhook_id"), sig = str(first, "signature");
  auto ts_text = std::to_string(ts);
  CHECK(verify({id, ts_text, sig, str(first, "payload")}, {*other, *key}, ts, 300).ok());
  CHECK_FALSE(verify({id, ts_text, sig, str(first, "payload")}, {*other}, ts, 300).ok());
  CHECK_FALSE(verify({id, ts_text, sig, "{\"test\": 2432232315}"}, {*key}, ts, 300).ok());
  CHECK_FALSE(verify({"msg_other", ts_text, sig, str(first, "payload")}, {*key}, ts, 300).ok());
}

TEST_CASE("malformed secrets are refused") {
  CHECK_FALSE(decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").ok());
  CHECK_FALSE(decode_secret("whsec_").ok());
  CHECK_FALSE(decode_secret("whsec_not*base64").ok());
}

TEST_CASE("the event envelope needs id, object, created_at, type and data") {
  auto ok = parse_envelope(
      R"({"id":"evt_1","object":"event","created_at":1,"type":"agent.session.action_required","data":{"id":"sess_1"}})");
  REQUIRE(ok.ok());
  CHECK(ok->session_id == "sess_1");
  auto unknown = parse_envelope(
      R"({"id":"evt_1","object":"event","created_at":1,"type":"response.completed","data":{"id":"x y"}})");
  CHECK(unknown.ok());
  CHECK_FALSE(parse_envelope("[]").ok());
  CHECK_FALSE(parse_envelope("not json").ok());
  CHECK_FALSE(parse_envelope(R"({"id":"evt_1","object":"event","type":"t","data":{}})").ok());
  CHECK_FALSE(
      parse_envelope(
          R"({"id":"evt_1","object":"event","created_at":1,"type":"agent.session.action_required","data":{"id":"../etc"}})")
          .ok());
}
