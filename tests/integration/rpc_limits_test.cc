// The RPC servers' protections on real mooncake-master and mooncake-worker
// processes: --max-connections (newcomers closed at once, served clients
// unaffected), --rpc-idle-timeout-ms (silent connections closed, pooled
// clients reconnect), --rpc-read-timeout-ms (a dribbling frame is cut off),
// the frame and size limits of the bounded decoder, and the flag checks. Each
// is observed from outside: raw loopback sockets for the wire, the admin
// server's /metrics for the counters, /proc for the master's peak memory.
//
// Every wait is bounded; every process listens on a free port.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

extern char** environ;

namespace mooncake::testing {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;

// MasterService.ListNodes() (or WorkerService.Stats()): no arguments.
std::string NoArgCall(std::string_view method) { return Wire().Call(method).Stop().Framed(); }

// MasterService.GetLocation(key) whose key declares `declared` bytes but
// carries only a few.
std::string GetLocationDeclaring(uint32_t declared) {
  return Wire().Call("GetLocation").Field(kString, 1).I32(declared).Raw("abc").Framed();
}

// ---- The admin server's /metrics ----

std::string Rejected(std::string_view reason) {
  return "mooncake_rpc_rejected_frames_total{reason=\"" + std::string(reason) + "\"}";
}
constexpr char kConnections[] = "mooncake_rpc_connections";
constexpr char kRefused[] = "mooncake_rpc_refused_connections_total";
constexpr char kIdleClosed[] = "mooncake_rpc_idle_closed_connections_total";

// ---- /proc ----

// The PID of our child process running `binary` (there is one of each).
pid_t ChildRunning(const std::string& binary) {
  const std::string self = std::to_string(getpid());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...
    size_t close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(line.substr(close_paren + 2));
    std::string state, ppid;
    rest >> state >> ppid;
    if (ppid != self) continue;
    if (fs::read_symlink(entry.path() / "exe", ec).filename() == binary) {
      return static_cast<pid_t>(std::stol(pid));
    }
  }
  return -1;
}

// VmHWM of `pid` in KiB (0 if unknown).
int64_t PeakRssKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6));
  }
  return 0;
}

// Resets the peak of `pid` to its current RSS (best effort).
void ResetPeakRss(pid_t pid) {
  std::ofstream("/proc/" + std::to_string(pid) + "/clear_refs") << "5";
}

// ---- Running a binary directly ----

struct Exit {
  int code = -1;  // -1: killed, or no exit within the timeout
  std::string output;
};

// Runs `args` (argv[0] a path) with stdout and stderr captured, bounded.
Exit RunBinary(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 10s) {
  Exit result;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    result.output = "posix_spawn failed";
    return result;
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) break;
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    result.output.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return result;
    }
    std::this_thread::sleep_for(10ms);
  }
  if (WIFEXITED(status)) result.code = WEXITSTATUS(status);
  return result;
}

// ---- The fixture ----

class RpcLimitsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(30);
  }

  void StartMaster(std::vector<std::string> args) {
    ASSERT_TRUE(cluster_.StartMaster(std::move(args)));
    master_admin_ = cluster_.master_admin_port();
    ASSERT_GT(master_admin_, 0);
  }

  // `series` of the process whose admin server is on `admin_port`.
  static double Metric(int admin_port, const std::string& series) {
    return AdminMetric(admin_port, series);
  }
  double MasterMetric(const std::string& series) const { return Metric(master_admin_, series); }

  // Polls until `series` equals `value` (within 10 s); explains otherwise.
  static ::testing::AssertionResult Reaches(int admin_port, const std::string& series,
                                            double value) {
    double last = 0;
    if (Eventually([&] { return (last = Metric(admin_port, series)) == value; }, 10s)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << series << " is " << last << ", expected " << value;
  }
  ::testing::AssertionResult MasterReaches(const std::string& series, double value) const {
    return Reaches(master_admin_, series, value);
  }

  TestCluster cluster_;
  int master_admin_ = -1;
};

