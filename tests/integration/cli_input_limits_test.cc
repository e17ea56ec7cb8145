// Inputs an operator names by mistake are bounded in every binary: a config
// file or an --admin-token-file that never ends (/dev/zero), and a
// mooncake-bench --value-size of a terabyte, are usage errors (exit 2) that
// name what was wrong, never a read or an allocation that ends in
// std::bad_alloc and an abort (exit 134). Real processes, run under an
// address-space limit so that a binary without the bounds fails fast
// instead of taking this machine's memory.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/unused_port.h"

extern char** environ;

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Address space a run may use: enough for any binary to start and parse
// its flags, far below what an unbounded read of /dev/zero asks for.
constexpr rlim_t kAddressSpaceLimit = 1ull << 30;

struct LimitedRun {
  int exit_code = -1;  // -1: killed by a signal (e.g. SIGABRT) or timed out
  std::string err;
};

// Runs `argv` with stdin, stdout on /dev/null and stderr captured, under
// kAddressSpaceLimit, for at most 30 s. MOONCAKE_* and the user's config
// are kept away from it.
LimitedRun RunLimited(std::vector<std::string> argv) {
  const fs::path err_path =
      fs::temp_directory_path() / ("cli_input_limits_test_" + std::to_string(getpid()) + ".err");
  std::vector<std::string> env = {"XDG_CONFIG_HOME=/nonexistent-mooncake-test"};
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    if (!entry.starts_with("MOONCAKE_") && !entry.starts_with("XDG_CONFIG_HOME=")) {
      env.emplace_back(entry);
    }
  }
  std::vector<char*> argv_ptrs, env_ptrs;
  for (auto& a : argv) argv_ptrs.push_back(a.data());
  for (auto& e : env) env_ptrs.push_back(e.data());
  argv_ptrs.push_back(nullptr);
  env_ptrs.push_back(nullptr);
  int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  LimitedRun run;
  if (err_fd < 0 || null_fd < 0) return run;
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here: the test is multithreaded.
    struct rlimit limit {
      kAddressSpaceLimit, kAddressSpaceLimit
    };
    setrlimit(RLIMIT_AS, &limit);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    _exit(127);
  }
  close(err_fd);
  close(null_fd);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (pid > 0 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  std::ifstream in(err_path);
  run.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  fs::remove(err_path);
  return run;
}

std::string Show(const LimitedRun& r) {
  return "exit=" + std::to_string(r.exit_code) + " stderr: " + r.err.substr(0, 1000);
}

TEST(CliInputLimitsTest, AConfigFileThatNeverEndsIsAUsageErrorInEveryBinary) {
  // No server is reached: each refuses its flags first (the CLI's master
  // is a free port, in case it did not).
  const std::string nowhere = "127.0.0.1:" + std::to_string(UnusedPort());
  LimitedRun cli =
      RunLimited({MOONCAKE_CLI_BIN, "--config", "/dev/zero", "--master", nowhere, "nodes"});
  EXPECT_EQ(cli.exit_code, 2) << Show(cli);
  EXPECT_NE(cli.err.find("config file '/dev/zero': holds more than 1.0 MiB"), std::string::npos)
      << Show(cli);

  LimitedRun master = RunLimited({MOONCAKE_MASTER_BIN, "--config", "/dev/zero", "--port", "0"});
  EXPECT_EQ(master.exit_code, 2) << Show(master);
  EXPECT_NE(master.err.find("config file /dev/zero: holds more than 1.0 MiB"), std::string::npos)
      << Show(master);

  LimitedRun worker = RunLimited({MOONCAKE_WORKER_BIN, "--config", "/dev/zero", "--port", "0"});
  EXPECT_EQ(worker.exit_code, 2) << Show(worker);
  EXPECT_NE(worker.err.find("holds more than 1.0 MiB"), std::string::npos) << Show(worker);
}

TEST(CliInputLimitsTest, AnAdminTokenFileThatNeverEndsIsAConfigError) {
  for (const char* binary : {MOONCAKE_MASTER_BIN, MOONCAKE_WORKER_BIN}) {
    LimitedRun run = RunLimited({binary, "--admin-token-file", "/dev/zero", "--port", "0"});
    EXPECT_EQ(run.exit_code, 2) << binary << " " << Show(run);
    EXPECT_NE(run.err.find("--admin-token-file: \"/dev/zero\" holds more than 4.0 KiB"),
              std::string::npos)
        << binary << " " << Show(run);
  }
}

#ifdef MOONCAKE_BENCH_BIN
TEST(CliInputLimitsTest, ABenchValueSizeOverTheLimitIsAUsageError) {
  const std::string nowhere = "127.0.0.1:" + std::to_string(UnusedPort());
  for (const char* size : {"1TiB", "64GiB"}) {
    LimitedRun run = RunLimited({MOONCAKE_BENCH_BIN, "--master", nowhere, "--value-size", size});
    EXPECT_EQ(run.exit_code, 2) << size << " " << Show(run);
    EXPECT_NE(run.err.find("is over the limit of 4GiB"), std::string::npos)
        << size << " " << Show(run);
  }
}
#endif

}  // namespace
}  // namespace mooncake::testing
