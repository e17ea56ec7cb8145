// Processes started with a standard descriptor closed (`cmd >&-`, `<&-`, a
// supervisor or cron wrapper that closes them): the next open(), socket() or
// memfd_create() would take the lowest free number, so the worker's DRAM
// arena became its stdout (log lines written into cached values) and the
// CLI wrote a value into its connection to the master. Every binary's main
// reopens a closed 0, 1 or 2 first (common/stdio_fds.h); the CLI keeps a
// closed stdout unusable, so writing a value to it fails with exit 3.
// Real processes, spawned with the descriptor closed.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

extern char** environ;

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1ull << 20;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Which standard descriptors a spawned process starts without.
struct Closed {
  bool in = false;
  bool out = false;
};

// A process spawned with some standard descriptors closed; its stderr (and
// stdout when not closed) go to `log`. Killed and reaped by the destructor
// if still running.
class Spawned {
 public:
  Spawned(std::vector<std::string> argv, Closed closed, const fs::path& log) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string_view entry(*e);
      // No MOONCAKE_* of the caller's, no config file of the user's.
      if (!entry.starts_with("MOONCAKE_") && !entry.starts_with("XDG_CONFIG_HOME=")) {
        env.emplace_back(entry);
      }
    }
    env.push_back("XDG_CONFIG_HOME=" + (log.parent_path() / "xdg-none").string());
    std::vector<char*> argv_ptrs, env_ptrs;
    for (auto& a : argv) argv_ptrs.push_back(a.data());
    for (auto& e : env) env_ptrs.push_back(e.data());
    argv_ptrs.push_back(nullptr);
    env_ptrs.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (closed.in) {
      posix_spawn_file_actions_addclose(&actions, STDIN_FILENO);
    } else {
      posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    }
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (closed.out) {
      posix_spawn_file_actions_addclose(&actions, STDOUT_FILENO);
    } else {
      posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
    }
    if (posix_spawn(&pid_, argv_ptrs[0], &actions, nullptr, argv_ptrs.data(), env_ptrs.data()) !=
        0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Spawned() {
    if (pid_ > 0) Stop(SIGKILL);
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;

  pid_t pid() const { return pid_; }

  // The exit code once it exits within `timeout`; nullopt when it did not
  // (it is then killed) or died of a signal.
  std::optional<int> Wait(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        Stop(SIGKILL);
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    if (!WIFEXITED(status)) return std::nullopt;
    return WEXITSTATUS(status);
  }

  // Sends `sig` and reaps it (SIGKILL after 10 s).
  void Stop(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    if (!Wait(std::chrono::seconds(10))) return;
  }

  // What descriptor `fd` of the process is: "/dev/null", "socket:[..]",
  // "/memfd:mooncake-dram (deleted)"; empty when it cannot be read.
  std::string Descriptor(int fd) const {
    std::error_code ec;
    auto target =
        fs::read_symlink("/proc/" + std::to_string(pid_) + "/fd/" + std::to_string(fd), ec);
    return ec ? std::string() : target.string();
  }

 private:
  pid_t pid_ = -1;
};

// Two lines of a ready file, the RPC port and the admin port, once written
// within 20 s.
std::optional<std::pair<int, int>> WaitForReadyFile(const fs::path& path) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    int port = 0, admin_port = 0;
    if (in >> port >> admin_port && port > 0) return std::pair{port, admin_port};
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

// The frames the master's RPC server refused, all reasons together: a CLI
// that wrote its output into its master connection shows up here.
double RejectedFrames(int admin_port) {
  auto reply = Http(admin_port, "GET", "/metrics");
  if (!reply) return std::nan("");
  constexpr std::string_view kSeries = "mooncake_rpc_rejected_frames_total{";
  double total = 0;
  std::istringstream page(reply->body);
  for (std::string line; std::getline(page, line);) {
    if (!line.starts_with(kSeries)) continue;
    total += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return total;
}

class CliStdioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 * kMiB, .ssd = 32 * kMiB}));
  }

  // mooncake-cli ARGS against the cluster, with `closed` descriptors closed;
  // the exit code (nullopt: it hung past 20 s or died) and its stderr.
  std::pair<std::optional<int>, std::string> CliWithClosed(const std::vector<std::string>& args,
                                                           Closed closed) {
    std::vector<std::string> argv = {MOONCAKE_CLI_BIN, "--master", cluster_.master_address()};
    argv.insert(argv.end(), args.begin(), args.end());
    const fs::path log = cluster_.dir() / "cli-closed.err";
    Spawned cli(argv, closed, log);
    EXPECT_GT(cli.pid(), 0);
    auto code = cli.Wait(std::chrono::seconds(20));
    return {code, ReadFile(log)};
  }

  TestCluster cluster_;
};

TEST_F(CliStdioTest, GetToAClosedStdoutExitsThreeAndSendsNothingToTheMaster) {
  ASSERT_EQ(cluster_.RunCli({"put", "k", "hello, a value of some length"}).exit_code, 0);
  const double rejected_before = RejectedFrames(cluster_.master_admin_port());
  ASSERT_FALSE(std::isnan(rejected_before));

  // When `mooncake-cli get k >&-` runs, expect the failure to write stdout,
  // as `cat FILE >&-` reports it, never exit 0.
  auto [code, err] = CliWithClosed({"get", "k"}, {.out = true});
  EXPECT_EQ(code, 3) << err;
  EXPECT_NE(err.find("get failed: writing stdout: Bad file descriptor"), std::string::npos) << err;

  // And -o /dev/stdout, which names the same closed descriptor.
  auto [named_code, named_err] = CliWithClosed({"get", "k", "-o", "/dev/stdout"}, {.out = true});
  EXPECT_EQ(named_code, 3) << named_err;

  // The value never went into the master connection: the master refused no
  // frame (it did, "frame_too_large", when the socket took descriptor 1).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(RejectedFrames(cluster_.master_admin_port()), rejected_before);
  EXPECT_EQ(cluster_.RunCli({"get", "k"}).out, "hello, a value of some length");
}

