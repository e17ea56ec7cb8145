// Operability of the real binaries (issue 15): /livez, /readyz (and /health,
// its alias) on both admin servers, /version, --version, the worker's
// environment variables and the wording of config errors.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"
#include "tests/unused_port.h"

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<json> JsonOf(const std::optional<HttpReply>& r) {
  if (!r) return std::nullopt;
  try {
    return json::parse(r->body);
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string Show(const std::optional<HttpReply>& r) {
  if (!r) return "no reply";
  return "status=" + std::to_string(r->status) + " body=" + r->body.substr(0, 2000);
}

std::string ReadAll(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A process this test starts itself (the harness waits for a ready file a
// worker writes only once registered). Killed and reaped on destruction.
class OwnProcess {
 public:
  // Runs `args` with `env` ("NAME=value") added to, or replacing, ours;
  // stdout and stderr go to `log`.
  OwnProcess(const std::vector<std::string>& args, const std::vector<std::string>& env,
             const fs::path& log)
      : log_(log) {
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      std::string name = kv.substr(0, kv.find('='));
      bool replaced = false;
      for (const auto& extra : env) replaced |= extra.substr(0, extra.find('=')) == name;
      if (!replaced) envs.push_back(kv);
    }
    envs.insert(envs.end(), env.begin(), env.end());
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (fd >= 0) close(fd);
  }
  ~OwnProcess() { Stop(); }
  OwnProcess(const OwnProcess&) = delete;
  OwnProcess& operator=(const OwnProcess&) = delete;

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string Log() const { return ReadAll(log_); }

 private:
  fs::path log_;
  pid_t pid_ = -1;
};

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `args` to completion (bounded by the binaries' own quick exit).
RunResult RunBinary(const std::vector<std::string>& args, const fs::path& dir) {
  const fs::path out = dir / "run.out", err = dir / "run.err";
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, STDOUT_FILENO);
    dup2(e, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  RunResult run;
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    run.exit_code = WEXITSTATUS(status);
  }
  run.out = ReadAll(out);
  run.err = ReadAll(err);
  return run;
}

// mooncake-bench sits beside the other binaries in the build tree.
fs::path BenchBinary() {
  return fs::path(MOONCAKE_MASTER_BIN).parent_path().parent_path() / "bench" / "mooncake-bench";
}

class OperationsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails();
  }

  // Arguments of a worker this test starts itself on `admin_port`.
  std::vector<std::string> OwnWorkerArgs(const std::string& node_id, int admin_port) const {
    return {MOONCAKE_WORKER_BIN,
            "--node-id",
            node_id,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--admin-port",
            std::to_string(admin_port),
            "--dram-capacity",
            "16MiB",
            "--ssd-capacity",
            "0",
            "--heartbeat-interval-ms",
            "200",
            "--log-level",
            "info"};
  }

  TestCluster cluster_;
};

TEST_F(OperationsTest, WorkerIsNotReadyUntilItRegistersWithTheMaster) {
  // Given a master port where nobody listens (the master is started, then
  // stopped, so RestartMaster can bring it back on that port).
  ASSERT_TRUE(cluster_.StartMaster());
  const int master_port = cluster_.master_port();
  cluster_.KillMaster(SIGKILL);

  // When a worker starts pointing at it
  const int admin = UnusedPort();
  auto args = OwnWorkerArgs("lonely", admin);
  args.insert(args.end(), {"--master", "127.0.0.1:" + std::to_string(master_port)});
  OwnProcess worker(args, {}, cluster_.dir() / "lonely.log");

  // Expect it alive but not ready, saying why
  std::optional<HttpReply> live;
  ASSERT_TRUE(Eventually([&] {
    live = Http(admin, "GET", "/livez");
    return live && live->status == 200;
  })) << Show(live)
      << "\n"
      << worker.Log();
  auto ready = Http(admin, "GET", "/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503) << Show(ready);
  auto doc = JsonOf(ready);
  ASSERT_TRUE(doc) << Show(ready);
  EXPECT_EQ((*doc)["ready"], false);
  EXPECT_EQ((*doc)["status"], "unavailable");
  EXPECT_EQ((*doc)["registered"], false);
  ASSERT_TRUE((*doc)["reasons"].is_array() && !(*doc)["reasons"].empty()) << doc->dump();
  EXPECT_NE((*doc)["reasons"][0].get<std::string>().find("not registered"), std::string::npos)
      << doc->dump();
  // /health is the same answer.
  auto health = Http(admin, "GET", "/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503) << Show(health);

  // And ready once the master is up on that port
  ASSERT_TRUE(cluster_.RestartMaster());
  ASSERT_TRUE(Eventually(
      [&] {
        ready = Http(admin, "GET", "/readyz");
        return ready && ready->status == 200;
      },
      20s))
      << Show(ready) << "\n"
      << worker.Log();
  doc = JsonOf(ready);
  ASSERT_TRUE(doc);
  EXPECT_EQ((*doc)["ready"], true);
  EXPECT_EQ((*doc)["status"], "ok");
  EXPECT_TRUE((*doc)["reasons"].empty()) << doc->dump();
  EXPECT_EQ((*doc)["node_id"], "lonely");
}

TEST_F(OperationsTest, WorkerTurnsUnreadyWhenHeartbeatsStopAndBackWhenTheMasterReturns) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.ssd = 0}));
  const int admin = cluster_.worker_admin_port("w1");
  auto ready = Http(admin, "GET", "/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << Show(ready);

  // When the master goes away, heartbeats go stale: 503 with the reason
  cluster_.KillMaster(SIGKILL);
  ASSERT_TRUE(Eventually(
      [&] {
        ready = Http(admin, "GET", "/readyz");
        return ready && ready->status == 503;
      },
      15s))
      << Show(ready);
  auto doc = JsonOf(ready);
  ASSERT_TRUE(doc);
  EXPECT_NE(doc->dump().find("no successful heartbeat"), std::string::npos) << doc->dump();
  EXPECT_EQ(Http(admin, "GET", "/livez")->status, 200);

  // And 200 again once the master is back
  ASSERT_TRUE(cluster_.RestartMaster());
  EXPECT_TRUE(Eventually(
      [&] {
        ready = Http(admin, "GET", "/readyz");
        return ready && ready->status == 200;
      },
      20s))
      << Show(ready);
}

