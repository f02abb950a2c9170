// The storage backend the conformance suite runs against, chosen when the
// test binary starts (--backend rocksdb | postgres). Each test gets a fresh,
// empty store and an injected clock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "opgate.pb.h"
#include "store/port.h"

namespace opgate::conformance {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // A fresh, empty store; it stays valid until the next call or the end.
  virtual std::unique_ptr<store::Storage> open_empty(const Clock& clock) = 0;
  // The same store as the last open_empty(), opened again (a restart).
  virtual std::unique_ptr<store::Storage> reopen(const Clock& clock) = 0;
  // Whether reopen() may be called while the store is open: several
  // processes share it (PostgreSQL), and each reopen() is one of them.
  virtual bool shared() const { return false; }
};

Backend& backend();

// A notification of `type` ("operation.approved") that names the audit head
// its transaction chains onto, with the event id the product gives it
// (evt_{seq}_approved).
inline pb::Notification notification_on(const store::AuditHead& head, std::string_view type,
                                        int64_t now_ms) {
  pb::Notification n;
  n.set_type(std::string(type));
  n.set_event_id("evt_" + std::to_string(head.seq) + "_" +
                 std::string(type.substr(type.find('.') + 1)));
  n.set_created_at_ms(now_ms);
  n.set_audit_seq(head.seq);
  n.set_audit_hash(head.hash);
  return n;
}

}  // namespace opgate::conformance
