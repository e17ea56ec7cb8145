#pragma once

// mooncake-bench's options: one struct with documented defaults (RocksDB
// db_bench style), filled from flags or a --config file in one place, and
// turned into the configs of the client and of the device modes.
//
// Thread-safety: plain data and pure functions, except that ParseBenchFlags
// reads MOONCAKE_MASTER and prints help or usage errors.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/transfer_bench.h"
#include "bench/vram_bench.h"
#include "client/client.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_tls.h"

namespace mooncake {
class RpcTlsContext;
}

namespace mooncake::bench {

// The largest --value-size (and --sizes entry) mooncake-bench accepts, 4 GiB:
// a value is built in memory before the run, so a larger one is a usage
// error (exit 2) rather than an allocation that aborts the process.
inline constexpr uint64_t kMaxBenchValueBytes = 4ull << 30;

struct BenchOptions {
  std::string master = "127.0.0.1:50051";
  // Master HA (docs/ha.md): etcd endpoints; non-empty: the client finds the
  // leader of cluster_name there instead of using `master`.
  std::string etcd;
  std::string cluster_name = "mooncake";
  // A sharded master directory for the client workloads (docs/sharding.md):
  // ClientConfig::master_shards; empty: one master.
  std::string master_shards;
  std::string node;
  // Load phase: put call i goes to load_nodes[i % size] (PutOptions::
  // preferred_node), so the keys spread over several workers and batched
  // gets span nodes; empty: the client chooses.
  std::vector<std::string> load_nodes;
  // --workload loop: the worker's RPC HOST:PORT, called directly.
  std::string worker;
  std::string value_size_text = "4KiB";
  uint64_t value_size = 4096;
  uint64_t keys = 1000;
  // Keys per client call in the load and mixed phases: 1 = Put/Get, more =
  // BatchPut/BatchGet of that many keys.
  uint64_t batch = 1;
  int concurrency = 4;
  // mixed: puts through Client::PutAsync, then gets only, through
  // Client::GetAsync, `concurrency` of them in flight from completions
  // instead of one thread each.
  bool async = false;
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
  std::string location_cache_text = "256MiB";
  uint64_t location_cache_bytes = 256ull << 20;
  // ClientConfig.rpc_poll_us, and the poll of the connections the master
  // and loop workloads open themselves.
  int rpc_poll_us = kDefaultRpcPollUs;
  // ClientConfig.combined_calls_in_flight (0: one per four CPUs).
  int combined_calls_in_flight = 0;
  std::string rdma = "off";  // ClientConfig.rdma: RDMA READ for large gets
  TlsSettings tls;           // ClientConfig.tls: mutual TLS to the cluster
  // --workload master: the master's admin HOST:PORT for its RSS (empty: no
  // bytes-per-key figure), keys per BatchGetLocation call, fake nodes.
  std::string master_admin;
  uint64_t location_batch = 256;
  int master_nodes = 2;
  int64_t prefetch_wait_ms = 200;
  uint64_t prefetch_samples = 200;  // keys per latency group
  // vram and transfer modes.
  std::vector<std::string> device_sizes_text;
  int iterations = 20;
  int gpu_device = 0;
  TransferBenchOptions transfer;
  // --workload scale (bench/scale_workload.h): shard counts to run one after
  // another, simulated workers, their heartbeat period, the master binary
  // it starts, or a static slot table of running masters (and their admin
  // HOST:PORTs, comma-separated in shard order) to use instead.
  std::vector<int> scale_shards = {1, 2, 4};
  int sim_workers = 1000;
  int heartbeat_ms = 1000;
  std::string master_bin;
  std::string shard_table;
  std::string shard_admins;
};

// Fills `options` from MOONCAKE_MASTER, then the command line (and --config
// file), and resolves the size texts. Returns the exit code when the process
// should stop now: 0 after --help (printed on stdout), 2 for a usage error
// (one "error: usage: ..." line on stderr); nullopt to go on.
std::optional<int> ParseBenchFlags(int argc, char** argv, BenchOptions& options);

// The modes that measure this machine's devices and need no cluster.
bool IsDeviceWorkload(const BenchOptions& options);

// The client of the cluster workloads; nullopt when --master is not
// HOST:PORT.
std::optional<ClientConfig> ToClientConfig(const BenchOptions& options);

// The TLS context (null: plain TCP) of the workloads that open their own
// RPC connections (master, loop); nullopt, after printing why, when the
// --tls-* files are unusable.
std::optional<std::shared_ptr<const RpcTlsContext>> ToRpcTls(const BenchOptions& options);

// --workload vram's options; the sizes stay the mode's default unless --sizes.
VramBenchOptions ToVramOptions(const BenchOptions& options);

}  // namespace mooncake::bench