TEST_F(OperationsTest, DeadNodeShowsInTheMastersReadiness) {
  ASSERT_TRUE(cluster_.StartMaster({"--node-ttl-ms", "1000"}));
  ASSERT_TRUE(cluster_.StartWorker("w1", {.ssd = 0}));
  ASSERT_TRUE(cluster_.StartWorker("w2", {.ssd = 0}));
  const int admin = cluster_.master_admin_port();
  auto ready = Http(admin, "GET", "/readyz");
  auto doc = JsonOf(ready);
  ASSERT_TRUE(doc) << Show(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ((*doc)["nodes_alive"], 2);
  EXPECT_EQ((*doc)["nodes_dead"], 0);
  EXPECT_EQ((*doc)["degraded"], false);

  cluster_.KillWorker("w2", SIGKILL);
  ASSERT_TRUE(Eventually(
      [&] {
        ready = Http(admin, "GET", "/readyz");
        doc = JsonOf(ready);
        return doc && (*doc)["nodes_dead"] == 1;
      },
      15s))
      << Show(ready);
  // Still serving the others: 200, but degraded, naming the dead node.
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ((*doc)["ready"], true);
  EXPECT_EQ((*doc)["degraded"], true);
  EXPECT_EQ((*doc)["nodes_alive"], 1);
  ASSERT_EQ((*doc)["reasons"].size(), 1u) << doc->dump();
  EXPECT_NE((*doc)["reasons"][0].get<std::string>().find("w2"), std::string::npos) << doc->dump();
  auto health = JsonOf(Http(admin, "GET", "/health"));
  ASSERT_TRUE(health);
  EXPECT_EQ((*health)["nodes_dead"], 1);
  EXPECT_EQ((*health)["status"], "ok");
  EXPECT_EQ(Http(admin, "GET", "/livez")->status, 200);
}

TEST_F(OperationsTest, VersionRouteOnBothAdminServers) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.ssd = 0}));
  for (int port : {cluster_.master_admin_port(), cluster_.worker_admin_port("w1")}) {
    auto reply = Http(port, "GET", "/version");
    auto doc = JsonOf(reply);
    ASSERT_TRUE(doc) << Show(reply);
    EXPECT_EQ(reply->status, 200);
    EXPECT_TRUE((*doc)["version"].is_string() && !(*doc)["version"].get<std::string>().empty());
    EXPECT_TRUE((*doc)["commit"].is_string());
    EXPECT_TRUE((*doc)["build_type"].is_string());
    EXPECT_TRUE((*doc)["gpu"].is_boolean());
    EXPECT_TRUE((*doc)["rdma"].is_boolean());
  }
}

