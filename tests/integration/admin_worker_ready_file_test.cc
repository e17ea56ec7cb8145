// The worker's --ready-file: written only once /readyz answers 200 (before,
// it was renamed into place a moment before the worker marked itself
// registered), and removed on a clean stop (before, it outlived the worker).

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

TEST(AdminWorkerReadyFileTest, WorkerIsReadyOnceItsReadyFileExistsAndRemovesItOnStop) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  ASSERT_TRUE(cluster.StartWorker("w1", {.dram = 8ull << 20, .ssd = 0}));
  const fs::path ready = cluster.dir() / "w1.port";
  ASSERT_TRUE(fs::exists(ready));
  // StartWorker returned as soon as the file appeared.
  auto readyz = Http(cluster.worker_admin_port("w1"), "GET", "/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 200) << readyz->body;
  cluster.KillWorker("w1", SIGTERM);
  EXPECT_FALSE(fs::exists(ready)) << cluster.LogTail("w1");
  ASSERT_TRUE(fs::exists(cluster.dir() / "master.port"));
}

}  // namespace
}  // namespace mooncake::testing
