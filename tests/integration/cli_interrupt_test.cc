// mooncake-cli stopped by SIGINT (Ctrl-C) or SIGTERM in the middle of a
// transfer leaves no file behind: neither the partial FILE.mooncake-part-PID.RANDOM
// of `get -o FILE` nor the spool file of `put KEY -` under $TMPDIR. Real
// processes; the mid-transfer state is forced, not raced: the worker that
// serves the get is stopped (SIGSTOP), and the put's stdin is a pipe the
// test keeps open.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/test_cluster.h"

extern char** environ;

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1ull << 20;

void WriteFile(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The names in `dir` (empty when it holds nothing).
std::vector<std::string> Listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  return names;
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += n + " ";
  return out;
}

// mooncake-cli with `args` against `cluster`, its stdin on `in_fd`, stdout
// and stderr into `log`, `extra_env` added to our environment (minus
// MOONCAKE_* and the user's config). Killed and reaped by the destructor if
// still running.
class CliProcess {
 public:
  CliProcess(const TestCluster& cluster, const std::vector<std::string>& args, int in_fd,
             const fs::path& log, const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {MOONCAKE_CLI_BIN, "--master", cluster.master_address()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = extra_env;
    env.push_back("XDG_CONFIG_HOME=" + (cluster.dir() / "xdg-none").string());
    for (char** e = environ; *e; ++e) {
      std::string_view entry(*e);
      if (entry.starts_with("MOONCAKE_") || entry.starts_with("XDG_CONFIG_HOME=") ||
          entry.starts_with("TMPDIR=")) {
        continue;
      }
      env.emplace_back(entry);
    }
    std::vector<char*> argv_ptrs, env_ptrs;
    for (auto& a : argv) argv_ptrs.push_back(a.data());
    for (auto& e : env) env_ptrs.push_back(e.data());
    argv_ptrs.push_back(nullptr);
    env_ptrs.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (in_fd >= 0) {
      posix_spawn_file_actions_adddup2(&actions, in_fd, STDIN_FILENO);
    } else {
      posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    }
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    if (posix_spawn(&pid_, MOONCAKE_CLI_BIN, &actions, nullptr, argv_ptrs.data(),
                    env_ptrs.data()) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  ~CliProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Whether one of its open descriptors names a file under `dir`.
  bool HasFileOpenUnder(const fs::path& dir) const {
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid_) + "/fd", ec)) {
      auto target = fs::read_symlink(fd.path(), ec);
      if (!ec && target.string().starts_with(dir.string() + "/")) return true;
    }
    return false;
  }

  // Sends `sig` and reaps it; the signal it died of, or nullopt when it
  // exited instead or was still running after 20 s (then killed).
  std::optional<int> StopWith(int sig) {
    kill(pid_, sig);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    if (!WIFSIGNALED(status)) return std::nullopt;
    return WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

// Polls `pred` every 20 ms for at most 20 s.
bool Within20s(const std::function<bool()>& pred) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

class CliInterruptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32 * kMiB, .ssd = 32 * kMiB}));
  }

  TestCluster cluster_;
};

TEST_F(CliInterruptTest, CtrlCDuringGetToAFileLeavesNoPartialFile) {
  // Given an object whose worker is held still, so a get of it stays in
  // the middle of its transfer, with its partial file made, for as long as
  // the test wants.
  const fs::path dir = cluster_.dir() / "out";
  fs::create_directories(dir);
  WriteFile(cluster_.dir() / "value.bin", PatternBytes(3, 2 * kMiB));
  ASSERT_EQ(
      cluster_.RunCli({"put", "big", "--file", (cluster_.dir() / "value.bin").string()}).exit_code,
      0);
  ASSERT_TRUE(cluster_.Signal("w1", SIGSTOP));

  for (int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(sig == SIGINT ? "SIGINT" : "SIGTERM");
    const fs::path log = cluster_.dir() / "get.log";
    CliProcess get(cluster_, {"get", "big", "-o", (dir / "x.bin").string()}, -1, log);
    ASSERT_GT(get.pid(), 0);
    ASSERT_TRUE(Within20s([&] { return !Listing(dir).empty(); })) << ReadFile(log);
    ASSERT_NE(Joined(Listing(dir)).find("x.bin.mooncake-part-"), std::string::npos)
        << Joined(Listing(dir));

    // When it is interrupted, expect it to die of the signal, as before,
    // and leave nothing in the directory.
    EXPECT_EQ(get.StopWith(sig), sig) << ReadFile(log);
    EXPECT_TRUE(Listing(dir).empty()) << "left behind: " << Joined(Listing(dir));
  }
  ASSERT_TRUE(cluster_.Signal("w1", SIGCONT));
  auto got = cluster_.RunCli({"get", "big", "-o", (dir / "x.bin").string()});
  EXPECT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(Listing(dir), std::vector<std::string>{"x.bin"});
}

TEST_F(CliInterruptTest, CtrlCDuringPutFromAStreamLeavesNoSpoolFile) {
  // Given `producer | mooncake-cli put K -` whose producer has sent more than
  // one RPC's worth (so the CLI spools it under $TMPDIR) and keeps the pipe
  // open.
  const fs::path tmp = cluster_.dir() / "tmp";
  fs::create_directories(tmp);
  // A CLI that dies early must fail the test, not kill it with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  for (int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(sig == SIGINT ? "SIGINT" : "SIGTERM");
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
    const fs::path log = cluster_.dir() / "put.log";
    CliProcess put(cluster_, {"put", "streamed", "-"}, pipe_fds[0], log,
                   {"TMPDIR=" + tmp.string()});
    close(pipe_fds[0]);
    ASSERT_GT(put.pid(), 0);
    // The pipe holds 64 KiB: the writer thread blocks until the CLI reads.
    std::thread producer([fd = pipe_fds[1]] {
      const std::string chunk = PatternBytes(5, kMiB);
      for (int i = 0; i < 5; ++i) {
        if (write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) break;
      }
    });
    producer.join();
    ASSERT_TRUE(Within20s([&] { return put.HasFileOpenUnder(tmp); })) << ReadFile(log);

    // When it is interrupted mid-stream, expect nothing left in $TMPDIR.
    EXPECT_EQ(put.StopWith(sig), sig) << ReadFile(log);
    close(pipe_fds[1]);
    EXPECT_TRUE(Listing(tmp).empty()) << "left behind: " << Joined(Listing(tmp));
  }
  EXPECT_EQ(cluster_.RunCli({"exist", "streamed"}).exit_code, 1);
}

}  // namespace
}  // namespace mooncake::testing
