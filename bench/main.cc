// mooncake-bench: load a key set, then run one workload from threads sharing
// one Client, and report throughput and latency per phase. Workloads:
//   mixed     gets of loaded keys and puts of new ones (--get-ratio)
//   zipf      skewed gets (--zipf-theta) over the loaded keys; with
//             --hot-cache-bytes the client hot cache serves the hot ones
//   prefetch  get latency of DRAM hits, SSD hits, and SSD hits after
//             BatchExist(prefetch) plus --prefetch-wait-ms of other work
// and two modes that need no cluster, measured on this machine's devices:
//   vram      VRAM tier put/get (host<->device) vs plain hipMemcpy
//   transfer  RDMA WRITE/READ between two queue pairs vs a TCP socket

#include <spdlog/fmt/fmt.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <thrift/TOutput.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/transfer_bench.h"
#include "bench/vram_bench.h"
#include "client/client.h"
#include "thrift/rpc_settings.h"

namespace mooncake::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchOptions {
  std::string master = "127.0.0.1:50051";
  std::string node;
  std::string value_size_text = "4KiB";
  uint64_t value_size = 4096;
  uint64_t keys = 1000;
  int concurrency = 4;
  double get_ratio = 0.9;
  double duration_s = 10;
  bool duration_given = false;
  uint64_t ops = 0;  // 0: bounded by duration only
  double load_timeout_s = 300;
  std::string key_prefix = "bench";
  bool json = false;
  bool cleanup = false;
  std::string workload = "mixed";
  double zipf_theta = 0.99;
  std::string hot_cache_text = "0";
  uint64_t hot_cache_bytes = 0;
  size_t location_cache_entries = 65536;
  std::string rdma = "off";  // ClientConfig.rdma: RDMA READ for large gets
  TlsSettings tls;           // ClientConfig.tls: mutual TLS to the cluster
  int64_t prefetch_wait_ms = 200;
  uint64_t prefetch_samples = 200;  // keys per latency group
  // vram and transfer modes.
  std::vector<std::string> device_sizes_text;
  int iterations = 20;
  int gpu_device = 0;
  TransferBenchOptions transfer;
};

// Keys per BatchExist call and the most keys the prefetch mode loads.
constexpr size_t kPrefetchBatch = 500;
constexpr uint64_t kMaxPrefetchLoad = 2'000'000;

// Counters of one operation kind, kept per thread and merged at the end so
// the hot path takes no lock.
struct OpStats {
  std::vector<uint32_t> latencies_us;  // successful operations
  uint64_t bytes = 0;
  std::map<ErrorCode, uint64_t> errors;

  uint64_t error_count() const {
    uint64_t n = 0;
    for (const auto& [code, count] : errors) n += count;
    return n;
  }

  void Record(Clock::time_point start, const Result<void>& result, uint64_t bytes_moved) {
    if (!result) {
      ++errors[result.error()];
      return;
    }
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
    latencies_us.push_back(static_cast<uint32_t>(std::min<int64_t>(us, UINT32_MAX)));
    bytes += bytes_moved;
  }

  void Merge(OpStats& other) {
    latencies_us.insert(latencies_us.end(), other.latencies_us.begin(), other.latencies_us.end());
    bytes += other.bytes;
    for (const auto& [code, count] : other.errors) errors[code] += count;
  }
};

struct ThreadStats {
  OpStats put;
  OpStats get;
};

struct PhaseRow {
  std::string phase;
  std::string op;
  double seconds = 0;
  OpStats stats;
};

// The unique part of every key of this run, so reruns never collide with
// keys an earlier run left behind (Put never overwrites).
std::string RunPrefix(const std::string& prefix) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  return fmt::format("{}-{:x}-{}-", prefix, ns, getpid());
}

std::string LoadKey(const std::string& run, uint64_t i) { return fmt::format("{}k{}", run, i); }
std::string WriteKey(const std::string& run, uint64_t i) { return fmt::format("{}w{}", run, i); }

