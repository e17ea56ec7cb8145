// `.ci/run` beside a cluster it did not start (real processes): it must stop
// only what it started. Each test copies .ci/run and scripts/local-cluster.sh
// into a scratch checkout whose build/ links to the real binaries and whose
// scripts/test.sh only records that it ran, and points the cluster at free
// ports (MASTER_PORT and friends), never the README's.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/unused_port.h"

#ifndef MOONCAKE_MASTER_BIN
#define MOONCAKE_MASTER_BIN "mooncake-master"
#endif
#ifndef MOONCAKE_WORKER_BIN
#define MOONCAKE_WORKER_BIN "mooncake-worker"
#endif
#ifndef MOONCAKE_CLI_BIN
#define MOONCAKE_CLI_BIN "mooncake-cli"
#endif

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

fs::path RepoRoot() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A checkout with just what .ci/run and local-cluster.sh need.
fs::path MakeCheckout(const fs::path& dir) {
  fs::create_directories(dir / ".ci");
  fs::create_directories(dir / "scripts/lib");
  fs::copy_file(RepoRoot() / ".ci/run", dir / ".ci/run");
  fs::copy_file(RepoRoot() / "scripts/local-cluster.sh", dir / "scripts/local-cluster.sh");
  fs::copy_file(RepoRoot() / "scripts/lib/pid_file.sh", dir / "scripts/lib/pid_file.sh");
  std::ofstream(dir / "scripts/test.sh")
      << "#!/bin/sh\necho ran > \"$(dirname \"$0\")/../suite-ran\"\n";
  fs::permissions(dir / "scripts/test.sh", fs::perms::owner_all);
  for (auto [sub, bin] : {std::pair{"master/mooncake-master", MOONCAKE_MASTER_BIN},
                          std::pair{"worker/mooncake-worker", MOONCAKE_WORKER_BIN},
                          std::pair{"cli/mooncake-cli", MOONCAKE_CLI_BIN}}) {
    fs::create_directories((dir / "build" / sub).parent_path());
    fs::create_symlink(fs::absolute(bin), dir / "build" / sub);
  }
  return dir;
}

class CiRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ci_run_test_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    // Free ports, never the README's 50050-50061.
    env_ = "MASTER_PORT=" + std::to_string(UnusedPort()) +
           " MASTER_ADMIN_PORT=" + std::to_string(UnusedPort()) +
           " WORKER_PORT=" + std::to_string(UnusedPort()) +
           " WORKER_ADMIN_PORT=" + std::to_string(UnusedPort()) +
           " DRAM=64MiB SSD=64MiB SKIP_DEPS=1 SKIP_BUILD=1 CI=true";
  }
  void TearDown() override {
    // Whatever is left, by its recorded PID (never by name).
    for (const auto& entry : fs::recursive_directory_iterator(root_)) {
      if (entry.path().extension() != ".pid") continue;
      pid_t pid = std::atoi(ReadFile(entry.path()).c_str());
      if (pid > 0) kill(pid, SIGKILL);
    }
    fs::remove_all(root_);
  }

  int Run(const fs::path& checkout, const std::string& command) {
    std::string line = "cd '" + checkout.string() + "' && env " + env_ + " " + command + " >>'" +
                       (root_ / "out.log").string() + "' 2>&1";
    int rc = std::system(line.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }
  static pid_t RecordedPid(const fs::path& checkout, const std::string& name) {
    return std::atoi(ReadFile(checkout / "var" / (name + ".pid")).c_str());
  }
  std::string Log() { return ReadFile(root_ / "out.log"); }
  void ExpectOnlyTheHalfItStartedIsStopped(const std::string& killed, const std::string& kept);

  fs::path root_;
  std::string env_;
};

// Half of a developer's cluster died (`killed`); the other half (`kept`)
// runs. .ci/run must start the dead half, run the suite, and stop only what
// it started: the kept half and its PID file stay.
void CiRunTest::ExpectOnlyTheHalfItStartedIsStopped(const std::string& killed,
                                                    const std::string& kept) {
  fs::path checkout = MakeCheckout(root_ / "dev");
  ASSERT_EQ(Run(checkout, "scripts/local-cluster.sh up"), 0) << Log();
  pid_t dead = RecordedPid(checkout, killed);
  pid_t alive = RecordedPid(checkout, kept);
  ASSERT_TRUE(Alive(alive));
  ASSERT_EQ(kill(dead, SIGKILL), 0);
  for (int i = 0; i < 100 && Alive(dead); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  ASSERT_EQ(Run(checkout, "bash .ci/run"), 0) << Log();
  EXPECT_TRUE(fs::exists(checkout / "suite-ran")) << Log();
  EXPECT_TRUE(Alive(alive)) << Log();
  // Its record too: `down` removes the PID file of what it stops.
  EXPECT_TRUE(fs::exists(checkout / "var" / (kept + ".pid"))) << Log();
  EXPECT_FALSE(fs::exists(checkout / "var" / (killed + ".pid")))
      << killed << " it started is stopped";
}

// Before: `down` at the end stopped the master it had found running.
TEST_F(CiRunTest, HalfAClusterGetsItsMissingHalfAndOnlyThatHalfIsStopped) {
  ExpectOnlyTheHalfItStartedIsStopped("worker-1", "master");
}

// The other half, and a node id with a colon (a worker's own default id is
// HOST:PORT): the master died, the worker runs. Before, the name did not
// parse and the final `down` stopped everything, the worker included.
TEST_F(CiRunTest, AStoppedMasterIsStartedAndStoppedAloneBesideAWorkerWhoseIdHasAColon) {
  env_ += " NODE_ID=node:1";
  ExpectOnlyTheHalfItStartedIsStopped("master", "node:1");
}

TEST_F(CiRunTest, AClusterOfAnotherCheckoutOnTheSamePortsIsRunBesideAndLeftRunning) {
  fs::path theirs = MakeCheckout(root_ / "theirs");
  fs::path ours = MakeCheckout(root_ / "ours");
  ASSERT_EQ(Run(theirs, "scripts/local-cluster.sh up"), 0) << Log();
  pid_t master = RecordedPid(theirs, "master");
  pid_t worker = RecordedPid(theirs, "worker-1");

  // Before: `up` in this checkout died on "port ... is busy" and CI failed.
  ASSERT_EQ(Run(ours, "bash .ci/run"), 0) << Log();
  EXPECT_TRUE(fs::exists(ours / "suite-ran")) << Log();
  EXPECT_TRUE(Alive(master));
  EXPECT_TRUE(Alive(worker));
  EXPECT_EQ(Run(theirs, "scripts/local-cluster.sh status"), 0) << Log();
  EXPECT_EQ(Run(theirs, "scripts/local-cluster.sh down"), 0) << Log();
}

}  // namespace
}  // namespace mooncake::testing
