#include "bench/scale_workload.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/fmt/fmt.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/phase_stats.h"
#include "common/key_slots.h"
#include "http/admin_client.h"
#include "mooncake_rpc/MasterService.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Channel = RpcChannel<rpc::MasterServiceClient>;

// The RPC contract's limits of one AnnounceKeys call (thrift/mooncake.thrift).
constexpr size_t kAnnounceMaxKeys = 8192;
constexpr size_t kAnnounceMaxBytes = 4u << 20;
// The DRAM tier every simulated worker reports.
constexpr int64_t kSimDramBytes = 64ll << 30;
// Masters are started with this node TTL: far above the heartbeat period so
// that a heartbeat delayed by a loaded 2-core machine does not expire a
// worker (and drop its keys) in the middle of a measurement.
constexpr int kMasterNodeTtlMs = 120'000;
constexpr auto kMasterReadyTimeout = std::chrono::seconds(30);

std::chrono::nanoseconds Nanos(double seconds) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(seconds));
}

// HOST:PORT split; nullopt when malformed.
std::optional<std::pair<std::string, int>> SplitAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  int port = std::atoi(address.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return std::nullopt;
  return std::pair{address.substr(0, colon), port};
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// One master shard: where it listens, its admin endpoint (for RSS and CPU),
// and the process when this bench started it.
struct Shard {
  std::string host;
  int port = 0;
  std::string admin;  // HOST:PORT; empty when unknown
  pid_t pid = -1;     // -1: not ours
  fs::path log;
  std::unique_ptr<Channel> channel;
};

// What one /metrics read of a master gives.
struct MasterSample {
  double rss = 0;
  double cpu_s = 0;
};

std::optional<MasterSample> ReadMaster(const Shard& shard) {
  auto address = SplitAddress(shard.admin);
  if (!address) return std::nullopt;
  auto reply = HttpCall(address->first, address->second, "GET", "/metrics");
  if (!reply || reply->status != 200) return std::nullopt;
  auto rss = MetricValue(reply->body, "process_resident_memory_bytes");
  auto cpu = MetricValue(reply->body, "process_cpu_seconds_total");
  if (!rss || !cpu) return std::nullopt;
  return MasterSample{*rss, *cpu};
}

// Per-shard samples, or nullopt when any shard could not be read.
std::optional<std::vector<MasterSample>> ReadMasters(const std::vector<Shard>& shards) {
  std::vector<MasterSample> out;
  for (const Shard& s : shards) {
    auto sample = ReadMaster(s);
    if (!sample) return std::nullopt;
    out.push_back(*sample);
  }
  return out;
}

std::string LogTail(const fs::path& log) {
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

// The mooncake-master to start: --master-bin, else next to this binary (the
// build tree's ../master/, or the same bin/ once installed).
std::optional<std::string> FindMasterBin(const BenchOptions& o) {
  if (!o.master_bin.empty()) return o.master_bin;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  for (const fs::path& candidate : {self.parent_path() / ".." / "master" / "mooncake-master",
                                    self.parent_path() / "mooncake-master"}) {
    if (access(candidate.c_str(), X_OK) == 0) return fs::weakly_canonical(candidate).string();
  }
  return std::nullopt;
}

// The machine's 1-minute load average (/proc/loadavg): the bench shares the
// machine's cores with the masters and anything else running, so a reader
// needs it to judge the rates.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one_minute = 0;
  in >> one_minute;
  return one_minute;
}

// CPU seconds this bench process has used (its client threads compete with
// the masters for the same cores).
double BenchCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The first line `binary --version` prints: which master build ran.
std::string MasterVersion(const std::string& binary) {
  std::string command = "'" + binary + "' --version 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return "";
  char line[512] = {};
  std::string out = fgets(line, sizeof line, pipe) ? line : "";
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The masters this bench starts, stopped by PID when destroyed: SIGTERM,
// then SIGKILL after 10 s. Each child also gets SIGKILL if the bench dies.
class MasterProcesses {
 public:
  MasterProcesses(std::string binary, fs::path dir) : binary_(std::move(binary)), dir_(dir) {}
  ~MasterProcesses() { StopAll(); }

  // Starts `count` masters and waits for their ready files; false (after
  // one error line with the failing master's log) when one did not start.
  bool Start(int count, std::vector<Shard>& shards) {
    for (int i = 0; i < count; ++i) {
      Shard shard;
      shard.host = "127.0.0.1";
      fs::path ready = dir_ / fmt::format("shard{}-of-{}.ready", i, count);
      shard.log = dir_ / fmt::format("shard{}-of-{}.log", i, count);
      // --rebuild-ms 0: these masters start before any worker announces, so
      // there is no directory to rebuild, and the measured lookups must not
      // spend the default 2.5 s window answering NOT_LEADER.
      std::vector<std::string> args = {binary_,
                                       "--rebuild-ms",
                                       "0",
                                       "--host",
                                       "127.0.0.1",
                                       "--port",
                                       "0",
                                       "--admin-port",
                                       "0",
                                       "--ready-file",
                                       ready.string(),
                                       "--log-level",
                                       "warn",
                                       "--node-ttl-ms",
                                       std::to_string(kMasterNodeTtlMs)};
      shard.pid = Spawn(args, shard.log);
      if (shard.pid < 0) {
        std::fprintf(stderr, "error: cannot start %s\n", binary_.c_str());
        return false;
      }
      pids_.push_back(shard.pid);
      if (!WaitReady(ready, shard)) return false;
      shards.push_back(std::move(shard));
    }
    return true;
  }

  void StopAll() {
    for (pid_t pid : pids_) kill(pid, SIGTERM);
    for (pid_t pid : pids_) {
      auto deadline = Clock::now() + std::chrono::seconds(10);
      int status = 0;
      while (waitpid(pid, &status, WNOHANG) == 0) {
        if (Clock::now() >= deadline) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    pids_.clear();
  }

 private:
  // fork + exec with stdout and stderr into `log`; -1 on failure. The child
  // runs only async-signal-safe calls before exec.
  static pid_t Spawn(const std::vector<std::string>& args, const fs::path& log) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fd);
    return pid;
  }

  bool WaitReady(const fs::path& ready, Shard& shard) {
    auto deadline = Clock::now() + kMasterReadyTimeout;
    while (Clock::now() < deadline) {
      std::ifstream in(ready);
      long rpc = 0, admin = 0;
      if (in >> rpc >> admin && rpc > 0) {
        shard.port = static_cast<int>(rpc);
        if (admin > 0) shard.admin = fmt::format("127.0.0.1:{}", admin);
        return true;
      }
      int status = 0;
      if (waitpid(shard.pid, &status, WNOHANG) == shard.pid) {
        std::erase(pids_, shard.pid);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::fprintf(stderr, "error: master %s did not become ready; its log:\n%s\n", binary_.c_str(),
                 LogTail(shard.log).c_str());
    return false;
  }

  const std::string binary_;
  const fs::path dir_;
  std::vector<pid_t> pids_;
};

// A private temporary folder, removed when destroyed.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/mooncake-scale-XXXXXX";
    if (mkdtemp(pattern.data())) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs `body(thread_index, stats)` on `threads` threads; merged stats.
template <typename Body>
OpStats OnThreads(int threads, Body&& body) {
  std::vector<OpStats> per_thread(threads);
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) running.emplace_back([&, t] { body(t, per_thread[t]); });
  for (auto& thread : running) thread.join();
  OpStats total;
  for (auto& s : per_thread) total.Merge(s);
  return total;
}

// Per-key results of a batch reply, or the call's error for every key.
template <typename Reply>
std::vector<Result<void>> KeyResults(const Result<std::vector<Reply>>& reply, size_t n) {
  std::vector<Result<void>> results;
  if (!reply) {
    results.assign(n, Err(reply.error()));
    return results;
  }
  for (const auto& r : *reply) results.push_back(ToResult(r.code));
  if (results.size() != n) results.assign(n, Err(ErrorCode::kInternalError));
  return results;
}

// Keeps every simulated worker heartbeating every period to every shard:
// one thread per shard, each spreading its workers evenly over the period
// so the master sees a steady rate rather than bursts. Latencies are kept
// per window; TakeWindow() hands over the current one.
class HeartbeatPump {
 public:
  HeartbeatPump(std::vector<Shard>& shards, const std::vector<std::string>& workers,
                std::chrono::milliseconds period)
      : shards_(shards), workers_(workers), period_(period) {
    for (size_t s = 0; s < shards_.size(); ++s) threads_.emplace_back([this, s] { Loop(s); });
  }
  ~HeartbeatPump() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // The heartbeats since the last call, and how long that window lasted.
  std::pair<OpStats, double> TakeWindow() {
    std::lock_guard lock(mu_);
    auto now = Clock::now();
    double seconds = std::chrono::duration<double>(now - window_start_).count();
    window_start_ = now;
    OpStats out = std::move(window_);
    window_ = OpStats();
    total_.Merge(out);
    return {std::move(out), seconds};
  }

  const OpStats& total() const { return total_; }
  // Seconds since the pump started.
  double seconds() const { return Seconds(started_); }

 private:
  void Loop(size_t shard) {
    Channel& channel = *shards_[shard].channel;
    const size_t n = workers_.size();
    std::vector<rpc::TierUsage> tiers(1);
    tiers[0].name = "dram";
    tiers[0].kind = "dram";
    tiers[0].capacity = kSimDramBytes;
    auto round = Clock::now();
    std::unique_lock lock(mu_);
    while (!stop_) {
      for (size_t w = 0; w < n && !stop_; ++w) {
        auto due = round + std::chrono::nanoseconds(period_) * w / n;
        if (cv_.wait_until(lock, due, [this] { return stop_; })) break;
        lock.unlock();
        tiers[0].used = static_cast<int64_t>(w % 1000) << 20;  // varies like a real tier
        auto start = Clock::now();
        auto reply = channel.Call(
            [&](rpc::MasterServiceClient& client) { return client.Heartbeat(workers_[w], tiers); });
        Result<void> result = reply ? ToResult(*reply) : Result<void>(Err(reply.error()));
        lock.lock();
        window_.Record(start, result, 0);
      }
      round += period_;
    }
  }

  std::vector<Shard>& shards_;
  const std::vector<std::string>& workers_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                              // guarded by mu_
  OpStats window_;                                 // guarded by mu_
  Clock::time_point window_start_ = Clock::now();  // guarded by mu_
  OpStats total_;                                  // TakeWindow's caller only
  const Clock::time_point started_ = Clock::now();
  std::vector<std::thread> threads_;
};

// Percentiles and rates of one phase's stats.
json PhaseJson(const std::string& op, double seconds, OpStats stats) {
  PhaseRow row{"scale", op, seconds, std::move(stats)};
  Summary s = Summarize(row);
  return {{"seconds", seconds},
          {"keys", s.ops},
          {"keys_per_s", s.ops_per_s},
          {"calls", s.calls},
          {"calls_per_s", s.calls_per_s},
          {"p50_us", s.p50},
          {"p99_us", s.p99},
          {"p999_us", s.p999},
          {"errors", s.errors},
          {"error_codes", ErrorBreakdown(row.stats)}};
}

// One shard count's run.
class ScaleRun {
 public:
  ScaleRun(const BenchOptions& o, std::vector<Shard>& shards, const SlotTable& table,
           std::string run)
      : o_(o), shards_(shards), table_(table), run_(std::move(run)) {
    for (int w = 0; w < o_.sim_workers; ++w) {
      workers_.push_back(fmt::format("sim-{}-w{:04}", run_, w));
    }
  }

  // The report's row of this shard count: one object per phase, the
  // masters' memory, and what else was running (load, the bench's CPU).
  json Run() {
    json row = {{"shards", shards_.size()}, {"sim_workers", o_.sim_workers}};
    row["loadavg_before"] = LoadAverage();
    const double bench_cpu_before = BenchCpuSeconds();
    row["register"] = Register();
    WarmConnections();
    Idle();
    HeartbeatPump pump(shards_, workers_, std::chrono::milliseconds(o_.heartbeat_ms));
    auto before = ReadMasters(shards_);
    row["announce"] = Announce();
    auto after = ReadMasters(shards_);
    row["memory"] = Memory(before, after);
    (void)pump.TakeWindow();
    row["heartbeat_quiet"] = Quiet(pump);
    row["lookup"] = Lookups();
    row["claim"] = Claims();
    (void)pump.TakeWindow();
    row["heartbeat_all"] = PhaseJson("heartbeat", pump.seconds(), pump.total());
    row["keys"] = announced_.load();
    row["avg_key_bytes"] = avg_key_bytes_;
    row["loadavg_after"] = LoadAverage();
    row["bench_cpu_s"] = BenchCpuSeconds() - bench_cpu_before;
    return row;
  }

 private:
  // key i belongs to worker i % workers: every worker announces its share.
  std::string Key(uint64_t i) const {
    return fmt::format("kv/{}/w{:04}/{:08}", run_, i % workers_.size(), i / workers_.size());
  }

  json Register() {
    auto start = Clock::now();
    std::atomic<size_t> next{0};
    OpStats stats = OnThreads(o_.concurrency, [&](int, OpStats& mine) {
      for (size_t w = next++; w < workers_.size(); w = next++) {
        rpc::NodeInfo info;
        info.node_id = workers_[w];
        info.host = fmt::format("10.{}.{}.{}", (w >> 16) & 255, (w >> 8) & 255, w & 255);
        info.port = 50100;  // never dialled: only the masters are asked
        info.alive = true;
        info.tiers.resize(1);
        info.tiers[0].name = "dram";
        info.tiers[0].kind = "dram";
        info.tiers[0].capacity = kSimDramBytes;
        for (Shard& shard : shards_) {
          auto op_start = Clock::now();
          auto reply = shard.channel->Call(
              [&](rpc::MasterServiceClient& client) { return client.RegisterNode(info); });
          mine.Record(op_start, reply ? ToResult(*reply) : Result<void>(Err(reply.error())), 0);
        }
      }
    });
    return PhaseJson("register", Seconds(start), std::move(stats));
  }

  // Opens --concurrency connections to every shard before the first RSS
  // reading, so the masters' per-connection threads and buffers do not
  // count as per-key memory: each thread holds its connection until all
  // have one, or a second has passed.
  void WarmConnections() {
    for (Shard& shard : shards_) {
      std::mutex mu;
      std::condition_variable cv;
      int holding = 0;
      OnThreads(o_.concurrency, [&](int, OpStats&) {
        (void)shard.channel->Call([&](rpc::MasterServiceClient& client) {
          rpc::LocationResult location;
          client.GetLocation(location, run_ + "/warm-up");
          std::unique_lock lock(mu);
          ++holding;
          cv.notify_all();
          cv.wait_for(lock, std::chrono::seconds(1), [&] { return holding >= o_.concurrency; });
          return location.code;
        });
      });
    }
  }

  // Each thread takes whole workers and announces their keys, grouped by
  // shard, in calls of at most 8192 keys and 4 MiB.
  json Announce() {
    auto start = Clock::now();
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> key_bytes{0}, rejected{0};
    const uint64_t keys = o_.keys;
    std::mutex mu;
    shard_keys_.assign(shards_.size(), 0);
    OpStats stats = OnThreads(o_.concurrency, [&](int, OpStats& mine) {
      std::vector<uint64_t> my_shard_keys(shards_.size(), 0);
      std::vector<std::vector<std::string>> batch(shards_.size());
      std::vector<size_t> batch_bytes(shards_.size(), 0);
      uint64_t my_bytes = 0, my_announced = 0, my_rejected = 0;
      auto flush = [&](size_t s, const std::string& node) {
        if (batch[s].empty()) return;
        auto op_start = Clock::now();
        auto reply = shards_[s].channel->Call([&](rpc::MasterServiceClient& client) {
          rpc::AnnounceResult result;
          client.AnnounceKeys(result, node, batch[s]);
          return result;
        });
        size_t n = batch[s].size();
        if (reply && reply->code == rpc::ErrorCode::OK) {
          size_t refused = std::min(reply->rejected.size(), n);
          my_rejected += refused;
          my_announced += n - refused;
          my_shard_keys[s] += n - refused;
          std::vector<Result<void>> results(n - refused);
          results.resize(n, Err(ErrorCode::kObjectAlreadyExists));
          mine.RecordBatch(op_start, results, 0);
        } else {
          ErrorCode code = reply ? ToResult(reply->code).error() : reply.error();
          mine.RecordBatch(op_start, std::vector<Result<void>>(n, Err(code)), 0);
        }
        batch[s].clear();
        batch_bytes[s] = 0;
      };
      for (size_t w = next++; w < workers_.size(); w = next++) {
        for (uint64_t i = w; i < keys; i += workers_.size()) {
          std::string key = Key(i);
          size_t s = table_.ShardOf(key);
          if (batch[s].size() >= kAnnounceMaxKeys ||
              batch_bytes[s] + key.size() > kAnnounceMaxBytes) {
            flush(s, workers_[w]);
          }
          my_bytes += key.size();
          batch_bytes[s] += key.size();
          batch[s].push_back(std::move(key));
        }
        for (size_t s = 0; s < shards_.size(); ++s) flush(s, workers_[w]);
      }
      key_bytes += my_bytes;
      announced_ += my_announced;
      rejected += my_rejected;
      std::lock_guard lock(mu);
      for (size_t s = 0; s < shards_.size(); ++s) shard_keys_[s] += my_shard_keys[s];
    });
    avg_key_bytes_ = keys ? static_cast<double>(key_bytes.load()) / static_cast<double>(keys) : 0;
    json out = PhaseJson("announce", Seconds(start), std::move(stats));
    out["rejected"] = rejected.load();
    return out;
  }

  // Bytes per key from each master's RSS growth over the announce, minus
  // the key text (as the master workload computes master_bytes_per_key).
  json Memory(const std::optional<std::vector<MasterSample>>& before,
              const std::optional<std::vector<MasterSample>>& after) {
    json out = {{"bytes_per_key", nullptr}, {"per_shard", json::array()}};
    if (!before || !after) {
      out["note"] = "no master /metrics (admin HOST:PORT unknown or unreachable)";
      return out;
    }
    const std::vector<uint64_t>& per_shard = shard_keys_;
    double grown = 0;
    for (size_t s = 0; s < shards_.size(); ++s) {
      auto rss_before = static_cast<uint64_t>((*before)[s].rss);
      auto rss_after = static_cast<uint64_t>((*after)[s].rss);
      grown += static_cast<double>(rss_after) - static_cast<double>(rss_before);
      auto bpk = MasterBytesPerKey(rss_before, rss_after, per_shard[s], avg_key_bytes_);
      out["per_shard"].push_back({{"keys", per_shard[s]},
                                  {"rss_before", rss_before},
                                  {"rss_after", rss_after},
                                  {"bytes_per_key", bpk ? json(*bpk) : json(nullptr)}});
    }
    uint64_t announced = announced_.load();
    if (announced > 0) {
      out["bytes_per_key"] = grown / static_cast<double>(announced) - avg_key_bytes_;
    }
    return out;
  }

  // Before any heartbeat: the masters' CPU at rest (their sweeps, admin
  // server), subtracted from the quiet phase's for the net heartbeat cost.
  void Idle() {
    double seconds = std::max(o_.duration_s, 2.0 * o_.heartbeat_ms / 1000.0) / 2;
    auto before = ReadMasters(shards_);
    auto start = Clock::now();
    std::this_thread::sleep_for(Nanos(seconds));
    auto after = ReadMasters(shards_);
    if (!before || !after) return;
    double cpu = 0;
    for (size_t s = 0; s < shards_.size(); ++s) cpu += (*after)[s].cpu_s - (*before)[s].cpu_s;
    idle_cpu_per_s_ = cpu / Seconds(start);
  }

  // Heartbeats only: the masters' CPU per 1,000 heartbeats handled, raw and
  // net of the CPU they use at rest.
  json Quiet(HeartbeatPump& pump) {
    double seconds = std::max(o_.duration_s, 2.0 * o_.heartbeat_ms / 1000.0);
    auto before = ReadMasters(shards_);
    std::this_thread::sleep_for(Nanos(seconds));
    auto after = ReadMasters(shards_);
    auto [stats, window] = pump.TakeWindow();
    uint64_t beats = stats.keys;
    json out = PhaseJson("heartbeat", window, std::move(stats));
    out["heartbeats_per_s"] = window > 0 ? static_cast<double>(beats) / window : 0.0;
    out["master_cpu_ms"] = nullptr;
    out["master_cpu_ms_per_1k"] = nullptr;
    out["master_cpu_ms_per_1k_net"] = nullptr;
    if (before && after) {
      double cpu = 0;
      for (size_t s = 0; s < shards_.size(); ++s) cpu += (*after)[s].cpu_s - (*before)[s].cpu_s;
      out["master_cpu_ms"] = cpu * 1000;
      if (beats > 0) out["master_cpu_ms_per_1k"] = cpu * 1000 / (beats / 1000.0);
      if (beats > 0 && idle_cpu_per_s_) {
        double net = std::max(0.0, cpu - *idle_cpu_per_s_ * window);
        out["master_idle_cpu_ms_per_s"] = *idle_cpu_per_s_ * 1000;
        out["master_cpu_ms_per_1k_net"] = net * 1000 / (beats / 1000.0);
      }
    }
    return out;
  }

  // Random announced keys, --location-batch per lookup, one
  // BatchGetLocation per shard that owns some of them; latency per call.
  json Lookups() {
    const uint64_t keys = o_.keys;
    auto start = Clock::now();
    auto deadline = start + Nanos(o_.duration_s);
    OpStats stats = OnThreads(o_.concurrency, [&](int t, OpStats& mine) {
      std::mt19937_64 rng(0x5ca1e + t);
      std::uniform_int_distribution<uint64_t> pick(0, keys - 1);
      std::vector<std::vector<std::string>> batch(shards_.size());
      while (Clock::now() < deadline) {
        for (uint64_t j = 0; j < o_.location_batch; ++j) {
          std::string key = Key(pick(rng));
          batch[table_.ShardOf(key)].push_back(std::move(key));
        }
        for (size_t s = 0; s < shards_.size(); ++s) {
          if (batch[s].empty()) continue;
          auto op_start = Clock::now();
          auto reply = shards_[s].channel->Call([&](rpc::MasterServiceClient& client) {
            std::vector<rpc::LocationResult> locations;
            client.BatchGetLocation(locations, batch[s]);
            return locations;
          });
          mine.RecordBatch(op_start, KeyResults(reply, batch[s].size()), 0);
          batch[s].clear();
        }
      }
    });
    json out = PhaseJson("lookup", Seconds(start), std::move(stats));
    out["keys_per_lookup"] = o_.location_batch;
    return out;
  }

  // New keys claimed by random simulated workers: PutOwner per key with
  // --batch 1, else BatchPutOwner of the keys of --batch that one shard owns.
  json Claims() {
    auto start = Clock::now();
    auto deadline = start + Nanos(o_.duration_s);
    OpStats stats = OnThreads(o_.concurrency, [&](int t, OpStats& mine) {
      std::mt19937_64 rng(0xc1a1 + t);
      std::vector<std::vector<std::string>> batch(shards_.size());
      uint64_t n = 0;
      while (Clock::now() < deadline) {
        const std::string& node = workers_[rng() % workers_.size()];
        for (uint64_t j = 0; j < o_.batch; ++j) {
          std::string key = fmt::format("kv/{}/c{:02}/{:010}", run_, t, n++);
          batch[table_.ShardOf(key)].push_back(std::move(key));
        }
        for (size_t s = 0; s < shards_.size(); ++s) {
          if (batch[s].empty()) continue;
          auto op_start = Clock::now();
          if (o_.batch == 1) {
            auto reply = shards_[s].channel->Call([&](rpc::MasterServiceClient& client) {
              rpc::PutOwnerResult result;
              client.PutOwner(result, batch[s][0], node);
              return result;
            });
            mine.Record(op_start, reply ? ToResult(reply->code) : Result<void>(Err(reply.error())),
                        0);
          } else {
            auto reply = shards_[s].channel->Call([&](rpc::MasterServiceClient& client) {
              std::vector<rpc::PutOwnerResult> results;
              client.BatchPutOwner(results, batch[s], node);
              return results;
            });
            mine.RecordBatch(op_start, KeyResults(reply, batch[s].size()), 0);
          }
          batch[s].clear();
        }
      }
    });
    json out = PhaseJson("claim", Seconds(start), std::move(stats));
    out["keys_per_claim"] = o_.batch;
    return out;
  }

  const BenchOptions& o_;
  std::vector<Shard>& shards_;
  const SlotTable& table_;
  const std::string run_;
  std::vector<std::string> workers_;
  std::atomic<uint64_t> announced_{0};
  std::vector<uint64_t> shard_keys_;  // keys each shard accepted in the announce
  double avg_key_bytes_ = 0;
  std::optional<double> idle_cpu_per_s_;  // all shards together, before heartbeats
};

std::string RunId() {
  std::random_device rd;
  return fmt::format("{:08x}", static_cast<uint32_t>(rd() ^ (getpid() << 8)));
}

std::unique_ptr<Channel> Connect(const Shard& shard, int concurrency) {
  // One pooled connection per bench thread, plus the heartbeat thread's.
  return std::make_unique<Channel>(
      shard.host, shard.port,
      RpcOptions{.io_timeout_ms = 30000, .max_idle = static_cast<size_t>(concurrency) + 4});
}

// A cell of the text table; "-" for a missing number.
std::string Cell(const json& value, const char* format) {
  if (!value.is_number()) return "-";
  return fmt::format(fmt::runtime(format), value.get<double>());
}

void PrintTable(const json& report) {
  std::printf("mooncake-bench scale: %s\n", report["config"]["summary"].get<std::string>().c_str());
  std::printf("master: %s\n", report["config"]["master"].get<std::string>().c_str());
  std::printf("%6s %10s %9s %13s %15s %10s %10s %12s %16s %18s\n", "shards", "keys", "bytes/key",
              "lookup keys/s", "lookup p50/p99", "claims/s", "claim p99", "heartbeats/s",
              "hb p99 quiet/all", "CPU ms/1k hb (net)");
  for (const json& row : report["rows"]) {
    std::string lookup_lat = fmt::format("{}/{} us", row["lookup"]["p50_us"].get<uint32_t>(),
                                         row["lookup"]["p99_us"].get<uint32_t>());
    const json& quiet = row["heartbeat_quiet"];
    std::string cpu = Cell(quiet["master_cpu_ms_per_1k"], "{:.1f}") + " (" +
                      Cell(quiet["master_cpu_ms_per_1k_net"], "{:.1f}") + ")";
    std::string hb_lat = fmt::format("{}/{} us", quiet["p99_us"].get<uint32_t>(),
                                     row["heartbeat_all"]["p99_us"].get<uint32_t>());
    std::printf("%6d %10llu %9s %13s %15s %10s %7u us %12s %16s %18s\n", row["shards"].get<int>(),
                static_cast<unsigned long long>(row["keys"].get<uint64_t>()),
                Cell(row["memory"]["bytes_per_key"], "{:.1f}").c_str(),
                Cell(row["lookup"]["keys_per_s"], "{:.0f}").c_str(), lookup_lat.c_str(),
                Cell(row["claim"]["keys_per_s"], "{:.0f}").c_str(),
                row["claim"]["p99_us"].get<uint32_t>(),
                Cell(quiet["heartbeats_per_s"], "{:.0f}").c_str(), hb_lat.c_str(), cpu.c_str());
  }
}

// Under the table: what a reader needs to judge the rates, and any errors.
void PrintNotes(const json& report) {
  for (const json& row : report["rows"]) {
    std::printf(
        "shards=%d: announce %.0f keys/s; bench CPU %.1f s; load average %.1f before, %.1f "
        "after\n",
        row["shards"].get<int>(), row["announce"]["keys_per_s"].get<double>(),
        row["bench_cpu_s"].get<double>(), row["loadavg_before"].get<double>(),
        row["loadavg_after"].get<double>());
    for (const char* phase : {"register", "announce", "lookup", "claim", "heartbeat_all"}) {
      const json& p = row[phase];
      if (p["errors"].get<uint64_t>() > 0) {
        std::printf("shards=%d %s errors: %s\n", row["shards"].get<int>(), phase,
                    p["error_codes"].get<std::string>().c_str());
      }
    }
  }
}

// The shards of one run: started masters, or --shard-table's.
struct Setup {
  std::vector<Shard> shards;
  std::optional<SlotTable> table;
};

bool Usable(const json& row) {
  return row["keys"].get<uint64_t>() > 0 && row["lookup"]["keys"].get<uint64_t>() > 0;
}

// The running masters of --shard-table; nullopt (after a usage error line)
// when the table or --shard-admins is malformed.
std::optional<Setup> SetupFromTable(const BenchOptions& o) {
  std::string why;
  auto table = SlotTable::Parse(o.shard_table, &why);
  if (!table) {
    std::fprintf(stderr, "error: usage: --shard-table: %s\n", why.c_str());
    return std::nullopt;
  }
  auto admins = SplitList(o.shard_admins);
  if (!admins.empty() && admins.size() != table->shard_count()) {
    std::fprintf(stderr, "error: usage: --shard-admins names %zu admins for %u shards\n",
                 admins.size(), table->shard_count());
    return std::nullopt;
  }
  Setup setup;
  for (uint32_t s = 0; s < table->shard_count(); ++s) {
    auto address = SplitAddress(table->address(s));  // Parse checked HOST:PORT
    Shard shard;
    shard.host = address->first;
    shard.port = address->second;
    if (!admins.empty()) shard.admin = admins[s];
    setup.shards.push_back(std::move(shard));
  }
  setup.table = std::move(*table);
  return setup;
}

// `count` masters started by `masters`, the slots split evenly over them;
// nullopt (after an error line) when one did not start.
std::optional<Setup> StartShards(MasterProcesses& masters, int count) {
  Setup setup;
  if (!masters.Start(count, setup.shards)) return std::nullopt;
  std::vector<std::string> addresses;
  for (const Shard& s : setup.shards) addresses.push_back(fmt::format("{}:{}", s.host, s.port));
  setup.table = *SlotTable::Even(count, addresses);
  return setup;
}

json ConfigJson(const BenchOptions& o, const std::string& run, const std::string& master,
                bool started) {
  json config = {{"master", master},
                 {"run", run},
                 {"sim_workers", o.sim_workers},
                 {"keys", o.keys},
                 {"heartbeat_ms", o.heartbeat_ms},
                 {"concurrency", o.concurrency},
                 {"duration_s", o.duration_s},
                 {"location_batch", o.location_batch},
                 {"claim_batch", o.batch},
                 {"master_node_ttl_ms", started ? json(kMasterNodeTtlMs) : json(nullptr)}};
  config["summary"] = fmt::format(
      "{} workers, {} keys, heartbeat {} ms, concurrency {}, {} s phases, "
      "lookups of {} keys, claims of {} keys, run {}",
      o.sim_workers, o.keys, o.heartbeat_ms, o.concurrency, o.duration_s, o.location_batch, o.batch,
      run);
  return config;
}

// Runs the phases on `setup` and returns its row.
json RunShards(const BenchOptions& o, Setup& setup, const std::string& run) {
  for (Shard& s : setup.shards) s.channel = Connect(s, o.concurrency);
  json row = ScaleRun(o, setup.shards, *setup.table, run).Run();
  row["slot_table"] = setup.table->Format();
  if (!o.json) std::fprintf(stderr, "scale: %zu shard(s) done\n", setup.shards.size());
  return row;
}

}  // namespace

int RunScaleBench(const BenchOptions& options) {
  const std::string run = RunId();
  std::vector<json> rows;
  std::string master_label;
  if (!options.shard_table.empty()) {
    auto setup = SetupFromTable(options);
    if (!setup) return 2;
    master_label = "running masters of --shard-table";
    rows.push_back(RunShards(options, *setup, run + "-0"));
  } else {
    auto binary = FindMasterBin(options);
    if (!binary) {
      std::fprintf(stderr,
                   "error: usage: no mooncake-master next to mooncake-bench; pass --master-bin\n");
      return 2;
    }
    master_label = *binary + " (" + MasterVersion(*binary) + ")";
    TempDir dir;
    if (dir.path().empty()) {
      std::fprintf(stderr, "error: cannot create a temporary folder\n");
      return 3;
    }
    for (size_t r = 0; r < options.scale_shards.size(); ++r) {
      // Declared before the setup, so its connections close before the
      // masters are stopped.
      MasterProcesses masters(*binary, dir.path());
      auto setup = StartShards(masters, options.scale_shards[r]);
      if (!setup) return 3;
      rows.push_back(RunShards(options, *setup, fmt::format("{}-{}", run, r)));
    }
  }
  json report = {{"config", ConfigJson(options, run, master_label, options.shard_table.empty())},
                 {"rows", rows}};
  if (options.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    PrintTable(report);
    PrintNotes(report);
  }
  return std::ranges::all_of(rows, Usable) ? 0 : 3;
}

}  // namespace mooncake::bench
