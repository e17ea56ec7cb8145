// mooncake-bench: load a key set, then run one workload from threads sharing
// one Client, and report throughput and latency per phase. Workloads:
//   mixed     gets of loaded keys and puts of new ones (--get-ratio)
//   zipf      skewed gets (--zipf-theta) over the loaded keys; with
//             --hot-cache-bytes the client hot cache serves the hot ones
//   prefetch  get latency of DRAM hits, SSD hits, and SSD hits after
//             BatchExist(prefetch) plus --prefetch-wait-ms of other work
//   master    the master alone: PutOwner, BatchGetLocation and its memory per
//             key, for fake nodes (no worker, no data)
//   loop      one worker alone (--worker), from ONE thread keeping a call
//             in flight on each of --concurrency connections through epoll,
//             as redis-benchmark drives Redis (bench/worker_loop_workload.h)
//   scale     1, 2, 4... master shards it starts, simulated workers that
//             register, heartbeat and announce keys routed by slot, then
//             lookups and owner claims (bench/scale_workload.h)
// and two modes that need no cluster, measured on this machine's devices:
//   vram      VRAM tier put/get (host<->device) vs plain hipMemcpy
//   transfer  RDMA WRITE/READ between two queue pairs vs a TCP socket
//
// This file only dispatches: options in bench_options, the cluster
// workloads in cluster_workloads, the master one in master_workload, their
// report in bench_report, the device modes in vram_bench and transfer_bench.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <thrift/TOutput.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <optional>
#include <string>

#include "bench/bench_options.h"
#include "bench/bench_report.h"
#include "bench/cluster_workloads.h"
#include "bench/master_workload.h"
#include "bench/scale_workload.h"
#include "bench/transfer_bench.h"
#include "bench/vram_bench.h"
#include "bench/worker_loop_workload.h"
#include "client/client.h"
#include "common/stdio_fds.h"

namespace mooncake::bench {
namespace {

// Only warnings from the libraries: stdout carries the report, and Thrift's
// own connect messages would repeat our one error line.
void QuietLibraries() {
  auto logger = spdlog::stderr_color_mt("mooncake-bench");
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
}

// The modes that measure this machine's devices; no cluster involved.
int RunDeviceBench(const BenchOptions& o) {
  if (o.workload == "transfer") return RunTransferBench(o.transfer);
  return RunVramBench(ToVramOptions(o));
}

// Exit codes: 0 when any operation succeeded, 2 for a bad --master, 3 when
// the master is unreachable or nothing succeeded.
int RunClusterBench(const BenchOptions& options) {
  std::optional<ClientConfig> config = ToClientConfig(options);
  if (!config) {
    std::fprintf(stderr, "error: usage: --master must be HOST:PORT\n");
    return 2;
  }
  auto client = Client::Create(*config);
  if (!client) {
    std::fprintf(stderr, "error: connect failed: %s (%d): cannot reach the master at %s\n",
                 std::string(ToString(client.error())).c_str(), static_cast<int>(client.error()),
                 options.master.c_str());
    return 3;
  }
  ClusterBench bench(options, **client);
  auto rows = bench.Run();
  return Report(options, bench.run(), rows, bench.extra());
}

int Main(int argc, char** argv) {
  BenchOptions options;
  if (auto exit_code = ParseBenchFlags(argc, argv, options)) return *exit_code;
  QuietLibraries();
  if (IsDeviceWorkload(options)) return RunDeviceBench(options);
  if (options.workload == "master") return RunMasterBench(options);
  if (options.workload == "scale") return RunScaleBench(options);
  if (options.workload == "loop") return RunWorkerLoopBench(options);
  return RunClusterBench(options);
}

}  // namespace
}  // namespace mooncake::bench

int main(int argc, char** argv) {
  // Before anything opens a file or socket: the report must never land in a
  // connection that took a closed stdout's number (common/stdio_fds.h).
  mooncake::ReopenClosedStdio();
  // Memory the run cannot have (a --value-size within the limit that this
  // machine still lacks) is an error line and exit 3, not an abort.
  try {
    return mooncake::bench::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory (is --value-size or --keys larger than meant?)\n");
    return 3;
  }
}
