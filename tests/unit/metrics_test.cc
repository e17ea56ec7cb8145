#include "common/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "http/prometheus_writer.h"

namespace mooncake {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

TEST(LatencyHistogramTest, EmptyHistogramReportsZeros) {
  LatencyHistogram h;
  auto snap = h.Snapshot();
  EXPECT_EQ(snap.count, 0u);
  EXPECT_EQ(snap.sum_seconds, 0.0);
  EXPECT_EQ(snap.Percentile(0.5), 0.0);
  EXPECT_EQ(snap.mean_seconds(), 0.0);
}

TEST(LatencyHistogramTest, BucketBoundsAreInclusiveUpperLimits) {
  LatencyHistogram h;
  h.Record(microseconds(30));   // bucket 0 (<= 50 us)
  h.Record(microseconds(50));   // still bucket 0: Prometheus' le is inclusive
  h.Record(microseconds(51));   // bucket 1 (<= 100 us)
  h.Record(milliseconds(700));  // (0.5, 1] s
  h.Record(seconds(10));        // above 5 s: +Inf
  h.Record(nanoseconds(-5));    // clock stepped back: counted as 0
  auto snap = h.Snapshot();
  EXPECT_EQ(snap.counts[0], 3u);
  EXPECT_EQ(snap.counts[1], 1u);
  EXPECT_EQ(snap.counts[13], 1u);  // bound 1 s
  EXPECT_EQ(snap.counts.back(), 1u);
  EXPECT_EQ(snap.count, 6u);
  EXPECT_NEAR(snap.sum_seconds, 10.700131, 1e-9);
  auto cumulative = snap.Cumulative();
  EXPECT_EQ(cumulative[0], 3u);
  EXPECT_EQ(cumulative[1], 4u);
  EXPECT_EQ(cumulative.back(), snap.count);
  for (size_t i = 1; i < cumulative.size(); ++i) EXPECT_GE(cumulative[i], cumulative[i - 1]);
}

TEST(LatencyHistogramTest, PercentilesInterpolateInsideTheBucket) {
  LatencyHistogram h;
  for (int i = 0; i < 100; ++i) h.Record(microseconds(700));  // (0.5 ms, 1 ms]
  double p50 = h.Percentile(0.5);
  EXPECT_GT(p50, 0.0005);
  EXPECT_LE(p50, 0.001);
  EXPECT_NEAR(p50, 0.00075, 1e-9);  // halfway through the bucket
  EXPECT_NEAR(h.Percentile(1.0), 0.001, 1e-12);

  // 90 fast, 10 slow: p50 is fast, p99 is slow.
  LatencyHistogram mixed;
  for (int i = 0; i < 90; ++i) mixed.Record(microseconds(80));
  for (int i = 0; i < 10; ++i) mixed.Record(milliseconds(200));
  EXPECT_LE(mixed.Percentile(0.5), 0.0001);
  EXPECT_GT(mixed.Percentile(0.99), 0.1);
  EXPECT_LE(mixed.Percentile(0.99), 0.25);
  // Monotonic in q, and q outside [0, 1] is clamped.
  double last = 0;
  for (double q = 0; q <= 1.0; q += 0.05) {
    double p = mixed.Percentile(q);
    EXPECT_GE(p, last);
    last = p;
  }
  EXPECT_EQ(mixed.Percentile(-1), mixed.Percentile(0));
  EXPECT_EQ(mixed.Percentile(7), mixed.Percentile(1));
}

TEST(LatencyHistogramTest, OverflowBucketReportsTheLastFiniteBound) {
  LatencyHistogram h;
  h.Record(seconds(60));
  EXPECT_EQ(h.Percentile(0.5), kLatencyBucketBounds.back());
}

TEST(LatencyHistogramTest, ConcurrentRecordsAreAllCounted) {
  LatencyHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; ++i) h.Record(microseconds(10 * (t + 1)));
    });
  }
  for (auto& t : threads) t.join();
  auto snap = h.Snapshot();
  EXPECT_EQ(snap.count, 40000u);
  EXPECT_NEAR(snap.sum_seconds, 10000 * (10 + 20 + 30 + 40) * 1e-6, 1e-6);
}

TEST(RequestMetricsTest, CountsRequestsErrorsAndCodesPerOperation) {
  RequestMetrics metrics({"put", "get", "put", "other"});
  ASSERT_EQ(metrics.ops(), (std::vector<std::string>{"put", "get", "other"}));
  metrics.Record("put", ErrorCode::kOk, milliseconds(1));
  metrics.Record("put", ErrorCode::kObjectAlreadyExists, milliseconds(2));
  metrics.Record("get", ErrorCode::kOk, microseconds(60));
  metrics.Record("get", ErrorCode::kObjectNotFound, microseconds(70));
  metrics.Record("get", ErrorCode::kObjectNotFound, microseconds(80));
  metrics.Record("frobnicate", ErrorCode::kOk, microseconds(1));  // not in the set

  auto snap = metrics.Snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].op, "put");
  EXPECT_EQ(snap[0].requests, 2u);
  EXPECT_EQ(snap[0].errors, 1u);
  EXPECT_EQ(snap[0].latency.count, 2u);
  EXPECT_EQ(snap[1].op, "get");
  EXPECT_EQ(snap[1].requests, 3u);
  EXPECT_EQ(snap[1].errors, 2u);
  using Codes = std::vector<std::pair<ErrorCode, uint64_t>>;
  EXPECT_EQ(snap[1].codes, (Codes{{ErrorCode::kOk, 1}, {ErrorCode::kObjectNotFound, 2}}));
  EXPECT_EQ(snap[2].op, "other");
  EXPECT_EQ(snap[2].requests, 1u);
  EXPECT_EQ(snap[2].errors, 0u);
}

