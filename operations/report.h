// How approvals are going, over a window of proposals: counts by kind and
// tier, amounts, decisions, time to decision (p50, p95), expiries,
// escalations, denial reasons, lowered amounts, outcome_unknown and its time
// to resolution, and per approver. Operations are added one at a time, so a
// long history is read in pages. Pure; not thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "opgate.pb.h"

namespace opgate::operations {

class DecisionReport {
 public:
  explicit DecisionReport(int64_t from_ms) : from_ms_(from_ms) {}
  // Counts the operation if it was proposed within the window.
  void add(const pb::Operation& operation);
  boost::json::object json() const;

 private:
  struct Kind {
    int64_t count = 0;
    std::map<std::string, int64_t> by_tier;
    std::map<std::string, int64_t> amount_minor;  // by currency
  };
  int64_t from_ms_;
  int64_t proposals_ = 0;
  std::map<std::string, Kind> kinds_;
  std::map<std::string, int64_t> outcomes_;  // pending, approved, denied, expired, rejected, ...
  std::vector<int64_t> decision_ms_;
  int64_t narrowed_ = 0;
  std::map<std::string, int64_t> narrowed_off_minor_;  // by currency
  int64_t reminded_ = 0, escalated_ = 0;
  // Denials by reason: at most kReasonsKept distinct ones are told apart,
  // the rest counted together, and the kReasonsShown most frequent shown.
  static constexpr size_t kReasonsKept = 1000, kReasonsShown = 20;
  std::map<std::string, int64_t> denial_reasons_;
  int64_t denials_for_other_reasons_ = 0;
  int64_t executed_ = 0, unknown_ = 0;
  std::vector<int64_t> resolution_ms_;
  std::map<std::string, int64_t> approvals_by_;
  std::map<std::string, int64_t> denials_by_;
};

}  // namespace opgate::operations
