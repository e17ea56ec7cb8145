// mooncake-bench --workload scale, small and fast: it starts its own master
// shards, registers, heartbeats, announces and looks up keys routed by slot,
// and reports one JSON row per shard count. Checks the report's shape and
// that work was done on every shard, never how fast.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/bench_runner.h"
#include "tests/integration/test_cluster.h"

#ifndef MOONCAKE_BENCH_BIN
#define MOONCAKE_BENCH_BIN "mooncake-bench"
#endif
#ifndef MOONCAKE_MASTER_BIN
#define MOONCAKE_MASTER_BIN "mooncake-master"
#endif

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Runs mooncake-bench with `args` (its stderr through a per-test file).
BenchRun RunBench(const std::vector<std::string>& args) {
  return RunBenchBinary(
      args, fs::temp_directory_path() /
                ("scale-bench-" + std::to_string(getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".err"));
}

const std::vector<std::string> kSmallRun = {
    "--workload",     "scale", "--master-bin",     MOONCAKE_MASTER_BIN,
    "--sim-workers",  "50",    "--keys",           "20000",
    "--duration-s",   "1",     "--concurrency",    "2",
    "--heartbeat-ms", "200",   "--location-batch", "64",
    "--batch",        "8"};

TEST(ScaleBenchTest, ReportsARowPerShardCountWithKeysLookupsAndHeartbeats) {
  std::vector<std::string> args = kSmallRun;
  args.insert(args.end(), {"--shards", "1,2", "--json"});
  BenchRun run = RunBench(args);
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err;
  json report = json::parse(run.out);
  EXPECT_NE(report["config"]["master"].get<std::string>().find("mooncake-master"),
            std::string::npos)
      << "the report says which master build ran";
  ASSERT_EQ(report["rows"].size(), 2u) << run.out;
  for (size_t i = 0; i < 2; ++i) {
    const json& row = report["rows"][i];
    SCOPED_TRACE("shards=" + row["shards"].dump());
    EXPECT_EQ(row["shards"], i + 1);
    EXPECT_EQ(row["keys"], 20000) << "every key announced once, to its slot's shard";
    EXPECT_EQ(row["announce"]["errors"], 0);
    EXPECT_EQ(row["register"]["keys"], 50 * (i + 1)) << "every worker registers with every shard";

    const json& per_shard = row["memory"]["per_shard"];
    ASSERT_EQ(per_shard.size(), i + 1) << row["memory"].dump();
    uint64_t total = 0;
    for (const json& shard : per_shard) {
      EXPECT_GT(shard["keys"].get<uint64_t>(), 0u) << "the slots spread keys over every shard";
      total += shard["keys"].get<uint64_t>();
    }
    EXPECT_EQ(total, 20000u);
    EXPECT_TRUE(row["memory"]["bytes_per_key"].is_number()) << row["memory"].dump();

    EXPECT_GT(row["lookup"]["keys"].get<uint64_t>(), 0u);
    EXPECT_EQ(row["lookup"]["errors"], 0) << "every announced key is found at its shard";
    EXPECT_GT(row["claim"]["keys"].get<uint64_t>(), 0u);
    EXPECT_EQ(row["claim"]["errors"], 0) << "claims of new keys all win";
    EXPECT_GT(row["heartbeat_quiet"]["keys"].get<uint64_t>(), 0u);
    EXPECT_EQ(row["heartbeat_all"]["errors"], 0) << "no simulated worker expired";
    EXPECT_TRUE(row["heartbeat_quiet"]["master_cpu_ms"].is_number());
  }
  EXPECT_NE(report["rows"][1]["slot_table"].get<std::string>().find("0-8191="), std::string::npos);
}

TEST(ScaleBenchTest, PrintsATextTable) {
  std::vector<std::string> args = kSmallRun;
  args.insert(args.end(), {"--shards", "2"});
  BenchRun run = RunBench(args);
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err;
  EXPECT_NE(run.out.find("lookup keys/s"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\n     2      20000 "), std::string::npos) << run.out;
}

// --shard-table: the masters are already running (here one harness master
// owning every slot); the bench only registers, announces and looks up.
TEST(ScaleBenchTest, UsesRunningMastersOfAShardTable) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  std::string admin = "127.0.0.1:" + std::to_string(cluster.master_admin_port());
  BenchRun run =
      RunBench({"--workload", "scale", "--shard-table", "0-16383=" + cluster.master_address(),
                "--shard-admins", admin, "--sim-workers", "10", "--keys", "2000", "--duration-s",
                "0.5", "--concurrency", "2", "--json"});
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err << cluster.AllLogTails();
  json report = json::parse(run.out);
  ASSERT_EQ(report["rows"].size(), 1u);
  const json& row = report["rows"][0];
  EXPECT_EQ(row["shards"], 1);
  EXPECT_EQ(row["keys"], 2000);
  EXPECT_EQ(row["lookup"]["errors"], 0);
  EXPECT_EQ(row["slot_table"], "0-16383=" + cluster.master_address());
  EXPECT_TRUE(row["memory"]["bytes_per_key"].is_number()) << "read through --shard-admins";
}

TEST(ScaleBenchTest, RefusesABadShardTable) {
  BenchRun run = RunBench(
      {"--workload", "scale", "--shard-table", "0-8191=127.0.0.1:1,8000-16383=127.0.0.1:2"});
  EXPECT_EQ(run.status, 2) << run.out << "\n" << run.err;
  EXPECT_NE(run.err.find("overlap"), std::string::npos) << run.err;
}

TEST(ScaleBenchTest, MissingMasterBinaryIsAStartFailure) {
  fs::path missing = fs::temp_directory_path() / ("no-such-master-" + std::to_string(getpid()));
  BenchRun run = RunBench(
      {"--workload", "scale", "--master-bin", missing.string(), "--shards", "1", "--keys", "10"});
  EXPECT_EQ(run.status, 3) << run.out << "\n" << run.err;
  EXPECT_NE(run.err.find("did not become ready"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace mooncake::testing