TEST(RequestMetricsTest, UnknownCodesCountAsInternalErrors) {
  RequestMetrics metrics({"get"});
  metrics.Record("get", static_cast<ErrorCode>(-12345), microseconds(5));
  auto snap = metrics.Snapshot();
  ASSERT_EQ(snap[0].codes.size(), 1u);
  EXPECT_EQ(snap[0].codes[0].first, ErrorCode::kInternalError);
  EXPECT_EQ(snap[0].errors, 1u);
}

// Every code with a name is counted under itself: NOT_LEADER (a standby
// master's answer during an election) was missing from the list and counted
// as INTERNAL_ERROR, sending operators after a crash instead.
TEST(RequestMetricsTest, EveryNamedCodeIsCountedAsItself) {
  for (int32_t value = -3000; value <= 0; ++value) {
    const auto code = static_cast<ErrorCode>(value);
    if (ToString(code) == "UNKNOWN_ERROR") continue;
    RequestMetrics metrics({"put"});
    metrics.Record("put", code, milliseconds(1));
    auto snapshot = metrics.Snapshot();
    ASSERT_EQ(snapshot[0].codes.size(), 1u) << ToString(code);
    EXPECT_EQ(snapshot[0].codes[0].first, code) << ToString(code);
    EXPECT_EQ(snapshot[0].codes[0].second, 1u) << ToString(code);
  }
  RequestMetrics metrics({"put"});
  metrics.Record("put", ErrorCode::kNotLeader, milliseconds(1));
  auto snapshot = metrics.Snapshot();
  ASSERT_EQ(snapshot[0].codes.size(), 1u);
  EXPECT_EQ(snapshot[0].codes[0].first, ErrorCode::kNotLeader);
}

TEST(RequestMetricsTest, TimerRecordsOnceAndAnUnfinishedTimerIsAnError) {
  RequestMetrics metrics({"get", "put"});
  {
    RequestTimer timer(metrics, "get");
    timer.Finish(ErrorCode::kOk);
    timer.Finish(ErrorCode::kInternalError);  // ignored: already finished
  }
  { RequestTimer timer(metrics, "put"); }  // an early exit that forgot to report
  auto snap = metrics.Snapshot();
  EXPECT_EQ(snap[0].requests, 1u);
  EXPECT_EQ(snap[0].errors, 0u);
  EXPECT_EQ(snap[1].requests, 1u);
  EXPECT_EQ(snap[1].errors, 1u);
}

TEST(PrometheusWriterTest, WritesFamiliesSamplesAndHistograms) {
  LatencyHistogram h;
  h.Record(microseconds(70));
  h.Record(seconds(9));
  PrometheusWriter w;
  w.Counter("demo_requests", "Requests\nserved \\ total", 7);
  w.BeginGauge("demo_used_bytes", "Bytes used");
  w.Sample({{"tier", "dram"}}, uint64_t{18446744073709551615ull});
  w.Sample({{"tier", "a\"b\\c\nd"}}, 0.5);
  w.BeginHistogram("demo_seconds", "Latency");
  w.Histogram({{"op", "get"}}, h.Snapshot());
  std::string text = w.Take();
  EXPECT_EQ(w.Take(), "");

  EXPECT_NE(text.find("# HELP demo_requests_total Requests\\nserved \\\\ total\n"
                      "# TYPE demo_requests_total counter\ndemo_requests_total 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("demo_used_bytes{tier=\"dram\"} 18446744073709551615\n"), std::string::npos);
  EXPECT_NE(text.find("demo_used_bytes{tier=\"a\\\"b\\\\c\\nd\"} 0.5\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE demo_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("demo_seconds_bucket{op=\"get\",le=\"5e-05\"} 0\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("demo_seconds_bucket{op=\"get\",le=\"0.0001\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("demo_seconds_bucket{op=\"get\",le=\"5\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("demo_seconds_bucket{op=\"get\",le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("demo_seconds_count{op=\"get\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("demo_seconds_sum{op=\"get\"} 9.00007"), std::string::npos) << text;
}

TEST(PrometheusWriterTest, SanitizesNames) {
  EXPECT_EQ(PrometheusWriter::SanitizeName("ok_name:x9"), "ok_name:x9");
  EXPECT_EQ(PrometheusWriter::SanitizeName("9bad-name.x"), "_bad_name_x");
  EXPECT_EQ(PrometheusWriter::SanitizeName(""), "_");
}

}  // namespace
}  // namespace mooncake
