#pragma once

// TestCluster: a small harness that starts a real mooncake-master and real
// mooncake-worker processes on 127.0.0.1, so integration tests read like the
// behaviour they check:
//
//   TestCluster cluster;                       // Given a cluster
//   ASSERT_TRUE(cluster.StartMaster());
//   ASSERT_TRUE(cluster.StartWorker("w1", {.dram = 16 << 20, .ssd = 256 << 20}));
//   auto client = cluster.NewClient("w1");     // When a client on w1 puts
//   ASSERT_TRUE(client->Put("k", "v"));
//   cluster.KillWorker("w1", SIGKILL);         // and w1 crashes
//   ASSERT_TRUE(cluster.RestartWorker("w1"));  // Expect its SSD objects back
//
// Every process gets `--port 0 --admin-port 0 --ready-file <dir>/<name>.port`
// (a restarted master: its old RPC port, a free admin port), never a default
// port, so the suite passes beside a cluster on the default ports (the
// README's scripts/local-cluster.sh). Its stdout and stderr go to
// <dir>/<name>.log, and it is stopped by PID (SIGTERM, then
// SIGKILL after a bound). Children die with the test process
// (PR_SET_PDEATHSIG), so a crashed test leaves nothing running. Every wait is
// bounded in time. The temp dir is removed at the end unless the environment
// variable MOONCAKE_IT_KEEP=1 is set; on a failed test the tail of every log is
// printed first.
//
// Thread-safety: none; a TestCluster belongs to the test thread that made it.

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "tests/unused_port.h"

namespace mooncake {

// Lets GoogleTest print codes by name: "INVALID_KEY (-400)".
inline void PrintTo(ErrorCode code, std::ostream* os) {
  *os << ToString(code) << " (" << static_cast<int32_t>(code) << ")";
}

}  // namespace mooncake

namespace mooncake::testing {

using namespace std::chrono_literals;

// EXPECT_TRUE(IsOk(client->Put(k, v))) prints the error code on failure.
template <typename T>
::testing::AssertionResult IsOk(const Result<T>& r) {
  if (r.has_value()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "failed with " << ToString(r.error()) << " (" << static_cast<int32_t>(r.error()) << ")";
}

// EXPECT_TRUE(FailsWith(client->Put("", v), ErrorCode::kInvalidKey)).
template <typename T>
::testing::AssertionResult FailsWith(const Result<T>& r, ErrorCode expected) {
  if (r.has_value()) {
    return ::testing::AssertionFailure() << "succeeded; expected " << ToString(expected);
  }
  if (r.error() != expected) {
    return ::testing::AssertionFailure()
           << "failed with " << ToString(r.error()) << " (" << static_cast<int32_t>(r.error())
           << "); expected " << ToString(expected) << " (" << static_cast<int32_t>(expected) << ")";
  }
  return ::testing::AssertionSuccess();
}

// Expects a read to have returned exactly `expected`; names the error, or
// the first differing offset, otherwise.
::testing::AssertionResult Holds(const Result<ObjectValue>& got, const std::string& expected);

// Expects client.Get(key) to return exactly `expected`, as Holds.
::testing::AssertionResult ReadsBack(Client& client, const std::string& key,
                                     const std::string& expected);

// One line describing an Inspect answer, for failure messages.
std::string Describe(const Result<ObjectInspection>& info);

// Tiers and knobs of one worker. Capacities are bytes.
struct WorkerOptions {
  uint64_t dram = 64ull << 20;
  uint64_t ssd = 128ull << 20;  // 0: no SSD tier
  int heartbeat_interval_ms = 200;
  bool promote_on_get = true;
  std::vector<std::string> extra_args = {};
};

struct CliResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  std::string out;
  std::string err;
};

// The loopback TCP connections to `port` whose receive queue holds bytes
// (/proc/net/tcp): requests sent to a stopped (SIGSTOP) process that it has
// not read, so a test knows they are on the wire.
size_t ConnectionsWithUnreadBytes(int port);

// How many `operation` requests (e.g. "register_node") the master whose
// admin port is `admin_port` has served, from its /stats; -1 when unreadable.
int64_t MasterRequestCount(int admin_port, const std::string& operation);

// Polls `pred` every `poll` until it returns true or `timeout` passes.
bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s,
                std::chrono::milliseconds poll = 50ms);

// A deterministic pseudo-random byte pattern: byte i of stream `seed` is the
// same however it is read, so large values can be produced and checked
// without holding them in memory.
char PatternByte(uint64_t seed, uint64_t offset);
std::string PatternBytes(uint64_t seed, uint64_t size, uint64_t offset = 0);

// An istream source of `size` pattern bytes.
class PatternStreamBuf : public std::streambuf {
 public:
  PatternStreamBuf(uint64_t seed, uint64_t size);

 protected:
  int_type underflow() override;

 private:
  uint64_t seed_;
  uint64_t size_;
  uint64_t pos_ = 0;  // offset of the first byte after the buffer
  std::string buf_;
};

