// The harness itself: a process that dies at start-up is reported at once
// with its log, and stopped processes are really gone.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

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
  })) << "w1 did not re-register with the restarted master: exit="
      << cli.exit_code << "\n"
      << cli.out << cli.err;
}

// The suite must pass beside the README's local cluster, which holds the
// default ports: every process the harness starts or restarts, and every CLI
// it runs, names its ports, so none of them needs a default one.
TEST(TestClusterHarness, NoProcessNeedsADefaultPort) {
  // The test never binds the default ports itself (a user's cluster may
  // hold them, or start while it runs): it checks that none is used.
  // When the harness starts, restarts and uses a master and a worker.
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  ASSERT_TRUE(cluster.StartWorker("w1", {.dram = 8 << 20, .ssd = 16 << 20}));
  ASSERT_TRUE(cluster.RestartWorker("w1"));
  const int port = cluster.master_port();
  ASSERT_TRUE(cluster.RestartMaster());

  // Expect them all up on ports of their own, admin servers included.
  EXPECT_EQ(cluster.master_port(), port);
  EXPECT_GT(cluster.master_admin_port(), 0);
  EXPECT_GT(cluster.worker_admin_port("w1"), 0);
  for (int p : {cluster.master_port(), cluster.master_admin_port(), cluster.worker_port("w1"),
                cluster.worker_admin_port("w1")}) {
    EXPECT_TRUE(p != 50050 && p != 50051 && p != 50060 && p != 50061) << p;
  }
  CliResult cli;
  EXPECT_TRUE(Eventually([&] {
    cli = cluster.RunCli({"nodes"});
    return cli.exit_code == 0 && cli.out.find("w1") != std::string::npos;
  })) << "exit="
      << cli.exit_code << "\n"
      << cli.out << cli.err;
}

// A developer's MOONCAKE_MASTER (say, their local cluster's) must not steer a
// CLI the harness runs: the harness drops it, and an extra_env entry is what
// the CLI sees. getenv answers the first match, so merely appending the
// test's entry after the inherited one would not do.
TEST(TestClusterHarness, CliSeesTheTestsMasterNotTheCallers) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster());
  const char* saved = std::getenv("MOONCAKE_MASTER");
  const std::optional<std::string> before =
      saved == nullptr ? std::nullopt : std::optional<std::string>(saved);
  const std::string nowhere = "127.0.0.1:" + std::to_string(UnusedPort());
  ASSERT_EQ(setenv("MOONCAKE_MASTER", nowhere.c_str(), 1), 0);
  auto r = cluster.RunCli({"nodes"}, {}, /*with_master=*/false,
                          {"MOONCAKE_MASTER=" + cluster.master_address()}, 30s);
  if (before) {
    setenv("MOONCAKE_MASTER", before->c_str(), 1);
  } else {
    unsetenv("MOONCAKE_MASTER");
  }
  EXPECT_EQ(r.exit_code, 0) << "the CLI did not reach " << cluster.master_address() << "\n"
                            << r.out << r.err;
}

}  // namespace
}  // namespace mooncake::testing
