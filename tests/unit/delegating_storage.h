// A store that hands every call to another: tests derive from it to step in
// before a transaction (hold it, fail it, or run another request's first).
#pragma once

#include "store/port.h"

namespace opgate::testing {

class DelegatingStorage : public store::Storage {
 public:
  explicit DelegatingStorage(store::Storage& inner) : inner_(inner) {}

  Status transact(const std::function<Status(store::Transaction&)>& fn) override {
    return inner_.transact(fn);
  }
  store::Reader& reader() override { return inner_.reader(); }
  Result<std::vector<store::Appended>> append_events(std::vector<store::NewEvent>& e) override {
    return inner_.append_events(e);
  }
  Result<store::AuditVerification> verify_audit() override { return inner_.verify_audit(); }
  Status check_writable() override { return inner_.check_writable(); }
  store::StorageStats stats() const override { return inner_.stats(); }

 protected:
  store::Storage& inner_;
};

}  // namespace opgate::testing