// Runs `body(thread_index, stats)` on `threads` threads and merges the stats.
template <typename Body>
ThreadStats RunThreads(int threads, Body&& body) {
  std::vector<ThreadStats> per_thread(threads);
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] { body(t, per_thread[t]); });
  }
  for (auto& thread : running) thread.join();
  ThreadStats total;
  for (auto& s : per_thread) {
    total.put.Merge(s.put);
    total.get.Merge(s.get);
  }
  return total;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class Bench {
 public:
  Bench(const BenchOptions& options, Client& client)
      : options_(options),
        client_(client),
        run_(RunPrefix(options.key_prefix)),
        value_(MakeValue(options.value_size)) {}

  std::vector<PhaseRow> Run() {
    std::vector<PhaseRow> rows;
    load_count_ = options_.keys;
    if (options_.workload == "prefetch") load_count_ = PrefetchLoadCount();
    Load(rows);
    if (loaded_.empty() && (options_.get_ratio > 0 || options_.workload != "mixed")) {
      std::fprintf(stderr, "error: no key was loaded; skipping the %s phase\n",
                   options_.workload.c_str());
    } else if (options_.workload == "zipf") {
      Zipf(rows);
    } else if (options_.workload == "prefetch") {
      Prefetch(rows);
    } else {
      Mixed(rows);
    }
    if (options_.cleanup) Cleanup();
    if (options_.rdma != "off") ReportTransport();
    return rows;
  }

  const std::string& run() const { return run_; }
  // Workload-specific facts for the report (prefetch counters, groups).
  const json& extra() const { return extra_; }

 private:
  // How the gets travelled (--rdma): RDMA reads, fallbacks, and why not.
  void ReportTransport() {
    TransportCounters t = client_.transport_counters();
    extra_["transport"] = {{"rdma_enabled", t.rdma_enabled},
                           {"rdma_reason", t.rdma_reason},
                           {"rdma_gets", t.rdma_gets},
                           {"rdma_bytes", t.rdma_bytes},
                           {"rdma_fallbacks", t.rdma_fallbacks}};
  }

  static std::string MakeValue(uint64_t size) {
    std::string value(size, '\0');
    std::mt19937_64 random(42);
    for (auto& c : value) c = static_cast<char>(random());
    return value;
  }

  // Phase 1: --keys puts, bounded by --load-timeout-s.
  void Load(std::vector<PhaseRow>& rows) {
    std::atomic<uint64_t> next{0};
    std::vector<uint8_t> stored(load_count_, 0);
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration<double>(options_.load_timeout_s);
    ThreadStats stats = RunThreads(options_.concurrency, [&](int, ThreadStats& mine) {
      for (uint64_t i = next++; i < load_count_ && Clock::now() < deadline; i = next++) {
        auto op_start = Clock::now();
        auto put = client_.Put(LoadKey(run_, i), value_);
        mine.put.Record(op_start, put, value_.size());
        if (put) stored[i] = 1;
      }
    });
    double seconds = Seconds(start);
    for (uint64_t i = 0; i < load_count_; ++i) {
      if (stored[i]) loaded_.push_back(i);
    }
    rows.push_back(PhaseRow{"load", "put", seconds, std::move(stats.put)});
  }

  // Phase 2: gets of loaded keys and puts of new ones, until --duration-s or
  // --ops, whichever comes first.
  void Mixed(std::vector<PhaseRow>& rows) {
    std::atomic<uint64_t> issued{0};
    std::atomic<uint64_t> writes{0};
    auto start = Clock::now();
    auto deadline = PhaseDeadline(start);
    ThreadStats stats = RunThreads(options_.concurrency, [&](int t, ThreadStats& mine) {
      std::mt19937_64 random(0x9e3779b97f4a7c15ull * (t + 1));
      std::uniform_real_distribution<double> coin(0, 1);
      while (Clock::now() < deadline && (options_.ops == 0 || issued++ < options_.ops)) {
        bool is_get = !loaded_.empty() && coin(random) < options_.get_ratio;
        auto op_start = Clock::now();
        if (is_get) {
          uint64_t id = loaded_[random() % loaded_.size()];
          mine.get.Record(op_start, CheckedGet(LoadKey(run_, id)), value_.size());
        } else {
          auto put = client_.Put(WriteKey(run_, writes++), value_);
          mine.put.Record(op_start, put, value_.size());
        }
      }
    });
    double seconds = Seconds(start);
    written_ = writes.load();
    PhaseRow all{"mixed", "all", seconds, {}};
    all.stats.Merge(stats.get);
    all.stats.Merge(stats.put);
    rows.push_back(PhaseRow{"mixed", "get", seconds, std::move(stats.get)});
    rows.push_back(PhaseRow{"mixed", "put", seconds, std::move(stats.put)});
    rows.push_back(std::move(all));
  }

  // The bound of a read phase: --duration-s, or --ops (then an hour at most).
  Clock::time_point PhaseDeadline(Clock::time_point start) const {
    double limit_s = options_.duration_given || options_.ops == 0 ? options_.duration_s : 3600;
    return start +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
  }

  // Phase 2 of zipf: skewed gets of the loaded keys; rank 0 is the hottest.
  void Zipf(std::vector<PhaseRow>& rows) {
    ZipfGenerator zipf(loaded_.size(), options_.zipf_theta);
    std::atomic<uint64_t> issued{0};
    auto start = Clock::now();
    auto deadline = PhaseDeadline(start);
    ThreadStats stats = RunThreads(options_.concurrency, [&](int t, ThreadStats& mine) {
      std::mt19937_64 random(0x9e3779b97f4a7c15ull * (t + 1));
      std::uniform_real_distribution<double> coin(0, 1);
      while (Clock::now() < deadline && (options_.ops == 0 || issued++ < options_.ops)) {
        uint64_t id = loaded_[zipf.Next(coin(random))];
        auto op_start = Clock::now();
        mine.get.Record(op_start, CheckedGet(LoadKey(run_, id)), value_.size());
      }
    });
    rows.push_back(PhaseRow{"zipf", "get", Seconds(start), std::move(stats.get)});
    HotCacheCounters hot = client_.hot_cache_counters();
    uint64_t lookups = hot.hits + hot.misses;
    extra_["hot_cache"] = {{"bytes_budget", options_.hot_cache_bytes},
                           {"hits", hot.hits},
                           {"misses", hot.misses},
                           {"validations", hot.validations},
                           {"stale", hot.stale},
                           {"entries", hot.entries},
                           {"bytes", hot.bytes},
                           {"hit_ratio", lookups ? static_cast<double>(hot.hits) / lookups : 0.0}};
  }

  // ---- prefetch ----

  // Enough objects to fill DRAM twice, so the first half is demoted to SSD.
  uint64_t PrefetchLoadCount() {
    uint64_t dram = 0;
    if (auto nodes = client_.ListNodes()) {
      for (const auto& node : *nodes) {
        if (!node.alive || (!options_.node.empty() && node.node_id != options_.node)) continue;
        for (const auto& tier : node.tiers) {
          if (tier.kind == "dram") dram += tier.capacity;
        }
      }
    }
    uint64_t needed = (2 * dram + options_.value_size - 1) / options_.value_size;
    return std::clamp<uint64_t>(needed, options_.keys, kMaxPrefetchLoad);
  }

  // Where the loaded keys live now: up to 2 * samples SSD-resident keys
  // (oldest first) and up to `samples` DRAM-resident ones (newest first).
  void Classify(std::vector<uint64_t>& ssd, std::vector<uint64_t>& dram) {
    uint64_t want = options_.prefetch_samples;
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(options_.load_timeout_s));
    for (size_t i = 0; i < loaded_.size() && ssd.size() < 2 * want && Clock::now() < deadline;
         ++i) {
      auto info = client_.Inspect(LoadKey(run_, loaded_[i]));
      if (info && info->tier == "ssd") ssd.push_back(loaded_[i]);
    }
    for (size_t i = loaded_.size(); i-- > 0 && dram.size() < want && Clock::now() < deadline;) {
      auto info = client_.Inspect(LoadKey(run_, loaded_[i]));
      if (info && info->tier == "dram") dram.push_back(loaded_[i]);
    }
  }

  // Times one get per key, one at a time, so latencies are not queueing.
  PhaseRow TimedGets(const std::string& op, const std::vector<uint64_t>& ids) {
    PhaseRow row{"prefetch", op, 0, {}};
    auto start = Clock::now();
    for (uint64_t id : ids) {
      auto op_start = Clock::now();
      row.stats.Record(op_start, CheckedGet(LoadKey(run_, id)), value_.size());
    }
    row.seconds = Seconds(start);
    return row;
  }

  // Sum of the prefetch counters over every live node.
  json PrefetchCounters() {
    json total = {{"started", 0}, {"succeeded", 0}, {"failed", 0}, {"skipped", 0}};
    auto nodes = client_.ListNodes();
    if (!nodes) return total;
    for (const auto& node : *nodes) {
      if (!node.alive) continue;
      auto s = client_.Stats(node.node_id);
      if (!s) continue;
      total["started"] = total["started"].get<int64_t>() + s->prefetch_started;
      total["succeeded"] = total["succeeded"].get<int64_t>() + s->prefetch_succeeded;
      total["failed"] = total["failed"].get<int64_t>() + s->prefetch_failed;
      total["skipped"] = total["skipped"].get<int64_t>() + s->prefetch_skipped;
    }
    return total;
  }

  void Prefetch(std::vector<PhaseRow>& rows) {
    std::vector<uint64_t> ssd, dram;
    Classify(ssd, dram);
    size_t half = ssd.size() / 2;
    std::vector<uint64_t> cold(ssd.begin(), ssd.begin() + half);
    std::vector<uint64_t> warmed(ssd.begin() + half, ssd.begin() + 2 * half);
    extra_["groups"] = {{"loaded", loaded_.size()},
                        {"dram_keys", dram.size()},
                        {"ssd_keys", 2 * half},
                        {"prefetch_wait_ms", options_.prefetch_wait_ms}};
    if (half == 0) {
      std::fprintf(stderr,
                   "warning: no SSD-resident key found; load more (--keys) or check the SSD "
                   "tier\n");
    }
    rows.push_back(TimedGets("get-dram", dram));
    rows.push_back(TimedGets("get-ssd", cold));
    json before = PrefetchCounters();
    std::vector<std::string> keys;
    for (uint64_t id : warmed) keys.push_back(LoadKey(run_, id));
    for (size_t i = 0; i < keys.size(); i += kPrefetchBatch) {
      std::vector<std::string> batch(keys.begin() + i,
                                     keys.begin() + std::min(keys.size(), i + kPrefetchBatch));
      client_.BatchExist(batch, /*prefetch=*/true);
    }
    // The "other work" a serving engine does between probing and reading.
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.prefetch_wait_ms));
    rows.push_back(TimedGets("get-ssd-prefetched", warmed));
    json after = PrefetchCounters();
    json delta;
    for (const auto& [name, value] : after.items()) {
      delta[name] = value.get<int64_t>() - before[name].get<int64_t>();
    }
    extra_["prefetch_counters"] = delta;
  }

  // A get that returns the wrong number of bytes is an error, not a hit.
  Result<void> CheckedGet(const std::string& key) {
    auto got = client_.Get(key);
    if (!got) return Err(got.error());
    if (got->data.size() != value_.size()) return Err(ErrorCode::kInternalError);
    return {};
  }

  void Cleanup() {
    std::vector<std::string> keys;
    for (uint64_t i : loaded_) keys.push_back(LoadKey(run_, i));
    for (uint64_t i = 0; i < written_; ++i) keys.push_back(WriteKey(run_, i));
    constexpr size_t kBatch = 1000;
    for (size_t i = 0; i < keys.size(); i += kBatch) {
      std::vector<std::string> batch(keys.begin() + i,
                                     keys.begin() + std::min(keys.size(), i + kBatch));
      client_.BatchRemove(batch, /*force=*/true);
    }
  }

  const BenchOptions& options_;
  Client& client_;
  const std::string run_;
  const std::string value_;
  std::vector<uint64_t> loaded_;  // ids of keys the load phase stored
  uint64_t written_ = 0;          // keys the mixed phase tried to put
  uint64_t load_count_ = 0;       // keys the load phase tries to put
  json extra_ = json::object();
};

