// A worker started the way a new user starts it: from an empty directory with
// the default --ssd-path (./var/worker/ssd). It creates that directory (and
// its parents), starts and registers with the master. A --ssd-path that
// cannot be created or written stops it at start with exit code 4 and one
// line naming the path.
//
// The harness (test_cluster.h) runs the master; the worker is run here with
// fork/chdir/exec, since the harness always passes its own --ssd-path and
// runs children in the test's working directory.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadWholeFile(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A mooncake-worker child run in `cwd`, stdout and stderr into `log`.
class BareWorker {
 public:
  BareWorker(const fs::path& cwd, const fs::path& log, std::vector<std::string> args) {
    args.insert(args.begin(), MOONCAKE_WORKER_BIN);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string cwd_s = cwd.string();
    const std::string log_s = log.string();
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ != 0) return;
    // Child: async-signal-safe calls only.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int fd = open(log_s.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
    if (chdir(cwd_s.c_str()) != 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ~BareWorker() { Stop(); }
  BareWorker(const BareWorker&) = delete;
  BareWorker& operator=(const BareWorker&) = delete;

  pid_t pid() const { return pid_; }

  // The exit status once it has exited within `timeout`, else nullopt.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout) {
    if (status_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        pid_ = -1;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(20ms);
    }
    return status_;
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    if (!WaitExit(10s)) {
      kill(pid_, SIGKILL);
      WaitExit(10s);
    }
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

class BareWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    empty_ = cluster_.dir() / "empty-cwd";
    fs::create_directories(empty_);
    ASSERT_TRUE(fs::is_empty(empty_));
  }

  std::vector<std::string> Args(const std::string& node_id) const {
    return {"--node-id",       node_id,
            "--host",          "127.0.0.1",
            "--port",          "0",
            "--admin-port",    "0",
            "--master",        cluster_.master_address(),
            "--dram-capacity", "16MiB",
            "--ssd-capacity",  "64MiB",
            "--ready-file",    (cluster_.dir() / (node_id + ".port")).string()};
  }

  TestCluster cluster_;
  fs::path empty_;
};

TEST_F(BareWorkerTest, DefaultSsdPathInAnEmptyDirectoryIsCreatedAndTheWorkerRegisters) {
  const fs::path ready = cluster_.dir() / "bare-1.port";
  const fs::path log = cluster_.dir() / "bare-1.log";
  BareWorker worker(empty_, log, Args("bare-1"));
  ASSERT_GT(worker.pid(), 0);

  ASSERT_TRUE(Eventually(
      [&] {
        std::error_code ec;
        return fs::file_size(ready, ec) > 0 && !ec;
      },
      30s))
      << "worker not ready; exit status "
      << (worker.WaitExit(0ms) ? std::to_string(*worker.WaitExit(0ms)) : "running") << "\n"
      << ReadWholeFile(log);
  EXPECT_TRUE(fs::is_directory(empty_ / "var" / "worker" / "ssd")) << ReadWholeFile(log);
  EXPECT_TRUE(fs::exists(empty_ / "var" / "worker" / "ssd" / "CURRENT")) << ReadWholeFile(log);

  std::string last;
  EXPECT_TRUE(Eventually(
      [&] {
        auto nodes = cluster_.RunCli({"nodes"});
        last = nodes.out + nodes.err;
        return nodes.exit_code == 0 && nodes.out.find("bare-1") != std::string::npos;
      },
      15s, 200ms))
      << "bare-1 never registered; mooncake-cli nodes: " << last << "\n"
      << ReadWholeFile(log);

  worker.Stop();
  auto status = worker.WaitExit(0ms);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << ReadWholeFile(log);
}

// Exit code 4 (the SSD tier cannot be opened) and one line naming the path.
void ExpectRefusedWithPath(BareWorker& worker, const fs::path& log, const std::string& path) {
  auto status = worker.WaitExit(30s);
  ASSERT_TRUE(status) << "worker still running with --ssd-path " << path;
  const std::string out = ReadWholeFile(log);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 4) << "status " << *status << "\n"
                                                               << out;
  EXPECT_NE(out.find("path=" + path), std::string::npos) << out;
  EXPECT_EQ(out.find("rocksdb open failed"), std::string::npos) << out;
}

TEST_F(BareWorkerTest, SsdPathUnderARegularFileFailsNamingThePath) {
  const fs::path file = empty_ / "plain-file";
  std::ofstream(file) << "not a directory";
  const std::string path = (file / "ssd").string();
  const fs::path log = cluster_.dir() / "bad-1.log";
  auto args = Args("bad-1");
  args.insert(args.end(), {"--ssd-path", path});
  BareWorker worker(empty_, log, args);
  ASSERT_GT(worker.pid(), 0);
  ExpectRefusedWithPath(worker, log, path);
  EXPECT_NE(ReadWholeFile(log).find("cannot create directory"), std::string::npos)
      << ReadWholeFile(log);
}

TEST_F(BareWorkerTest, SsdPathInProcFailsNamingThePath) {
  // No one, root included, can create directories in /proc.
  const std::string path = "/proc/mooncake-no-such-dir/ssd";
  const fs::path log = cluster_.dir() / "bad-2.log";
  auto args = Args("bad-2");
  args.insert(args.end(), {"--ssd-path", path});
  BareWorker worker(empty_, log, args);
  ASSERT_GT(worker.pid(), 0);
  ExpectRefusedWithPath(worker, log, path);
}

}  // namespace
}  // namespace mooncake::testing
