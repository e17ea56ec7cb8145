// The harness itself: a process that dies at start-up is reported at once
// with its log, and stopped processes are really gone.

#include <signal.h>
#include <sys/types.h>

#include <string>

#include <gtest/gtest.h>

#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

TEST(TestClusterHarness, WorkerThatDiesAtStartupIsReportedWithItsLog) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  const auto started = std::chrono::steady_clock::now();
  auto result = cluster.StartWorker("w1", {.extra_args = {"--no-such-flag"}});
  EXPECT_FALSE(result);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 15s) << "waited for a dead process";
  const std::string message = result.message();
  EXPECT_NE(message.find("exited"), std::string::npos) << message;
  EXPECT_NE(message.find("no-such-flag"), std::string::npos) << message;
  EXPECT_FALSE(cluster.IsRunning("w1"));
}

TEST(TestClusterHarness, KilledAndRestartedProcessesAreTracked) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  ASSERT_TRUE(cluster.StartWorker("w1", {.dram = 8 << 20, .ssd = 16 << 20}));
  EXPECT_TRUE(cluster.IsRunning("w1"));
  cluster.KillWorker("w1", SIGTERM);
  EXPECT_FALSE(cluster.IsRunning("w1"));
  ASSERT_TRUE(cluster.RestartWorker("w1"));
  EXPECT_TRUE(cluster.IsRunning("w1"));
  const int port = cluster.master_port();
  ASSERT_TRUE(cluster.RestartMaster());
  EXPECT_EQ(cluster.master_port(), port);
  EXPECT_TRUE(cluster.IsRunning("master"));

  // The worker finds the master again on its old port within a few heartbeats.
  CliResult cli;
  EXPECT_TRUE(Eventually([&] {
    cli = cluster.RunCli({"nodes"});
    return cli.exit_code == 0 && cli.out.find("w1") != std::string::npos;
  })) << "w1 did not re-register with the restarted master: exit=" << cli.exit_code << "\n"
      << cli.out << cli.err;
}

}  // namespace
}  // namespace mooncake::testing