TEST_F(RpcLimitsTest, MasterClosesConnectionsOverMaxConnectionsAndKeepsServingOthers) {
  ASSERT_NO_FATAL_FAILURE(StartMaster({"--max-connections", "4"}));
  // Given 4 connections the master is serving (each made a real call).
  std::vector<std::unique_ptr<RawConnection>> served;
  for (int i = 0; i < 4; ++i) {
    served.push_back(std::make_unique<RawConnection>(cluster_.master_port()));
    ASSERT_TRUE(served.back()->RoundTrip()) << "connection " << i;
  }
  ASSERT_TRUE(MasterReaches(kConnections, 4));
  EXPECT_EQ(MasterMetric(kRefused), 0);

  // When a fifth connects and makes a valid call, it is closed at once,
  // unanswered, and counted.
  RawConnection fifth(cluster_.master_port());
  ASSERT_TRUE(fifth.connected());
  fifth.Send(NoArgCall("ListNodes"));  // may already fail: closed at once
  std::string got;
  EXPECT_EQ(fifth.Await(1s, &got), RawConnection::Outcome::kClosed)
      << got.size() << " bytes came back";
  EXPECT_TRUE(MasterReaches(kRefused, 1));

  // Expect the served ones unaffected; after one leaves, a newcomer and a
  // real client are served.
  for (auto& conn : served) EXPECT_TRUE(conn->RoundTrip());
  served.pop_back();
  ASSERT_TRUE(MasterReaches(kConnections, 3));
  RawConnection newcomer(cluster_.master_port());
  EXPECT_TRUE(newcomer.RoundTrip());
  newcomer.Close();
  ASSERT_TRUE(MasterReaches(kConnections, 3));
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  EXPECT_TRUE(IsOk(client->ListNodes()));
  EXPECT_EQ(MasterMetric(kRefused), 1);
}

TEST_F(RpcLimitsTest, WorkerClosesConnectionsOverItsOwnLimit) {
  ASSERT_NO_FATAL_FAILURE(StartMaster({}));
  ASSERT_TRUE(cluster_.StartWorker(
      "w1", {.dram = 16 * kMiB, .ssd = 0, .extra_args = {"--max-connections", "2"}}));
  const int admin = cluster_.worker_admin_port("w1");
  ASSERT_GT(admin, 0);
  const int port = cluster_.worker_port("w1");
  RawConnection a(port), b(port);
  ASSERT_TRUE(a.RoundTrip("Stats"));
  ASSERT_TRUE(b.RoundTrip("Stats"));
  ASSERT_TRUE(Reaches(admin, kConnections, 2));

  RawConnection c(port);
  c.Send(NoArgCall("Stats"));
  EXPECT_EQ(c.Await(1s), RawConnection::Outcome::kClosed);
  EXPECT_TRUE(Reaches(admin, kRefused, 1));
  EXPECT_TRUE(a.RoundTrip("Stats"));
  // The master's limit is its own: it refused nothing.
  EXPECT_EQ(MasterMetric(kRefused), 0);
}

TEST_F(RpcLimitsTest, SilentConnectionsAreClosedAndPooledClientsReconnect) {
  const std::vector<std::string> idle = {"--rpc-idle-timeout-ms", "300"};
  ASSERT_NO_FATAL_FAILURE(StartMaster(idle));
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 * kMiB, .ssd = 0, .extra_args = idle}));
  const int worker_admin = cluster_.worker_admin_port("w1");
  ASSERT_GT(worker_admin, 0);

  // A connection that sends nothing is closed by the master, and counted.
  const double idle_before = MasterMetric(kIdleClosed);
  RawConnection silent(cluster_.master_port());
  ASSERT_TRUE(silent.connected());
  const auto start = Clock::now();
  EXPECT_EQ(silent.Await(5s), RawConnection::Outcome::kClosed);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 4s);
  EXPECT_TRUE(Eventually([&] { return MasterMetric(kIdleClosed) > idle_before; }, 5s));
  EXPECT_EQ(MasterMetric(Rejected("slow_frame")), 0);

  // A client whose pooled connections (to the master and the worker) were
  // closed while it slept keeps working.
  // (Nothing but this client connects to the worker.)
  const double worker_idle = Metric(worker_admin, kIdleClosed);
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  const std::string value = PatternBytes(7, 100 * 1024);
  ASSERT_TRUE(IsOk(client->Put("k", value)));
  const double master_idle = MasterMetric(kIdleClosed);
  std::this_thread::sleep_for(1200ms);
  EXPECT_GT(MasterMetric(kIdleClosed), master_idle);
  EXPECT_GT(Metric(worker_admin, kIdleClosed), worker_idle);
  EXPECT_TRUE(ReadsBack(*client, "k", value));
  EXPECT_TRUE(IsOk(client->ListNodes()));
  // And the worker, whose own pooled master connections idle too, is alive.
  auto nodes = client->ListNodes();
  ASSERT_TRUE(IsOk(nodes));
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_TRUE(nodes->front().alive);
}

