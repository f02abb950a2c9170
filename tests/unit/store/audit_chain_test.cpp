// The audit chain's two hash versions: records written before version 2
// (hash over the predecessor and the fields) and version 2 (over the
// predecessor and the digest of the fields) verify in one chain, and a
// version-2 link can be recomputed from a digest alone.
#include "store/audit_chain.h"

#include <doctest/doctest.h>

using namespace opgate;

namespace {
pb::AuditRecord record(std::string key, std::string action) {
  pb::AuditRecord r;
  r.set_principal("alice");
  r.set_operation_key(std::move(key));
  r.set_action(std::move(action));
  r.set_details_json(R"({"amount_minor":2500})");
  return r;
}
}  // namespace

TEST_CASE("a chain of records before and after hash version 2 verifies; a changed field fails") {
  store::AuditHead head;
  // Written by an earlier release: version 0.
  pb::AuditRecord old = record("a:1:full-refund:v1", "propose");
  old.set_seq(1);
  old.set_at_ms(10);
  old.set_hash(store::audit_hash(old, ""));
  head = {1, old.hash()};
  pb::AuditRecord now = record("b:2:full-refund:v1", "approve");
  store::chain_audit(now, 20, head);
  CHECK(now.hash_version() == 2);
  CHECK(now.prev_hash() == old.hash());
  // The link needs only the predecessor's hash and the fields' digest.
  CHECK(store::audit_link(old.hash(), store::audit_fields_digest(now)) == now.hash());

  store::ChainVerifier v;
  CHECK(v.add(old));
  CHECK(v.add(now));
  CHECK(v.result().ok);
  CHECK(v.result().head.seq == 2);

  for (auto change : {+[](pb::AuditRecord& r) { r.set_details_json(R"({"amount_minor":9})"); },
                      +[](pb::AuditRecord& r) { r.set_hash_version(0); },
                      +[](pb::AuditRecord& r) { r.set_principal("mallory"); }}) {
    pb::AuditRecord altered = now;
    change(altered);
    store::ChainVerifier w;
    CHECK(w.add(old));
    CHECK_FALSE(w.add(altered));
  }
}
