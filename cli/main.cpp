// opgate: the daemon (`opgate serve`) and the operator's command line.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "cli/operator_cli.h"
#include "common/logging.h"
#include "common/version.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/store_factory.h"
#include "operations/tools.h"
#include "operations/views.h"

namespace {

using namespace opgate;

// The command line's options, kept alive until the chosen command runs, and
// the exit status it sets.
struct Commands {
  cli::Context ctx;
  int rc = 0;
  std::string config_path, ports_file, tools_config;
  std::string session, owner, key, reason, state, outcome, evidence, provider_object_id, amount,
      edit_reason, order, window;
  // Its own variable: CLI11 writes a default into it as the option is made,
  // and a shared one would carry it into other commands.
  std::string deny_reason;
  std::string data_dir, file, dir, expect_head, endpoint, since, release_to;
  bool attention = false;

  void add_global_options(CLI::App& app) {
    const char* url = std::getenv("OPGATE_URL");
    const char* token = std::getenv("OPGATE_TOKEN");
    const char* ca_file = std::getenv("OPGATE_CA_FILE");
    ctx.url = url ? url : "http://127.0.0.1:8081";
    ctx.token = token ? token : "";
    ctx.ca_file = ca_file ? ca_file : "";
    app.add_flag("--json", ctx.json, "print JSON instead of text");
    app.add_option("--page-size", ctx.page_size,
                   "operations per page when listing (every page is read)")
        ->check(CLI::Range(1, 1000));
  }

  // serve, migrate, tools: the daemon and its configuration.
  void add_daemon(CLI::App& app) {
    auto* serve = app.add_subcommand("serve", "run the daemon");
    serve->add_option("--config", config_path, "TOML configuration file")->required();
    serve->add_option("--ports-file", ports_file, "write the bound ports here as JSON");
    serve->callback([this] {
      init_json_logging();
      auto config = daemon::load_config(config_path);
      if (!config) {
        // The daemon's stderr is its log: the refusal is a JSON line too.
        log_event(spdlog::level::critical, "config.invalid",
                  "cannot start: " + config.error().message,
                  {{"reason", config.error().message}, {"path", config_path}});
        rc = 2;
        return;
      }
      rc = daemon::serve(*config, {config_path, ports_file});
    });
    auto* migrate =
        app.add_subcommand("migrate", "apply the database schema's migrations, then exit");
    migrate->add_option("--config", config_path, "TOML configuration file")->required();
    migrate->callback([this] {
      auto config = daemon::load_config(config_path);
      if (!config) return fail(2, config.error());
      auto done = daemon::migrate_store(*config);
      if (!done) return fail(1, done.error());
      std::cout << *done << "\n";
    });
    auto* policy = app.add_subcommand("policy", "the policy: who may approve what");
    policy->require_subcommand(1);
    auto* show = policy->add_subcommand(
        "show", "every tool with its tier, limits and whether it is enabled; thresholds");
    show->add_option("--config", tools_config,
                     "read it from this TOML configuration, not from the running daemon");
    show->callback([this] {
      if (tools_config.empty()) {
        rc = cli::policy_show(ctx);
        return;
      }
      auto config = daemon::load_config(tools_config);
      if (!config) return fail(2, config.error());
      rc = cli::print_policy(ctx, operations::policy_json(config->policy));
    });
    auto* test = policy->add_subcommand(
        "test", "replay the recorded proposals against a new policy: what would differ");
    test->add_option("--config", tools_config, "the new policy's TOML configuration")->required();
    test->add_option("--since", window, "only proposals of this window: 30d (default), 12h, 90m");
    test->add_option("--data-dir", data_dir,
                     "replay a stopped daemon's data directory, read-only, instead of asking it");
    test->add_option("--backup", dir, "replay a backup (opgate backup create), left untouched");
    test->add_option("--current", config_path,
                     "offline: the configuration the recorded proposals were made under");
    test->callback([this] {
      auto config = daemon::load_config(tools_config);
      if (!config) return fail(2, config.error());
      cli::ReplaySource source{data_dir, dir, std::nullopt};
      if (!config_path.empty()) {
        auto current = daemon::load_config(config_path);
        if (!current) return fail(2, current.error());
        source.current = current->policy;
      }
      rc = cli::policy_test(ctx, config->policy, window.empty() ? "30d" : window, source);
    });
    auto* report = app.add_subcommand("report",
                                      "how approvals are going: decisions, times, "
                                      "escalations, outcome_unknown, per approver");
    report->add_option("--since", window, "the window of proposals: 7d (default), 12h, 90m");
    report->callback([this] { rc = cli::report(ctx, window.empty() ? "7d" : window); });
    auto* tools = app.add_subcommand("tools", "print the tool definitions for session creation");
    tools->add_option("--config", tools_config,
                      "TOML configuration file: the tools its [policy.tools] enable and its "
                      "[[operations]] declare");
    tools->callback([this] {
      operations::PolicyConfig policy;
      if (!tools_config.empty()) {
        auto config = daemon::load_config(tools_config);
        if (!config) return fail(2, config.error());
        policy = config->policy;
      }
      std::cout << operations::tool_definitions_json(policy) << "\n";
    });
  }

