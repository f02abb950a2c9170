#include "daemon/gauges.h"

#include <spdlog/spdlog.h>

#include <limits>

#include "operations/state_machine.h"
#include "store/rocksdb/rocks_storage.h"

namespace opgate::daemon {

// Gauges read when /metrics is scraped: each is a counter kept in step with
// the writes or an in-memory value, never a scan of history.
void register_gauges(Metrics& metrics, store::Storage& storage, store::rocks::RocksStorage* rocks,
                     ingress::Inbox& inbox, const Clock& clock,
                     operations::AttentionPolicy attention) {
  metrics.gauge("opgate_inbox_backlog", [&] { return static_cast<double>(inbox.backlog()); });
  // Group commit: synced writes of new webhook events, and the events in them.
  metrics.gauge("opgate_inbox_group_commits_total",
                [&] { return static_cast<double>(inbox.group_commits()); });
  metrics.gauge("opgate_inbox_group_commit_events_total",
                [&] { return static_cast<double>(inbox.committed_events()); });
  metrics.gauge("opgate_inbox_events_per_group_commit", [&] {
    const auto commits = inbox.group_commits();
    return commits == 0 ? 0.0 : static_cast<double>(inbox.committed_events()) / commits;
  });
  if (rocks) {  // the embedded backend's own group commit
    metrics.gauge("opgate_journal_commits_total",
                  [rocks] { return static_cast<double>(rocks->journal().commits()); });
    metrics.gauge("opgate_journal_transactions_total",
                  [rocks] { return static_cast<double>(rocks->journal().transactions()); });
  }
  metrics.gauge("opgate_synced_writes_total",
                [&] { return static_cast<double>(storage.stats().synced_writes); });
  metrics.gauge("opgate_wal_fsyncs_total",
                [&] { return static_cast<double>(storage.stats().wal_syncs); });
  // The unknown operations are few (an alert fires long before there are
  // many); they are read from the state index, never the settled history.
  // A gauge whose records cannot be read is NaN (an alert on it neither
  // fires nor clears by mistake), logged and counted.
  auto unreadable = [&metrics](const char* gauge, const Error& e) {
    spdlog::warn("metrics: cannot read {}: {}", gauge, e.message);
    metrics.inc("opgate_metric_read_errors_total", {{"gauge", gauge}});
    return std::numeric_limits<double>::quiet_NaN();
  };
  auto unknown_stats = [&storage, &clock, attention, unreadable] {
    std::pair<double, double> out{0, 0};
    store::OperationQuery q;
    q.state = pb::STATE_OUTCOME_UNKNOWN;
    q.limit = 10000;
    auto page = storage.reader().operations(q);
    if (!page) {
      const double nan = unreadable("opgate_oldest_outcome_unknown_seconds", page.error());
      return std::pair<double, double>{nan, nan};
    }
    const int64_t now = clock.now_ms();
    for (const auto& op : page->operations) {
      out.first = std::max(out.first, (now - op.unknown_since_ms()) / 1000.0);
      if (operations::needs_attention(op, now, attention)) out.second += 1;
    }
    return out;
  };
  metrics.gauge("opgate_oldest_outcome_unknown_seconds", [=] { return unknown_stats().first; });
  metrics.gauge("opgate_operations_needing_attention", [=] { return unknown_stats().second; });
  metrics.gauge_family(
      "opgate_operations",
      [&storage, unreadable] {
        std::map<std::string, double> out;
        auto counts = storage.reader().counts();
        if (!counts) {
          unreadable("opgate_operations", counts.error());
          return out;
        }
        for (const auto& [state, n] : counts->operations)
          out[std::string(operations::to_string(static_cast<operations::State>(state)))] =
              static_cast<double>(n);
        return out;
      },
      "state");
  metrics.gauge_family(
      "opgate_operations_settled",
      [&storage, unreadable] {
        std::map<std::string, double> out;
        auto counts = storage.reader().counts();
        if (!counts) {
          unreadable("opgate_operations_settled", counts.error());
          return out;
        }
        for (const auto& [outcome, n] : counts->settled)
          out[std::string(operations::to_string(static_cast<operations::Outcome>(outcome)))] =
              static_cast<double>(n);
        return out;
      },
      "outcome");
  // The pending proposal that expires first is the oldest one: read through
  // the expiry index, one entry.
  metrics.gauge("opgate_oldest_pending_seconds", [&storage, &clock, unreadable] {
    auto first = storage.reader().expired_by(INT64_MAX, 1);
    if (!first) return unreadable("opgate_oldest_pending_seconds", first.error());
    if (first->empty()) return 0.0;
    auto op = storage.reader().operation(first->front());
    if (!op) return unreadable("opgate_oldest_pending_seconds", op.error());
    if (!*op) return 0.0;
    return std::max<double>(0, (clock.now_ms() - (*op)->created_at_ms()) / 1000.0);
  });
}

// Per configured endpoint (as reloaded): its backlog and whether it is healthy.
void register_notify_gauges(Metrics& metrics, store::Storage& storage,
                            Live<outbox::NotifyConfig>& notify) {
  auto read = [&storage, &notify](bool backlog) {
    std::map<std::string, double> out;
    for (const auto& e : notify.get()->endpoints) {
      auto state = storage.reader().endpoint_state(e.name);
      if (!state) continue;
      out[e.name] = backlog ? static_cast<double>(state->backlog())
                            : (state->failing() || state->disabled() ? 0.0 : 1.0);
    }
    return out;
  };
  metrics.gauge_family(
      "opgate_notification_backlog", [read] { return read(true); }, "endpoint");
  metrics.gauge_family(
      "opgate_notification_endpoint_healthy", [read] { return read(false); }, "endpoint");
  // Deliveries waiting for an endpoint this node's configuration does not
  // name (held, never dropped): by the kept standing of every endpoint.
  metrics.gauge_family(
      "opgate_notifications_held",
      [&storage, &notify] {
        std::map<std::string, double> out;
        auto states = storage.reader().endpoint_states();
        if (!states) return out;
        auto config = notify.get();
        for (const auto& st : *states) {
          bool known = false;
          for (const auto& e : config->endpoints) known = known || e.name == st.name();
          if (!known && st.backlog() > 0) out[st.name()] = static_cast<double>(st.backlog());
        }
        return out;
      },
      "endpoint");
}

}  // namespace opgate::daemon
