// mooncake-cli against a real cluster: what an operator types, and the exit
// codes scripts rely on (0 ok, 1 not found, 2 usage error, 3 server error).

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::filesystem::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Prints the whole CLI result when an expectation on it fails.
std::string Show(const CliResult& r) {
  return "exit=" + std::to_string(r.exit_code) + "\n  stdout: " + r.out.substr(0, 2000) +
         "\n  stderr: " + r.err.substr(0, 2000);
}

// mooncake-cli's command line and environment for `args` against `cluster`,
// as RunCli builds them: no config file or MOONCAKE_* of the caller's.
// argv() and envp() point into the object, which must outlive the spawn.
class CliInvocation {
 public:
  CliInvocation(const TestCluster& cluster, const std::vector<std::string>& args)
      : argv_{MOONCAKE_CLI_BIN, "--master", cluster.master_address()},
        env_{"XDG_CONFIG_HOME=" + (cluster.dir() / "xdg-config").string()} {
    argv_.insert(argv_.end(), args.begin(), args.end());
    for (char** e = environ; *e; ++e) {
      std::string_view entry(*e);
      if (!entry.starts_with("MOONCAKE_") && !entry.starts_with("XDG_CONFIG_HOME=")) {
        env_.emplace_back(entry);
      }
    }
    for (auto& a : argv_) argv_ptrs_.push_back(a.data());
    for (auto& e : env_) env_ptrs_.push_back(e.data());
    argv_ptrs_.push_back(nullptr);
    env_ptrs_.push_back(nullptr);
  }
  CliInvocation(const CliInvocation&) = delete;
  CliInvocation& operator=(const CliInvocation&) = delete;

  char* const* argv() { return argv_ptrs_.data(); }
  char* const* envp() { return env_ptrs_.data(); }

 private:
  std::vector<std::string> argv_, env_;
  std::vector<char*> argv_ptrs_, env_ptrs_;
};

// Runs mooncake-cli with its stdout on `out_fd`, as `mooncake-cli ... > FILE`
// does (RunCli captures stdout in a pipe), and its stdin on `in_fd` (-1:
// /dev/null). Returns the exit code, -1 when it died or ran past a minute;
// its stderr goes to `err_fd`, or is the test's when -1. `max_rss_kib`, if
// given, gets its peak RSS.
int RunCliWithFds(const TestCluster& cluster, const std::vector<std::string>& args, int out_fd,
                  int in_fd = -1, long* max_rss_kib = nullptr, int err_fd = -1) {
  CliInvocation cli(cluster, args);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  if (in_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, in_fd, STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, MOONCAKE_CLI_BIN, &actions, nullptr, cli.argv(), cli.envp());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  int status = 0;
  struct rusage usage {};
  while (wait4(pid, &status, WNOHANG, &usage) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (max_rss_kib) *max_rss_kib = usage.ru_maxrss;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Files in `dir` whose name contains `part`: what a get may have left behind.
std::vector<std::string> FilesNamed(const std::filesystem::path& dir, std::string_view part) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename();
    if (name.find(part) != std::string::npos) found.push_back(name);
  }
  return found;
}

// Runs mooncake-cli with its stdout on /dev/full, as `mooncake-cli ... >
// FILE` on a full disk: every write to it fails with ENOSPC.
CliResult RunCliIntoAFullDisk(const TestCluster& cluster, const std::vector<std::string>& args) {
  CliResult result;
  const auto err_path = cluster.dir() / "full-disk.err";
  int out = open("/dev/full", O_WRONLY | O_CLOEXEC);
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) {
    ADD_FAILURE() << "cannot open /dev/full or " << err_path;
  } else {
    result.exit_code = RunCliWithFds(cluster, args, out, -1, nullptr, err);
  }
  if (out >= 0) close(out);
  if (err >= 0) close(err);
  result.err = ReadFile(err_path);
  return result;
}

// The uid and gid of `nobody`, whom a test runs mooncake-cli as when it
// needs permissions that root would bypass.
constexpr uid_t kNobody = 65534;

// Exit code of a child that could not become kNobody or run the CLI as it.
constexpr int kCannotRunAsNobody = 125;