// An ostream sink that checks every byte written against the pattern and
// counts them; mismatches() > 0 or bytes() != expected size means corruption.
class PatternCheckBuf : public std::streambuf {
 public:
  explicit PatternCheckBuf(uint64_t seed) : seed_(seed) {}
  uint64_t bytes() const { return pos_; }
  uint64_t mismatches() const { return mismatches_; }
  // Offset of the first wrong byte, if any.
  std::optional<uint64_t> first_mismatch() const { return first_mismatch_; }

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int_type overflow(int_type ch) override;

 private:
  uint64_t seed_;
  uint64_t pos_ = 0;
  uint64_t mismatches_ = 0;
  std::optional<uint64_t> first_mismatch_;
};

// One child process the harness started.
struct ChildProcess {
  std::string name;
  std::vector<std::string> args;  // argv[0] is the binary
  std::filesystem::path log;
  std::filesystem::path ready_file;
  pid_t pid = -1;      // -1 when not running
  int port = 0;        // bound RPC port, line 1 of the ready file
  int admin_port = 0;  // bound admin port, line 2 (-1: disabled, 0: not read)
};

class TestCluster {
 public:
  TestCluster();
  ~TestCluster();
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  // Starts mooncake-master on a free port and waits for its ready file. It
  // gets --rebuild-ms 0 (serves key calls at once) unless `extra_args` name
  // --rebuild-ms, --ha-rebuild-ms or --etcd; RestartMaster keeps the args.
  ::testing::AssertionResult StartMaster(std::vector<std::string> extra_args = {});
  // Stops the master with `sig` (SIGTERM waits for a clean exit, SIGKILL not).
  void KillMaster(int sig = SIGKILL);
  // Starts the master again on the SAME RPC port, so workers find it again;
  // its admin server takes a free port (master_admin_port() has it).
  ::testing::AssertionResult RestartMaster();

  // Starts mooncake-worker `node_id` registered with the master, SSD under
  // <dir>/<node_id>/ssd, and waits until it announced itself (ready file).
  ::testing::AssertionResult StartWorker(const std::string& node_id, WorkerOptions options = {});
  // Sends `sig` to the worker and reaps it (SIGTERM: bounded, then SIGKILL).
  void KillWorker(const std::string& node_id, int sig = SIGKILL);
  // Starts a stopped worker again with the same node id, options and SSD path.
  ::testing::AssertionResult RestartWorker(const std::string& node_id);
  bool IsRunning(const std::string& name);
  // Sends `sig` to a running process ("master" or a node id) without
  // reaping it: SIGSTOP and SIGCONT hold a process still. After SIGSTOP it
  // returns once every thread of the process has stopped (at most 5 s).
  bool Signal(const std::string& name, int sig);

  // A client of this cluster's master; `local_node` is its co-located worker.
  // Fails the current test (and returns null) if the client cannot connect.
  std::unique_ptr<Client> NewClient(const std::string& local_node = "");
  // The configuration NewClient(local_node) uses, for tests that change a
  // knob (rdma, caches, timeouts) before building the client.
  ClientConfig ClientConfigFor(const std::string& local_node = "") const;
  // A client built from `config` as given; fails the current test (and
  // returns null) if Client::Create fails.
  std::unique_ptr<Client> NewClient(const ClientConfig& config);

  // Runs mooncake-cli with `--master 127.0.0.1:<port>` prepended (unless
  // `with_master` is false), feeding `stdin_data`, bounded by `timeout`.
  // The CLI never sees the caller's MOONCAKE_MASTER or ~/.config/mooncake
  // (XDG_CONFIG_HOME points into dir()), so without `with_master` it falls
  // back only to what `args` or `extra_env` name (a test that names neither
  // would reach the default 127.0.0.1:50051: don't); `extra_env` entries
  // replace inherited variables of the same name.
  CliResult RunCli(const std::vector<std::string>& args, std::string_view stdin_data = {},
                   bool with_master = true, const std::vector<std::string>& extra_env = {},
                   std::chrono::milliseconds timeout = 60s);

  int master_port() const { return master_.port; }
  int master_admin_port() const { return master_.admin_port; }
  std::string master_address() const;
  int worker_port(const std::string& node_id) const;
  int worker_admin_port(const std::string& node_id) const;
  const std::filesystem::path& dir() const { return dir_; }

  // The last `lines` lines of a process's log ("master" or a node id).
  std::string LogTail(const std::string& name, int lines = 40) const;
  // Every process's log tail, for failure messages.
  std::string AllLogTails(int lines = 40) const;

 private:
  ChildProcess* Find(const std::string& name);
  const ChildProcess* Find(const std::string& name) const;
  std::vector<std::string> WorkerArgs(const std::string& node_id) const;
  // Spawns `p` and waits for its ready file; on failure stops it and explains.
  ::testing::AssertionResult Launch(ChildProcess& p);
  void Stop(ChildProcess& p, int sig);

  std::filesystem::path dir_;
  ChildProcess master_;
  std::map<std::string, ChildProcess> workers_;
  std::map<std::string, WorkerOptions> worker_options_;
};

// Convenience accessors on Stats results.
const TierCounters* FindTier(const WorkerCounters& counters, std::string_view kind);
int64_t TotalPromotionsIn(const WorkerCounters& counters);
int64_t TotalDemotionsOut(const WorkerCounters& counters);

}  // namespace mooncake::testing
