// The examples run as a user would run them, against real clusters:
// examples/local_cluster.sh (start, use with mooncake-cli, stop by PID),
// mooncake-client-example and examples/python_client.py.
//
// Paths: the build tree is the one holding mooncake-cli
// (<build>/cli/mooncake-cli -> <build>/examples/...), the repository root is
// three levels above this file.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tests/integration/test_cluster.h"

#ifndef MOONCAKE_CLI_BIN
#define MOONCAKE_CLI_BIN "mooncake-cli"
#endif

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

fs::path BuildDir() { return fs::absolute(MOONCAKE_CLI_BIN).parent_path().parent_path(); }
fs::path RepoRoot() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

struct CommandResult {
  int exit_code = -1;  // -1: killed or not run
  std::string output;  // stdout and stderr together
};

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command line bounded by coreutils `timeout` (SIGTERM, then
// SIGKILL 5 s later), capturing stdout and stderr.
CommandResult RunCommand(const std::string& command, int timeout_s = 120) {
  std::string line =
      "timeout -k 5 " + std::to_string(timeout_s) + " bash -c " + Quote(command) + " 2>&1";
  CommandResult result;
  FILE* pipe = popen(line.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

std::string Show(const CommandResult& r) {
  return "exit=" + std::to_string(r.exit_code) + "\n" + r.output.substr(0, 4000);
}

bool ProcessGone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

std::vector<int> RecordedPids(const fs::path& dir) {
  std::vector<int> pids;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".pid") continue;
    std::ifstream in(entry.path());
    int pid = 0;
    if (in >> pid && pid > 0) pids.push_back(pid);
  }
  return pids;
}

class LocalClusterScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mooncake-example-cluster-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    env_ = "MASTER_PORT=" + std::to_string(master_port_) + " WORKER_PORTS='" +
           std::to_string(UnusedPort()) + " " + std::to_string(UnusedPort()) + " " +
           std::to_string(UnusedPort()) +
           "' DRAM=32MiB SSD=64MiB BUILD_DIR=" + Quote(BuildDir().string()) + " ";
  }
  void TearDown() override {
    // Whatever happened, nothing the script started may outlive the test.
    if (fs::exists(dir_)) Script("stop");
    if (HasFailure()) {
      for (const char* name : {"master", "worker-1", "worker-2", "worker-3"}) {
        auto log =
            RunCommand("tail -n 20 " + Quote((dir_ / (std::string(name) + ".log")).string()));
        std::cerr << "---- " << name << ".log\n" << log.output;
      }
    }
    fs::remove_all(dir_);
  }

  CommandResult Script(const std::string& action) {
    return RunCommand(env_ + Quote((RepoRoot() / "examples/local_cluster.sh").string()) + " " +
                      action + " " + Quote(dir_.string()));
  }
  CommandResult Cli(const std::string& args) {
    return RunCommand(Quote(MOONCAKE_CLI_BIN) +
                      " --master 127.0.0.1:" + std::to_string(master_port_) + " " + args);
  }

  fs::path dir_;
  int master_port_ = UnusedPort();
  std::string env_;
};

TEST_F(LocalClusterScriptTest, StartsThreeWorkersServesTheCliAndStopsByPid) {
  // When the script starts a cluster in a temp dir on custom ports.
  auto started = Script("start");
  ASSERT_EQ(started.exit_code, 0) << Show(started);
  EXPECT_NE(started.output.find("127.0.0.1:" + std::to_string(master_port_)), std::string::npos)
      << Show(started);
  for (const char* name : {"worker-1", "worker-2", "worker-3"}) {
    EXPECT_NE(started.output.find(name), std::string::npos) << Show(started);
  }
  std::vector<int> pids = RecordedPids(dir_);
  ASSERT_EQ(pids.size(), 4u);

  // Expect the CLI to see three live workers and to store and read a value.
  auto nodes = Cli("--json nodes");
  ASSERT_EQ(nodes.exit_code, 0) << Show(nodes);
  for (const char* name : {"worker-1", "worker-2", "worker-3"}) {
    EXPECT_NE(nodes.output.find(name), std::string::npos) << Show(nodes);
  }
  auto put = Cli("put example-key example-value");
  EXPECT_EQ(put.exit_code, 0) << Show(put);
  auto get = Cli("get example-key");
  EXPECT_EQ(get.exit_code, 0) << Show(get);
  EXPECT_NE(get.output.find("example-value"), std::string::npos) << Show(get);
  auto status = Script("status");
  EXPECT_EQ(status.exit_code, 0) << Show(status);

  // Then stop: every recorded PID is gone.
  auto stopped = Script("stop");
  EXPECT_EQ(stopped.exit_code, 0) << Show(stopped);
  for (int pid : pids) {
    EXPECT_TRUE(Eventually([pid] { return ProcessGone(pid); }, 15s)) << "pid " << pid;
  }
  auto after = Script("status");
  EXPECT_NE(after.exit_code, 0) << Show(after);
}

class ExampleClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32ull << 20, .ssd = 64ull << 20}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 32ull << 20, .ssd = 64ull << 20}));
  }
  TestCluster cluster_;
};

TEST_F(ExampleClientsTest, CppClientExampleSucceeds) {
  fs::path binary = BuildDir() / "examples/mooncake-client-example";
  ASSERT_TRUE(fs::exists(binary)) << binary << " is not built (target mooncake-client-example)";
  auto run = RunCommand(Quote(binary.string()) + " --master " + cluster_.master_address());
  EXPECT_EQ(run.exit_code, 0) << Show(run) << cluster_.AllLogTails();
  EXPECT_NE(run.output.find("every step ok"), std::string::npos) << Show(run);
}

TEST_F(ExampleClientsTest, ZeroCopyExampleSucceeds) {
  fs::path binary = BuildDir() / "examples/mooncake-zero-copy-example";
  ASSERT_TRUE(fs::exists(binary)) << binary << " is not built (target mooncake-zero-copy-example)";
  auto run =
      RunCommand(Quote(binary.string()) + " --master " + cluster_.master_address() + " --node w1");
  EXPECT_EQ(run.exit_code, 0) << Show(run) << cluster_.AllLogTails();
  EXPECT_NE(run.output.find("every step ok"), std::string::npos) << Show(run);
  EXPECT_NE(run.output.find("-> dram of w1"), std::string::npos) << Show(run);
}

TEST_F(ExampleClientsTest, PythonClientSucceeds) {
  fs::path gen_py = BuildDir() / "examples/gen-py";
  ASSERT_TRUE(fs::exists(gen_py / "mooncake_rpc/WorkerService.py"))
      << gen_py << " is missing (target mooncake-python-gen)";
  // Debian's interpreter is the one python3-thrift is installed for.
  std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  auto run =
      RunCommand(python + " " + Quote((RepoRoot() / "examples/python_client.py").string()) +
                 " --master " + cluster_.master_address() + " --gen-py " + Quote(gen_py.string()));
  EXPECT_EQ(run.exit_code, 0) << Show(run) << cluster_.AllLogTails();
  EXPECT_NE(run.output.find("every step ok"), std::string::npos) << Show(run);
  // The workers run on this machine: the zero-copy part must really run.
  EXPECT_EQ(run.output.find("skipped"), std::string::npos) << Show(run);
  EXPECT_NE(run.output.find("Get of the zero-copy value"), std::string::npos) << Show(run);
}

// A master answers NOT_LEADER for --rebuild-ms after it starts; the example
// must wait that out at the same address (it names itself in GetRole), not
// take the empty answer for a node.
TEST(ExampleClientsRebuildTest, PythonClientWaitsOutTheRebuildWindow) {
  fs::path gen_py = BuildDir() / "examples/gen-py";
  ASSERT_TRUE(fs::exists(gen_py / "mooncake_rpc/WorkerService.py"))
      << gen_py << " is missing (target mooncake-python-gen)";
  std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  TestCluster cluster;
  ASSERT_TRUE(cluster.StartMaster({"--rebuild-ms", "2000"}));
  const auto master_ready = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster.StartWorker("w1", {.dram = 32ull << 20, .ssd = 64ull << 20}));
  const bool in_window = std::chrono::steady_clock::now() - master_ready < 1500ms;
  auto run =
      RunCommand(python + " " + Quote((RepoRoot() / "examples/python_client.py").string()) +
                 " --master " + cluster.master_address() + " --gen-py " + Quote(gen_py.string()));
  EXPECT_EQ(run.exit_code, 0) << Show(run) << cluster.AllLogTails();
  EXPECT_NE(run.output.find("every step ok"), std::string::npos) << Show(run);
  // Only provable when the worker started well inside the window.
  if (in_window) {
    EXPECT_NE(run.output.find("rebuilding its directory"), std::string::npos) << Show(run);
  }
}

}  // namespace
}  // namespace mooncake::testing
