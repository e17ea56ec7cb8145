// mooncake-bench: load a key set, then run a mixed get/put workload from
// threads sharing one Client, and report throughput and latency per phase.

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
#include "client/client.h"

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
};

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
    Load(rows);
    if (loaded_.empty() && options_.get_ratio > 0) {
      std::fprintf(stderr, "error: no key was loaded; skipping the mixed phase\n");
    } else {
      Mixed(rows);
    }
    if (options_.cleanup) Cleanup();
    return rows;
  }

  const std::string& run() const { return run_; }

 private:
  static std::string MakeValue(uint64_t size) {
    std::string value(size, '\0');
    std::mt19937_64 random(42);
    for (auto& c : value) c = static_cast<char>(random());
    return value;
  }

  // Phase 1: --keys puts, bounded by --load-timeout-s.
  void Load(std::vector<PhaseRow>& rows) {
    std::atomic<uint64_t> next{0};
    std::vector<uint8_t> stored(options_.keys, 0);
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration<double>(options_.load_timeout_s);
    ThreadStats stats = RunThreads(options_.concurrency, [&](int, ThreadStats& mine) {
      for (uint64_t i = next++; i < options_.keys && Clock::now() < deadline; i = next++) {
        auto op_start = Clock::now();
        auto put = client_.Put(LoadKey(run_, i), value_);
        mine.put.Record(op_start, put, value_.size());
        if (put) stored[i] = 1;
      }
    });
    double seconds = Seconds(start);
    for (uint64_t i = 0; i < options_.keys; ++i) {
      if (stored[i]) loaded_.push_back(i);
    }
    rows.push_back(PhaseRow{"load", "put", seconds, std::move(stats.put)});
  }

  // Phase 2: gets of loaded keys and puts of new ones, until --duration-s or
  // --ops, whichever comes first.
  void Mixed(std::vector<PhaseRow>& rows) {
    std::atomic<uint64_t> issued{0};
    std::atomic<uint64_t> writes{0};
    double limit_s = options_.duration_given || options_.ops == 0 ? options_.duration_s : 3600;
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration<double>(limit_s);
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

void PrintText(const BenchOptions& o, const std::string& run, std::vector<PhaseRow>& rows) {
  std::printf(
      "mooncake-bench master=%s value_size=%llu keys=%llu concurrency=%d get_ratio=%.2f "
      "run=%s\n",
      o.master.c_str(), static_cast<unsigned long long>(o.value_size),
      static_cast<unsigned long long>(o.keys), o.concurrency, o.get_ratio, run.c_str());
  std::printf("%-6s %-4s %10s %12s %10s %9s %9s %9s %8s\n", "phase", "op", "ops", "ops/s", "MB/s",
              "p50_us", "p99_us", "p999_us", "errors");
  for (auto& row : rows) {
    Summary s = Summarize(row);
    std::printf("%-6s %-4s %10llu %12.1f %10.1f %9u %9u %9u %8llu\n", row.phase.c_str(),
                row.op.c_str(), static_cast<unsigned long long>(s.ops), s.ops_per_s, s.mb_per_s,
                s.p50, s.p99, s.p999, static_cast<unsigned long long>(s.errors));
  }
  for (const auto& row : rows) {
    if (row.op != "all" && !row.stats.errors.empty()) {
      std::printf("errors %s/%s: %s\n", row.phase.c_str(), row.op.c_str(),
                  ErrorBreakdown(row.stats).c_str());
    }
  }
}

void PrintJson(const BenchOptions& o, const std::string& run, std::vector<PhaseRow>& rows) {
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
                 {"run_prefix", run}};
  std::cout << json{{"config", config}, {"phases", phases}}.dump(2) << std::endl;
}

// ---- Flags ----

// Parses flags; returns an exit code when the process should stop now.
std::optional<int> ParseFlags(int argc, char** argv, BenchOptions& o) {
  if (const char* env = std::getenv("MOONCAKE_MASTER"); env && *env) o.master = env;
  CLI::App app{"mooncake-bench: load keys, then a timed mixed get/put workload", "mooncake-bench"};
  app.add_option("--master", o.master, "Master HOST:PORT")->capture_default_str();
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
  app.footer(
      "Example:\n  mooncake-bench --value-size 1MB --keys 2000 --concurrency 8 "
      "--get-ratio 0.9 --duration-s 30");
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
  return std::nullopt;
}

ClientConfig ToClientConfig(const BenchOptions& o, bool& ok) {
  ClientConfig config;
  size_t colon = o.master.rfind(':');
  ok = colon != std::string::npos && colon > 0;
  if (!ok) return config;
  config.master_host = o.master.substr(0, colon);
  config.master_port = std::atoi(o.master.c_str() + colon + 1);
  config.local_node = o.node;
  return config;
}

int Main(int argc, char** argv) {
  BenchOptions options;
  if (auto exit_code = ParseFlags(argc, argv, options)) return *exit_code;
  auto logger = spdlog::stderr_color_mt("mooncake-bench");
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});

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
    PrintJson(options, bench.run(), rows);
  } else {
    PrintText(options, bench.run(), rows);
  }
  bool any_success = std::any_of(rows.begin(), rows.end(),
                                 [](const PhaseRow& r) { return !r.stats.latencies_us.empty(); });
  return any_success ? 0 : 3;
}

}  // namespace
}  // namespace mooncake::bench

int main(int argc, char** argv) { return mooncake::bench::Main(argc, argv); }
