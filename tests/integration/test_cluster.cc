#include "tests/integration/test_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/raw_rpc.h"

extern char** environ;

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kReadyTimeout = 20s;        // a process must be ready within this
constexpr auto kTermGrace = 5s;            // SIGTERM, then SIGKILL after this
constexpr auto kReapTimeout = 10s;         // waiting for a SIGKILLed child
constexpr int kMasterRestartAttempts = 5;  // the old port may linger briefly

#ifndef MOONCAKE_MASTER_BIN
#define MOONCAKE_MASTER_BIN "mooncake-master"
#endif
#ifndef MOONCAKE_WORKER_BIN
#define MOONCAKE_WORKER_BIN "mooncake-worker"
#endif
#ifndef MOONCAKE_CLI_BIN
#define MOONCAKE_CLI_BIN "mooncake-cli"
#endif

// argv/envp storage that outlives fork: vectors of owned strings plus the
// NULL-terminated pointer arrays execve wants, built before fork so the child
// only calls async-signal-safe functions.
struct ExecImage {
  std::vector<std::string> argv_s;
  std::vector<std::string> envp_s;
  std::vector<char*> argv;
  std::vector<char*> envp;

  // The child's environment is ours minus the variables named in `drop` and
  // in `extra_env` ("NAME=value" entries, which then take their place; of
  // two for one name the later wins): getenv returns the first match, so a
  // duplicate must not stay behind.
  ExecImage(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
            const std::vector<std::string_view>& drop) {
    argv_s = args;
    auto name_of = [](std::string_view kv) { return kv.substr(0, kv.find('=')); };
    // Set in extra_env at or after index `from`?
    auto set_later = [&](std::string_view name, size_t from) {
      return std::any_of(extra_env.begin() + static_cast<std::ptrdiff_t>(from), extra_env.end(),
                         [&](const std::string& e) { return name_of(e) == name; });
    };
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string_view kv(*e);
      if (std::ranges::find(drop, name_of(kv)) != drop.end() || set_later(name_of(kv), 0)) {
        continue;
      }
      envp_s.emplace_back(kv);
    }
    for (size_t i = 0; i < extra_env.size(); ++i) {
      if (!set_later(name_of(extra_env[i]), i + 1)) envp_s.push_back(extra_env[i]);
    }
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : envp_s) envp.push_back(s.data());
    envp.push_back(nullptr);
  }
};

// Forks and execs `image` with the given fds as stdin/stdout/stderr. The
// child gets SIGKILL when the test process dies. Returns the pid or -1.
pid_t Spawn(ExecImage& image, int in_fd, int out_fd, int err_fd) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;  // parent (or -1)

  // Child: async-signal-safe calls only.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(126);
  close_range(3, ~0U, 0);
  execve(image.argv[0], image.argv.data(), image.envp.data());
  _exit(127);
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  }
  return "status " + std::to_string(status);
}

// Reaps `pid` if it has exited; returns its status then.
std::optional<int> TryReap(pid_t pid) {
  int status = 0;
  pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == pid) return status;
  if (r < 0 && errno == ECHILD) return 0;  // already gone
  return std::nullopt;
}

