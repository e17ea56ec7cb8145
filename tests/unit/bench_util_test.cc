// mooncake-bench's pure helpers of the batch, master and loop workloads:
// HOST:PORT parsing, batch slicing, the Prometheus sample reader and the
// bytes-per-key arithmetic.

#include "bench/bench_util.h"

#include <gtest/gtest.h>

#include <optional>

namespace mooncake::bench {
namespace {

TEST(BenchUtilTest, ParseHostPortSplitsAtTheLastColonAndChecksThePort) {
  auto plain = ParseHostPort("127.0.0.1:50052");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->host, "127.0.0.1");
  EXPECT_EQ(plain->port, 50052);
  auto v6 = ParseHostPort("::1:9100");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9100);
  for (const char* bad :
       {"", "host", ":80", "host:", "host:0", "host:65536", "host:80x", "host:-1", "host: 80"}) {
    EXPECT_FALSE(ParseHostPort(bad)) << bad;
  }
}

TEST(BenchUtilTest, BatchKeysSlicesTheKeySet) {
  EXPECT_EQ(BatchKeys(100, 16, 0), 16u);
  EXPECT_EQ(BatchKeys(100, 16, 5), 16u);
  EXPECT_EQ(BatchKeys(100, 16, 6), 4u) << "the last call takes what is left";
  EXPECT_EQ(BatchKeys(100, 16, 7), 0u);
  EXPECT_EQ(BatchKeys(96, 16, 6), 0u);
  EXPECT_EQ(BatchKeys(5, 1, 4), 1u);
  EXPECT_EQ(BatchKeys(5, 0, 0), 0u);
  uint64_t total = 0;
  for (uint64_t call = 0; BatchKeys(1000, 256, call) > 0; ++call)
    total += BatchKeys(1000, 256, call);
  EXPECT_EQ(total, 1000u);
}

TEST(BenchUtilTest, MetricValueFindsTheExactSample) {
  const char* body =
      "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
      "# TYPE process_resident_memory_bytes gauge\n"
      "process_resident_memory_bytes_total 1\n"
      "process_resident_memory_bytes 14077952\n"
      "process_virtual_memory_bytes 1.5e9\n";
  EXPECT_EQ(MetricValue(body, "process_resident_memory_bytes"), 14077952.0);
  EXPECT_EQ(MetricValue(body, "process_virtual_memory_bytes"), 1.5e9);
  EXPECT_EQ(MetricValue(body, "process_open_fds"), std::nullopt);
  EXPECT_EQ(MetricValue("process_open_fds x\n", "process_open_fds"), std::nullopt);
  EXPECT_EQ(MetricValue("process_open_fds 7", "process_open_fds"), 7.0) << "no final newline";
}

TEST(BenchUtilTest, MasterBytesPerKeySubtractsTheKeyText) {
  // 100000 keys grew the RSS by 20 MB: 200 bytes each, 35 of them key text.
  auto per_key = MasterBytesPerKey(10'000'000, 30'000'000, 100'000, 35.0);
  ASSERT_TRUE(per_key);
  EXPECT_DOUBLE_EQ(*per_key, 165.0);
  // The RSS may shrink: the figure goes negative rather than wrapping.
  auto shrunk = MasterBytesPerKey(30'000'000, 29'000'000, 1'000, 10.0);
  ASSERT_TRUE(shrunk);
  EXPECT_DOUBLE_EQ(*shrunk, -1010.0);
  EXPECT_EQ(MasterBytesPerKey(1, 2, 0, 10.0), std::nullopt);
}

}  // namespace
}  // namespace mooncake::bench