TEST_F(RpcLimitsTest, FrameThatDribblesIsClosedAtTheReadTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartMaster({"--rpc-read-timeout-ms", "500"}));
  RawConnection conn(cluster_.master_port());
  ASSERT_TRUE(conn.Send(Frame("", 1000)));
  // 1 byte every 100 ms: the whole frame would take 100 s.
  const auto start = Clock::now();
  bool closed = false;
  int sent = 0;
  while (!closed && sent < 1000 && Clock::now() - start < 10s) {
    closed = !conn.Send("x");
    if (!closed) ++sent;
    closed = closed || conn.Await(100ms) == RawConnection::Outcome::kClosed;
  }
  EXPECT_TRUE(closed) << "still open after " << sent << " bytes";
  EXPECT_LT(sent, 1000);
  EXPECT_LT(Clock::now() - start, 3s) << "closed only after " << sent << " bytes";
  EXPECT_TRUE(MasterReaches(Rejected("slow_frame"), 1));
  EXPECT_EQ(MasterMetric(kIdleClosed), 0);
}

TEST_F(RpcLimitsTest, OversizedFramesAndFieldsAreRefusedWithoutAllocating) {
  ASSERT_NO_FATAL_FAILURE(StartMaster({}));
  const pid_t master = ChildRunning(fs::path(MOONCAKE_MASTER_BIN).filename());
  ASSERT_GT(master, 0) << "cannot find the master's PID";

  // A frame that declares 17 MiB is refused before its payload.
  RawConnection big(cluster_.master_port());
  ASSERT_TRUE(big.Send(Frame("xxxxxxxx", 17 << 20)));
  EXPECT_EQ(big.Await(2s), RawConnection::Outcome::kClosed);
  EXPECT_TRUE(MasterReaches(Rejected("frame_too_large"), 1));

  // A 2 GiB string inside a 40-byte frame: refused, and nothing allocated.
  ResetPeakRss(master);
  const int64_t peak_before = PeakRssKiB(master);
  RawConnection huge_string(cluster_.master_port());
  ASSERT_TRUE(huge_string.Send(GetLocationDeclaring(0x7FFFFFF0)));
  EXPECT_EQ(huge_string.Await(2s), RawConnection::Outcome::kClosed);
  EXPECT_TRUE(MasterReaches(Rejected("size_limit"), 1));
  EXPECT_LT(PeakRssKiB(master) - peak_before, 64 * 1024) << "KiB of the master's peak RSS grew";

  // Unversioned (old non-strict) messages are malformed.
  RawConnection unversioned(cluster_.master_port());
  ASSERT_TRUE(unversioned.Send(Wire().Str("ListNodes").U8(1).I32(1).Stop().Framed()));
  EXPECT_EQ(unversioned.Await(2s), RawConnection::Outcome::kClosed);
  EXPECT_TRUE(MasterReaches(Rejected("malformed"), 1));

  // Structs nested 40 deep in an unknown field break the depth limit.
  Wire nested;
  nested.Call("ListNodes");
  for (int i = 0; i < 40; ++i) nested.Field(kStruct, 99);
  for (int i = 0; i <= 40; ++i) nested.Stop();
  RawConnection deep(cluster_.master_port());
  ASSERT_TRUE(deep.Send(nested.Framed()));
  EXPECT_EQ(deep.Await(2s), RawConnection::Outcome::kClosed);
  EXPECT_TRUE(MasterReaches(Rejected("depth_limit"), 1));

  // Expect the master unharmed.
  RawConnection after(cluster_.master_port());
  EXPECT_TRUE(after.RoundTrip());
  EXPECT_TRUE(cluster_.IsRunning("master"));
}

