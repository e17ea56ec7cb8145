#pragma once

// The standard process_* metrics (the names Prometheus' own client libraries
// export) and mooncake_build_info, read from /proc/self at scrape time. Both
// the master's and the worker's /metrics write them.
//
// Thread-safety: the functions keep no state; ReadProcessStats reads /proc
// on each call.

#include <cstdint>
#include <optional>
#include <string_view>

#include "http/prometheus_writer.h"

namespace mooncake {

struct ProcessStats {
  double cpu_seconds = 0;         // user + system CPU time
  uint64_t resident_bytes = 0;    // RSS
  uint64_t virtual_bytes = 0;     // VSZ
  double start_time_seconds = 0;  // since the Unix epoch
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;  // the soft RLIMIT_NOFILE; 0 when unlimited or unknown
};

// What /proc/self/stat gives: the fields after the command name, which may
// itself hold spaces and parentheses (so parsing starts after the last ')').
struct ProcStatFields {
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  uint64_t start_ticks = 0;  // since boot
  uint64_t vsize_bytes = 0;
  uint64_t rss_pages = 0;
};
std::optional<ProcStatFields> ParseProcSelfStat(std::string_view stat);
// The "btime" line of /proc/stat: boot time in seconds since the epoch.
std::optional<uint64_t> ParseBootTime(std::string_view proc_stat);
// The soft limit of the "Max open files" line of /proc/self/limits;
// 0 for "unlimited".
std::optional<uint64_t> ParseMaxOpenFiles(std::string_view limits);

// Fields that cannot be read stay 0.
ProcessStats ReadProcessStats();

// process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_start_time_seconds,
// process_open_fds and process_max_fds.
void WriteProcessMetrics(PrometheusWriter& writer, const ProcessStats& stats);
// mooncake_build_info{version,commit,build_type} 1.
void WriteBuildInfo(PrometheusWriter& writer);

}  // namespace mooncake
