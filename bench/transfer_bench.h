#pragma once

// mooncake-bench --workload transfer: raw point-to-point copy speed, without a
// master or a worker. For each size it measures
//   tcp         a loopback TCP connection (127.0.0.1): `size` bytes one way,
//               a 1-byte ack back, per transfer
//   rdma_write  RDMA WRITE between two queue pairs of one device, connected
//   rdma_read   to each other in-process; only when a device is usable
// and prints GB/s (1e9 bytes per second), p50/p99 per transfer in
// microseconds, and each RDMA path's GB/s over TCP's. With no RDMA device it
// prints `rdma: unavailable (<reason>)` and the TCP figures.
//
// Thread-safety: RunTransferBench is a blocking, self-contained call; it owns
// every socket, thread and buffer it uses (at most 4 buffers of the largest
// size) and shares no state between calls.

#include <cstdint>
#include <string>
#include <vector>

namespace mooncake::bench {

struct TransferBenchOptions {
  // Bytes per transfer; each in [1, 1 GiB].
  std::vector<uint64_t> sizes = {64ull << 10, 1ull << 20, 64ull << 20};
  // Timed transfers per size and path, in [1, 100000] (plus 2 warm-up ones).
  int iterations = 20;
  bool json = false;
  // RdmaContext::Open arguments: "" is the first device, gid -1 picks one.
  std::string rdma_device;
  int rdma_port = 1;
  int rdma_gid_index = -1;
};

// Runs the benchmark and prints the table (or JSON when options.json) on
// stdout. Returns 0 on success, 1 when a measurement failed, 2 for bad options.
int RunTransferBench(const TransferBenchOptions& options);

}  // namespace mooncake::bench
