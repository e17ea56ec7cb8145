// mooncake-bench's per-phase counters, their summary and the JSON report.

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_report.h"
#include "bench/phase_stats.h"

namespace mooncake::bench {
namespace {

OpStats Latencies(std::vector<uint32_t> us, uint64_t bytes) {
  OpStats stats;
  stats.keys = us.size();  // one key per call
  stats.latencies_us = std::move(us);
  stats.bytes = bytes;
  return stats;
}

TEST(BenchPhaseStatsTest, RecordCountsSuccessesAndErrorsApart) {
  OpStats stats;
  stats.Record(Clock::now(), {}, 100);
  stats.Record(Clock::now(), Err(ErrorCode::kObjectNotFound), 100);
  stats.Record(Clock::now(), Err(ErrorCode::kObjectNotFound), 100);
  EXPECT_EQ(stats.latencies_us.size(), 1u);
  EXPECT_EQ(stats.bytes, 100u);
  EXPECT_EQ(stats.error_count(), 2u);
  EXPECT_EQ(stats.errors.at(ErrorCode::kObjectNotFound), 2u);
}

TEST(BenchPhaseStatsTest, RecordBatchCountsOneCallAndEveryKey) {
  OpStats stats;
  stats.RecordBatch(Clock::now(), {{}, Err(ErrorCode::kObjectNotFound), {}, {}}, 100);
  EXPECT_EQ(stats.latencies_us.size(), 1u) << "one latency sample per call";
  EXPECT_EQ(stats.keys, 3u);
  EXPECT_EQ(stats.bytes, 300u);
  EXPECT_EQ(stats.errors.at(ErrorCode::kObjectNotFound), 1u);
}

TEST(BenchPhaseStatsTest, RecordBatchWithNoSuccessHasNoLatency) {
  OpStats stats;
  stats.RecordBatch(Clock::now(), {Err(ErrorCode::kRpcFail), Err(ErrorCode::kRpcFail)}, 100);
  EXPECT_TRUE(stats.latencies_us.empty());
  EXPECT_EQ(stats.keys, 0u);
  EXPECT_EQ(stats.error_count(), 2u);
}

TEST(BenchPhaseStatsTest, SummarizeCountsKeysAndCallsApart) {
  OpStats stats;
  for (int call = 0; call < 10; ++call) {
    stats.RecordBatch(Clock::now(), std::vector<Result<void>>(16), 4096);
  }
  PhaseRow row{"load", "put", 2.0, stats};
  Summary s = Summarize(row);
  EXPECT_EQ(s.ops, 160u);
  EXPECT_DOUBLE_EQ(s.ops_per_s, 80.0);
  EXPECT_EQ(s.calls, 10u);
  EXPECT_DOUBLE_EQ(s.calls_per_s, 5.0);
}

TEST(BenchPhaseStatsTest, MergeAddsEverything) {
  OpStats total = Latencies({1, 2}, 10);
  total.errors[ErrorCode::kTransferFail] = 1;
  OpStats other = Latencies({3}, 5);
  other.errors[ErrorCode::kTransferFail] = 2;
  other.errors[ErrorCode::kRpcTimeout] = 1;
  total.Merge(other);
  EXPECT_EQ(total.latencies_us, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(total.keys, 3u);
  EXPECT_EQ(total.bytes, 15u);
  EXPECT_EQ(total.error_count(), 4u);
}

TEST(BenchPhaseStatsTest, SummarizeGivesRatesAndPercentiles) {
  std::vector<uint32_t> us;
  for (uint32_t i = 1000; i >= 1; --i) us.push_back(i);  // unsorted on purpose
  PhaseRow row{"mixed", "get", 2.0, Latencies(us, 4'000'000)};
  row.stats.errors[ErrorCode::kObjectNotFound] = 3;
  Summary s = Summarize(row);
  EXPECT_EQ(s.ops, 1000u);
  EXPECT_DOUBLE_EQ(s.ops_per_s, 500.0);
  EXPECT_DOUBLE_EQ(s.mb_per_s, 2.0);
  EXPECT_NEAR(s.p50, 500u, 1u);
  EXPECT_NEAR(s.p99, 990u, 1u);
  EXPECT_NEAR(s.p999, 999u, 1u);
  EXPECT_EQ(s.errors, 3u);
  EXPECT_TRUE(std::is_sorted(row.stats.latencies_us.begin(), row.stats.latencies_us.end()));
}

TEST(BenchPhaseStatsTest, EmptyPhaseSummarizesToZeros) {
  PhaseRow row{"zipf", "get", 0.0, {}};
  Summary s = Summarize(row);
  EXPECT_EQ(s.ops, 0u);
  EXPECT_EQ(s.ops_per_s, 0.0);
  EXPECT_EQ(s.p99, 0u);
}

TEST(BenchPhaseStatsTest, ErrorBreakdownListsCodesInOrder) {
  OpStats stats;
  EXPECT_EQ(ErrorBreakdown(stats), "");
  stats.errors[ErrorCode::kObjectNotFound] = 3;
  stats.errors[ErrorCode::kTransferFail] = 1;
  EXPECT_EQ(ErrorBreakdown(stats), "TRANSFER_FAIL x1, OBJECT_NOT_FOUND x3");
}

TEST(BenchReportTest, JsonHasConfigPhasesAndExtras) {
  BenchOptions options;
  options.workload = "zipf";
  std::vector<PhaseRow> rows;
  rows.push_back(PhaseRow{"load", "put", 1.0, Latencies({5, 7}, 8192)});
  rows.push_back(PhaseRow{"zipf", "get", 1.0, {}});
  rows.back().stats.errors[ErrorCode::kRpcTimeout] = 2;
  nlohmann::json extra = {{"hot_cache", {{"hits", 1}}}};

  nlohmann::json report = ReportJson(options, "bench-1-2-", rows, extra);

  EXPECT_EQ(report["config"]["workload"], "zipf");
  EXPECT_EQ(report["config"]["run_prefix"], "bench-1-2-");
  ASSERT_EQ(report["phases"].size(), 2u);
  EXPECT_EQ(report["phases"][0]["phase"], "load");
  EXPECT_EQ(report["phases"][0]["ops"], 2);
  EXPECT_EQ(report["phases"][0]["bytes"], 8192);
  EXPECT_EQ(report["phases"][1]["errors"], 2);
  EXPECT_EQ(report["phases"][1]["error_codes"]["RPC_TIMEOUT"], 2);
  EXPECT_EQ(report["hot_cache"]["hits"], 1);
}

TEST(BenchReportTest, JsonCarriesBatchKeysAndCalls) {
  BenchOptions options;
  options.batch = 16;
  std::vector<PhaseRow> rows;
  OpStats stats;
  for (int call = 0; call < 4; ++call) {
    stats.RecordBatch(Clock::now(), std::vector<Result<void>>(16), 10);
  }
  rows.push_back(PhaseRow{"load", "put", 1.0, stats});

  nlohmann::json report = ReportJson(options, "r-", rows, nlohmann::json::object());

  EXPECT_EQ(report["config"]["batch"], 16);
  const auto& phase = report["phases"][0];
  EXPECT_EQ(phase["ops"], 64);
  EXPECT_DOUBLE_EQ(phase["ops_per_s"].get<double>(), 64.0);
  EXPECT_DOUBLE_EQ(phase["keys_per_s"].get<double>(), 64.0);
  EXPECT_EQ(phase["calls"], 4);
  EXPECT_DOUBLE_EQ(phase["calls_per_s"].get<double>(), 4.0);
  for (const char* field : {"p50_us", "p99_us", "p999_us", "mb_per_s", "errors"}) {
    EXPECT_TRUE(phase.contains(field)) << field;
  }
}

}  // namespace
}  // namespace mooncake::bench
