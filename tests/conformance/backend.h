// The storage backend the conformance suite runs against, chosen when the
// test binary starts (--backend rocksdb | postgres). Each test gets a fresh,
// empty store and an injected clock.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
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

}  // namespace opgate::conformance
