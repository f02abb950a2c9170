// The stage for stateful unit tests: a real RocksDB store in a private
// temporary directory, an injected clock, and a scripted Agents API.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adapters/agents/agents_client.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/metrics.h"
#include "ingress/inbox.h"
#include "outbox/outbox.h"
#include "store/journal.h"

namespace opgate::testing {

// Answers as scripted and records what it was asked.
class FakeAgents final : public adapters::AgentsClient {
 public:
  std::optional<Error> fetch_error;             // for every session
  std::map<std::string, Error> session_errors;  // for one session
  adapters::SessionView view;
  int fetches = 0;
  Result<adapters::SubmitVerdict> verdict = adapters::SubmitVerdict::accepted;
  std::vector<std::string> idempotency_keys;

  Result<adapters::SessionView> get_session(const std::string& session_id) override {
    ++fetches;
    if (fetch_error) return *fetch_error;
    if (auto it = session_errors.find(session_id); it != session_errors.end()) return it->second;
    return view;
  }
  Result<adapters::SubmitVerdict> submit_result(const std::string&, const pb::CallRef&,
                                                const pb::ToolResult&,
                                                const std::string& key) override {
    idempotency_keys.push_back(key);
    return verdict;
  }
  Result<std::string> get_turns(const std::string&) override { return std::string("{}"); }
  Result<adapters::Page> get_items(const std::string&, const std::string&, int) override {
    return adapters::Page{};
  }
};

struct StoreWorld {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("opgate-unit-" + crypto::random_hex(6));
  ManualClock clock{1'800'000'000'000};
  std::unique_ptr<store::Store> store;
  std::unique_ptr<store::Journal> journal;
  std::unique_ptr<ingress::Inbox> inbox;
  std::unique_ptr<outbox::Outbox> outbox;
  FakeAgents agents;
  Metrics metrics;

  // An options.inbox_retention_ms runs against this world's clock.
  explicit StoreWorld(store::OpenOptions options = {}) {
    options.clock = &clock;
    auto opened = store::Store::open(dir.string(), options);
    REQUIRE_MESSAGE(opened.ok(), opened.error().message);
    store = std::move(opened.value());
    journal = std::move(store::Journal::open(*store, clock).value());
    inbox = std::make_unique<ingress::Inbox>(*store, clock);
    outbox = std::make_unique<outbox::Outbox>(*store);
  }
  ~StoreWorld() {
    outbox.reset();
    inbox.reset();
    journal.reset();
    store.reset();
    std::filesystem::remove_all(dir);
  }
};

}  // namespace opgate::testing