// ---- Reporting ----

struct Summary {
  uint64_t ops = 0;
  double ops_per_s = 0;
  double mb_per_s = 0;
  uint32_t p50 = 0, p99 = 0, p999 = 0;
  uint64_t errors = 0;
};

Summary Summarize(PhaseRow& row) {
  auto& lat = row.stats.latencies_us;
  std::sort(lat.begin(), lat.end());
  Summary s;
  s.ops = lat.size();
  double seconds = std::max(row.seconds, 1e-9);
  s.ops_per_s = static_cast<double>(s.ops) / seconds;
  s.mb_per_s = static_cast<double>(row.stats.bytes) / 1e6 / seconds;
  s.p50 = Percentile(lat, 0.50);
  s.p99 = Percentile(lat, 0.99);
  s.p999 = Percentile(lat, 0.999);
  s.errors = row.stats.error_count();
  return s;
}

std::string ErrorBreakdown(const OpStats& stats) {
  std::string out;
  for (const auto& [code, count] : stats.errors) {
    out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", ToString(code), count);
  }
  return out;
}

void PrintText(const BenchOptions& o, const std::string& run, std::vector<PhaseRow>& rows,
               const json& extra) {
  std::printf(
      "mooncake-bench workload=%s master=%s value_size=%llu keys=%llu concurrency=%d "
      "get_ratio=%.2f zipf_theta=%.2f hot_cache_bytes=%llu run=%s\n",
      o.workload.c_str(), o.master.c_str(), static_cast<unsigned long long>(o.value_size),
      static_cast<unsigned long long>(o.keys), o.concurrency, o.get_ratio, o.zipf_theta,
      static_cast<unsigned long long>(o.hot_cache_bytes), run.c_str());
  std::printf("%-8s %-18s %10s %12s %10s %9s %9s %9s %8s\n", "phase", "op", "ops", "ops/s", "MB/s",
              "p50_us", "p99_us", "p999_us", "errors");
  for (auto& row : rows) {
    Summary s = Summarize(row);
    std::printf("%-8s %-18s %10llu %12.1f %10.1f %9u %9u %9u %8llu\n", row.phase.c_str(),
                row.op.c_str(), static_cast<unsigned long long>(s.ops), s.ops_per_s, s.mb_per_s,
                s.p50, s.p99, s.p999, static_cast<unsigned long long>(s.errors));
  }
  for (const auto& row : rows) {
    if (row.op != "all" && !row.stats.errors.empty()) {
      std::printf("errors %s/%s: %s\n", row.phase.c_str(), row.op.c_str(),
                  ErrorBreakdown(row.stats).c_str());
    }
  }
  if (extra.contains("hot_cache")) {
    const json& h = extra["hot_cache"];
    std::printf(
        "hot cache: hit ratio %.3f (hits %llu, misses %llu, validations %llu, stale %llu, "
        "%llu entries)\n",
        h["hit_ratio"].get<double>(), h["hits"].get<unsigned long long>(),
        h["misses"].get<unsigned long long>(), h["validations"].get<unsigned long long>(),
        h["stale"].get<unsigned long long>(), h["entries"].get<unsigned long long>());
  }
  if (extra.contains("transport")) {
    const json& t = extra["transport"];
    std::printf("transport: rdma %s (%s), rdma gets %llu, rdma bytes %llu, fallbacks %llu\n",
                t["rdma_enabled"].get<bool>() ? "enabled" : "disabled",
                t["rdma_reason"].get<std::string>().c_str(),
                t["rdma_gets"].get<unsigned long long>(), t["rdma_bytes"].get<unsigned long long>(),
                t["rdma_fallbacks"].get<unsigned long long>());
  }
  if (extra.contains("groups"))
    std::printf("prefetch groups: %s\n", extra["groups"].dump().c_str());
  if (extra.contains("prefetch_counters")) {
    std::printf("worker prefetch counters (delta): %s\n",
                extra["prefetch_counters"].dump().c_str());
  }
}

