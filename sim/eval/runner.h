// Runs release-gate scenarios: each in a private cluster, its steps in
// order, then the trace collected from all three services and checked
// against the gate's properties and the scenario's expected outcome.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "sim/eval/properties.h"
#include "sim/eval/scenario.h"

namespace opgate::eval {

struct RunOptions {
  std::filesystem::path opgate_bin;
  std::filesystem::path sim_bin;
  bool keep_dirs = false;  // keep each scenario's directory (logs and data)
  // Scenarios run at once, each in its own cluster. A cluster mostly
  // waits, so this may well exceed the cores.
  int jobs = 1;
};

struct ScenarioReport {
  std::string name;
  std::string description;
  std::vector<PropertyResult> properties;  // "every step as scripted" first
  double seconds = 0;
  bool passed() const;
};

ScenarioReport run_scenario(const Scenario& scenario, const RunOptions& options);

void print_report(std::ostream& out, const ScenarioReport& report, bool verbose);

// Runs every *.json under `dir` (sorted by name; `only`, if not empty, picks
// one by stem), `options.jobs` at a time, prints each report in that order
// and the summary line "N passed, M failed". Returns 0 if all passed, 1 if
// any failed, 2 if none could run.
int run_gate(const std::filesystem::path& dir, const std::string& only, const RunOptions& options,
             bool verbose, std::ostream& out);

}  // namespace opgate::eval
