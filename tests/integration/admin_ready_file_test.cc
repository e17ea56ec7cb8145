// The master's --ready-file lives only as long as the master: a supervisor
// that waits for the file must not take a stopped master's ports (still in
// the file after a clean exit, before this fix) for a live one's.

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

TEST(AdminReadyFileTest, MasterRemovesItsReadyFileOnACleanStop) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  const fs::path ready = cluster.dir() / "master.port";
  ASSERT_TRUE(fs::exists(ready));
  cluster.KillMaster(SIGTERM);
  EXPECT_FALSE(fs::exists(ready)) << cluster.LogTail("master");

  // A file another process wrote over ours is not ours to remove.
  ASSERT_TRUE(cluster.RestartMaster());
  ASSERT_TRUE(fs::exists(ready));
  std::ofstream(ready, std::ios::trunc) << "1\n2\n";
  cluster.KillMaster(SIGTERM);
  EXPECT_TRUE(fs::exists(ready)) << cluster.LogTail("master");
}

}  // namespace
}  // namespace mooncake::testing