void PrintJson(const BenchOptions& o, const std::string& run, std::vector<PhaseRow>& rows,
               const json& extra) {
  json phases = json::array();
  for (auto& row : rows) {
    Summary s = Summarize(row);
    json codes = json::object();
    for (const auto& [code, count] : row.stats.errors) codes[std::string(ToString(code))] = count;
    phases.push_back({{"phase", row.phase},
                      {"op", row.op},
                      {"seconds", row.seconds},
                      {"ops", s.ops},
                      {"ops_per_s", s.ops_per_s},
                      {"mb_per_s", s.mb_per_s},
                      {"bytes", row.stats.bytes},
                      {"p50_us", s.p50},
                      {"p99_us", s.p99},
                      {"p999_us", s.p999},
                      {"errors", s.errors},
                      {"error_codes", codes}});
  }
  json config = {{"master", o.master},
                 {"value_size", o.value_size},
                 {"keys", o.keys},
                 {"concurrency", o.concurrency},
                 {"get_ratio", o.get_ratio},
                 {"duration_s", o.duration_s},
                 {"ops", o.ops},
                 {"workload", o.workload},
                 {"zipf_theta", o.zipf_theta},
                 {"hot_cache_bytes", o.hot_cache_bytes},
                 {"location_cache_entries", o.location_cache_entries},
                 {"rdma", o.rdma},
                 {"prefetch_wait_ms", o.prefetch_wait_ms},
                 {"run_prefix", run}};
  json out = {{"config", config}, {"phases", phases}};
  for (const auto& [name, value] : extra.items()) out[name] = value;
  std::cout << out.dump(2) << std::endl;
}

