#pragma once

// The worker's settings, filled from flags and an optional config file in one
// place (ParseWorkerConfig). Defaults bring up a DRAM + SSD worker on
// 127.0.0.1:50061 that registers with a master on 127.0.0.1:50051.
//
// Thread-safety: a plain value; ParseWorkerConfig is reentrant.

#include <cstdint>
#include <string>

#include "common/status.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_tls.h"

namespace mooncake {

inline constexpr int kDefaultWorkerAdminPort = 50060;

// The smallest non-zero tier size (--dram-capacity, --ssd-capacity,
// --vram-capacity) the worker accepts: a bare number is bytes, so a smaller
// one is almost always a forgotten unit ("64" meant 64MiB).
inline constexpr uint64_t kMinTierCapacity = 1ull << 20;
// The largest tier size: registration carries a tier's capacity to the
// master as an i64, and a larger one arrived negative and was refused, so
// the worker served but never registered.
inline constexpr uint64_t kMaxTierCapacity = static_cast<uint64_t>(INT64_MAX);

struct WorkerConfig {
  // Cluster-wide name of this node; empty means "<advertise-host>:<port>".
  std::string node_id;
  // Address the Thrift service binds to.
  std::string host = "127.0.0.1";
  // Address peers and clients use to reach this worker; empty means `host`.
  std::string advertise_host;
  // TCP port; 0 picks a free one (see ready_file).
  int port = 50061;
  // Connection limits of the Thrift service.
  RpcServerLimits rpc_limits;
  // Mutual TLS on the Thrift service and on this worker's own calls to the
  // master and to other workers; off when empty.
  TlsSettings tls;
  // The master, as HOST:PORT. Ignored (and not checked) when `etcd` or
  // `master_shards` is set. ParseWorkerConfig takes these three from one
  // source: a flag, else the config file, else MOONCAKE_MASTER /
  // MOONCAKE_ETCD / MOONCAKE_MASTER_SHARDS; the others' values are dropped.
  std::string master = "127.0.0.1:50051";
  // Master HA (docs/ha.md): comma-separated etcd endpoints
  // (http://HOST:PORT); non-empty: find the leader of `cluster_name` there
  // and follow it when it changes, instead of using `master`.
  std::string etcd;
  std::string cluster_name = "mooncake";
  // A sharded master directory (docs/sharding.md): a slot table
  // "FIRST-LAST=HOST:PORT,..." or "HOST:PORT,HOST:PORT" (an even split).
  // Non-empty: register and heartbeat with every shard and route each key's
  // calls to its shard; `master` is then unused. Exclusive with `etcd`.
  std::string master_shards;
  uint64_t dram_capacity = 256ull << 20;
  // Populate the whole DRAM arena at startup, before reporting ready, so
  // first writes pay no page faults (like memcached -L). Costs startup time
  // and RSS = dram_capacity up front; the worker does not start when the
  // memory cannot be had.
  bool dram_prefault = false;
  // With a VRAM tier: pin the DRAM arena for the GPU (hipHostRegister), so
  // moves between DRAM and VRAM are one DMA each instead of a CPU copy
  // through a staging buffer. Implies dram_prefault (the pages must be
  // there to be pinned) and keeps them unswappable; the worker does not
  // start when the runtime refuses. Ignored, with a warning, when the
  // worker runs without a VRAM tier.
  bool dram_pin_for_vram = false;
  // 0 runs without an SSD tier.
  uint64_t ssd_capacity = 1ull << 30;
  // RocksDB directory of the SSD tier; reopened on restart to recover objects.
  std::string ssd_path = "./var/worker/ssd";
  // VRAM tier size; 0 (default) runs without it. Needs a build with HIP
  // (MOONCAKE_WITH_GPU) and a device: without one the worker logs why and
  // runs with DRAM + SSD.
  uint64_t vram_capacity = 0;
  // HIP device index of the VRAM tier.
  int gpu_device = 0;
  double high_watermark = 0.90;
  double low_watermark = 0.80;
  int64_t heartbeat_interval_ms = 1000;
  bool promote_on_get = true;
  bool allow_evict_soft_pinned = true;
  int64_t kv_lease_ttl_ms = 10000;
  int64_t soft_pin_ttl_ms = 30 * 60 * 1000;
  int64_t put_start_discard_timeout_ms = 30000;
  // Write hard-pinned objects held in DRAM through to the SSD tier as well,
  // so they survive a restart.
  bool hard_pin_write_through = true;
  // When the last tier is full, hand cold objects to other nodes (instead of
  // dropping them from the cluster).
  bool inter_node_eviction = true;
  int64_t adopt_confirm_delay_ms = 30000;
  // RDMA for inter-node moves: "auto" uses it when a device is usable (else
  // logs why and uses TCP), "on" refuses to start without one, "off" never
  // uses it. Peers without RDMA are always reached over TCP.
  std::string rdma = "auto";
  // RDMA device name (ibv_devices); empty picks the first one.
  std::string rdma_device;
  // 1-based port of the RDMA device.
  int rdma_port = 1;
  // GID table index; -1 picks the first RoCE v2 IPv4-mapped GID, else 0.
  int rdma_gid_index = -1;
  // Test hook: "after_adopt" or "after_hand_over" kills this worker (SIGKILL)
  // at that step of an outgoing inter-node move. Empty in production.
  std::string test_crash_at;
  // Test hook: each registration waits this long between taking the list of
  // keys to announce and sending it, logging "test hook: announcing in",
  // so a test can act inside that window. 0 in production.
  int64_t test_announce_delay_ms = 0;
  // If set, two lines are written here once the worker has registered: the
  // bound RPC port and the bound admin port (-1 when disabled).
  std::string ready_file;
  // REST admin server (health, stats, objects, evict, config, metrics).
  std::string admin_host = "127.0.0.1";
  // 0 picks a free port, -1 disables it; left at the default while `port`
  // is 0, a free port is picked too.
  int admin_port = kDefaultWorkerAdminPort;
  // Bearer token mutating admin requests must carry; empty: no check.
  std::string admin_token;
  // File holding the token (trimmed), so it stays out of the process list.
  std::string admin_token_file;
  std::string log_level = "info";

  // Set when --help was given: the help text is in the parser's message and
  // the caller prints it and exits 0.
  bool show_help = false;

  // "etcd ENDPOINTS cluster NAME" with etcd, else `master`: for logs.
  std::string master_description() const;
  // Parsed from `master`.
  std::string master_host() const;
  int master_port() const;
};

// Checks ranges and formats; kInvalidParams with the reason in `*message`.
Result<void> ValidateWorkerConfig(const WorkerConfig& config, std::string* message);

// Parses flags (same names as the fields, with dashes) and --config FILE
// (TOML/INI, same key names; command-line flags win). Sizes accept suffixes:
// 64MiB, 1GiB, 512MB. `message` may be null.
Result<WorkerConfig> ParseWorkerConfig(int argc, const char* const* argv, std::string* message);

}  // namespace mooncake
