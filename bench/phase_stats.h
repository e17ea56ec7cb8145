#pragma once

// What one phase of a cluster workload measured, and its summary: counters
// per operation kind, rows of the report, percentiles and rates.
//
// Thread-safety: plain data, not thread-safe. Each bench thread records into
// its own OpStats; the stats are merged once the threads have joined, so the
// hot path takes no lock.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace mooncake::bench {

using Clock = std::chrono::steady_clock;

// Counters of one operation kind. A call is one client call (Put, or
// BatchPut of --batch keys); a key is one object it moved.
struct OpStats {
  std::vector<uint32_t> latencies_us;  // one per call in which any key succeeded
  uint64_t keys = 0;                   // keys that succeeded
  uint64_t bytes = 0;
  std::map<ErrorCode, uint64_t> errors;

  uint64_t error_count() const;
  // Counts `result`: its latency since `start` and `bytes_moved` when it
  // succeeded, its error code when not.
  void Record(Clock::time_point start, const Result<void>& result, uint64_t bytes_moved);
  // Counts one batch call: its latency since `start` once when any key
  // succeeded, `bytes_per_key` and one key per success, one error per failed
  // key.
  void RecordBatch(Clock::time_point start, const std::vector<Result<void>>& results,
                   uint64_t bytes_per_key);
  // Adds `other`'s counts; `other` is left as it was.
  void Merge(const OpStats& other);
};

// One bench thread's counters.
struct ThreadStats {
  OpStats put;
  OpStats get;
};

// One line of the report: an operation kind within a phase.
struct PhaseRow {
  std::string phase;
  std::string op;
  double seconds = 0;
  OpStats stats;
};

struct Summary {
  uint64_t ops = 0;  // keys: equals calls when every call moves one key
  double ops_per_s = 0;
  uint64_t calls = 0;  // calls with a latency sample
  double calls_per_s = 0;
  double mb_per_s = 0;  // 1e6 bytes per second
  uint32_t p50 = 0, p99 = 0, p999 = 0;
  uint64_t errors = 0;
};

// Rates (keys and calls per second) and per-call latency percentiles of
// `row`; sorts its latencies in place.
Summary Summarize(PhaseRow& row);

// "TRANSFER_FAIL x1, OBJECT_NOT_FOUND x3" (codes in numeric order); empty
// when there were no errors.
std::string ErrorBreakdown(const OpStats& stats);

// Seconds since `start`.
double Seconds(Clock::time_point start);

}  // namespace mooncake::bench