// ---- Flags ----

// Parses flags; returns an exit code when the process should stop now.
std::optional<int> ParseFlags(int argc, char** argv, BenchOptions& o) {
  if (const char* env = std::getenv("MOONCAKE_MASTER"); env && *env) o.master = env;
  CLI::App app{
      "mooncake-bench: load keys, then a timed workload (mixed, zipf or prefetch); or measure "
      "this machine's VRAM tier (vram) or RDMA vs TCP transfers (transfer)",
      "mooncake-bench"};
  app.add_option("--workload", o.workload, "mixed, zipf, prefetch, vram or transfer")
      ->capture_default_str()
      ->check(CLI::IsMember({"mixed", "zipf", "prefetch", "vram", "transfer"}));
  app.add_option("--sizes", o.device_sizes_text,
                 "vram/transfer: transfer sizes (default 64KiB,1MiB,64MiB)")
      ->delimiter(',');
  app.add_option("--iterations", o.iterations, "vram/transfer: timed transfers per size and path")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--gpu-device", o.gpu_device, "vram: HIP device index")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rdma", o.rdma,
                 "Client reads of values over 4 MiB by RDMA READ: off, auto (where a device and "
                 "the owner allow, else TCP) or on (fail without a device)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "auto", "on"}));
  app.add_option("--rdma-device", o.transfer.rdma_device,
                 "RDMA device for --rdma and the transfer workload (first if empty)");
  app.add_option("--rdma-port", o.transfer.rdma_port, "transfer: RDMA port")->capture_default_str();
  app.add_option("--rdma-gid-index", o.transfer.rdma_gid_index, "transfer: GID index (-1 auto)")
      ->capture_default_str();
  app.add_option("--zipf-theta", o.zipf_theta, "Skew of the zipf workload (0 uniform .. <1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9999));
  app.add_option("--location-cache-entries", o.location_cache_entries,
                 "Keys whose owner the client remembers (0: ask the master on every read)")
      ->capture_default_str();
  app.add_option("--hot-cache-bytes", o.hot_cache_text,
                 "Client hot cache budget (0 off), e.g. 64MiB; objects > 1/8 of it bypass it")
      ->capture_default_str();
  app.add_option("--prefetch-wait-ms", o.prefetch_wait_ms,
                 "prefetch: other work (sleep) between BatchExist(prefetch) and the gets")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{60'000}));
  app.add_option("--prefetch-samples", o.prefetch_samples,
                 "prefetch: keys per latency group (DRAM, SSD, SSD prefetched)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000}));
  app.add_option("--master", o.master, "Master HOST:PORT")->capture_default_str();
  AddTlsOptions(app, o.tls);
  app.add_option("--node", o.node, "Local node id (put target)");
  app.add_option("--value-size", o.value_size_text, "Value size: 4096, 4KB, 4KiB, 1MB (1024-based)")
      ->capture_default_str();
  app.add_option("--keys", o.keys, "Objects put in the load phase")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}));
  app.add_option("--concurrency", o.concurrency, "Threads sharing one client")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--get-ratio", o.get_ratio, "Fraction of gets in the mixed phase (0..1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  auto* duration = app.add_option("--duration-s", o.duration_s, "Mixed phase length in seconds")
                       ->capture_default_str()
                       ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--ops", o.ops, "Mixed phase operation count (0: until --duration-s)");
  app.add_option("--load-timeout-s", o.load_timeout_s, "Upper bound on the load phase")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--key-prefix", o.key_prefix, "Key prefix; a unique run id is appended")
      ->capture_default_str();
  app.add_flag("--json", o.json, "Machine-readable output");
  app.add_flag("--cleanup", o.cleanup, "Remove the keys this run wrote when done");
  // The same keys as the long flags, without the dashes (`value-size = "1MiB"`);
  // flags on the command line win over the file, unknown keys are errors.
  app.set_config("--config", "", "Read these options from a TOML/INI file (same key names)")
      ->type_name("FILE");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.footer(
      "Examples:\n  mooncake-bench --value-size 1MB --keys 2000 --concurrency 8 "
      "--get-ratio 0.9 --duration-s 30\n"
      "  mooncake-bench --workload zipf --keys 10000 --value-size 16KiB --duration-s 10 "
      "--hot-cache-bytes 64MiB\n"
      "  mooncake-bench --workload prefetch --node worker-1 --value-size 256KiB "
      "--prefetch-wait-ms 200\n"
      "  mooncake-bench --workload vram --sizes 64KiB,1MiB,64MiB --iterations 50\n"
      "  mooncake-bench --workload transfer --sizes 64KiB,1MiB,64MiB");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: usage: %s\n", e.what());
    return 2;
  }
  o.duration_given = duration->count() > 0;
  auto size = ParseSize(o.value_size_text);
  if (!size) {
    std::fprintf(stderr, "error: usage: --value-size '%s' is not a size like 4KB or 1MiB\n",
                 o.value_size_text.c_str());
    return 2;
  }
  o.value_size = *size;
  if (o.hot_cache_text != "0") {
    auto budget = ParseSize(o.hot_cache_text);
    if (!budget) {
      std::fprintf(stderr, "error: usage: --hot-cache-bytes '%s' is not a size like 64MiB\n",
                   o.hot_cache_text.c_str());
      return 2;
    }
    o.hot_cache_bytes = *budget;
  }
  std::vector<uint64_t> sizes;
  for (const std::string& text : o.device_sizes_text) {
    auto parsed = ParseSize(text);
    if (!parsed) {
      std::fprintf(stderr, "error: usage: --sizes '%s' is not a size like 64KiB\n", text.c_str());
      return 2;
    }
    sizes.push_back(*parsed);
  }
  if (!sizes.empty()) o.transfer.sizes = sizes;
  o.transfer.iterations = o.iterations;
  o.transfer.json = o.json;
  return std::nullopt;
}