TEST_F(OperationsTest, VersionFlagPrintsTheVersionLineAndExitsZero) {
  const fs::path bench = BenchBinary();
  std::vector<std::pair<std::string, std::string>> binaries = {
      {MOONCAKE_MASTER_BIN, "mooncake-master "}, {MOONCAKE_WORKER_BIN, "mooncake-worker "}};
  if (fs::exists(bench)) binaries.push_back({bench.string(), "mooncake-bench "});
  for (const auto& [binary, program] : binaries) {
    RunResult run = RunBinary({binary, "--version"}, cluster_.dir());
    EXPECT_EQ(run.exit_code, 0) << binary << ": " << run.err;
    EXPECT_TRUE(run.out.starts_with(program)) << run.out;
    EXPECT_NE(run.out.find("commit "), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("gpu: "), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("rdma: "), std::string::npos) << run.out;
    EXPECT_TRUE(run.err.empty()) << run.err;
  }
}

// An operator reports the commit --version prints; it must be the one built,
// even when the build tree was configured at an older commit.
TEST_F(OperationsTest, VersionNamesTheCommitThatWasBuilt) {
  const fs::path git = "/usr/bin/git";
  if (!fs::exists(git)) GTEST_SKIP() << "no /usr/bin/git to read the source's commit";
  // Read-only git use: never take the index lock others' git commands need.
  setenv("GIT_OPTIONAL_LOCKS", "0", 1);
  RunResult head = RunBinary(
      {git.string(), "-C", MOONCAKE_SOURCE_DIR, "rev-parse", "--short=12", "HEAD"}, cluster_.dir());
  if (head.exit_code != 0) GTEST_SKIP() << "the source is not a git checkout: " << head.err;
  const std::string commit = head.out.substr(0, head.out.find('\n'));
  RunResult diff = RunBinary(
      {git.string(), "-C", MOONCAKE_SOURCE_DIR, "diff", "--quiet", "HEAD", "--"}, cluster_.dir());
  RunResult run = RunBinary({MOONCAKE_WORKER_BIN, "--version"}, cluster_.dir());
  if (diff.exit_code == 0) {
    // A tree without local changes (CI's fresh clone): exactly the commit,
    // no -dirty marker.
    EXPECT_NE(run.out.find("(commit " + commit + ","), std::string::npos)
        << run.out << " (source HEAD is " << commit
        << " with no local changes; rebuild after committing)";
  } else {
    // Tracked files differ from HEAD now; they may have been edited before or
    // after the build, so either form names the right commit.
    // WriteGitCommitMarksAModifiedTree checks the marker itself.
    EXPECT_TRUE(run.out.find("(commit " + commit + ",") != std::string::npos ||
                run.out.find("(commit " + commit + "-dirty,") != std::string::npos)
        << run.out << " (source HEAD is " << commit
        << ", with local changes; rebuild after committing)";
  }
}