// Runs mooncake-cli as kNobody when this test runs as root, else as us.
// exit_code is kCannotRunAsNobody when that could not be done.
CliResult RunCliAsNobody(const TestCluster& cluster, const std::vector<std::string>& args) {
  CliInvocation cli(cluster, args);
  CliResult result;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return result;
  const bool as_root = geteuid() == 0;
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here: the test is multithreaded.
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    int null_in = open("/dev/null", O_RDONLY);
    if (null_in >= 0) dup2(null_in, STDIN_FILENO);
    if (as_root && (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0)) {
      _exit(kCannotRunAsNobody);
    }
    execve(MOONCAKE_CLI_BIN, cli.argv(), cli.envp());
    _exit(kCannotRunAsNobody);
  }
  close(out[1]);
  close(err[1]);
  auto drain = [](int fd, std::string& into) {
    char buffer[4096];
    ssize_t got;
    while ((got = read(fd, buffer, sizeof(buffer))) > 0) into.append(buffer, got);
    close(fd);
  };
  drain(out[0], result.out);
  drain(err[0], result.err);
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Given a master and two workers.
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 32 * kMiB, .ssd = 64 * kMiB}));
  }

  CliResult Cli(const std::vector<std::string>& args, std::string_view stdin_data = {}) {
    return cluster_.RunCli(args, stdin_data);
  }

  TestCluster cluster_;
};

TEST_F(CliTest, PutGetExistRemoveWithTheirExitCodes) {
  // When a value is put from the command line.
  auto put = Cli({"put", "greeting", "hello world"});
  EXPECT_EQ(put.exit_code, 0) << Show(put);

  // Expect get to print it, and exist to print 1.
  auto get = Cli({"get", "greeting"});
  EXPECT_EQ(get.exit_code, 0) << Show(get);
  EXPECT_TRUE(get.out == "hello world" || get.out == "hello world\n") << Show(get);
  auto exist = Cli({"exist", "greeting"});
  EXPECT_EQ(exist.exit_code, 0) << Show(exist);
  EXPECT_EQ(Trim(exist.out), "1") << Show(exist);

  // A second put of the key is refused with a clear message.
  auto again = Cli({"put", "greeting", "other"});
  EXPECT_NE(again.exit_code, 0) << Show(again);
  EXPECT_NE(Lower(again.err + again.out).find("already"), std::string::npos) << Show(again);

  // A missing key: exit 1 for get, exist (printing 0) and remove.
  auto missing_get = Cli({"get", "no-such-key"});
  EXPECT_EQ(missing_get.exit_code, 1) << Show(missing_get);
  auto missing_exist = Cli({"exist", "no-such-key"});
  EXPECT_EQ(missing_exist.exit_code, 1) << Show(missing_exist);
  EXPECT_EQ(Trim(missing_exist.out), "0") << Show(missing_exist);
  auto missing_remove = Cli({"remove", "no-such-key"});
  EXPECT_EQ(missing_remove.exit_code, 1) << Show(missing_remove);

  // A key just read holds a lease: plain remove is a server error naming
  // it, --force removes it.
  auto leased = Cli({"remove", "greeting"});
  EXPECT_EQ(leased.exit_code, 3) << Show(leased);
  EXPECT_NE(leased.err.find("OBJECT_HAS_LEASE"), std::string::npos) << Show(leased);
  auto remove = Cli({"remove", "greeting", "--force"});
  EXPECT_EQ(remove.exit_code, 0) << Show(remove);
  // A key nobody read is removed without --force.
  auto put_unread = Cli({"put", "unread", "v"});
  EXPECT_EQ(put_unread.exit_code, 0) << Show(put_unread);
  auto remove_unread = Cli({"remove", "unread"});
  EXPECT_EQ(remove_unread.exit_code, 0) << Show(remove_unread);

  // Expect removed keys gone.
  auto gone = Cli({"exist", "greeting"});
  EXPECT_EQ(gone.exit_code, 1) << Show(gone);
  EXPECT_EQ(Trim(gone.out), "0") << Show(gone);
  auto gone_get = Cli({"get", "greeting"});
  EXPECT_EQ(gone_get.exit_code, 1) << Show(gone_get);
}

