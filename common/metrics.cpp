#include "common/metrics.h"

#include <fmt/format.h>

namespace opgate {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  buckets_[i]++;
  count_++;
  double cur = sum_.load();
  while (!sum_.compare_exchange_weak(cur, cur + value)) {
  }
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::string out;
  uint64_t cumulative = 0;
  std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i].load();
    out +=
        fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds_[i], cumulative);
  }
  cumulative += buckets_[bounds_.size()].load();
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, cumulative);
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, sum_.load(), name, braces,
                     count_.load());
  return out;
}

std::string Metrics::key(const std::map<std::string, std::string>& labels) {
  std::string k;
  for (const auto& [n, v] : labels) {
    if (!k.empty()) k += ',';
    std::string escaped;
    for (char c : v) {
      if (c == '"' || c == '\\') escaped += '\\';
      if (c == '\n') {
        escaped += "\\n";
        continue;
      }
      escaped += c;
    }
    k += fmt::format("{}=\"{}\"", n, escaped);
  }
  return k;
}

std::atomic<uint64_t>& Metrics::counter(const std::string& name,
                                        const std::map<std::string, std::string>& labels) {
  WriterLock lock(mu_);
  auto& slot = counters_[name][key(labels)];
  if (!slot) slot = std::make_unique<std::atomic<uint64_t>>(0);
  return *slot;
}

void Metrics::inc(const std::string& name, const std::map<std::string, std::string>& labels,
                  uint64_t by) {
  std::string k = key(labels);
  {
    // The common case: the series exists. Shared with other increments and
    // with scrapes, so neither waits for the other.
    ReaderLock lock(mu_);
    if (auto it = counters_.find(name); it != counters_.end())
      if (auto s = it->second.find(k); s != it->second.end()) {
        *s->second += by;
        return;
      }
  }
  counter(name, labels) += by;
}

uint64_t Metrics::counter_value(const std::string& name,
                                const std::map<std::string, std::string>& labels) const {
  ReaderLock lock(mu_);
  auto it = counters_.find(name);
  if (it == counters_.end()) return 0;
  auto s = it->second.find(key(labels));
  return s == it->second.end() ? 0 : s->second->load();
}

Histogram& Metrics::histogram(const std::string& name, const std::vector<double>& bounds) {
  return histogram(name, {}, bounds);
}

Histogram& Metrics::histogram(const std::string& name,
                              const std::map<std::string, std::string>& labels,
                              const std::vector<double>& bounds) {
  const std::string k = key(labels);
  {
    ReaderLock lock(mu_);
    if (auto it = histograms_.find(name); it != histograms_.end())
      if (auto h = it->second.find(k); h != it->second.end()) return *h->second;
  }
  WriterLock lock(mu_);
  auto& slot = histograms_[name][k];
  if (!slot) slot = std::make_unique<Histogram>(bounds);
  return *slot;
}

void Metrics::gauge(const std::string& name, std::function<double()> read) {
  WriterLock lock(mu_);
  gauges_[name] = std::move(read);
}

void Metrics::gauge_family(const std::string& name,
                           std::function<std::map<std::string, double>()> read,
                           const std::string& label) {
  WriterLock lock(mu_);
  families_[name] = {label, std::move(read)};
}

void Metrics::info(const std::string& name, const std::string& help,
                   const std::vector<std::pair<std::string, std::string>>& labels) {
  std::string k;
  for (const auto& [label, value] : labels) k += (k.empty() ? "" : ",") + key({{label, value}});
  WriterLock lock(mu_);
  infos_[name] = {help, std::move(k)};
}

void Metrics::describe(const std::string& name, const std::string& help) {
  WriterLock lock(mu_);
  help_[name] = help;
}

std::string Metrics::render() const {
  std::string out;
  decltype(gauges_) gauges;
  decltype(families_) families;
  decltype(infos_) infos;
  decltype(help_) help;
  auto header = [&](const std::string& name, std::string_view type) {
    auto h = help.find(name);
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name,
                       h == help.end() ? "An opgate metric." : h->second, name, type);
  };
  {
    // Atomic loads only under the (shared) lock; the gauges, which may read
    // the store, are evaluated after it is released.
    ReaderLock lock(mu_);
    help = help_;
    for (const auto& [name, series] : counters_) {
      header(name, "counter");
      for (const auto& [labels, value] : series)
        out += labels.empty() ? fmt::format("{} {}\n", name, value->load())
                              : fmt::format("{}{{{}}} {}\n", name, labels, value->load());
    }
    for (const auto& [name, series] : histograms_) {
      header(name, "histogram");
      for (const auto& [labels, h] : series) out += h->render(name, labels);
    }
    gauges = gauges_;
    families = families_;
    infos = infos_;
  }
  for (const auto& [name, read] : gauges) {
    // A value read on demand may be a counter kept elsewhere (…_total).
    header(name, name.ends_with("_total") ? "counter" : "gauge");
    out += fmt::format("{} {}\n", name, read());
  }
  for (const auto& [name, fam] : families) {
    header(name, "gauge");
    for (const auto& [value_label, v] : fam.second())
      out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, fam.first, value_label, v);
  }
  for (const auto& [name, info] : infos) {
    help[name] = info.first;
    header(name, "gauge");
    out += fmt::format("{}{{{}}} 1\n", name, info.second);
  }
  return out;
}

}  // namespace opgate