  // sessions bind|recover|inspect, and the short forms recover, inspect.
  void add_sessions(CLI::App& app) {
    auto* sessions = app.add_subcommand("sessions", "bind, recover and inspect sessions");
    sessions->require_subcommand(1);
    auto* bind = sessions->add_subcommand("bind", "bind a session to the owner it acts for");
    bind->add_option("session", session, "session id")->required();
    bind->add_option("--owner", owner, "owner id")->required();
    bind->callback([this] { rc = cli::bind_session(ctx, session, owner); });
    auto* srecover = sessions->add_subcommand("recover", "sync a session now");
    srecover->add_option("session", session)->required();
    srecover->callback([this] { rc = cli::recover_session(ctx, session); });
    auto* sinspect = sessions->add_subcommand("inspect", "turns, items, calls and ledger");
    sinspect->add_option("session", session)->required();
    sinspect->callback([this] { rc = cli::inspect_session(ctx, session); });
    auto* recover = app.add_subcommand("recover", "sync a session now");
    recover->add_option("--session", session)->required();
    recover->callback([this] { rc = cli::recover_session(ctx, session); });
    auto* inspect = app.add_subcommand("inspect", "turns, items, calls and ledger of a session");
    inspect->add_option("--session", session)->required();
    inspect->callback([this] { rc = cli::inspect_session(ctx, session); });
  }

  // pending, approve, deny: the decisions people make.
  void add_decisions(CLI::App& app) {
    auto* pend = app.add_subcommand("pending", "list proposals awaiting a decision");
    pend->add_option("--session", session, "only this session's");
    pend->callback([this] { rc = cli::pending(ctx, session); });
    auto* approve = app.add_subcommand(
        "approve", "approve exactly the proposal shown, or a lower amount of it (--amount)");
    approve->add_option("--operation", key, "operation key")->required();
    approve->add_option("--session", session, "check it belongs to this session");
    auto* lower = approve->add_option("--amount", amount,
                                      "approve this lower amount instead, in major units (15.00)");
    approve->add_option("--reason", edit_reason,
                        "why the amount is lowered (needed with --amount)");
    approve->add_flag("--yes,-y", ctx.assume_yes, "do not ask for confirmation");
    approve->callback(
        [this, lower] { rc = cli::approve(ctx, key, session, given(lower, amount), edit_reason); });
    auto* deny = app.add_subcommand("deny", "deny a pending proposal");
    deny->add_option("--operation", key)->required();
    deny->add_option("--reason", deny_reason, "why (shown to the session)")
        ->default_val("denied by operator");
    deny->add_option("--session", session, "check it belongs to this session");
    deny->callback([this] { rc = cli::deny(ctx, key, deny_reason, session); });
  }

