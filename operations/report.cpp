#include "operations/report.h"

#include <algorithm>
#include <boost/json.hpp>

#include "operations/state_machine.h"

namespace opgate::operations {

namespace json = boost::json;

namespace {

json::value percentile(std::vector<int64_t> values, double p) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(rank, values.size() - 1)];
}

template <typename Map>
json::object object_of(const Map& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

}  // namespace

void DecisionReport::add(const pb::Operation& op) {
  if (op.created_at_ms() < from_ms_) return;
  ++proposals_;
  const auto& p = op.proposal();
  auto& kind = kinds_[p.kind()];
  ++kind.count;
  ++kind.by_tier[p.tier()];
  kind.amount_minor[p.currency()] += p.amount_minor();
  if (op.reminded_at_ms() != 0) ++reminded_;
  if (op.escalated_at_ms() != 0) ++escalated_;
  if (p.original_amount_minor() != 0) {
    ++narrowed_;
    narrowed_off_minor_[p.currency()] += p.original_amount_minor() - p.amount_minor();
  }
  const bool approved = op.approvals_size() > 0 && !is(op, State::pending) &&
                        !is(op, Outcome::denied) && !is(op, Outcome::expired) &&
                        !is(op, Outcome::rejected);
  std::string outcome = is(op, State::pending) ? "pending"
                        : approved             ? "approved"
                                               : std::string(outcome_text(op));
  ++outcomes_[outcome];
  if (approved) {
    int64_t last = 0;
    for (const auto& a : op.approvals()) {
      last = std::max(last, a.at_ms());
      ++approvals_by_[a.principal()];
    }
    decision_ms_.push_back(last - op.created_at_ms());
    ++executed_;
  } else if (is(op, Outcome::denied)) {
    decision_ms_.push_back(op.updated_at_ms() - op.created_at_ms());
    if (denial_reasons_.size() < kReasonsKept || denial_reasons_.count(op.decision_reason()))
      ++denial_reasons_[op.decision_reason()];
    else
      ++denials_for_other_reasons_;
    ++denials_by_[op.decided_by()];
  }
  if (op.unknown_since_ms() != 0) {
    ++unknown_;
    if (is(op, State::settled))
      resolution_ms_.push_back(op.updated_at_ms() - op.unknown_since_ms());
  }
}

json::object DecisionReport::json() const {
  json::object kinds;
  for (const auto& [name, k] : kinds_)
    kinds[name] = json::object{{"count", k.count},
                               {"by_tier", object_of(k.by_tier)},
                               {"amount_minor", object_of(k.amount_minor)}};
  json::object approvers;
  std::map<std::string, std::pair<int64_t, int64_t>> people;
  for (const auto& [who, n] : approvals_by_) people[who].first = n;
  for (const auto& [who, n] : denials_by_) people[who].second = n;
  for (const auto& [who, counts] : people)
    approvers[who] = json::object{{"approved", counts.first}, {"denied", counts.second}};
  // The most frequent reasons (then in text order); the rest counted.
  std::vector<std::pair<std::string, int64_t>> reasons(denial_reasons_.begin(),
                                                       denial_reasons_.end());
  std::stable_sort(reasons.begin(), reasons.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  json::object shown_reasons;
  int64_t other_reasons = denials_for_other_reasons_;
  for (size_t i = 0; i < reasons.size(); ++i) {
    if (i < kReasonsShown)
      shown_reasons[reasons[i].first] = reasons[i].second;
    else
      other_reasons += reasons[i].second;
  }
  return json::object{
      {"from_ms", from_ms_},
      {"proposals", proposals_},
      {"kinds", std::move(kinds)},
      {"outcomes", object_of(outcomes_)},
      {"time_to_decision_ms", json::object{{"count", static_cast<int64_t>(decision_ms_.size())},
                                           {"p50", percentile(decision_ms_, 0.5)},
                                           {"p95", percentile(decision_ms_, 0.95)}}},
      {"reminded", reminded_},
      {"escalated", escalated_},
      {"narrowed", json::object{{"count", narrowed_},
                                {"amount_removed_minor", object_of(narrowed_off_minor_)}}},
      {"denial_reasons", std::move(shown_reasons)},
      {"denials_for_other_reasons", other_reasons},
      {"outcome_unknown",
       json::object{{"count", unknown_},
                    {"of_executed", executed_},
                    {"rate", executed_ ? static_cast<double>(unknown_) / executed_ : 0.0},
                    {"time_to_resolution_ms",
                     json::object{{"count", static_cast<int64_t>(resolution_ms_.size())},
                                  {"p50", percentile(resolution_ms_, 0.5)},
                                  {"p95", percentile(resolution_ms_, 0.95)}}}}},
      {"approvers", std::move(approvers)}};
}

}  // namespace opgate::operations
