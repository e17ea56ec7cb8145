#include "bench/cluster_workloads.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <thread>

#include "bench/bench_util.h"
#include "thrift/rpc_transport.h"

namespace mooncake::bench {
namespace {

using nlohmann::json;

// Keys per BatchExist call and the most keys the prefetch mode loads.
constexpr size_t kPrefetchBatch = 500;
constexpr uint64_t kMaxPrefetchLoad = 2'000'000;
// Keys per BatchRemove call of --cleanup.
constexpr size_t kCleanupBatch = 1000;

std::string LoadKey(const std::string& run, uint64_t i) { return fmt::format("{}k{}", run, i); }
std::string WriteKey(const std::string& run, uint64_t i) { return fmt::format("{}w{}", run, i); }

// Random bytes, the same every run, so values do not compress.
std::string MakeValue(uint64_t size) {
  std::string value(size, '\0');
  std::mt19937_64 random(42);
  for (auto& c : value) c = static_cast<char>(random());
  return value;
}

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

// Runs `op(random, coin, stats)` on `threads` threads until `deadline` or,
// when `ops` > 0, until that many operations were issued across the threads.
// Each thread has its own reproducible random stream.
template <typename Op>
ThreadStats RunTimedPhase(int threads, Clock::time_point deadline, uint64_t ops, Op&& op) {
  std::atomic<uint64_t> issued{0};
  return RunThreads(threads, [&](int t, ThreadStats& mine) {
    std::mt19937_64 random(0x9e3779b97f4a7c15ull * (t + 1));
    std::uniform_real_distribution<double> coin(0, 1);
    while (Clock::now() < deadline && (ops == 0 || issued++ < ops)) op(random, coin, mine);
  });
}

}  // namespace

ClusterBench::ClusterBench(const BenchOptions& options, Client& client)
    : options_(options),
      client_(client),
      run_(RunPrefix(options.key_prefix)),
      value_(MakeValue(options.value_size)) {}

std::vector<PhaseRow> ClusterBench::Run() {
  std::vector<PhaseRow> rows;
  load_count_ = options_.keys;
  if (options_.workload == "prefetch") load_count_ = PrefetchLoadCount();
  WarmConnections();
  if (options_.async) {
    AsyncLoad(rows);
  } else {
    Load(rows);
  }
  if (loaded_.empty() && (options_.get_ratio > 0 || options_.workload != "mixed")) {
    std::fprintf(stderr, "error: no key was loaded; skipping the %s phase\n",
                 options_.workload.c_str());
  } else if (options_.workload == "zipf") {
    Zipf(rows);
  } else if (options_.workload == "prefetch") {
    Prefetch(rows);
  } else if (options_.async) {
    AsyncGets(rows);
  } else {
    Mixed(rows);
  }
  // Whether this process's waits for replies polled (--rpc-poll-us), in
  // the phases measured (not the cleanup after them).
  RpcPollCounts polls = ReadRpcPollCounts();
  extra_["rpc_polls"] = {{"poll_us", options_.rpc_poll_us},
                         {"data", polls.data},
                         {"expired", polls.expired},
                         {"busy", polls.busy}};
  if (options_.cleanup) Cleanup();
  if (options_.rdma != "off") ReportTransport();
  TransportCounters t = CountersSinceWarmUp();
  extra_["combined"] = {{"gets", t.combined_gets},
                        {"get_batches", t.combined_get_batches},
                        {"puts", t.combined_puts},
                        {"put_batches", t.combined_put_batches}};
  return rows;
}

// Before the load phase's clock starts, every thread makes one call shaped
// as the phase's (a Put, or a BatchPut of --batch keys) at the same moment,
// or with --async --concurrency PutAsync calls go out at once, so that the
// connections the phase uses are open (up to the client's idle pool per
// worker), as redis-benchmark connects all its clients before its clock
// starts. Otherwise a short phase (4,000 puts of 64 KiB at 64 threads last
// about 0.15 s) also times 64 TCP connects and, with --rpc-engine threads,
// the worker's thread for each. The keys are removed at once, and there
// are never more of them than the load phase puts.
void ClusterBench::WarmConnections() {
  if (load_count_ == 0) return;
  const int threads = static_cast<int>(
      std::min<uint64_t>(static_cast<uint64_t>(options_.concurrency), load_count_));
  const uint64_t batch = std::clamp<uint64_t>(load_count_ / threads, 1, options_.batch);
  std::vector<std::string> keys;
  for (int t = 0; t < threads; ++t) {
    for (uint64_t k = 0; k < batch; ++k) keys.push_back(fmt::format("{}warm{}-{}", run_, t, k));
  }
  std::atomic<uint64_t> stored{0};
  if (options_.async) {
    // Shared with the completions, which may outlive the wait by their
    // last instructions.
    auto all_done = std::make_shared<std::latch>(threads);
    for (int t = 0; t < threads; ++t) {
      client_.PutAsync(
          keys[t], value_,
          [&stored, all_done](Result<void> put) {
            if (put) stored.fetch_add(1);
            all_done->count_down();
          },
          LoadOptions(t));
    }
    all_done->wait();
  } else {
    std::latch all_started(threads);
    RunThreads(threads, [&](int t, ThreadStats&) {
      all_started.arrive_and_wait();
      std::span<const std::string> mine(keys.data() + t * batch, batch);
      if (batch == 1) {
        if (client_.Put(mine[0], value_, LoadOptions(t))) stored.fetch_add(1);
        return;
      }
      std::vector<std::pair<std::string, std::string>> items;
      for (const auto& key : mine) items.emplace_back(key, value_);
      for (const auto& result : client_.BatchPut(items, LoadOptions(t))) {
        if (result) stored.fetch_add(1);
      }
    });
  }
  uint64_t removed = 0;
  for (const auto& result : client_.BatchRemove(keys)) {
    if (result) ++removed;
  }
  extra_["warm_up"] = {{"keys", keys.size()}, {"stored", stored.load()}, {"removed", removed}};
  warm_up_counters_ = client_.transport_counters();
}

TransportCounters ClusterBench::CountersSinceWarmUp() const {
  TransportCounters t = client_.transport_counters();
  t.async_puts -= warm_up_counters_.async_puts;
  t.async_put_batches -= warm_up_counters_.async_put_batches;
  t.combined_puts -= warm_up_counters_.combined_puts;
  t.combined_put_batches -= warm_up_counters_.combined_put_batches;
  return t;
}

// Phase 1: --keys puts (BatchPut of --batch keys per call when > 1),
// bounded by --load-timeout-s.
void ClusterBench::Load(std::vector<PhaseRow>& rows) {
  const uint64_t batch = options_.batch;
  std::atomic<uint64_t> next{0};
  // One byte per key rather than vector<bool>: threads write distinct
  // elements, which bit-packed storage would make a data race.
  std::vector<uint8_t> stored(load_count_, 0);
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration<double>(options_.load_timeout_s);
  ThreadStats stats = RunThreads(options_.concurrency, [&](int, ThreadStats& mine) {
    if (batch == 1) {
      for (uint64_t i = next++; i < load_count_ && Clock::now() < deadline; i = next++) {
        auto op_start = Clock::now();
        auto put = client_.Put(LoadKey(run_, i), value_, LoadOptions(i));
        mine.put.Record(op_start, put, value_.size());
        if (put) stored[i] = 1;
      }
      return;
    }
    // The values are copied once per thread; each call only renames the keys.
    std::vector<std::pair<std::string, std::string>> items;
    for (uint64_t call = next++; Clock::now() < deadline; call = next++) {
      uint64_t n = BatchKeys(load_count_, batch, call);
      if (n == 0) break;
      uint64_t first = call * batch;
      items.resize(n, {std::string(), value_});
      for (uint64_t k = 0; k < n; ++k) items[k].first = LoadKey(run_, first + k);
      auto op_start = Clock::now();
      auto results = client_.BatchPut(items, LoadOptions(call));
      mine.put.RecordBatch(op_start, results, value_.size());
      for (uint64_t k = 0; k < n && k < results.size(); ++k) {
        if (results[k]) stored[first + k] = 1;
      }
    }
  });
  double seconds = Seconds(start);
  for (uint64_t i = 0; i < load_count_; ++i) {
    if (stored[i]) loaded_.push_back(i);
  }
  rows.push_back(PhaseRow{"load", "put", seconds, std::move(stats.put)});
}

PutOptions ClusterBench::LoadOptions(uint64_t call) const {
  PutOptions options;
  if (!options_.load_nodes.empty()) {
    options.preferred_node = options_.load_nodes[call % options_.load_nodes.size()];
  }
  return options;
}

// Phase 2: gets of loaded keys and puts of new ones, until --duration-s or
// --ops (calls), whichever comes first. With --batch N each call is a
// BatchGet of N random loaded keys or a BatchPut of N new ones.
void ClusterBench::Mixed(std::vector<PhaseRow>& rows) {
  const uint64_t batch = options_.batch;
  std::atomic<uint64_t> writes{0};
  auto start = Clock::now();
  ThreadStats stats =
      RunTimedPhase(options_.concurrency, PhaseDeadline(start), options_.ops,
                    [&](std::mt19937_64& random, auto& coin, ThreadStats& mine) {
                      bool is_get = !loaded_.empty() && coin(random) < options_.get_ratio;
                      if (batch == 1) {
                        auto op_start = Clock::now();
                        if (is_get) {
                          uint64_t id = loaded_[random() % loaded_.size()];
                          mine.get.Record(op_start, CheckedGet(LoadKey(run_, id)), value_.size());
                        } else {
                          auto put = client_.Put(WriteKey(run_, writes++), value_);
                          mine.put.Record(op_start, put, value_.size());
                        }
                        return;
                      }
                      if (is_get) {
                        std::vector<std::string> keys;
                        keys.reserve(batch);
                        for (uint64_t k = 0; k < batch; ++k) {
                          keys.push_back(LoadKey(run_, loaded_[random() % loaded_.size()]));
                        }
                        auto op_start = Clock::now();
                        auto got = client_.BatchGet(keys);
                        std::vector<Result<void>> checked;
                        checked.reserve(got.size());
                        for (const auto& value : got) checked.push_back(CheckedValue(value));
                        mine.get.RecordBatch(op_start, checked, value_.size());
                      } else {
                        uint64_t first = writes.fetch_add(batch);
                        std::vector<std::pair<std::string, std::string>> items;
                        items.reserve(batch);
                        for (uint64_t k = 0; k < batch; ++k)
                          items.emplace_back(WriteKey(run_, first + k), value_);
                        auto op_start = Clock::now();
                        mine.put.RecordBatch(op_start, client_.BatchPut(items), value_.size());
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

// The calls of --async: --concurrency chains, each completion recording its
// call and issuing the chain's next, so no thread of this process waits on
// a reply (as redis-benchmark keeps one call in flight per connection from
// one thread). Shared with the completions, which may outlive the phase's
// wait by their last few instructions.
class AsyncChains : public std::enable_shared_from_this<AsyncChains> {
 public:
  using Done = std::function<void(Result<void>)>;
  // Issues call number `n`; `draw` is a random number for it.
  using Issue = std::function<void(uint64_t n, uint64_t draw, Done done)>;
  AsyncChains(Clock::time_point deadline, uint64_t max_ops, uint64_t bytes_per_op, Issue issue)
      : deadline_(deadline),
        max_ops_(max_ops),
        bytes_per_op_(bytes_per_op),
        issue_(std::move(issue)) {}

  // Runs `chains` chains until the deadline or max_ops calls (0: no bound);
  // returns their stats.
  OpStats Run(int chains) {
    {
      std::lock_guard lock(mu_);
      running_ = chains;
    }
    for (int i = 0; i < chains; ++i) IssueNext();
    std::unique_lock lock(mu_);
    ended_.wait(lock, [&] { return running_ == 0; });
    return stats_;
  }

 private:
  void IssueNext() {
    uint64_t n = 0;
    uint64_t draw = 0;
    {
      std::lock_guard lock(mu_);
      if (Clock::now() >= deadline_ || (max_ops_ > 0 && issued_ >= max_ops_)) {
        if (--running_ == 0) ended_.notify_all();
        return;
      }
      n = issued_++;
      draw = random_();
    }
    auto start = Clock::now();
    issue_(n, draw, [self = shared_from_this(), start](Result<void> result) {
      {
        std::lock_guard lock(self->mu_);
        self->stats_.Record(start, result, self->bytes_per_op_);
      }
      self->IssueNext();
    });
  }

  const Clock::time_point deadline_;
  const uint64_t max_ops_;
  const uint64_t bytes_per_op_;
  const Issue issue_;
  std::mutex mu_;
  std::condition_variable ended_;
  std::mt19937_64 random_{0x9e3779b97f4a7c15ull};  // guarded by mu_
  OpStats stats_;                                  // guarded by mu_
  uint64_t issued_ = 0;                            // guarded by mu_
  int running_ = 0;                                // guarded by mu_
};

// Phase 1 with --async: the puts through PutAsync.
void ClusterBench::AsyncLoad(std::vector<PhaseRow>& rows) {
  // Completions write distinct elements; Run() returns after the last.
  auto stored = std::make_shared<std::vector<uint8_t>>(load_count_, 0);
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options_.load_timeout_s));
  auto issue = [this, stored](uint64_t n, uint64_t, AsyncChains::Done done) {
    auto record = [stored, n, done](Result<void> put) {
      if (put) (*stored)[n] = 1;
      done(put);
    };
    client_.PutAsync(LoadKey(run_, n), value_, std::move(record), LoadOptions(n));
  };
  auto chains = std::make_shared<AsyncChains>(deadline, load_count_, value_.size(), issue);
  OpStats stats = chains->Run(options_.concurrency);
  double seconds = Seconds(start);
  for (uint64_t i = 0; i < load_count_; ++i) {
    if ((*stored)[i]) loaded_.push_back(i);
  }
  rows.push_back(PhaseRow{"load", "put", seconds, std::move(stats)});
}

// Phase 2 with --async: gets of loaded keys through GetAsync.
void ClusterBench::AsyncGets(std::vector<PhaseRow>& rows) {
  auto start = Clock::now();
  auto chains = std::make_shared<AsyncChains>(
      PhaseDeadline(start), options_.ops, value_.size(),
      [this](uint64_t, uint64_t draw, AsyncChains::Done done) {
        client_.GetAsync(LoadKey(run_, loaded_[draw % loaded_.size()]),
                         [this, done](Result<ObjectValue> got) { done(CheckedValue(got)); });
      });
  OpStats stats = chains->Run(options_.concurrency);
  rows.push_back(PhaseRow{"mixed", "get", Seconds(start), std::move(stats)});
  TransportCounters t = CountersSinceWarmUp();
  extra_["async"] = {{"gets_pipelined", t.async_gets_pipelined},
                     {"gets_slow", t.async_gets_slow},
                     {"puts", t.async_puts},
                     {"put_batches", t.async_put_batches}};
}

// The bound of a read phase: --duration-s, or --ops (then an hour at most).
Clock::time_point ClusterBench::PhaseDeadline(Clock::time_point start) const {
  double limit_s = options_.duration_given || options_.ops == 0 ? options_.duration_s : 3600;
  return start +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
}

// Phase 2 of zipf: skewed gets of the loaded keys; rank 0 is the hottest.
void ClusterBench::Zipf(std::vector<PhaseRow>& rows) {
  ZipfGenerator zipf(loaded_.size(), options_.zipf_theta);
  auto start = Clock::now();
  ThreadStats stats =
      RunTimedPhase(options_.concurrency, PhaseDeadline(start), options_.ops,
                    [&](std::mt19937_64& random, auto& coin, ThreadStats& mine) {
                      uint64_t id = loaded_[zipf.Next(coin(random))];
                      auto op_start = Clock::now();
                      mine.get.Record(op_start, CheckedGet(LoadKey(run_, id)), value_.size());
                    });
  rows.push_back(PhaseRow{"zipf", "get", Seconds(start), std::move(stats.get)});
  ReportHotCache();
}

// How much of the zipf phase the client hot cache (--hot-cache-bytes) served.
void ClusterBench::ReportHotCache() {
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

// How the gets travelled (--rdma): RDMA reads, fallbacks, and why not.
void ClusterBench::ReportTransport() {
  TransportCounters t = client_.transport_counters();
  extra_["transport"] = {{"rdma_enabled", t.rdma_enabled},
                         {"rdma_reason", t.rdma_reason},
                         {"rdma_gets", t.rdma_gets},
                         {"rdma_bytes", t.rdma_bytes},
                         {"rdma_fallbacks", t.rdma_fallbacks}};
}

// ---- prefetch ----

// Enough objects to fill DRAM twice, so the first half is demoted to SSD.
uint64_t ClusterBench::PrefetchLoadCount() {
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
void ClusterBench::Classify(std::vector<uint64_t>& ssd, std::vector<uint64_t>& dram) {
  uint64_t want = options_.prefetch_samples;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options_.load_timeout_s));
  for (size_t i = 0; i < loaded_.size() && ssd.size() < 2 * want && Clock::now() < deadline; ++i) {
    auto info = client_.Inspect(LoadKey(run_, loaded_[i]));
    if (info && info->tier == "ssd") ssd.push_back(loaded_[i]);
  }
  for (size_t i = loaded_.size(); i-- > 0 && dram.size() < want && Clock::now() < deadline;) {
    auto info = client_.Inspect(LoadKey(run_, loaded_[i]));
    if (info && info->tier == "dram") dram.push_back(loaded_[i]);
  }
}

// Times one get per key, one at a time, so latencies are not queueing.
PhaseRow ClusterBench::TimedGets(const std::string& op, const std::vector<uint64_t>& ids) {
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
json ClusterBench::PrefetchCounters() {
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

// BatchExist(prefetch) of the keys, as a serving engine probes before reading.
void ClusterBench::PrefetchKeys(const std::vector<uint64_t>& ids) {
  std::vector<std::string> keys;
  for (uint64_t id : ids) keys.push_back(LoadKey(run_, id));
  for (size_t i = 0; i < keys.size(); i += kPrefetchBatch) {
    std::vector<std::string> batch(keys.begin() + i,
                                   keys.begin() + std::min(keys.size(), i + kPrefetchBatch));
    client_.BatchExist(batch, /*prefetch=*/true);
  }
}

// Three latency groups: DRAM hits, SSD hits, and SSD hits that were
// prefetched --prefetch-wait-ms earlier. Half the SSD keys stay cold so the
// two SSD groups are comparable.
void ClusterBench::Prefetch(std::vector<PhaseRow>& rows) {
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
  PrefetchKeys(warmed);
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
Result<void> ClusterBench::CheckedGet(const std::string& key) {
  return CheckedValue(client_.Get(key));
}

Result<void> ClusterBench::CheckedValue(const Result<ObjectValue>& got) const {
  if (!got) return Err(got.error());
  if (got->data.size() != value_.size()) return Err(ErrorCode::kInternalError);
  return {};
}

// --cleanup: removes every key this run stored or tried to put.
void ClusterBench::Cleanup() {
  std::vector<std::string> keys;
  for (uint64_t i : loaded_) keys.push_back(LoadKey(run_, i));
  for (uint64_t i = 0; i < written_; ++i) keys.push_back(WriteKey(run_, i));
  for (size_t i = 0; i < keys.size(); i += kCleanupBatch) {
    std::vector<std::string> batch(keys.begin() + i,
                                   keys.begin() + std::min(keys.size(), i + kCleanupBatch));
    client_.BatchRemove(batch, /*force=*/true);
  }
}

}  // namespace mooncake::bench
