#include "sim/faults.h"

#include <array>
#include <cctype>
#include <utility>

#include "sim/sim_errors.h"

namespace opgate::sim {
namespace json = boost::json;

namespace {

constexpr std::array<std::pair<FaultAction, std::string_view>, 10> kActionNames{{
    {FaultAction::kDelay, "delay"},
    {FaultAction::kDropBeforeCommit, "drop_before_commit"},
    {FaultAction::kDropAfterCommit, "drop_after_commit"},
    {FaultAction::kError500BeforeCommit, "error_500_before_commit"},
    {FaultAction::kError500AfterCommit, "error_500_after_commit"},
    {FaultAction::kRateLimit, "rate_limit"},
    {FaultAction::kDecline, "decline"},
    {FaultAction::kPending, "pending"},
    {FaultAction::kGone, "gone"},
    {FaultAction::kMalformed, "malformed"},
}};

constexpr int64_t kMaxDelayMs = 600'000;
constexpr int64_t kMaxRetryAfterS = 3600;

Error rule_error(size_t index, std::string_view what) {
  return make_error(sim_errc::invalid_fault_rule,
                    "rules[" + std::to_string(index) + "]: " + std::string(what));
}

std::optional<int64_t> as_int(const json::value& v) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64() && v.as_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v.as_uint64());
  return std::nullopt;
}

Result<FaultRule> parse_rule(const json::value& value, size_t index, FaultActionSet allowed,
                             std::string_view subject_field) {
  if (!value.is_object()) return rule_error(index, "must be an object");
  FaultRule rule;
  bool has_action = false;
  for (const auto& [key, v] : value.as_object()) {
    if (key == "method") {
      if (!v.is_string()) return rule_error(index, "method must be a string");
      rule.method = std::string(v.as_string());
      for (auto& c : rule.method)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (key == "path_prefix") {
      if (!v.is_string()) return rule_error(index, "path_prefix must be a string");
      rule.path_prefix = std::string(v.as_string());
    } else if (key == subject_field) {
      if (v.is_null()) continue;
      if (!v.is_string())
        return rule_error(index, std::string(subject_field) + " must be a string");
      rule.subject = std::string(v.as_string());
    } else if (key == "action") {
      if (!v.is_string()) return rule_error(index, "action must be a string");
      auto action = fault_action_from_string(v.as_string());
      if (!action || (allowed & fault_bit(*action)) == 0)
        return rule_error(index, "unsupported action \"" + std::string(v.as_string()) + "\"");
      rule.action = *action;
      has_action = true;
    } else if (key == "delay_ms") {
      auto n = as_int(v);
      if (!n || *n < 0 || *n > kMaxDelayMs)
        return rule_error(index, "delay_ms must be an integer in 0..600000");
      rule.delay_ms = *n;
    } else if (key == "retry_after_s") {
      auto n = as_int(v);
      if (!n || *n < 0 || *n > kMaxRetryAfterS)
        return rule_error(index, "retry_after_s must be an integer in 0..3600");
      rule.retry_after_s = *n;
    } else if (key == "times") {
      auto n = as_int(v);
      if (!n || (*n < 1 && *n != -1))
        return rule_error(index, "times must be a positive integer or -1 (forever)");
      rule.times = *n;
    } else {
      return rule_error(index, "unknown field \"" + std::string(key) + "\"");
    }
  }
  if (!has_action) return rule_error(index, "action is required");
  return rule;
}

bool matches(const FaultRule& rule, const FaultQuery& q) {
  if (rule.times == 0) return false;
  if ((q.supported & fault_bit(rule.action)) == 0) return false;
  if (!rule.method.empty() && rule.method != q.method) return false;
  if (!q.path.starts_with(rule.path_prefix)) return false;
  if (rule.subject && (!q.subject || *q.subject != *rule.subject)) return false;
  return true;
}

}  // namespace

std::string_view to_string(FaultAction action) {
  for (const auto& [a, name] : kActionNames)
    if (a == action) return name;
  return "unknown";
}

std::optional<FaultAction> fault_action_from_string(std::string_view text) {
  for (const auto& [a, name] : kActionNames)
    if (name == text) return a;
  return std::nullopt;
}

Result<std::vector<FaultRule>> parse_fault_rules(const json::value& body, FaultActionSet allowed,
                                                 std::string_view subject_field) {
  if (!body.is_object())
    return make_error(sim_errc::invalid_fault_rule, "The body must be an object.");
  const auto& obj = body.as_object();
  const auto* rules = obj.if_contains("rules");
  if (!rules || !rules->is_array())
    return make_error(sim_errc::invalid_fault_rule, "The body must carry a \"rules\" array.");
  std::vector<FaultRule> out;
  size_t index = 0;
  for (const auto& v : rules->as_array()) {
    auto rule = parse_rule(v, index++, allowed, subject_field);
    if (!rule) return rule.error();
    out.push_back(std::move(rule.value()));
  }
  return out;
}

json::object fault_rule_to_json(const FaultRule& rule, std::string_view subject_field) {
  json::object o;
  o["id"] = rule.id;
  o["method"] = rule.method.empty() ? json::value(nullptr) : json::value(rule.method);
  o["path_prefix"] = rule.path_prefix;
  o[subject_field] = rule.subject ? json::value(*rule.subject) : json::value(nullptr);
  o["action"] = to_string(rule.action);
  o["delay_ms"] = rule.delay_ms;
  o["retry_after_s"] = rule.retry_after_s;
  o["times"] = rule.times;
  return o;
}

Status FaultTable::add(std::vector<FaultRule> rules) {
  MutexLock lock(mu_);
  if (rules_.size() + rules.size() > kMaxRules)
    return make_error(sim_errc::too_many_rules,
                      "At most " + std::to_string(kMaxRules) + " fault rules may be set.");
  for (auto& r : rules) {
    r.id = next_id_++;
    rules_.push_back(std::move(r));
  }
  return Status::Ok();
}

void FaultTable::clear() {
  MutexLock lock(mu_);
  rules_.clear();
}

std::vector<FaultRule> FaultTable::list() const {
  MutexLock lock(mu_);
  return rules_;
}

std::optional<FaultRule> FaultTable::take(const FaultQuery& query) {
  MutexLock lock(mu_);
  for (auto& rule : rules_) {
    if (!matches(rule, query)) continue;
    if (rule.times > 0) --rule.times;
    return rule;
  }
  return std::nullopt;
}

}  // namespace opgate::sim