// Waits up to `timeout` for `pid` to exit; returns its status if it did.
std::optional<int> ReapWithin(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (auto st = TryReap(pid)) return st;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

// The ports a ready file names: the RPC port on line 1 and, when present,
// the admin port on line 2 (-1: admin server disabled). Nothing until line 1
// holds a valid port.
struct ReadyPorts {
  int rpc = 0;
  int admin = 0;  // 0: the file has no second line
};

std::optional<ReadyPorts> ReadPorts(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  long port = 0;
  if (!(in >> port) || port <= 0 || port > 65535) return std::nullopt;
  ReadyPorts ports{.rpc = static_cast<int>(port)};
  long admin = 0;
  if (in >> admin && admin >= -1 && admin <= 65535) ports.admin = static_cast<int>(admin);
  return ports;
}

std::string Join(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

bool HasFlag(const std::vector<std::string>& args, std::string_view flag) {
  return std::ranges::find(args, flag) != args.end();
}

// Whether `args` hold `flag` as "FLAG VALUE" or "FLAG=VALUE".
bool HasFlagOrAssignment(const std::vector<std::string>& args, std::string_view flag) {
  return std::ranges::any_of(args, [flag](const std::string& a) {
    return a == flag || (a.starts_with(flag) && a.size() > flag.size() && a[flag.size()] == '=');
  });
}

// Sets the value after `flag` in `args`; fails if `flag` has no value there.
::testing::AssertionResult SetFlag(std::vector<std::string>& args, std::string_view flag,
                                   std::string value) {
  auto it = std::ranges::find(args, flag);
  if (it == args.end() || std::next(it) == args.end()) {
    return ::testing::AssertionFailure() << "args lack " << flag << " VALUE: " << Join(args);
  }
  *std::next(it) = std::move(value);
  return ::testing::AssertionSuccess();
}

void AppendLine(const fs::path& file, const std::string& line) {
  std::ofstream out(file, std::ios::app);
  out << line << '\n';
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t PatternWord(uint64_t seed, uint64_t word) {
  return SplitMix64(seed * 0x100000001b3ull + word);
}

}  // namespace

// ---------------------------------------------------------------------------
// Small utilities

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

char PatternByte(uint64_t seed, uint64_t offset) {
  return static_cast<char>((PatternWord(seed, offset / 8) >> (8 * (offset % 8))) & 0xff);
}

std::string PatternBytes(uint64_t seed, uint64_t size, uint64_t offset) {
  std::string out(size, '\0');
  uint64_t i = 0;
  // Leading bytes up to a word boundary, then whole words, then the tail.
  while (i < size && (offset + i) % 8 != 0) {
    out[i] = PatternByte(seed, offset + i);
    ++i;
  }
  while (i + 8 <= size) {
    uint64_t w = PatternWord(seed, (offset + i) / 8);
    std::memcpy(out.data() + i, &w, 8);  // little-endian, same as PatternByte
    i += 8;
  }
  while (i < size) {
    out[i] = PatternByte(seed, offset + i);
    ++i;
  }
  return out;
}

PatternStreamBuf::PatternStreamBuf(uint64_t seed, uint64_t size) : seed_(seed), size_(size) {}

PatternStreamBuf::int_type PatternStreamBuf::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  if (pos_ >= size_) return traits_type::eof();
  const uint64_t n = std::min<uint64_t>(1ull << 20, size_ - pos_);
  buf_ = PatternBytes(seed_, n, pos_);
  pos_ += n;
  setg(buf_.data(), buf_.data(), buf_.data() + buf_.size());
  return traits_type::to_int_type(*gptr());
}

std::streamsize PatternCheckBuf::xsputn(const char* s, std::streamsize n) {
  std::string expected = PatternBytes(seed_, static_cast<uint64_t>(n), pos_);
  if (std::memcmp(expected.data(), s, static_cast<size_t>(n)) != 0) {
    for (std::streamsize i = 0; i < n; ++i) {
      if (expected[i] != s[i]) {
        if (!first_mismatch_) first_mismatch_ = pos_ + i;
        ++mismatches_;
      }
    }
  }
  pos_ += static_cast<uint64_t>(n);
  return n;
}

PatternCheckBuf::int_type PatternCheckBuf::overflow(int_type ch) {
  if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  char c = traits_type::to_char_type(ch);
  xsputn(&c, 1);
  return ch;
}

const TierCounters* FindTier(const WorkerCounters& counters, std::string_view kind) {
  for (const auto& t : counters.tiers) {
    if (t.usage.kind == kind) return &t;
  }
  for (const auto& t : counters.tiers) {
    if (t.usage.name == kind) return &t;
  }
  return nullptr;
}

int64_t TotalPromotionsIn(const WorkerCounters& counters) {
  int64_t n = 0;
  for (const auto& t : counters.tiers) n += t.promotions_in;
  return n;
}

int64_t TotalDemotionsOut(const WorkerCounters& counters) {
  int64_t n = 0;
  for (const auto& t : counters.tiers) n += t.demotions_out;
  return n;
}

// ---------------------------------------------------------------------------
// TestCluster

TestCluster::TestCluster() {
  // A CLI child that exits before reading its stdin must not kill the test.
  signal(SIGPIPE, SIG_IGN);
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/mooncake-it-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
    tmpl = "/tmp";
  }
  dir_ = tmpl;
  master_.name = "master";
  master_.log = dir_ / "master.log";
  master_.ready_file = dir_ / "master.port";
}

