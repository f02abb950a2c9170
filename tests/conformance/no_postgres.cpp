// Built when the PostgreSQL backend is not: --backend postgres says so.
#include <memory>

#include "backend.h"

namespace opgate::conformance {
std::unique_ptr<Backend> make_postgres_backend() { return nullptr; }
}  // namespace opgate::conformance