TEST_F(CliTest, GetToFileAndPutFromFileOrStdinAreByteForByte) {
  const auto dir = cluster_.dir();
  // A value larger than one RPC chunk, with every byte value in it.
  const std::string big = PatternBytes(42, 2 * kRpcChunkBytes + 777);
  WriteFile(dir / "in.bin", big);

  // When a file is put with --file and read back with get -o.
  auto put_file = Cli({"put", "from-file", "--file", (dir / "in.bin").string()});
  ASSERT_EQ(put_file.exit_code, 0) << Show(put_file);
  auto get_file = Cli({"get", "from-file", "-o", (dir / "out.bin").string()});
  ASSERT_EQ(get_file.exit_code, 0) << Show(get_file);
  const std::string out = ReadFile(dir / "out.bin");
  EXPECT_EQ(out.size(), big.size());
  EXPECT_TRUE(out == big) << "get -o wrote different bytes";

  // When binary data is piped into put -.
  const std::string piped = std::string("line one\n\0\x01\xfe\xff", 14) + PatternBytes(43, 300000);
  auto put_stdin = Cli({"put", "from-stdin", "-"}, piped);
  ASSERT_EQ(put_stdin.exit_code, 0) << Show(put_stdin);
  auto get_stdin = Cli({"get", "from-stdin", "-o", (dir / "stdin.bin").string()});
  ASSERT_EQ(get_stdin.exit_code, 0) << Show(get_stdin);
  EXPECT_TRUE(ReadFile(dir / "stdin.bin") == piped) << "stdin round trip differs";

  // Expect a C++ client to read the same bytes the CLI wrote.
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  auto got = client->Get("from-file");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == big);
}

TEST_F(CliTest, GetToAPathThatCannotBeWrittenIsALocalErrorExitThree) {
  ASSERT_EQ(Cli({"put", "k", "hello"}).exit_code, 0);
  const auto dir = cluster_.dir() / "out";
  std::filesystem::create_directories(dir);
  WriteFile(dir / "file", "old");
  // Under a regular file (ENOTDIR) or in a directory that does not exist:
  // exit 3 (a local I/O error, not a usage error), naming the path, and
  // JSON code LOCAL_IO.
  for (const auto& path : {dir / "file" / "x", dir / "no-such-dir" / "x"}) {
    auto r = Cli({"get", "k", "-o", path.string()});
    EXPECT_EQ(r.exit_code, 3) << Show(r);
    EXPECT_NE(r.err.find("get failed: cannot write " + path.string() + ": "), std::string::npos)
        << Show(r);
    auto json = Cli({"--json", "get", "k", "-o", path.string()});
    EXPECT_EQ(json.exit_code, 3) << Show(json);
    EXPECT_NE(json.out.find("\"code\":\"LOCAL_IO\""), std::string::npos) << Show(json);
  }
  EXPECT_EQ(ReadFile(dir / "file"), "old");
}