TestCluster::~TestCluster() {
  // Stop everything at once: SIGTERM to all, one shared grace period.
  std::vector<ChildProcess*> running;
  for (auto& [_, w] : workers_) {
    if (w.pid > 0) running.push_back(&w);
  }
  if (master_.pid > 0) running.push_back(&master_);
  for (auto* p : running) kill(p->pid, SIGTERM);
  const auto deadline = Clock::now() + kTermGrace;
  for (auto* p : running) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!ReapWithin(p->pid, std::max(left, 0ms))) {
      kill(p->pid, SIGKILL);
      ReapWithin(p->pid, kReapTimeout);
      AppendLine(p->log, "=== harness: did not exit within the SIGTERM grace; SIGKILLed ===");
    }
    p->pid = -1;
  }

  if (::testing::Test::HasFailure()) {
    std::cerr << "---- mooncake integration: process logs (" << dir_.string() << ") ----\n"
              << AllLogTails(60);
  }
  const char* keep = std::getenv("MOONCAKE_IT_KEEP");
  if (keep != nullptr && std::string_view(keep) == "1") {
    std::cerr << "MOONCAKE_IT_KEEP=1: keeping " << dir_.string() << "\n";
    return;
  }
  if (dir_ != "/tmp") {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

ChildProcess* TestCluster::Find(const std::string& name) {
  if (name == "master") return &master_;
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

namespace {

// Whether every thread of `pid` is stopped ('T' in /proc/PID/task/TID/stat).
bool AllThreadsStopped(pid_t pid) {
  std::error_code ec;
  std::filesystem::directory_iterator tasks("/proc/" + std::to_string(pid) + "/task", ec);
  if (ec) return false;
  for (const auto& task : tasks) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // The state follows the command name, which is in parentheses.
    auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'T') {
      return false;
    }
  }
  return true;
}

}  // namespace

bool TestCluster::Signal(const std::string& name, int sig) {
  ChildProcess* p = Find(name);
  if (p == nullptr || p->pid <= 0 || kill(p->pid, sig) != 0) return false;
  // kill() returns before a busy process has stopped, and a thread still
  // running could answer one more call: wait until all have stopped.
  return sig != SIGSTOP || Eventually([&] { return AllThreadsStopped(p->pid); }, 5s, 1ms);
}