  // ops list|show|reconcile|resolve, and the ledger.
  void add_operations(CLI::App& app) {
    auto* ops = app.add_subcommand("ops", "operations: list, show, reconcile, resolve");
    ops->require_subcommand(1);
    auto* list = ops->add_subcommand("list", "list operations");
    list->add_option("--state", state, "pending|approved|executing|outcome_unknown|settled");
    list->add_flag("--attention", attention, "only those needing a person");
    list->callback([this] { rc = cli::list_operations(ctx, state, attention); });
    auto* show = ops->add_subcommand("show", "one operation and its history");
    show->add_option("key", key)->required();
    show->callback([this] { rc = cli::show_operation(ctx, key); });
    auto* rec = ops->add_subcommand("reconcile", "ask the provider now");
    rec->add_option("key", key)->required();
    rec->callback([this] { rc = cli::reconcile(ctx, key); });
    auto* res = ops->add_subcommand("resolve", "settle an outcome_unknown operation by hand");
    res->add_option("key", key)->required();
    res->add_option("--outcome", outcome)
        ->required()
        ->check(CLI::IsMember({"succeeded", "failed"}));
    res->add_option("--evidence", evidence, "what proves it (audited, never sent to the session)")
        ->required();
    res->add_option("--provider-object-id", provider_object_id,
                    "the provider's object (re_..., cbtxn_...) the ledger row names");
    res->callback([this] { rc = cli::resolve(ctx, key, outcome, evidence, provider_object_id); });
    auto* ledger = app.add_subcommand("ledger", "the ledger: one row per succeeded operation");
    ledger->add_option("--session", session, "only this session's rows");
    ledger->add_option("--owner", owner, "only this owner's rows");
    ledger->callback([this] { rc = cli::ledger(ctx, session, owner); });
  }

  // audit verify, orders import, backup create|restore: the records.
  void add_records(CLI::App& app) {
    auto* audit = app.add_subcommand("audit", "the audit chain");
    audit->require_subcommand(1);
    auto* verify = audit->add_subcommand("verify", "verify the hash chain");
    verify->add_option("--data-dir", data_dir, "verify a stopped daemon's data directory offline");
    verify->add_option(
        "--expect-head", expect_head,
        "SEQ:HASH a notification receiver saw: fail if the chain no longer holds it");
    verify->callback([this] {
      rc = data_dir.empty() ? cli::audit_verify_online(ctx, expect_head)
                            : cli::audit_verify_offline(data_dir, ctx.json, expect_head);
    });
    auto* export_pack = audit->add_subcommand(
        "export", "write one operation's evidence pack, provable offline (the export is audited)");
    export_pack->add_option("--operation", key, "the operation key")->required();
    export_pack->add_option("--out", file, "the file to write")->required();
    export_pack->callback([this] { rc = cli::audit_export(ctx, key, file); });
    auto* verify_pack = audit->add_subcommand(
        "verify-evidence", "verify an evidence pack with nothing but the file (exit 1 if not)");
    verify_pack->add_option("file", file, "the pack")->required();
    verify_pack->add_option("--head", expect_head,
                            "SEQ:HASH a witness saw (a notification's audit_head): the proof "
                            "must pass through it");
    verify_pack->callback([this] { rc = cli::verify_evidence_file(file, ctx.json, expect_head); });
    auto* drafts = app.add_subcommand("drafts", "replies to customers the agent drafted");
    drafts->require_subcommand(1);
    auto* list_drafts =
        drafts->add_subcommand("list", "the drafts, for a person to send (opgate never does)");
    list_drafts->add_option("--order", order, "only this order's");
    list_drafts->callback([this] { rc = cli::list_drafts(ctx, order); });
    auto* orders = app.add_subcommand("orders", "server-owned orders");
    orders->require_subcommand(1);
    auto* upsert = orders->add_subcommand("import", "upsert orders from an NDJSON file");
    upsert->add_option("file", file)->required();
    upsert->callback([this] { rc = cli::import_orders(ctx, file); });
    auto* backup = app.add_subcommand("backup", "back up the store, or restore a copy");
    backup->require_subcommand(1);
    auto* create = backup->add_subcommand("create", "write an online copy (on the daemon's host)");
    create->add_option("--to", dir, "a directory that does not exist yet")->required();
    create->callback([this] { rc = cli::backup_create(ctx, dir); });
    auto* restore =
        backup->add_subcommand("restore", "make a new data directory from a copy (daemon stopped)");
    restore->add_option("--from", file, "the backup directory")->required();
    restore->add_option("--data-dir", data_dir, "the new data directory")->required();
    restore->callback([this] { rc = cli::backup_restore(file, data_dir, ctx.json); });
  }