TEST_F(CliStdioTest, PutWithAClosedStdoutSaysItsLineWasLostAndWithAClosedStdinFailsAtOnce) {
  // The put is done; only its "stored" line cannot be written: exit 3.
  auto [code, err] = CliWithClosed({"put", "k", "v"}, {.out = true});
  EXPECT_EQ(code, 3) << err;
  EXPECT_NE(err.find("put failed: writing stdout: Bad file descriptor (the put itself was done)"),
            std::string::npos)
      << err;
  EXPECT_EQ(cluster_.RunCli({"get", "k"}).out, "v");

  // `put k2 - <&-`: reading stdin fails at once (it read the master socket
  // and waited 30 s for the RPC timeout when that socket took descriptor 0).
  const auto started = Clock::now();
  auto [in_code, in_err] = CliWithClosed({"put", "k2", "-"}, {.in = true});
  EXPECT_EQ(in_code, 3) << in_err;
  EXPECT_NE(in_err.find("put failed: reading the input: Bad file descriptor"), std::string::npos)
      << in_err;
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(10));
  EXPECT_EQ(cluster_.RunCli({"exist", "k2"}).exit_code, 1);
}

TEST_F(CliStdioTest, AWorkerStartedWithoutStdoutNeverLogsIntoItsDramArena) {
  // Given a worker started with stdout closed, its DRAM tier the only one
  // (so an object's bytes live in the arena, which took descriptor 1).
  const fs::path dir = cluster_.dir() / "closed-worker";
  fs::create_directories(dir);
  Spawned worker(
      {MOONCAKE_WORKER_BIN, "--node-id", "closed", "--port", "0", "--admin-port", "0", "--master",
       cluster_.master_address(), "--dram-capacity", "4MiB", "--ssd-capacity", "0",
       "--heartbeat-interval-ms", "200", "--ready-file", (dir / "ready").string()},
      {.out = true}, dir / "worker.err");
  ASSERT_GT(worker.pid(), 0);
  ASSERT_TRUE(WaitForReadyFile(dir / "ready")) << ReadFile(dir / "worker.err");

  // Expect its descriptor 1 on /dev/null, not on its arena, a socket or a
  // data file.
  EXPECT_EQ(worker.Descriptor(1), "/dev/null");

  // When a 1 MiB object is stored and the worker then logs a warning (a
  // put that fits no tier), expect the object's bytes unchanged.
  const std::string value = PatternBytes(11, kMiB);
  WriteFile(dir / "value.bin", value);
  WriteFile(dir / "too-large.bin", PatternBytes(12, 5 * kMiB));
  ASSERT_EQ(
      cluster_.RunCli({"--node", "closed", "put", "victim", "--file", (dir / "value.bin").string()})
          .exit_code,
      0);
  EXPECT_NE(cluster_
                .RunCli({"--node", "closed", "put", "too-large", "--file",
                         (dir / "too-large.bin").string()})
                .exit_code,
            0);
  auto got = cluster_.RunCli({"get", "victim"});
  EXPECT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == value) << "the object's bytes changed after the worker logged";
  worker.Stop(SIGTERM);
}

TEST_F(CliStdioTest, AMasterStartedWithoutStdoutHasItOnDevNull) {
  const fs::path dir = cluster_.dir() / "closed-master";
  fs::create_directories(dir);
  Spawned master({MOONCAKE_MASTER_BIN, "--port", "0", "--admin-port", "0", "--ready-file",
                  (dir / "ready").string()},
                 {.in = true, .out = true}, dir / "master.err");
  ASSERT_GT(master.pid(), 0);
  ASSERT_TRUE(WaitForReadyFile(dir / "ready")) << ReadFile(dir / "master.err");
  EXPECT_EQ(master.Descriptor(0), "/dev/null");
  EXPECT_EQ(master.Descriptor(1), "/dev/null");
  master.Stop(SIGTERM);
}

#ifdef MOONCAKE_BENCH_BIN
TEST_F(CliStdioTest, BenchWithAClosedStdoutNeverWritesItsReportToTheMaster) {
  const double rejected_before = RejectedFrames(cluster_.master_admin_port());
  ASSERT_FALSE(std::isnan(rejected_before));
  const fs::path log = cluster_.dir() / "bench-closed.err";
  Spawned bench({MOONCAKE_BENCH_BIN, "--master", cluster_.master_address(), "--node", "w1",
                 "--keys", "10", "--ops", "5", "--get-ratio", "1", "--concurrency", "1", "--json"},
                {.out = true}, log);
  ASSERT_GT(bench.pid(), 0);
  auto code = bench.Wait(std::chrono::seconds(60));
  EXPECT_TRUE(code.has_value()) << ReadFile(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(RejectedFrames(cluster_.master_admin_port()), rejected_before) << ReadFile(log);
}
#endif

}  // namespace
}  // namespace mooncake::testing
