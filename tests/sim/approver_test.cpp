// The benchmark approver reads its list strictly: a line it cannot use is
// named, and nothing is sent.
#include "sim/approver.h"

#include <doctest/doctest.h>

using namespace opgate;

TEST_CASE("approver: one job per line, exactly as the operation showed") {
  auto jobs = sim::parse_approval_jobs(
      R"({"key":"demo-user:P1:full-refund:v1","amount_minor":1001,"currency":"USD","fingerprint":"fp1"})"
      "\n\n"
      R"({"key":"demo-user:P2:full-refund:v1","amount_minor":1002,"currency":"EUR","fingerprint":"fp2"})"
      "\n");
  REQUIRE(jobs.ok());
  REQUIRE(jobs->size() == 2);
  CHECK((*jobs)[0].key == "demo-user:P1:full-refund:v1");
  CHECK((*jobs)[1].amount_minor == 1002);
  CHECK((*jobs)[1].currency == "EUR");
  CHECK((*jobs)[1].fingerprint == "fp2");
}

TEST_CASE("approver: a line without what an approval needs is named") {
  auto jobs = sim::parse_approval_jobs(
      R"({"key":"k","amount_minor":1,"currency":"USD","fingerprint":"f"})"
      "\n"
      R"({"key":"k","amount_minor":"1","currency":"USD","fingerprint":"f"})"
      "\n");
  REQUIRE_FALSE(jobs.ok());
  CHECK(jobs.error().message.find("line 2") != std::string::npos);
  CHECK_FALSE(sim::parse_approval_jobs("not json\n").ok());
  sim::ApproverOptions o;
  o.connections = 0;
  CHECK_FALSE(sim::run_approvals(o, {}).ok());
}
