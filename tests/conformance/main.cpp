// The storage port's conformance suite: every backend must pass it.
//   conformance_tests [--backend rocksdb|postgres] [doctest options]
// postgres reads its connection string from OPGATE_TEST_PG_URL.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <iostream>

#include "backend.h"
#include "common/crypto.h"
#include "store/rocksdb/rocks_storage.h"

namespace opgate::conformance {

namespace {

class RocksBackend final : public Backend {
 public:
  ~RocksBackend() override { clean(); }
  std::string name() const override { return "rocksdb"; }
  std::unique_ptr<store::Storage> open_empty(const Clock& clock) override {
    clean();
    dir_ = std::filesystem::temp_directory_path() / ("opgate-conf-" + crypto::random_hex(6));
    return reopen(clock);
  }
  std::unique_ptr<store::Storage> reopen(const Clock& clock) override {
    auto s = store::rocks::RocksStorage::open(dir_.string(), {}, clock);
    REQUIRE_MESSAGE(s.ok(), s.error().message);
    return std::move(*s);
  }

 private:
  void clean() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

std::unique_ptr<Backend> chosen;

}  // namespace

Backend& backend() { return *chosen; }

// Defined by a backend's own file when it is built in.
std::unique_ptr<Backend> make_postgres_backend();

}  // namespace opgate::conformance

int main(int argc, char** argv) {
  std::string name = "rocksdb";
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      name = argv[++i];
      continue;
    }
    rest.push_back(argv[i]);
  }
  using namespace opgate::conformance;
  if (name == "rocksdb") {
    chosen = std::make_unique<RocksBackend>();
  } else if (name == "postgres") {
    chosen = make_postgres_backend();
    if (!chosen) {
      std::cerr << "the postgres backend is not built in\n";
      return 2;
    }
  } else {
    std::cerr << "unknown backend " << name << "\n";
    return 2;
  }
  std::cout << "storage backend: " << chosen->name() << "\n";
  doctest::Context context(static_cast<int>(rest.size()), rest.data());
  const int rc = context.run();
  chosen.reset();
  return rc;
}