const ChildProcess* TestCluster::Find(const std::string& name) const {
  if (name == "master") return &master_;
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

bool TestCluster::IsRunning(const std::string& name) {
  ChildProcess* p = Find(name);
  if (p == nullptr || p->pid <= 0) return false;
  if (auto st = TryReap(p->pid)) {
    AppendLine(p->log, "=== harness: process " + DescribeStatus(*st) + " ===");
    p->pid = -1;
    return false;
  }
  return true;
}

std::string TestCluster::master_address() const {
  return "127.0.0.1:" + std::to_string(master_.port);
}

int TestCluster::worker_port(const std::string& node_id) const {
  const ChildProcess* p = Find(node_id);
  return p == nullptr ? 0 : p->port;
}

int TestCluster::worker_admin_port(const std::string& node_id) const {
  const ChildProcess* p = Find(node_id);
  return p == nullptr ? 0 : p->admin_port;
}

std::string TestCluster::LogTail(const std::string& name, int lines) const {
  const ChildProcess* p = Find(name);
  if (p == nullptr) return "(no process named " + name + ")\n";
  std::ifstream in(p->log, std::ios::binary);
  if (!in) return "(no log at " + p->log.string() + ")\n";
  // Read at most the last 256 KiB, then keep the last `lines` lines.
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - (256 << 10));
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string_view> all;
  std::string_view rest(text);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    all.push_back(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  std::string out;
  const size_t first = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  for (size_t i = first; i < all.size(); ++i) {
    out += "    ";
    out += all[i];
    out += '\n';
  }
  return out;
}

std::string TestCluster::AllLogTails(int lines) const {
  std::ostringstream out;
  out << "== master (" << master_.log.string() << ")\n" << LogTail("master", lines);
  for (const auto& [name, w] : workers_) {
    out << "== " << name << " (" << w.log.string() << ")\n" << LogTail(name, lines);
  }
  return out.str();
}

::testing::AssertionResult TestCluster::Launch(ChildProcess& p) {
  std::error_code ec;
  fs::remove(p.ready_file, ec);
  AppendLine(p.log, "=== harness: starting " + Join(p.args) + " ===");

  int log_fd = open(p.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0) {
    if (log_fd >= 0) close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return ::testing::AssertionFailure()
           << "cannot open log " << p.log << ": " << std::strerror(errno);
  }
  ExecImage image(p.args, {}, /*drop=*/{});
  p.pid = Spawn(image, null_fd, log_fd, log_fd);
  const int spawn_errno = errno;
  close(log_fd);
  close(null_fd);
  if (p.pid < 0) {
    return ::testing::AssertionFailure() << "fork failed: " << std::strerror(spawn_errno);
  }

  const auto started = Clock::now();
  const auto deadline = started + kReadyTimeout;
  while (true) {
    if (auto st = TryReap(p.pid)) {
      p.pid = -1;
      AppendLine(p.log, "=== harness: process " + DescribeStatus(*st) + " ===");
      return ::testing::AssertionFailure()
             << p.name << " " << DescribeStatus(*st)
             << " before it was ready\n  command: " << Join(p.args) << "\n  log tail:\n"
             << LogTail(p.name);
    }
    // Written atomically (temp file + rename), so never seen half-done.
    if (auto ports = ReadPorts(p.ready_file)) {
      p.port = ports->rpc;
      p.admin_port = ports->admin;
      return ::testing::AssertionSuccess();
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(20ms);
  }
  Stop(p, SIGKILL);
  return ::testing::AssertionFailure()
         << p.name << " wrote no ready file " << p.ready_file << " within "
         << std::chrono::duration_cast<std::chrono::seconds>(kReadyTimeout).count()
         << " s\n  command: " << Join(p.args) << "\n  log tail:\n"
         << LogTail(p.name);
}

void TestCluster::Stop(ChildProcess& p, int sig) {
  if (p.pid <= 0) return;
  if (auto st = TryReap(p.pid)) {
    AppendLine(p.log, "=== harness: process had already " + DescribeStatus(*st) + " ===");
    p.pid = -1;
    return;
  }
  kill(p.pid, sig);
  std::optional<int> st = ReapWithin(p.pid, sig == SIGKILL ? kReapTimeout : kTermGrace);
  if (!st && sig != SIGKILL) {
    AppendLine(p.log, "=== harness: no exit within the grace after signal " + std::to_string(sig) +
                          "; SIGKILL ===");
    kill(p.pid, SIGKILL);
    st = ReapWithin(p.pid, kReapTimeout);
  }
  AppendLine(p.log, "=== harness: stopped, " +
                        (st ? DescribeStatus(*st) : std::string("not reaped")) + " ===");
  p.pid = -1;
}

::testing::AssertionResult TestCluster::StartMaster(std::vector<std::string> extra_args) {
  if (master_.pid > 0) return ::testing::AssertionFailure() << "master already running";
  master_.args = {
      MOONCAKE_MASTER_BIN,         "--host",      "127.0.0.1", "--port", "0", "--ready-file",
      master_.ready_file.string(), "--log-level", "info"};
  // Explicitly free, not the default 50050 (a local cluster may hold it).
  if (!HasFlag(extra_args, "--admin-port")) {
    master_.args.insert(master_.args.end(), {"--admin-port", "0"});
  }
  // A fresh master answers key calls NOT_LEADER for --rebuild-ms (2.5 s by
  // default) while workers re-announce. A cluster started master first has
  // nothing to rebuild, so serve at once unless the test wants the window
  // (passes --rebuild-ms itself) or is an HA test (--etcd keeps its own).
  // RestartMaster reuses these args, so a restart serves at once too.
  if (!HasFlagOrAssignment(extra_args, "--rebuild-ms") &&
      !HasFlagOrAssignment(extra_args, "--ha-rebuild-ms") &&
      !HasFlagOrAssignment(extra_args, "--etcd")) {
    master_.args.insert(master_.args.end(), {"--rebuild-ms", "0"});
  }
  master_.args.insert(master_.args.end(), extra_args.begin(), extra_args.end());
  return Launch(master_);
}

void TestCluster::KillMaster(int sig) { Stop(master_, sig); }

::testing::AssertionResult TestCluster::RestartMaster() {
  if (master_.port <= 0) return ::testing::AssertionFailure() << "master was never started";
  Stop(master_, SIGTERM);
  // Same RPC port as before, so the workers' --master address is right
  // again. The admin port must stay explicit: with a non-zero --port and no
  // --admin-port the master takes the default 50050, which a local cluster
  // may hold. StartMaster gave it one (0 unless the test chose a port).
  if (auto st = SetFlag(master_.args, "--port", std::to_string(master_.port)); !st) return st;
  if (!HasFlag(master_.args, "--admin-port")) {
    master_.args.insert(master_.args.end(), {"--admin-port", "0"});
  }
  const int port = master_.port;
  ::testing::AssertionResult result = ::testing::AssertionFailure();
  for (int attempt = 1; attempt <= kMasterRestartAttempts; ++attempt) {
    result = Launch(master_);
    if (result) break;
    // Most likely the port is still held by a closing socket; try again.
    std::this_thread::sleep_for(500ms);
  }
  if (result && master_.port != port) {
    return ::testing::AssertionFailure()
           << "master came back on port " << master_.port << ", expected " << port;
  }
  return result;
}

std::vector<std::string> TestCluster::WorkerArgs(const std::string& node_id) const {
  const WorkerOptions& o = worker_options_.at(node_id);
  const ChildProcess& w = workers_.at(node_id);
  std::vector<std::string> args = {
      MOONCAKE_WORKER_BIN,
      "--node-id",
      node_id,
      "--host",
      "127.0.0.1",
      "--port",
      "0",
      "--master",
      master_address(),
      "--dram-capacity",
      std::to_string(o.dram),
      "--ssd-capacity",
      std::to_string(o.ssd),
      "--heartbeat-interval-ms",
      std::to_string(o.heartbeat_interval_ms),
      "--promote-on-get",
      o.promote_on_get ? "true" : "false",
      "--ready-file",
      w.ready_file.string(),
      "--log-level",
      "info",
  };
  // Explicitly free, not the default 50060 (a local cluster may hold it).
  if (!HasFlag(o.extra_args, "--admin-port")) args.insert(args.end(), {"--admin-port", "0"});
  if (o.ssd > 0) {
    args.push_back("--ssd-path");
    args.push_back((dir_ / node_id / "ssd").string());
  }
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  return args;
}

::testing::AssertionResult TestCluster::StartWorker(const std::string& node_id,
                                                    WorkerOptions options) {
  if (node_id.empty() || node_id == "master") {
    return ::testing::AssertionFailure() << "bad node id '" << node_id << "'";
  }
  if (master_.port <= 0) return ::testing::AssertionFailure() << "start the master first";
  if (workers_.contains(node_id) && workers_[node_id].pid > 0) {
    return ::testing::AssertionFailure() << node_id << " already running";
  }
  std::error_code ec;
  fs::create_directories(dir_ / node_id, ec);
  worker_options_[node_id] = std::move(options);
  ChildProcess& w = workers_[node_id];
  w.name = node_id;
  w.log = dir_ / (node_id + ".log");
  w.ready_file = dir_ / (node_id + ".port");
  w.args = WorkerArgs(node_id);
  return Launch(w);
}

void TestCluster::KillWorker(const std::string& node_id, int sig) {
  auto it = workers_.find(node_id);
  if (it == workers_.end()) {
    ADD_FAILURE() << "KillWorker: no worker " << node_id;
    return;
  }
  Stop(it->second, sig);
}

::testing::AssertionResult TestCluster::RestartWorker(const std::string& node_id) {
  auto it = workers_.find(node_id);
  if (it == workers_.end()) return ::testing::AssertionFailure() << "no worker " << node_id;
  Stop(it->second, SIGTERM);
  it->second.args = WorkerArgs(node_id);  // same node id, options and SSD path
  return Launch(it->second);
}

std::unique_ptr<Client> TestCluster::NewClient(const std::string& local_node) {
  return NewClient(ClientConfigFor(local_node));
}

ClientConfig TestCluster::ClientConfigFor(const std::string& local_node) const {
  ClientConfig config;
  config.master_host = "127.0.0.1";
  config.master_port = master_.port;
  config.local_node = local_node;
  return config;
}

std::unique_ptr<Client> TestCluster::NewClient(const ClientConfig& config) {
  auto client = Client::Create(config);
  if (!client) {
    ADD_FAILURE() << "Client::Create(master=" << config.master_host << ":" << config.master_port
                  << ", local_node='" << config.local_node << "', rdma=" << config.rdma
                  << ") failed: " << ToString(client.error());
    return nullptr;
  }
  return std::move(*client);
}

CliResult TestCluster::RunCli(const std::vector<std::string>& args, std::string_view stdin_data,
                              bool with_master, const std::vector<std::string>& extra_env,
                              std::chrono::milliseconds timeout) {
  CliResult result;
  std::vector<std::string> argv = {MOONCAKE_CLI_BIN};
  if (with_master) {
    argv.push_back("--master");
    argv.push_back(master_address());
  }
  argv.insert(argv.end(), args.begin(), args.end());

  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return result;
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return result;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) close(fd);
    return result;
  }
  // Neither the caller's MOONCAKE_MASTER nor their ~/.config/mooncake/cli.toml
  // may point a CLI at a cluster outside this test: XDG_CONFIG_HOME names a
  // directory of this cluster that holds no mooncake/cli.toml (extra_env
  // may still set either).
  std::vector<std::string> env = {"XDG_CONFIG_HOME=" + (dir_ / "xdg-config").string()};
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  ExecImage image(argv, env, /*drop=*/{"MOONCAKE_MASTER"});
  const pid_t pid = Spawn(image, in_pipe[0], out_pipe[1], err_pipe[1]);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    for (int fd : {in_pipe[1], out_pipe[0], err_pipe[0]}) close(fd);
    result.err = "fork failed";
    return result;
  }

  int in_fd = in_pipe[1];
  fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  size_t written = 0;
  if (stdin_data.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  int out_fd = out_pipe[0], err_fd = err_pipe[0];
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  char buf[64 << 10];
  while (out_fd >= 0 || err_fd >= 0 || in_fd >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) {
      timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (out_fd >= 0) fds[n++] = {out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[n++] = {err_fd, POLLIN, 0};
    if (in_fd >= 0) fds[n++] = {in_fd, POLLOUT, 0};
    int r = poll(fds, n, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) break;
    for (int i = 0; i < n && r > 0; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in_fd) {
        ssize_t w = write(in_fd, stdin_data.data() + written, stdin_data.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == stdin_data.size()) {
          close(in_fd);  // done, or the child closed its stdin (EPIPE)
          in_fd = -1;
        }
        continue;
      }
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        (fds[i].fd == out_fd ? result.out : result.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        if (fds[i].fd == out_fd) {
          close(out_fd);
          out_fd = -1;
        } else {
          close(err_fd);
          err_fd = -1;
        }
      }
    }
  }
  for (int fd : {in_fd, out_fd, err_fd}) {
    if (fd >= 0) close(fd);
  }
  std::optional<int> status;
  if (!timed_out) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    status = ReapWithin(pid, std::max(left, 100ms));
  }
  if (!status) {
    kill(pid, SIGKILL);
    status = ReapWithin(pid, kReapTimeout);
    result.err += "\n[harness: mooncake-cli timed out after " + std::to_string(timeout.count()) +
                  " ms: " + Join(argv) + "]";
    result.exit_code = -1;
    return result;
  }
  result.exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  return result;
}

