#include "bench/phase_stats.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "bench/bench_util.h"

namespace mooncake::bench {

uint64_t OpStats::error_count() const {
  uint64_t n = 0;
  for (const auto& [code, count] : errors) n += count;
  return n;
}

void OpStats::Record(Clock::time_point start, const Result<void>& result, uint64_t bytes_moved) {
  if (!result) {
    ++errors[result.error()];
    return;
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  // Saturate: an hour-long stall must not wrap into a fast sample.
  latencies_us.push_back(static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX)));
  ++keys;
  bytes += bytes_moved;
}

void OpStats::RecordBatch(Clock::time_point start, const std::vector<Result<void>>& results,
                          uint64_t bytes_per_key) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  uint64_t ok = 0;
  for (const auto& result : results) {
    if (result) {
      ++ok;
    } else {
      ++errors[result.error()];
    }
  }
  if (ok == 0) return;
  latencies_us.push_back(static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX)));
  keys += ok;
  bytes += ok * bytes_per_key;
}

void OpStats::Merge(const OpStats& other) {
  latencies_us.insert(latencies_us.end(), other.latencies_us.begin(), other.latencies_us.end());
  keys += other.keys;
  bytes += other.bytes;
  for (const auto& [code, count] : other.errors) errors[code] += count;
}

Summary Summarize(PhaseRow& row) {
  auto& lat = row.stats.latencies_us;
  std::sort(lat.begin(), lat.end());
  Summary s;
  s.calls = lat.size();
  s.ops = row.stats.keys;
  // A phase with no time (nothing to do) reports zero rates, not a division
  // by zero.
  double seconds = std::max(row.seconds, 1e-9);
  s.ops_per_s = static_cast<double>(s.ops) / seconds;
  s.calls_per_s = static_cast<double>(s.calls) / seconds;
  s.mb_per_s = static_cast<double>(row.stats.bytes) / 1e6 / seconds;
  s.p50 = Percentile(lat, 0.50);
  s.p99 = Percentile(lat, 0.99);
  s.p999 = Percentile(lat, 0.999);
  s.errors = row.stats.error_count();
  return s;
}

std::string ErrorBreakdown(const OpStats& stats) {
  std::string out;
  for (const auto& [code, count] : stats.errors) {
    out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", ToString(code), count);
  }
  return out;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace mooncake::bench