TEST_F(RpcLimitsTest, BadLimitFlagsExitTwoWithAMessage) {
  const std::vector<std::string> master = {
      MOONCAKE_MASTER_BIN, "--host", "127.0.0.1", "--port", "0", "--admin-port", "0"};
  struct Case {
    std::vector<std::string> extra;
    std::string mentions;
  };
  for (const auto& c : {Case{{"--max-connections", "0"}, "--max-connections"},
                        Case{{"--max-connections", "-3"}, "--max-connections"},
                        Case{{"--rpc-idle-timeout-ms", "0"}, "--rpc-idle-timeout-ms"},
                        Case{{"--rpc-read-timeout-ms", "0"}, "--rpc-read-timeout-ms"}}) {
    auto args = master;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    Exit r = RunBinary(args);
    EXPECT_EQ(r.code, 2) << c.extra[0] << " " << c.extra[1] << ": " << r.output;
    EXPECT_NE(r.output.find(c.mentions), std::string::npos) << r.output;
  }

  // The worker checks them too, before it tries to reach any master.
  Exit worker =
      RunBinary({MOONCAKE_WORKER_BIN, "--host", "127.0.0.1", "--port", "0", "--admin-port", "0",
                 "--master", "127.0.0.1:" + std::to_string(UnusedPort()), "--ssd-capacity", "0",
                 "--max-connections", "0"});
  EXPECT_EQ(worker.code, 2) << worker.output;
  EXPECT_NE(worker.output.find("--max-connections"), std::string::npos) << worker.output;
}

TEST_F(RpcLimitsTest, ManySmallKeysStayUnderTheContainerLimit) {
  // 20000 keys: more than one list may carry (kRpcMaxContainerElements is
  // 16384), so the client must slice every batch, both to the master
  // (BatchGetLocation) and to the worker.
  ASSERT_NO_FATAL_FAILURE(StartMaster({}));
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 64 * kMiB, .ssd = 0}));
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  constexpr int kKeys = 20000;
  std::vector<std::pair<std::string, std::string>> items;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back("k" + std::to_string(i));
    items.emplace_back(keys.back(), "v" + std::to_string(i));
  }
  auto put = client->BatchPut(items);
  ASSERT_EQ(put.size(), items.size());
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(IsOk(put[i])) << keys[i];
  auto exist = client->BatchExist(keys);
  ASSERT_EQ(exist.size(), keys.size());
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(IsOk(exist[i]) && *exist[i]) << keys[i];
  auto got = client->BatchGet(keys);
  ASSERT_EQ(got.size(), keys.size());
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(IsOk(got[i])) << keys[i];
    ASSERT_EQ(got[i]->data, items[i].second) << keys[i];
  }
  EXPECT_EQ(MasterMetric(Rejected("size_limit")), 0);
}

// A peer that pipelines requests and never reads the replies must not park a
// server thread in send() for good: it would keep its --max-connections slot
// and SIGTERM could not stop the process. Replies must be taken within the
// read timeout (counted as slow_reader).
TEST_F(RpcLimitsTest, PeerThatNeverReadsItsRepliesIsClosed) {
  ASSERT_NO_FATAL_FAILURE(StartMaster({}));
  ASSERT_TRUE(cluster_.StartWorker(
      "w1", {.dram = 32 * kMiB,
             .ssd = 0,
             .extra_args = {"--rpc-idle-timeout-ms", "300", "--rpc-read-timeout-ms", "300"}}));
  const int admin = cluster_.worker_admin_port("w1");
  ASSERT_GT(admin, 0);
  {
    auto client = cluster_.NewClient();
    ASSERT_TRUE(client);
    ASSERT_TRUE(IsOk(client->Put("big", PatternBytes(1, 4 * kMiB))));
  }
  ASSERT_TRUE(Reaches(admin, kConnections, 0));

  // WorkerService.Get("big", 0, 0) twenty times: 80 MiB of replies, far
  // more than the socket buffers hold; the replies are never read.
  const std::string get = Wire()
                              .Call("Get")
                              .Field(kString, 1)
                              .Str("big")
                              .Field(kI64, 2)  // offset 0
                              .I64(0)
                              .Field(kI64, 3)  // length 0: all of it
                              .I64(0)
                              .Stop()
                              .Framed();
  RawConnection greedy(cluster_.worker_port("w1"));
  for (int i = 0; i < 20; ++i) greedy.Send(get);
  // The worker is serving it (a gauge still at 0 could mean "not accepted
  // yet" as well as "already given up").
  ASSERT_TRUE(Reaches(admin, kConnections, 1));

  // Expect the worker to give up on it after its timeouts.
  EXPECT_TRUE(Reaches(admin, kConnections, 0));
  EXPECT_GE(Metric(admin, Rejected("slow_reader")), 1);
  const auto start = Clock::now();
  cluster_.KillWorker("w1", SIGTERM);
  EXPECT_LT(Clock::now() - start, 3s) << cluster_.LogTail("w1", 5);
}

}  // namespace
}  // namespace mooncake::testing