  // notify list|replay|enable|release.
  void add_notifications(CLI::App& app) {
    auto* notify = app.add_subcommand("notify", "outbound notification endpoints");
    notify->require_subcommand(1);
    notify->add_subcommand("list", "endpoints, their state, last error and backlog")
        ->callback([this] { rc = cli::notify_list(ctx); });
    auto* replay = notify->add_subcommand("replay", "queue kept events again for one endpoint");
    replay->add_option("--endpoint", endpoint)->required();
    replay->add_option("--since", since, "Unix seconds, or 90m, 2h, 1d back from now")->required();
    replay->callback([this] { rc = cli::notify_replay(ctx, endpoint, since); });
    auto* enable = notify->add_subcommand("enable", "re-enable an endpoint disabled by a 410");
    enable->add_option("endpoint", endpoint)->required();
    enable->callback([this] { rc = cli::notify_enable(ctx, endpoint); });
    auto* release = notify->add_subcommand(
        "release", "held deliveries of an endpoint no longer configured: replay or discard them");
    release->add_option("--from", endpoint, "the endpoint whose deliveries are held")->required();
    release->add_option("--to", release_to,
                        "a configured endpoint to send them to (else discarded)");
    release->add_flag("--yes,-y", ctx.assume_yes, "discard without asking");
    release->callback([this] {
      if (release_to.empty() && !ctx.assume_yes) {
        std::cerr
            << "error: without --to the held deliveries are discarded; add --yes to confirm\n";
        rc = 2;
        return;
      }
      rc = cli::notify_release_held(ctx, endpoint, release_to);
    });
  }

  // agent-tokens create|list|revoke: the credentials of the MCP front door.
  // passkeys allow: an administrator lets one principal register a passkey.
  void add_passkeys(CLI::App& app) {
    auto* passkeys = app.add_subcommand("passkeys", "passkeys for step-up approvals");
    passkeys->require_subcommand(1);
    auto* allow = passkeys->add_subcommand(
        "allow", "let a principal register one passkey in the console (within a day)");
    allow->add_option("--principal", owner, "the operator token's principal")->required();
    allow->callback([this] { rc = cli::allow_passkey(ctx, owner); });
  }

  void add_agent_tokens(CLI::App& app) {
    auto* tokens = app.add_subcommand("agent-tokens", "tokens agent runtimes use over MCP");
    tokens->require_subcommand(1);
    auto* create = tokens->add_subcommand("create", "mint a token bound to one owner");
    create->add_option("--owner", owner, "the customer the agent acts for")->required();
    create->add_option("--label", reason, "what it is for (shown in lists)");
    auto* ttl = create->add_option("--ttl", since,
                                   "how long it lives: seconds, or 12h, 30d (default: always)");
    create->callback(
        [this, ttl] { rc = cli::agent_token_create(ctx, owner, reason, given(ttl, since)); });
    tokens->add_subcommand("list", "tokens of the owners this operator may act for")
        ->callback([this] { rc = cli::agent_token_list(ctx); });
    auto* revoke = tokens->add_subcommand("revoke", "revoke a token at once");
    revoke->add_option("id", key, "the token's id (at_...)")->required();
    revoke->callback([this] { rc = cli::agent_token_revoke(ctx, key); });
  }

  // An option's value if it was given at all (even empty), else none.
  static std::optional<std::string> given(const CLI::Option* option, const std::string& value) {
    return option->count() > 0 ? std::optional<std::string>(value) : std::nullopt;
  }

  void fail(int status, const Error& e) {
    std::cerr << "error: " << e.message << "\n";
    rc = status;
  }
};  // namespace

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"opgate: agents propose refunds and credits; people approve; the ledger proves."};
  app.require_subcommand(1);
  // --json and --page-size may also follow the subcommand.
  app.fallthrough();
  app.set_version_flag("--version", std::string(kVersionLine));
  Commands commands;
  commands.add_global_options(app);
  commands.add_daemon(app);
  commands.add_sessions(app);
  commands.add_decisions(app);
  commands.add_operations(app);
  commands.add_records(app);
  commands.add_notifications(app);
  commands.add_agent_tokens(app);
  commands.add_passkeys(app);
  CLI11_PARSE(app, argc, argv);
  return commands.rc;
}
