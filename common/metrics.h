// A small Prometheus registry: labelled counters, gauges read on demand, and
// fixed-bucket histograms. Thread-safe: counters are atomics; the registry's
// lock is shared by increments and scrapes and exclusive only to add a
// series, and gauges are evaluated outside it, so a scrape never holds up
// the request path.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace opgate {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  std::string render(const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

class Metrics {
 public:
  // name like "opgate_webhooks_total", labels like {{"source","agents"}}.
  void inc(const std::string& name, const std::map<std::string, std::string>& labels = {},
           uint64_t by = 1) EXCLUDES(mu_);
  // One series' counter, made at zero if new: valid as long as this object,
  // for a hot path to count on without a lookup per event.
  std::atomic<uint64_t>& counter(const std::string& name,
                                 const std::map<std::string, std::string>& labels = {})
      EXCLUDES(mu_);
  Histogram& histogram(const std::string& name, const std::vector<double>& bounds);
  // One histogram per label set, e.g. per endpoint.
  Histogram& histogram(const std::string& name, const std::map<std::string, std::string>& labels,
                       const std::vector<double>& bounds) EXCLUDES(mu_);
  // A gauge computed when /metrics is read.
  void gauge(const std::string& name, std::function<double()> read) EXCLUDES(mu_);
  // Gauges with labels, e.g. operations by state.
  void gauge_family(const std::string& name, std::function<std::map<std::string, double>()> read,
                    const std::string& label) EXCLUDES(mu_);
  // A constant series of value 1 whose labels (in the order given) carry the
  // facts, with its # HELP line: opgate_build_info{version="0.2.0",revision="80cc074"} 1.
  void info(const std::string& name, const std::string& help,
            const std::vector<std::pair<std::string, std::string>>& labels) EXCLUDES(mu_);
  // The # HELP text of a family (every family the daemon exports has one).
  void describe(const std::string& name, const std::string& help) EXCLUDES(mu_);
  std::string render() const EXCLUDES(mu_);
  uint64_t counter_value(const std::string& name,
                         const std::map<std::string, std::string>& labels = {}) const EXCLUDES(mu_);

 private:
  static std::string key(const std::map<std::string, std::string>& labels);
  mutable SharedMutex mu_;  // exclusive only to add a series
  std::map<std::string, std::map<std::string, std::unique_ptr<std::atomic<uint64_t>>>> counters_
      GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, std::unique_ptr<Histogram>>> histograms_
      GUARDED_BY(mu_);
  std::map<std::string, std::function<double()>> gauges_ GUARDED_BY(mu_);
  std::map<std::string, std::pair<std::string, std::function<std::map<std::string, double>()>>>
      families_ GUARDED_BY(mu_);
  // name → {help, labels}
  std::map<std::string, std::pair<std::string, std::string>> infos_ GUARDED_BY(mu_);
  std::map<std::string, std::string> help_ GUARDED_BY(mu_);
};

}  // namespace opgate