std::string Describe(const Result<ObjectInspection>& info) {
  if (!info) return std::string("inspect failed: ") + std::string(ToString(info.error()));
  return "node=" + info->node_id + " tier=" + info->tier +
         " offset=" + std::to_string(info->offset) + " size=" + std::to_string(info->size) +
         " version=" + std::to_string(info->version) + " state=" + info->state +
         " hard_pinned=" + std::to_string(info->hard_pinned) +
         " soft_pinned=" + std::to_string(info->soft_pinned);
}

::testing::AssertionResult Holds(const Result<ObjectValue>& got, const std::string& expected) {
  if (!got) return ::testing::AssertionFailure() << "failed with " << ToString(got.error());
  if (got->data.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "returned " << got->data.size() << " bytes, expected " << expected.size();
  }
  if (got->data != expected) {
    size_t i = 0;
    while (i < expected.size() && got->data[i] == expected[i]) ++i;
    return ::testing::AssertionFailure() << "returned different bytes from offset " << i;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult ReadsBack(Client& client, const std::string& key,
                                     const std::string& expected) {
  auto read = Holds(client.Get(key), expected);
  if (!read) return ::testing::AssertionFailure() << "Get(" << key << ") " << read.message();
  return read;
}

// /proc/net/tcp: "local rem state tx_queue:rx_queue ...", hex.
size_t ConnectionsWithUnreadBytes(int port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  size_t count = 0;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    if (!(fields >> slot >> local >> remote >> state >> queues)) continue;
    auto colon = local.find(':');
    auto queue_colon = queues.find(':');
    if (colon == std::string::npos || queue_colon == std::string::npos) continue;
    if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
    if (std::stoul(queues.substr(queue_colon + 1), nullptr, 16) > 0) ++count;
  }
  return count;
}

int64_t MasterRequestCount(int admin_port, const std::string& operation) {
  auto reply = Http(admin_port, "GET", "/stats");
  if (!reply || reply->status != 200) return -1;
  auto body = nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("requests") || !body["requests"].contains(operation)) {
    return -1;
  }
  return body["requests"][operation].value("requests", int64_t{-1});
}

}  // namespace mooncake::testing
