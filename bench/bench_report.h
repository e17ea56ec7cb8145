#pragma once

// The report of a cluster workload: a text table (db_bench style) or one
// JSON document, on stdout. Formatting only; the numbers come from
// Summarize.
//
// Thread-safety: call from one thread once the workload has finished.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/phase_stats.h"

namespace mooncake::bench {

// The text report: a header line with the run's settings, one row per phase
// and operation, the error codes of failed rows, and the workload's extras
// (hot cache, transport, prefetch groups and counters). Sorts each row's
// latencies.
void PrintText(const BenchOptions& options, const std::string& run, std::vector<PhaseRow>& rows,
               const nlohmann::json& extra);

// The JSON report: {"config": ..., "phases": [...]} plus each key of
// `extra` at the top level. Sorts each row's latencies.
nlohmann::json ReportJson(const BenchOptions& options, const std::string& run,
                          std::vector<PhaseRow>& rows, const nlohmann::json& extra);

// ReportJson, indented by 2, on stdout.
void PrintJson(const BenchOptions& options, const std::string& run, std::vector<PhaseRow>& rows,
               const nlohmann::json& extra);

// Prints the report options.json asks for (JSON or text) and returns the
// process exit code: 0 when some operation succeeded, 3 when none did.
int Report(const BenchOptions& options, const std::string& run, std::vector<PhaseRow>& rows,
           const nlohmann::json& extra);

}  // namespace mooncake::bench