TEST_F(CliTest, GetToAWritableFileInAReadOnlyDirectoryWritesItInPlace) {
  // Given a writable file in a directory the CLI cannot create files in
  // (root-owned 0755 run as nobody; 0555 when the test is not root).
  const std::string value = "the value\n" + PatternBytes(8, 3 * kRpcChunkBytes + 5);
  WriteFile(cluster_.dir() / "value.bin", value);
  ASSERT_EQ(Cli({"put", "k", "--file", (cluster_.dir() / "value.bin").string()}).exit_code, 0);
  const auto dir = cluster_.dir() / "read-only";
  std::filesystem::create_directories(dir);
  WriteFile(dir / "out.bin", "old contents");
  ASSERT_EQ(chmod((dir / "out.bin").c_str(), 0666), 0);
  ASSERT_EQ(chmod(cluster_.dir().c_str(), 0755), 0);  // mkdtemp made it 0700
  ASSERT_EQ(chmod(dir.c_str(), geteuid() == 0 ? 0755 : 0555), 0);
  struct DirMode {  // writable again for the cluster's clean-up
    std::filesystem::path dir;
    ~DirMode() { chmod(dir.c_str(), 0755); }
  } restore{dir};

  // A missing key leaves the file untouched.
  auto missing = RunCliAsNobody(cluster_, {"get", "absent", "-o", (dir / "out.bin").string()});
  if (missing.exit_code == kCannotRunAsNobody) {
    GTEST_SKIP() << "cannot run mooncake-cli as uid " << kNobody
                 << " (no CAP_SETUID, or the build or test directory is not readable to it)";
  }
  EXPECT_EQ(missing.exit_code, 1) << Show(missing);
  EXPECT_EQ(ReadFile(dir / "out.bin"), "old contents");

  // When a get names the file, expect it to hold the value, as `> FILE`
  // would, with no partial file left beside it.
  auto get = RunCliAsNobody(cluster_, {"get", "k", "-o", (dir / "out.bin").string()});
  EXPECT_EQ(get.exit_code, 0) << Show(get);
  EXPECT_TRUE(ReadFile(dir / "out.bin") == value) << ReadFile(dir / "out.bin").size() << " bytes";
  struct stat st {};
  ASSERT_EQ(stat((dir / "out.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u) << std::oct << (st.st_mode & 07777);
  EXPECT_TRUE(FilesNamed(dir, "mooncake-part").empty());

  // A new file there cannot be made: the message names the directory, exit 3.
  auto create = RunCliAsNobody(cluster_, {"get", "k", "-o", (dir / "new.bin").string()});
  EXPECT_EQ(create.exit_code, 3) << Show(create);
  EXPECT_NE(create.err.find("cannot create " + (dir / "new.bin").string() + " in " + dir.string() +
                            ": Permission denied"),
            std::string::npos)
      << Show(create);
  EXPECT_FALSE(std::filesystem::exists(dir / "new.bin"));
}

TEST_F(CliTest, GetToASymlinkWritesItsTargetAndKeepsTheLinkAndTheMode) {
  const auto dir = cluster_.dir() / "out";
  std::filesystem::create_directories(dir);
  const std::string value = "the value\n" + PatternBytes(5, 3000);
  WriteFile(dir / "value.bin", value);
  ASSERT_EQ(Cli({"put", "k", "--file", (dir / "value.bin").string()}).exit_code, 0);

  // Given link -> src, when get -o names the link.
  WriteFile(dir / "src", "old contents");
  std::filesystem::create_symlink("src", dir / "link");
  auto via_link = Cli({"get", "k", "-o", (dir / "link").string()});
  ASSERT_EQ(via_link.exit_code, 0) << Show(via_link);
  // Expect the target to hold the value and the link to stay a link to it.
  EXPECT_TRUE(ReadFile(dir / "src") == value) << "the link's target was not written";
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link")) << "the link was replaced by a file";
  std::error_code ec;
  EXPECT_EQ(std::filesystem::read_symlink(dir / "link", ec), "src") << ec.message();

  // Given a private file, when a get replaces it, expect it to stay private.
  WriteFile(dir / "private", "old");
  ASSERT_EQ(chmod((dir / "private").c_str(), 0600), 0);
  auto private_get = Cli({"get", "k", "-o", (dir / "private").string()});
  ASSERT_EQ(private_get.exit_code, 0) << Show(private_get);
  EXPECT_TRUE(ReadFile(dir / "private") == value);
  struct stat st {};
  ASSERT_EQ(stat((dir / "private").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << std::oct << (st.st_mode & 07777);

  // No partial file is left beside either.
  EXPECT_TRUE(FilesNamed(dir, "mooncake-part").empty());
}

TEST_F(CliTest, GetToStdoutByNameWritesWhereStdoutGoes) {
  const auto dir = cluster_.dir() / "out";
  std::filesystem::create_directories(dir);
  const std::string value = PatternBytes(6, 5000);
  WriteFile(dir / "value.bin", value);
  ASSERT_EQ(Cli({"put", "k", "--file", (dir / "value.bin").string()}).exit_code, 0);

  // stdout a pipe (the harness's): -o /dev/stdout prints the value.
  auto piped = Cli({"get", "k", "-o", "/dev/stdout"});
  ASSERT_EQ(piped.exit_code, 0) << Show(piped);
  EXPECT_TRUE(piped.out == value) << Show(piped);

  // stdout a file, as `get k -o /dev/stdout > out.bin`. /dev/stdout itself
  // is not named: a CLI that renamed a file over it would break this
  // machine. /proc/self/fd/1, /dev/fd/1 (through the /dev/fd link) and a
  // link of our own to it take the same path through /proc.
  std::filesystem::create_symlink("/proc/self/fd/1", dir / "stdout-link");
  for (const std::string& target :
       {std::string("/proc/self/fd/1"), std::string("/dev/fd/1"), (dir / "stdout-link").string()}) {
    const auto out_path = dir / "stdout.bin";
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(out, 0);
    int code = RunCliWithFds(cluster_, {"get", "k", "-o", target}, out);
    close(out);
    EXPECT_EQ(code, 0) << target;
    EXPECT_TRUE(ReadFile(out_path) == value)
        << target << ": stdout holds " << ReadFile(out_path).size() << " bytes";
    EXPECT_TRUE(std::filesystem::is_symlink(dir / "stdout-link")) << target;

    // After `>>`, the value goes after what is there, as any write to stdout.
    out = open(out_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    ASSERT_GE(out, 0);
    code = RunCliWithFds(cluster_, {"get", "k", "-o", target}, out);
    close(out);
    EXPECT_EQ(code, 0) << target;
    EXPECT_TRUE(ReadFile(out_path) == value + value) << target << ": appending";
  }

  // A fifo is written in place, never replaced by a file.
  const auto fifo = dir / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Our read end is open first, so neither side waits for the other.
  int read_end = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(read_end, 0);
  std::atomic<bool> finished = false;
  CliResult to_fifo;
  std::thread runner([&] {
    to_fifo = Cli({"get", "k", "-o", fifo.string()});
    finished = true;
  });
  std::string from_fifo;
  char buffer[1 << 16];
  for (bool last = false; !last;) {
    last = finished;  // one more pass after the CLI has exited drains the rest
    ssize_t got;
    while ((got = read(read_end, buffer, sizeof(buffer))) > 0) from_fifo.append(buffer, got);
    if (!last) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  runner.join();
  close(read_end);
  EXPECT_EQ(to_fifo.exit_code, 0) << Show(to_fifo);
  EXPECT_TRUE(from_fifo == value) << from_fifo.size() << " bytes came through the fifo";
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_TRUE(FilesNamed(dir, "mooncake-part").empty());
}

TEST_F(CliTest, GetToAFullStdoutIsALocalWriteErrorNotATransferFailure) {
  // Given a small value and one of several chunks.
  ASSERT_EQ(Cli({"put", "small", "hello"}).exit_code, 0);
  WriteFile(cluster_.dir() / "big.bin", PatternBytes(7, 2 * kRpcChunkBytes + 3));
  ASSERT_EQ(Cli({"put", "big", "--file", (cluster_.dir() / "big.bin").string()}).exit_code, 0);

  // When each is read to a stdout on a full disk (`get k > FILE`), expect
  // exit 3 and a message about writing stdout, never a cluster error that
  // sends the user to debug the network.
  for (const std::string key : {"small", "big"}) {
    auto r = RunCliIntoAFullDisk(cluster_, {"get", key});
    EXPECT_EQ(r.exit_code, 3) << key << "\n" << Show(r);
    EXPECT_NE(r.err.find("get failed: writing stdout: No space left on device"), std::string::npos)
        << key << "\n"
        << Show(r);
    EXPECT_EQ(r.err.find("TRANSFER_FAIL"), std::string::npos) << key << "\n" << Show(r);
  }
}

TEST_F(CliTest, EveryCommandWhoseOutputCannotBeWrittenExitsThree) {
  ASSERT_EQ(Cli({"put", "k", "hello"}).exit_code, 0);
  // When a command's answer goes to a full disk (`mooncake-cli ... > FILE`),
  // expect exit 3 and the reason on stderr, so a script never takes the
  // empty file for a success.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--json", "inspect", "k"},
                                             {"inspect", "k"},
                                             {"locate", "k"},
                                             {"--json", "exist", "k"},
                                             {"exist", "k"},
                                             {"exist", "absent"},  // exit 1 and "0" when written
                                             {"nodes"},
                                             {"--json", "nodes"},
                                             {"stats"},
                                             {"stats", "--node", "w1"},
                                             {"--json", "get", "k"},
                                             {"put", "k2", "x"},
                                             {"upsert", "k2", "yy"},
                                             {"remove", "k2", "--force"}}) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    auto r = RunCliIntoAFullDisk(cluster_, args);
    EXPECT_EQ(r.exit_code, 3) << joined << "\n" << Show(r);
    EXPECT_NE(r.err.find("failed: writing stdout: No space left on device"), std::string::npos)
        << joined << "\n"
        << Show(r);
  }
  // A change to the cluster was made all the same, and the message says so.
  auto put = RunCliIntoAFullDisk(cluster_, {"put", "k3", "x"});
  EXPECT_NE(put.err.find("(the put itself was done)"), std::string::npos) << Show(put);
  EXPECT_EQ(Trim(Cli({"exist", "k3"}).out), "1");
  // A failure already reported keeps its own exit code.
  EXPECT_EQ(RunCliIntoAFullDisk(cluster_, {"get", "absent"}).exit_code, 1);
  EXPECT_EQ(RunCliIntoAFullDisk(cluster_, {"put", "k", "again"}).exit_code, 3);
}

TEST_F(CliTest, PutOfAProcFileStoresWhatItReadsThoughItsSizeSaysZero) {
  // /proc files are regular but report size 0.
  const std::string expected = ReadFile("/proc/version");
  ASSERT_FALSE(expected.empty());

  auto from_file = Cli({"put", "v", "--file", "/proc/version"});
  ASSERT_EQ(from_file.exit_code, 0) << Show(from_file);
  auto got = Cli({"get", "v"});
  ASSERT_EQ(got.exit_code, 0) << Show(got);
  EXPECT_EQ(got.out, expected);

  // Redirected to stdin, as `put v - < /proc/version`.
  int in = open("/proc/version", O_RDONLY | O_CLOEXEC);
  int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(in, 0);
  ASSERT_GE(out, 0);
  EXPECT_EQ(RunCliWithFds(cluster_, {"put", "v-stdin", "-"}, out, in), 0);
  close(in);
  close(out);
  auto got_stdin = Cli({"get", "v-stdin"});
  ASSERT_EQ(got_stdin.exit_code, 0) << Show(got_stdin);
  EXPECT_EQ(got_stdin.out, expected);

  // A file that is empty is still refused as an empty value.
  WriteFile(cluster_.dir() / "empty", "");
  auto empty = Cli({"put", "e", "--file", (cluster_.dir() / "empty").string()});
  EXPECT_EQ(empty.exit_code, 2) << Show(empty);
  EXPECT_NE(empty.err.find("an empty value"), std::string::npos) << Show(empty);
  EXPECT_EQ(Cli({"exist", "e"}).exit_code, 1);
}

// This process's peak RSS in KiB (VmHWM), or -1.
long PeakRssKib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmHWM:")) return std::stol(line.substr(6));
  }
  return -1;
}

TEST_F(CliTest, GetJsonOfALargeValueIsOneWholeObjectAndNeverHeldInMemory) {
  const auto dir = cluster_.dir();
  // Neither a multiple of 3 (base64 padding) nor of a chunk. Written a MiB
  // at a time: a child's peak RSS starts at ours (posix_spawn shares our
  // memory until exec), so this test keeps its own small until both runs.
  constexpr uint64_t kSize = 20 * kMiB + 5;
  {
    std::ofstream out(dir / "big.bin", std::ios::binary);
    for (uint64_t at = 0; at < kSize; at += kMiB) {
      std::string part = PatternBytes(9, std::min(kMiB, kSize - at), at);
      out.write(part.data(), static_cast<std::streamsize>(part.size()));
    }
  }
  ASSERT_EQ(Cli({"put", "small", "tiny"}).exit_code, 0);
  auto put = Cli({"put", "big", "--file", (dir / "big.bin").string()});
  ASSERT_EQ(put.exit_code, 0) << Show(put);

  // get --json with stdout in a file; `rss` gets the CLI's peak RSS.
  auto get_json = [&](const std::string& key, long& rss) {
    const auto out_path = dir / (key + ".json");
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(out, 0);
    EXPECT_EQ(RunCliWithFds(cluster_, {"--json", "get", key}, out, -1, &rss), 0) << key;
    close(out);
  };
  long small_rss = 0, big_rss = 0;
  get_json("small", small_rss);
  get_json("big", big_rss);
  const long own_rss = PeakRssKib();

  // Expect one line holding one object, with the same bytes and the version.
  const std::string text = ReadFile(dir / "big.json");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_EQ(text.back(), '\n');
  auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << text.substr(0, 200);
  EXPECT_EQ(doc["ok"], true);
  EXPECT_EQ(doc["key"], "big");
  EXPECT_EQ(doc["size"], kSize);
  ASSERT_TRUE(doc["value_base64"].is_string());
  // coreutils' encoder, not ours, says what the bytes must read as.
  const std::string b64_cmd =
      "base64 -w0 '" + (dir / "big.bin").string() + "' > '" + (dir / "big.b64").string() + "'";
  ASSERT_EQ(std::system(b64_cmd.c_str()), 0);
  EXPECT_TRUE(doc["value_base64"].get<std::string>() == ReadFile(dir / "big.b64"))
      << "different bytes";
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  auto info = client->Inspect("big");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(doc["version"], info->version);

  // Expect the large get to need less memory than the value over a tiny
  // one (holding the value, its base64 and the JSON text took ~3.7x it).
  EXPECT_LT((big_rss - small_rss) * 1024, static_cast<long>(kSize))
      << "peak RSS " << small_rss << " KiB for a tiny value, " << big_rss << " KiB for "
      << kSize / kMiB << " MiB (this test's own: " << own_rss << " KiB)";
}

TEST_F(CliTest, NodeFlagPlacesTheObjectAndStatsAndNodesReport) {
  auto put = Cli({"--node", "w2", "put", "placed", "on-w2"});
  ASSERT_EQ(put.exit_code, 0) << Show(put);
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  auto info = client->Inspect("placed");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(info->node_id, "w2");

  auto nodes = Cli({"--json", "nodes"});
  EXPECT_EQ(nodes.exit_code, 0) << Show(nodes);
  const std::string json = Trim(nodes.out);
  EXPECT_TRUE(!json.empty() && (json.front() == '[' || json.front() == '{')) << Show(nodes);
  EXPECT_NE(json.find("w1"), std::string::npos) << Show(nodes);
  EXPECT_NE(json.find("w2"), std::string::npos) << Show(nodes);

  auto stats = Cli({"stats", "--node", "w2"});
  EXPECT_EQ(stats.exit_code, 0) << Show(stats);
  EXPECT_NE(Lower(stats.out).find("dram"), std::string::npos) << Show(stats);
  auto unknown = Cli({"stats", "--node", "no-such-node"});
  EXPECT_NE(unknown.exit_code, 0) << Show(unknown);
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {},                   // no subcommand
           {"frobnicate", "k"},  // unknown subcommand
           {"get"},              // missing key
           {"put"},              // missing key
           {"exist"},            // missing key
           {"get", "k", "--no-such-flag"},
       }) {
    auto r = Cli(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << "mooncake-cli " << joined << "\n" << Show(r);
  }
  // --master that is not HOST:PORT is a usage error too.
  auto bad_master = cluster_.RunCli({"--master", "not-an-address", "get", "k"}, {}, false);
  EXPECT_EQ(bad_master.exit_code, 2) << Show(bad_master);
}

TEST_F(CliTest, DashHIsAUsageErrorWithAHintAndVersionPrintsOneLine) {
  // redis-cli habits: -h HOST is not help and not the master.
  auto h = Cli({"-h", "127.0.0.1", "nodes"});
  EXPECT_EQ(h.exit_code, 2) << Show(h);
  EXPECT_NE(h.err.find("use --master HOST:PORT; --help for help"), std::string::npos) << Show(h);
  auto help = Cli({"--help"});
  EXPECT_EQ(help.exit_code, 0) << Show(help);
  EXPECT_NE(help.out.find("Usage:"), std::string::npos) << Show(help);

  auto version = cluster_.RunCli({"--version"}, {}, false);
  EXPECT_EQ(version.exit_code, 0) << Show(version);
  EXPECT_TRUE(version.out.starts_with("mooncake-cli ")) << Show(version);
  EXPECT_EQ(std::count(version.out.begin(), version.out.end(), '\n'), 1) << Show(version);
}

TEST_F(CliTest, ConfigFileKeysAndItsMistakes) {
  // The harness points XDG_CONFIG_HOME into the cluster's dir.
  const auto config_dir = cluster_.dir() / "xdg-config" / "mooncake";
  std::filesystem::create_directories(config_dir);
  const auto config = config_dir / "cli.toml";
  WriteFile(config, "master = \"" + cluster_.master_address() + "\"\nnode = \"w2\"\njson = true\n");
  auto put = cluster_.RunCli({"put", "from-config", "v"}, {}, false);
  ASSERT_EQ(put.exit_code, 0) << Show(put);
  EXPECT_NE(put.out.find("\"ok\":true"), std::string::npos) << Show(put);  // json = true
  auto stats = cluster_.RunCli({"stats"}, {}, false);                      // node = "w2"
  EXPECT_EQ(stats.exit_code, 0) << Show(stats);
  EXPECT_NE(stats.out.find("\"node_id\":\"w2\""), std::string::npos) << Show(stats);

  // An unknown key, a YAML file and garbage are usage errors, never ignored.
  for (auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"master = \"" + cluster_.master_address() + "\"\nmastr = \"x\"\n", "'mastr'"},
           {"master: " + cluster_.master_address() + "\n", "not `key = value`"},
           {std::string("\x01\x02\xff\xfe", 4), "config file"}}) {
    WriteFile(config, text);
    auto r = cluster_.RunCli({"nodes"}, {}, false);
    EXPECT_EQ(r.exit_code, 2) << Show(r);
    EXPECT_NE(r.err.find(expected), std::string::npos) << Show(r);
    EXPECT_NE(r.err.find(config.string()), std::string::npos) << Show(r);
  }
  // --config names another file; a flag still wins over the file.
  const auto other = cluster_.dir() / "other.toml";
  WriteFile(other, "master = \"127.0.0.1:1\"\n");
  auto flag_wins = cluster_.RunCli({"--config", other.string(), "exist", "from-config"});
  EXPECT_EQ(flag_wins.exit_code, 0) << Show(flag_wins);
}

TEST_F(CliTest, UnreachableMasterExitsThree) {
  const std::string nowhere = "127.0.0.1:" + std::to_string(UnusedPort());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"get", "k"}, {"put", "k", "v"}, {"exist", "k"}, {"remove", "k"}, {"nodes"}}) {
    std::vector<std::string> full = {"--master", nowhere};
    full.insert(full.end(), args.begin(), args.end());
    auto r = cluster_.RunCli(full, {}, false, {}, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 3) << args[0] << "\n" << Show(r);
    EXPECT_FALSE(r.err.empty()) << args[0] << ": no message on stderr";
  }
}

TEST_F(CliTest, MasterAddressComesFromTheEnvironment) {
  const std::string env = "MOONCAKE_MASTER=" + cluster_.master_address();
  auto put = cluster_.RunCli({"put", "via-env", "v"}, {}, false, {env});
  EXPECT_EQ(put.exit_code, 0) << Show(put);
  auto exist = cluster_.RunCli({"exist", "via-env"}, {}, false, {env});
  EXPECT_EQ(exist.exit_code, 0) << Show(exist);
  EXPECT_EQ(Trim(exist.out), "1") << Show(exist);
}

}  // namespace
}  // namespace mooncake::testing
