// The /proc parsers behind the process_* metrics, the rate limiter of the
// worker's write-failure log, and the writer's constant (node) labels.

#include "http/process_metrics.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/version.h"
#include "http/prometheus_writer.h"
#include "tests/unit/in_memory_directory.h"
#include "tiers/dram_tier.h"
#include "tiers/ssd_tier.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {
namespace {

// proc(5) field order; the command name holds a space and a ')'.
constexpr char kStat[] =
    "4242 (mooncake-w (x)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 "
    "250 75 0 0 20 0 12 0 98765 123456789 4321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 "
    "0 0 0 0 0\n";

TEST(ProcessMetricsTest, ParsesProcSelfStatAfterTheLastParenthesis) {
  auto fields = ParseProcSelfStat(kStat);
  ASSERT_TRUE(fields);
  EXPECT_EQ(fields->utime_ticks, 250u);
  EXPECT_EQ(fields->stime_ticks, 75u);
  EXPECT_EQ(fields->start_ticks, 98765u);
  EXPECT_EQ(fields->vsize_bytes, 123456789u);
  EXPECT_EQ(fields->rss_pages, 4321u);
}

TEST(ProcessMetricsTest, RejectsTruncatedOrGarbledStat) {
  EXPECT_FALSE(ParseProcSelfStat(""));
  EXPECT_FALSE(ParseProcSelfStat("4242 (w) S 1 2 3"));
  EXPECT_FALSE(ParseProcSelfStat("4242 no parenthesis at all"));
  std::string bad = kStat;
  bad.replace(bad.find("250"), 3, "2x0");
  EXPECT_FALSE(ParseProcSelfStat(bad));
}

TEST(ProcessMetricsTest, ParsesBootTimeAndMaxOpenFiles) {
  EXPECT_EQ(ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"), 1700000000u);
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\n"));
  constexpr char kLimits[] =
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max cpu time              unlimited            unlimited            seconds   \n"
      "Max open files            1024                 524288               files     \n";
  EXPECT_EQ(ParseMaxOpenFiles(kLimits), 1024u);
  EXPECT_EQ(ParseMaxOpenFiles("Max open files            unlimited            unlimited   files\n"),
            0u);
  EXPECT_FALSE(ParseMaxOpenFiles("Max cpu time unlimited\n"));
}

TEST(ProcessMetricsTest, ReadsThisProcess) {
  ProcessStats stats = ReadProcessStats();
  EXPECT_GT(stats.resident_bytes, 0u);
  EXPECT_GE(stats.virtual_bytes, stats.resident_bytes);
  EXPECT_GT(stats.open_fds, 2u);  // stdin, stdout, stderr at least
  EXPECT_GE(stats.cpu_seconds, 0);
  auto now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(stats.start_time_seconds, now + 1);
  EXPECT_GT(stats.start_time_seconds, now - 24 * 3600) << "this test process started today";
}

TEST(ProcessMetricsTest, WritesStandardNamesAndBuildInfo) {
  PrometheusWriter w;
  WriteBuildInfo(w);
  WriteProcessMetrics(w, {.cpu_seconds = 1.5,
                          .resident_bytes = 4096,
                          .virtual_bytes = 8192,
                          .start_time_seconds = 1700000000,
                          .open_fds = 7,
                          .max_fds = 1024});
  std::string text = w.Take();
  const BuildInfo& info = GetBuildInfo();
  std::string build = "mooncake_build_info{version=\"" + std::string(info.version) +
                      "\",commit=\"" + std::string(info.commit) + "\",build_type=\"" +
                      std::string(info.build_type) + "\"} 1\n";
  EXPECT_NE(text.find(build), std::string::npos) << text;
  for (const char* line :
       {"# TYPE process_cpu_seconds_total counter\n", "process_cpu_seconds_total 1.5\n",
        "process_resident_memory_bytes 4096\n", "process_virtual_memory_bytes 8192\n",
        "process_start_time_seconds 1.7e+09\n", "process_open_fds 7\n", "process_max_fds 1024\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

TEST(ProcessMetricsTest, ConstLabelsComeFirstOnEverySample) {
  PrometheusWriter w;
  w.SetConstLabels({{"node", "w\"1"}});
  w.Counter("c", "help", 3);
  w.BeginGauge("g", "help");
  w.Sample({{"tier", "dram"}}, uint64_t{5});
  std::string text = w.Take();
  EXPECT_NE(text.find("c_total{node=\"w\\\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("g{node=\"w\\\"1\",tier=\"dram\"} 5\n"), std::string::npos) << text;
}

TEST(LogRateLimiterTest, LetsOneLinePerIntervalPerCodeThroughAndCountsTheRest) {
  using namespace std::chrono_literals;
  LogRateLimiter limiter(1s);
  auto t0 = std::chrono::steady_clock::time_point{} + 100s;
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Admit(ErrorCode::kNoAvailableHandle, t0, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(limiter.Admit(ErrorCode::kNoAvailableHandle, t0 + 100ms, &suppressed));
  }
  // Another reason has its own budget.
  EXPECT_TRUE(limiter.Admit(ErrorCode::kInvalidParams, t0 + 200ms, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(limiter.Admit(ErrorCode::kNoAvailableHandle, t0 + 1s, &suppressed));
  EXPECT_EQ(suppressed, 5u);
  EXPECT_FALSE(limiter.Admit(ErrorCode::kNoAvailableHandle, t0 + 1500ms, &suppressed));
  EXPECT_TRUE(limiter.Admit(ErrorCode::kNoAvailableHandle, t0 + 3s, &suppressed));
  EXPECT_EQ(suppressed, 1u);
}

// The rule behind mooncake_worker_gets_total, _get_misses_total and
// _hits_total: a client reads an object in kRpcChunkBytes pieces, and only
// the piece at offset 0 counts. Tier byte counters count every byte.
class BackendCountingTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMiB = 1ull << 20;

  void SetUp() override {
    char tmpl[] = "/tmp/mc-counting-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", 64 * kMiB).value()));
    tiers.push_back(std::move(SsdTier::Open("ssd", dir_ + "/ssd", 128 * kMiB).value()));
    BackendOptions options;
    options.promote_on_get = false;
    backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, options);
    backend_->Recover();
  }
  void TearDown() override {
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Reads `key` the way a client does: kRpcChunkBytes at a time.
  uint64_t ReadInChunks(const std::string& key) {
    uint64_t offset = 0, total = 0;
    do {
      auto slice = backend_->Get(key, offset, kRpcChunkBytes);
      if (!slice) return 0;
      total = slice->total_size;
      offset += slice->data.size();
    } while (offset < total);
    return offset;
  }

  const TierSnapshot& Tier(const BackendStats& stats, const std::string& name) {
    for (const auto& t : stats.tiers) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << "no tier " << name;
    return stats.tiers.front();
  }

  std::string dir_;
  mooncake::testing::InMemoryDirectory directory_;
  std::unique_ptr<TieredCacheBackend> backend_;
};

TEST_F(BackendCountingTest, AChunkedReadCountsOneGetAndOneHit) {
  const uint64_t size = 19 * kMiB;
  ASSERT_TRUE(backend_->Put("big", std::string(size, 'x'), {}));
  ASSERT_EQ(ReadInChunks("big"), size);
  ASSERT_GT(size, 4 * kRpcChunkBytes) << "the read took several chunks";
  BackendStats stats = backend_->Stats();
  EXPECT_EQ(stats.gets, 1u);
  EXPECT_EQ(stats.get_misses, 0u);
  EXPECT_EQ(Tier(stats, "dram").hits, 1u);
  EXPECT_EQ(Tier(stats, "dram").read_bytes, size);
  EXPECT_EQ(Tier(stats, "dram").written_bytes, size);
  EXPECT_EQ(Tier(stats, "ssd").read_bytes, 0u);
}

TEST_F(BackendCountingTest, AGetOfAnAbsentKeyCountsOneMiss) {
  EXPECT_FALSE(backend_->Get("absent", 0, kRpcChunkBytes));
  // A later chunk of a read is not a new read.
  EXPECT_FALSE(backend_->Get("absent", kRpcChunkBytes, kRpcChunkBytes));
  BackendStats stats = backend_->Stats();
  EXPECT_EQ(stats.gets, 1u);
  EXPECT_EQ(stats.get_misses, 1u);
}

TEST_F(BackendCountingTest, MovesBetweenTiersCountBytesOnBothTiers) {
  const uint64_t size = 3 * kMiB;
  ASSERT_TRUE(backend_->Put("k", std::string(size, 'y'), {}));
  ASSERT_TRUE(backend_->EvictTier("dram", 0));
  backend_->RunMaintenance();  // logs the pass's one summary line
  BackendStats stats = backend_->Stats();
  EXPECT_EQ(Tier(stats, "dram").read_bytes, size);
  EXPECT_EQ(Tier(stats, "ssd").written_bytes, size);
  ASSERT_EQ(ReadInChunks("k"), size);
  stats = backend_->Stats();
  EXPECT_EQ(Tier(stats, "ssd").read_bytes, size);
  EXPECT_EQ(Tier(stats, "ssd").hits, 1u);
}

}  // namespace
}  // namespace mooncake