// cmake/WriteGitCommit.cmake (what the build runs to make git_commit.h) on a
// scratch repository: HEAD's 12-digit hash when the tracked files match HEAD,
// with "-dirty" when one is modified; an untracked file alone is not a change.
TEST_F(OperationsTest, WriteGitCommitMarksAModifiedTree) {
  const fs::path git = "/usr/bin/git", cmake = "/usr/bin/cmake";
  if (!fs::exists(git) || !fs::exists(cmake)) GTEST_SKIP() << "needs /usr/bin/git and /usr/bin/cmake";
  setenv("GIT_OPTIONAL_LOCKS", "0", 1);
  const fs::path repo = cluster_.dir() / "scratch-repo", header = cluster_.dir() / "git_commit.h";
  fs::create_directories(repo);
  std::ofstream(repo / "tracked.txt") << "one\n";
  auto in_repo = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {git.string(), "-C", repo.string(), "-c", "user.name=t", "-c",
                               "user.email=t@example.invalid"});
    return RunBinary(args, cluster_.dir());
  };
  ASSERT_EQ(in_repo({"init", "-q"}).exit_code, 0);
  ASSERT_EQ(in_repo({"add", "tracked.txt"}).exit_code, 0);
  RunResult committed = in_repo({"commit", "-q", "-m", "scratch"});
  ASSERT_EQ(committed.exit_code, 0) << committed.err;
  RunResult head = in_repo({"rev-parse", "--short=12", "HEAD"});
  ASSERT_EQ(head.exit_code, 0) << head.err;
  const std::string commit = head.out.substr(0, head.out.find('\n'));
  ASSERT_EQ(commit.size(), 12u) << head.out;
  auto written = [&] {
    RunResult run = RunBinary({cmake.string(), "-DSOURCE_DIR=" + repo.string(),
                               "-DOUTPUT=" + header.string(), "-P",
                               std::string(MOONCAKE_SOURCE_DIR) + "/cmake/WriteGitCommit.cmake"},
                              cluster_.dir());
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return ReadAll(header);
  };
  const std::string clean = "#define MOONCAKE_GIT_COMMIT \"" + commit + "\"\n";
  const std::string dirty = "#define MOONCAKE_GIT_COMMIT \"" + commit + "-dirty\"\n";
  EXPECT_EQ(written(), clean);
  std::ofstream(repo / "tracked.txt") << "two\n";
  EXPECT_EQ(written(), dirty);
  std::ofstream(repo / "tracked.txt") << "one\n";
  std::ofstream(repo / "untracked.txt") << "scratch\n";
  EXPECT_EQ(written(), clean);
}

TEST_F(OperationsTest, EnvironmentVariablesSteerTheWorker) {
  ASSERT_TRUE(cluster_.StartMaster());
  const fs::path ready_file = cluster_.dir() / "env-worker.port";
  std::vector<std::string> args = {MOONCAKE_WORKER_BIN,
                                   "--host",
                                   "127.0.0.1",
                                   "--port",
                                   "0",
                                   "--admin-port",
                                   "0",
                                   "--dram-capacity",
                                   "16MiB",
                                   "--ssd-capacity",
                                   "0",
                                   "--heartbeat-interval-ms",
                                   "200",
                                   "--ready-file",
                                   ready_file.string()};
  // No --master and no --node-id: both come from the environment.
  OwnProcess worker(args,
                    {"MOONCAKE_MASTER=127.0.0.1:" + std::to_string(cluster_.master_port()),
                     "MOONCAKE_NODE_ID=from-env"},
                    cluster_.dir() / "env-worker.log");
  ASSERT_TRUE(Eventually([&] { return fs::exists(ready_file); }, 20s)) << worker.Log();
  auto nodes = JsonOf(Http(cluster_.master_admin_port(), "GET", "/nodes"));
  ASSERT_TRUE(nodes);
  ASSERT_EQ((*nodes)["nodes"].size(), 1u) << nodes->dump();
  EXPECT_EQ((*nodes)["nodes"][0]["node_id"], "from-env") << nodes->dump();
}

TEST_F(OperationsTest, MisspeltConfigKeyNamesTheKeyAndExitsTwo) {
  const fs::path config = cluster_.dir() / "worker.toml";
  std::ofstream(config) << "node_id = \"w1\"\n";
  RunResult run = RunBinary({MOONCAKE_WORKER_BIN, "--config", config.string()}, cluster_.dir());
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("config file " + config.string() + ": unknown key \"node_id\""),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("e.g. node-id"), std::string::npos) << run.err;

  RunResult bad_size = RunBinary({MOONCAKE_WORKER_BIN, "--dram-capacity", "lots"}, cluster_.dir());
  EXPECT_EQ(bad_size.exit_code, 2);
  EXPECT_NE(bad_size.err.find("--dram-capacity: expected a size like 64MiB, got \"lots\""),
            std::string::npos)
      << bad_size.err;

  const fs::path master_config = cluster_.dir() / "master.toml";
  std::ofstream(master_config) << "node_ttl_ms = 100\n";
  RunResult master =
      RunBinary({MOONCAKE_MASTER_BIN, "--config", master_config.string()}, cluster_.dir());
  EXPECT_EQ(master.exit_code, 2);
  EXPECT_NE(master.err.find("unknown key \"node_ttl_ms\""), std::string::npos) << master.err;
  EXPECT_NE(master.err.find("e.g. node-ttl-ms"), std::string::npos) << master.err;
}

}  // namespace
}  // namespace mooncake::testing
