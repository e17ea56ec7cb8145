#pragma once

// The workloads mooncake-bench runs against a cluster through one Client:
// a load phase of --keys puts (BatchPut of --batch keys per call; its
// connections opened first by untimed calls shaped as the phase's, whose
// keys are removed at once), then
//   mixed     gets of loaded keys and puts of new ones (--get-ratio); with
//             --batch N, BatchGet/BatchPut of N keys per call; with --async,
//             puts through PutAsync and then gets only, through GetAsync,
//             --concurrency in flight
//   zipf      skewed gets (--zipf-theta) over the loaded keys; with
//             --hot-cache-bytes the client hot cache serves the hot ones
//   prefetch  get latency of DRAM hits, SSD hits, and SSD hits after
//             BatchExist(prefetch) plus --prefetch-wait-ms of other work
// Every key carries a run prefix unique to this process, so reruns never
// collide with keys an earlier run left behind (Put never overwrites).
//
// Thread-safety: one ClusterBench runs once, from one thread; Run() starts
// --concurrency threads that share the Client (which is thread-safe) and
// joins them before it returns. Owns neither the options nor the client;
// both must outlive it.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/phase_stats.h"
#include "client/client.h"

namespace mooncake::bench {

class ClusterBench {
 public:
  ClusterBench(const BenchOptions& options, Client& client);

  // Loads the keys, runs options.workload, removes the keys with --cleanup,
  // and returns the report's rows in phase order.
  std::vector<PhaseRow> Run();

  // This run's key prefix.
  const std::string& run() const { return run_; }
  // Workload-specific facts for the report (prefetch counters, groups,
  // hot cache, transport).
  const nlohmann::json& extra() const { return extra_; }

 private:
  void WarmConnections();
  // The client's counters, less the warm-up's puts.
  TransportCounters CountersSinceWarmUp() const;
  void Load(std::vector<PhaseRow>& rows);
  // The put options of load call `call`: its --load-nodes target, if any.
  PutOptions LoadOptions(uint64_t call) const;
  void AsyncLoad(std::vector<PhaseRow>& rows);
  void Mixed(std::vector<PhaseRow>& rows);
  void AsyncGets(std::vector<PhaseRow>& rows);
  void Zipf(std::vector<PhaseRow>& rows);
  void Prefetch(std::vector<PhaseRow>& rows);
  void Cleanup();

  Clock::time_point PhaseDeadline(Clock::time_point start) const;
  uint64_t PrefetchLoadCount();
  void Classify(std::vector<uint64_t>& ssd, std::vector<uint64_t>& dram);
  PhaseRow TimedGets(const std::string& op, const std::vector<uint64_t>& ids);
  nlohmann::json PrefetchCounters();
  void PrefetchKeys(const std::vector<uint64_t>& ids);
  Result<void> CheckedGet(const std::string& key);
  // kInternalError when a got value is not --value-size long.
  Result<void> CheckedValue(const Result<ObjectValue>& got) const;
  void ReportHotCache();
  void ReportTransport();

  const BenchOptions& options_;
  Client& client_;
  const std::string run_;
  const std::string value_;
  std::vector<uint64_t> loaded_;        // ids of keys the load phase stored
  uint64_t written_ = 0;                // keys the mixed phase tried to put
  uint64_t load_count_ = 0;             // keys the load phase tries to put
  TransportCounters warm_up_counters_;  // the client's, after the warm-up
  nlohmann::json extra_ = nlohmann::json::object();
};

}  // namespace mooncake::bench
