// An evidence export over a real store: the audit record that vouches for
// the pack's body is written only while the operation and its records are
// what the body was built from.
#include "operations/evidence.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "delegating_storage.h"
#include "operations/decisions.h"
#include "world.h"

using namespace opgate;
namespace json = boost::json;

namespace {

constexpr const char* kRefund = "demo-user:ORDER-100:full-refund:v1";

operations::Principal person(std::string name) {
  operations::Principal p;
  p.name = std::move(name);
  p.scopes = {"operations:read", "operations:approve"};
  p.owners = {"*"};
  return p;
}

// A store whose next transaction is preceded by `before` (another
// request's, landing between the export's reads and its audit record).
class Interleaved final : public testing::DelegatingStorage {
 public:
  using DelegatingStorage::DelegatingStorage;
  std::function<void(store::Storage&)> before;

  Status transact(const std::function<Status(store::Transaction&)>& fn) override {
    if (auto run = std::exchange(before, {})) run(inner_);
    return inner_.transact(fn);
  }
};

}  // namespace

TEST_CASE("an operation decided while its evidence is exported is exported as it is now") {
  testing::World w;
  w.seed_order("ORDER-100");
  REQUIRE(w.sync->bind("sess_1", "demo-user", "admin").ok());
  operations::SessionView v;
  v.required_actions = {{"call_1", "turn_1", "request_refund", R"({"order_id":"ORDER-100"})"}};
  w.agents.views["sess_1"] = v;
  w.webhook("msg_1", "sess_1");
  w.pump();
  REQUIRE(w.operation(kRefund).state() == pb::STATE_PENDING);

  Interleaved storage(*w.storage);
  storage.before = [](store::Storage& s) {
    REQUIRE(s.transact([](store::Transaction& txn) {
               return operations::deny(txn, kRefund, person("bob"), "not eligible");
             }).ok());
  };
  auto pack = operations::export_evidence(storage, kRefund, person("alice"), *w.policy.get());
  REQUIRE_MESSAGE(pack.ok(), pack.error().message);
  const auto doc = json::parse(*pack);
  CHECK(doc.at("body").at("operation").at("state").as_string() == "settled");
  // One record vouches for it, for the operation as it was exported.
  auto records = w.storage->reader().audit_of(kRefund);
  REQUIRE(records.ok());
  int exported = 0;
  for (const auto& r : *records) {
    if (r.action() != "evidence_exported") continue;
    ++exported;
    CHECK(r.from_state() == "settled");
  }
  CHECK(exported == 1);
  const auto check = operations::verify_evidence(*pack, std::nullopt);
  CHECK_MESSAGE(check.ok, check.problem);
}
