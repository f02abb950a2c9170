#include "daemon/metrics_catalogue.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace opgate::daemon {

void describe_metrics(Metrics& m, const std::vector<std::string>& sources,
                      const std::vector<std::string>& endpoints) {
  const std::pair<const char*, const char*> help[] = {
      {"opgate_webhooks_received_total", "Webhook requests received, by source."},
      {"opgate_webhooks_accepted_total", "New webhook events stored and acknowledged, by source."},
      {"opgate_webhooks_duplicate_total",
       "Webhooks acknowledged as copies of an event already stored, by source."},
      {"opgate_webhooks_rejected_total", "Webhooks refused, by source and reason."},
      {"opgate_ingest_seconds", "Time from a webhook's arrival to its durable acknowledgement."},
      {"opgate_inbox_backlog", "Webhook events waiting for the worker."},
      {"opgate_inbox_group_commits_total", "Synced writes of new webhook events."},
      {"opgate_inbox_group_commit_events_total", "Webhook events written by those writes."},
      {"opgate_inbox_events_per_group_commit", "Webhook events per synced write, on average."},
      {"opgate_journal_commits_total", "Synced writes of transactions (group commits)."},
      {"opgate_journal_transactions_total", "Transactions committed by those writes."},
      {"opgate_synced_writes_total", "Synced writes requested of the store."},
      {"opgate_wal_fsyncs_total", "WAL fsyncs the store performed."},
      {"opgate_ingress_connections", "Open connections to the webhook listener."},
      {"opgate_session_sync_total", "Session syncs with the agent platform, by result."},
      {"opgate_session_sweeps_total", "Sessions re-synced by the sweep, by result."},
      {"opgate_tool_calls_total", "Tool calls answered, by tool and result."},
      {"opgate_provider_attempts_total", "Provider calls, by the provider's verdict."},
      {"opgate_provider_call_seconds", "Duration of provider calls."},
      {"opgate_reconciliations_total", "Reconciliations of outcome_unknown operations, by result."},
      {"opgate_result_deliveries_total", "Tool result deliveries to sessions, by result."},
      {"opgate_operations", "Operations in each state."},
      {"opgate_operations_settled", "Settled operations, by outcome."},
      {"opgate_oldest_pending_seconds",
       "Age of the oldest proposal waiting for a decision (0 if none)."},
      {"opgate_oldest_outcome_unknown_seconds",
       "Time the oldest outcome_unknown operation has been unknown (0 if none)."},
      {"opgate_operations_needing_attention",
       "outcome_unknown operations past the attention thresholds."},
      {"opgate_ready", "1 when the daemon serves and its store can be written."},
      {"opgate_metric_read_errors_total",
       "Scrapes in which a gauge could not read its records (it showed NaN), by gauge."},
      {"opgate_notifications_sent_total", "Notifications an endpoint accepted, by endpoint."},
      {"opgate_notifications_failed_total",
       "Notification attempts that failed (the delivery is retried or dropped), by endpoint."},
      {"opgate_notifications_retried_total", "Notification deliveries rescheduled, by endpoint."},
      {"opgate_notifications_dropped_total",
       "Notifications not sent to an endpoint disabled by a 410, or held ones an operator "
       "discarded, by endpoint (kept for replay either way)."},
      {"opgate_notifications_held",
       "Deliveries waiting for an endpoint this node's configuration does not name, by "
       "endpoint."},
      {"opgate_notifications_held_total",
       "Times a delivery for an endpoint this node does not know was held back, by endpoint."},
      {"opgate_notification_endpoints_disabled_total",
       "Endpoints disabled because they answered 410 Gone, by endpoint."},
      {"opgate_notification_delivery_seconds",
       "Time from the event's commit to the endpoint's acceptance, by endpoint."},
      {"opgate_notification_backlog", "Deliveries queued for an endpoint, by endpoint."},
      {"opgate_notification_endpoint_healthy",
       "1 when an endpoint is neither failing nor disabled, by endpoint."},
      {"process_cpu_seconds_total", "User and system CPU time spent, in seconds."},
      {"process_resident_memory_bytes", "Resident memory size in bytes."},
      {"process_virtual_memory_bytes", "Virtual memory size in bytes."},
      {"process_open_fds", "Open file descriptors."},
      {"process_max_fds", "The limit on open file descriptors."},
      {"process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds."},
  };
  for (const auto& [name, text] : help) m.describe(name, text);

  // Counters at 0 for the label values known now.
  for (const auto& source : sources) {
    m.inc("opgate_webhooks_received_total", {{"source", source}}, 0);
    m.inc("opgate_webhooks_accepted_total", {{"source", source}}, 0);
    m.inc("opgate_webhooks_duplicate_total", {{"source", source}}, 0);
    for (const char* reason : {"bad_signature", "timestamp_out_of_tolerance", "bad_headers",
                               "bad_envelope", "backlog_full", "storage_unavailable"})
      m.inc("opgate_webhooks_rejected_total", {{"source", source}, {"reason", reason}}, 0);
  }
  for (const auto& endpoint : endpoints)
    for (const char* name :
         {"opgate_notifications_sent_total", "opgate_notifications_failed_total",
          "opgate_notifications_retried_total", "opgate_notifications_dropped_total",
          "opgate_notification_endpoints_disabled_total"})
      m.inc(name, {{"endpoint", endpoint}}, 0);
  for (const char* result : {"ok", "error", "not_found"})
    m.inc("opgate_session_sync_total", {{"result", result}}, 0);
  for (const char* result : {"succeeded", "pending", "refused", "indeterminate"})
    m.inc("opgate_provider_attempts_total", {{"result", result}}, 0);
  for (const char* result : {"found", "absent", "unreachable"})
    m.inc("opgate_reconciliations_total", {{"result", result}}, 0);
  for (const char* result : {"delivered", "retry", "conflict", "stale"})
    m.inc("opgate_result_deliveries_total", {{"result", result}}, 0);
  for (const char* gauge : {"opgate_oldest_outcome_unknown_seconds", "opgate_operations",
                            "opgate_operations_settled", "opgate_oldest_pending_seconds"})
    m.inc("opgate_metric_read_errors_total", {{"gauge", gauge}}, 0);
}

namespace {
// Fields of /proc/self/stat after the command name.
std::vector<std::string> proc_stat() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  std::vector<std::string> fields;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream rest(line.substr(close + 2));
  std::string f;
  while (rest >> f) fields.push_back(f);
  return fields;
}
}  // namespace

void register_process_metrics(Metrics& m) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // Start time: boot time + starttime ticks (field 22, index 19 here).
  double start = 0;
  {
    std::ifstream in("/proc/stat");
    std::string key;
    double btime = 0;
    while (in >> key)
      if (key == "btime") {
        in >> btime;
        break;
      }
    auto f = proc_stat();
    if (f.size() > 19) start = btime + std::stod(f[19]) / ticks;
  }
  m.gauge("process_start_time_seconds", [start] { return start; });
  m.gauge("process_cpu_seconds_total", [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  });
  m.gauge("process_resident_memory_bytes", [page] {
    std::ifstream in("/proc/self/statm");
    double size = 0, resident = 0;
    in >> size >> resident;
    return resident * page;
  });
  m.gauge("process_virtual_memory_bytes", [page] {
    std::ifstream in("/proc/self/statm");
    double size = 0;
    in >> size;
    return size * page;
  });
  m.gauge("process_open_fds", [] {
    std::error_code ec;
    double n = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++n;
    return n;
  });
  m.gauge("process_max_fds", [] {
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    return static_cast<double>(rl.rlim_cur);
  });
}

}  // namespace opgate::daemon