// The modes that measure this machine's devices; no cluster involved.
int RunDeviceBench(const BenchOptions& o) {
  if (o.workload == "transfer") return RunTransferBench(o.transfer);
  VramBenchOptions vram;
  if (!o.device_sizes_text.empty()) vram.sizes = o.transfer.sizes;
  vram.iterations = o.iterations;
  vram.device_index = o.gpu_device;
  vram.json = o.json;
  return RunVramBench(vram);
}

ClientConfig ToClientConfig(const BenchOptions& o, bool& ok) {
  ClientConfig config;
  size_t colon = o.master.rfind(':');
  ok = colon != std::string::npos && colon > 0;
  if (!ok) return config;
  config.master_host = o.master.substr(0, colon);
  config.master_port = std::atoi(o.master.c_str() + colon + 1);
  config.local_node = o.node;
  config.local_hot_cache_bytes = o.hot_cache_bytes;
  config.location_cache_entries = o.location_cache_entries;
  config.rdma = o.rdma;
  config.rdma_device = o.transfer.rdma_device;
  config.tls = o.tls;
  return config;
}

int Main(int argc, char** argv) {
  BenchOptions options;
  if (auto exit_code = ParseFlags(argc, argv, options)) return *exit_code;
  auto logger = spdlog::stderr_color_mt("mooncake-bench");
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
  if (options.workload == "vram" || options.workload == "transfer") {
    return RunDeviceBench(options);
  }

  bool address_ok = false;
  ClientConfig config = ToClientConfig(options, address_ok);
  if (!address_ok) {
    std::fprintf(stderr, "error: usage: --master must be HOST:PORT\n");
    return 2;
  }
  auto client = Client::Create(config);
  if (!client) {
    std::fprintf(stderr, "error: connect failed: %s (%d): cannot reach the master at %s\n",
                 std::string(ToString(client.error())).c_str(), static_cast<int>(client.error()),
                 options.master.c_str());
    return 3;
  }
  Bench bench(options, **client);
  auto rows = bench.Run();
  if (options.json) {
    PrintJson(options, bench.run(), rows, bench.extra());
  } else {
    PrintText(options, bench.run(), rows, bench.extra());
  }
  bool any_success = std::any_of(rows.begin(), rows.end(),
                                 [](const PhaseRow& r) { return !r.stats.latencies_us.empty(); });
  return any_success ? 0 : 3;
}

}  // namespace
}  // namespace mooncake::bench

int main(int argc, char** argv) { return mooncake::bench::Main(argc, argv); }
