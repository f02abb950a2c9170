// Every metric family the daemon exports, described (# HELP) in one place,
// its counters present at 0 from the start for the label values known in
// advance (an alert on a rate needs the series before the first event), and
// the process_* families Prometheus' client libraries export. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/metrics.h"

namespace opgate::daemon {

void describe_metrics(Metrics& metrics, const std::vector<std::string>& webhook_sources,
                      const std::vector<std::string>& notify_endpoints);

// process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds: read from /proc when scraped.
void register_process_metrics(Metrics& metrics);

}  // namespace opgate::daemon
