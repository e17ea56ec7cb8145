#pragma once

// mooncake::Client: the library serving frameworks link to put, get, probe
// and remove objects in the cluster. It asks the master where a key lives,
// talks to the owning worker directly, and moves values larger than one RPC
// (kRpcChunkBytes) in chunks, so objects of any size up to a tier's capacity
// work and no layer holds more than one extra copy of a value. With
// ClientConfig.rdma, everything after a large object's first chunk may come
// by RDMA READ straight from the owner's memory tier instead.
//
// Thread-safety: a Client is safe to share between threads; connections are
// pooled per node.

#include <compare>
#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/node.h"
#include "common/status.h"
#include "thrift/rpc_tls.h"

namespace mooncake {

struct ValueView;  // thrift/value_calls.h

struct ClientConfig {
  std::string master_host = "127.0.0.1";
  int master_port = 50051;
  // Master high availability (docs/ha.md): comma-separated etcd endpoints
  // ("http://HOST:PORT,..."). When set, master_host/master_port are ignored:
  // the leader of `cluster_name` is read from etcd, and a call that finds
  // its master gone or a standby (NOT_LEADER) re-reads etcd and retries for
  // up to `leader_wait_ms` (a failover, then the new leader's rebuild).
  std::string etcd_endpoints;
  std::string cluster_name = "mooncake";
  int64_t leader_wait_ms = 15000;
  // A sharded master directory (docs/sharding.md): a slot table
  // "FIRST-LAST=HOST:PORT,..." or a plain list "HOST:PORT,HOST:PORT" (an even
  // split of the slots in that order). When set, master_host/master_port are
  // ignored: each key-level call goes to the master of the key's slot, node
  // listings to the first shard. Not combinable with etcd_endpoints (Create
  // fails with kInvalidParams). Empty: one master, as above.
  std::string master_shards;
  // Node id of the worker on this client's own machine; Put prefers it when
  // no preferred_node is given. Empty: let the master pick by free space.
  // While that worker cannot take puts (not registered, full, unreachable),
  // puts go where the master picks and the local node is tried again a
  // second later (one warning line per such second).
  std::string local_node;
  // Without a local node or a preferred one, a put goes where the master's
  // PickNode says (the node with the most free space, as of the workers'
  // heartbeats). The client reuses that answer for this long, for objects
  // that fit the free space it reported less what this client put there
  // since, instead of asking before every put; a put the node refuses (full,
  // unreachable) forgets it. 0: ask the master before every put; at most
  // an hour is used.
  int64_t pick_reuse_ms = 200;
  int connect_timeout_ms = 2000;
  int io_timeout_ms = 30000;
  // A thread waiting for a reply polls its socket this long before it
  // sleeps, while the machine has a spare CPU (fewer threads running than
  // CPUs, and no cgroup CPU quota): a reply that comes within it costs no
  // sleep and wake-up, most of a small call's latency on a virtual machine.
  // 0 turns it off; at most 1000 is used.
  int rpc_poll_us = 30;
  // Threads that Put or Get at once share calls (see Put and Get below);
  // this many such shared calls may be out at once, per worker for gets and
  // per set of put options for puts. One at a time makes the largest
  // batches, the cheapest on a small machine; a machine with many cores
  // serves several side by side. 0: one per four CPUs this process may use
  // (UsableCpus: a cgroup CPU quota counts), at least one. At most
  // kMaxCombinedCallsInFlight is used; Create fails with kInvalidParams for
  // a negative value.
  int combined_calls_in_flight = 0;
  // Remembers key owners (from puts and master answers) in at most this
  // many bytes, so most reads skip the master round trip: about 100 bytes
  // plus the key's length an entry, so the default keeps at least a million
  // keys of 40 bytes (up to two million). A stale entry costs one extra call: the node answers
  // that it lacks the key, or cannot be reached, and the client asks the
  // master. 0 turns it off.
  uint64_t location_cache_bytes = 256ull << 20;
  // Client-side LRU of recently read objects; 0 turns it off.
  uint64_t local_hot_cache_bytes = 0;
  // Hot-cache hits of objects at least this large first ask the owner for the
  // current version (one small RPC), so an upsert elsewhere is never served
  // stale. Smaller objects are served without asking for at most
  // hot_cache_max_staleness_ms after they were fetched.
  uint64_t hot_cache_validate_min_bytes = 64 * 1024;
  int64_t hot_cache_max_staleness_ms = 1000;
  // RDMA READ for large gets: "off" (TCP only), "auto" (RDMA where this
  // machine has a usable device and the owner exports the object's tier,
  // else TCP; why not is logged and in transport_counters()), "on" (Create
  // fails with kTierNotFound when no device can be opened). Anything else:
  // Create fails with kInvalidParams.
  std::string rdma = "off";
  std::string rdma_device;  // "" picks the first device
  // Objects at least this large have everything after their first chunk
  // read by RDMA when possible (two small RPCs to the owner pin down the
  // placement and confirm the version); smaller ones always use TCP.
  uint64_t rdma_min_bytes = kRpcChunkBytes + 1;
  // Mutual TLS to the master and the workers (thrift/rpc_tls.h); off when
  // empty. Create fails with kInvalidParams when the files are unusable.
  TlsSettings tls;
};

struct PutOptions {
  bool hard_pin = false;
  bool soft_pin = false;
  int64_t soft_pin_ttl_ms = 0;  // 0: the worker's default (30 min); max 24 h
  std::string preferred_node;   // node id; empty lets the client choose
  std::string preferred_tier;   // "vram", "dram", "ssd"; empty: fastest with room

  auto operator<=>(const PutOptions&) const = default;
};

// Gets and puts share calls with other threads' only for values up to this
// size (Get, Put): a shared call carries its values through one connection
// and one worker thread, which for larger values costs more parallelism
// than the shared round trip saves.
inline constexpr uint64_t kMaxCombinedValueBytes = 16 * 1024;
// The most shared calls one combiner lets out at once
// (ClientConfig::combined_calls_in_flight is capped here).
inline constexpr int kMaxCombinedCallsInFlight = 64;

// PutAsync's bounds on puts accepted and not yet completed (their count,
// and their keys' and values' bytes); a put past either completes at once
// with kObjectReplicaBusy. Far above what a caller that waits for its puts
// keeps in flight: they stop a producer that outpaces the cluster from
// holding copies of its values until the process runs out of memory.
inline constexpr size_t kMaxAsyncPutsPending = 65536;
inline constexpr uint64_t kMaxAsyncPutBytesPending = 1ull << 30;

// Called with (bytes done, bytes total) as a transfer progresses.
using ProgressFn = std::function<void(uint64_t, uint64_t)>;

struct ObjectValue {
  std::string data;  // binary; std::string because Thrift's binary is one
  int64_t version = 0;
};

// Per-tier counters one worker reports.
struct TierCounters {
  TierUsage usage;
  int64_t hits = 0;
  int64_t promotions_in = 0;
  int64_t demotions_out = 0;
  int64_t evictions = 0;
};

struct WorkerCounters {
  std::string node_id;
  std::vector<TierCounters> tiers;
  int64_t gets = 0;
  int64_t get_misses = 0;
  int64_t puts = 0;
  int64_t removes = 0;
  int64_t dropped = 0;
  int64_t upserts = 0;
  int64_t prefetch_started = 0;
  int64_t prefetch_succeeded = 0;
  int64_t prefetch_failed = 0;
  int64_t prefetch_skipped = 0;
  int64_t moved_out = 0;
  int64_t moved_in = 0;
  int64_t pinned_bytes = 0;
};

struct HotCacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t validations = 0;  // hits that asked the owner for the version
  uint64_t stale = 0;        // entries found outdated and dropped
  uint64_t bytes = 0;
  uint64_t entries = 0;
};

// How this client's reads travelled.
struct TransportCounters {
  uint64_t rdma_gets = 0;       // reads whose bytes after the first chunk came by RDMA
  uint64_t rdma_bytes = 0;      // bytes read by RDMA and kept
  uint64_t rdma_fallbacks = 0;  // RDMA attempts that gave way to TCP (refused or failed)
  // GetAsync: answered whole by one reply on a pipelined connection, or
  // sent the ordinary way (owner not remembered, moved, large, TLS, hot
  // cache on, connection broken).
  uint64_t async_gets_pipelined = 0;
  uint64_t async_gets_slow = 0;
  // Pipelined connections GetAsync holds now: one per worker address in
  // use (one whose node moved to another address is let go).
  uint64_t async_connections = 0;
  // PutAsync: puts, and the batches that carried them.
  uint64_t async_puts = 0;
  uint64_t async_put_batches = 0;
  // Get and Put from threads that called at once: calls that travelled in
  // a batch of several, the batches that carried them, and the callers
  // waiting right now for the batch on the wire to return.
  uint64_t combined_gets = 0;
  uint64_t combined_get_batches = 0;
  uint64_t combined_puts = 0;
  uint64_t combined_put_batches = 0;
  uint64_t combining_waiters = 0;
  bool rdma_enabled = false;
  // Why RDMA is off or unusable; when enabled, the device and port in use.
  std::string rdma_reason;
};

// Placement and state of one object as its owner sees it.
struct ObjectInspection {
  std::string node_id;
  std::string tier;
  int64_t offset = 0;
  int64_t size = 0;
  int64_t version = 0;
  bool hard_pinned = false;
  bool soft_pinned = false;
  std::string state;
  int32_t readers = 0;
  int64_t lease_remaining_ms = 0;
  int64_t idle_ms = 0;
};

// How a process on a worker's node reaches one of its memory tiers without a
// copy through the worker. Map it with SharedMapping (client/shared_mapping.h).
struct MemoryRegionHandle {
  enum class Kind {
    kNone,       // not mappable (SSD): read through Get
    kHostFile,   // the DRAM arena: a path to open and mmap (same node and user)
    kDeviceIpc,  // the VRAM arena: a HIP IPC memory handle
  };
  Kind kind = Kind::kNone;
  std::string path;
  std::string ipc_handle;  // the bytes of a hipIpcMemHandle_t
  int device_index = -1;
  uint64_t region_size = 0;  // offsets below are relative to the region
  std::string machine_id;    // the worker machine's boot id (MachineId())
};

// A plan-based write: write `size` bytes at `offset` of `memory`, then
// Commit. Uncommitted after `timeout_ms`, the worker discards it.
struct WritePlan {
  std::string key;
  std::string node_id;
  std::string tier;
  MemoryRegionHandle memory;
  uint64_t offset = 0;
  uint64_t size = 0;
  int64_t epoch = 0;
  int64_t timeout_ms = 0;
};

// Where an object lives (get_location). A reader on the owner's node may map
// `memory` and read [offset, offset + size) while `hold_ms` lasts (the object
// is neither moved nor evicted), then compare `version` with a second
// GetLocation to be sure no upsert rewrote it meanwhile.
struct ObjectPlacement {
  std::string node_id;
  std::string tier;
  MemoryRegionHandle memory;
  uint64_t offset = 0;
  uint64_t size = 0;
  int64_t version = 0;
  int64_t hold_ms = 0;
};

class Client {
 public:
  // Connects to the master; kRpcFail if it cannot be reached. Checks the
  // configuration first (kInvalidParams) and opens the RDMA device when
  // config.rdma asks for it (kTierNotFound for "on" without one).
  static Result<std::unique_ptr<Client>> Create(ClientConfig config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Stores a new object. kObjectAlreadyExists if the key has an owner.
  // Threads that put at once share calls: puts of at most
  // kMaxCombinedValueBytes with equal options that arrive while another such
  // put is on the wire leave together when it returns, as one BatchPut (one
  // request per node, one claim at the master). A lone put goes at once.
  Result<void> Put(std::string_view key, std::string_view value, const PutOptions& options = {});
  // Stores a new object without waiting for it: `done` receives what
  // Put(key, value, options) would return, on a thread of this client, and
  // this call returns at once. Puts with the same options that are in
  // flight together travel as one BatchPut (one request per node and one
  // claim at the master for all of them), so many puts in flight cost a few
  // calls. `done` runs on a thread that completes other puts too: keep it
  // short, do not throw from it, and do not destroy the Client in it; it
  // may call PutAsync again. ~Client completes the puts in flight.
  // Puts waiting are bounded (kMaxAsyncPutsPending, kMaxAsyncPutBytesPending;
  // a lone put of any size is taken): one past a bound is not sent, and
  // `done` receives kObjectReplicaBusy at once, on the calling thread.
  // Retry it once earlier puts have completed.
  using PutDone = std::function<void(Result<void>)>;
  void PutAsync(std::string key, std::string value, PutDone done, const PutOptions& options = {});
  // Stores `size` bytes read from `in`, one chunk in memory at a time.
  Result<void> PutStream(std::string_view key, std::istream& in, uint64_t size,
                         const PutOptions& options = {}, const ProgressFn& progress = {});

  // Reads an object. Threads that get at once share calls, as Put's do:
  // the gets of one worker that arrive while another is on the wire leave
  // together as one BatchGet, and any a batch reply does not hold whole (a
  // large object, a moved one) is then read alone. A get whose owner the
  // client does not remember goes alone. They share only while the values this
  // client reads are small (a running average of at most
  // kMaxCombinedValueBytes), and never with the hot cache on.
  Result<ObjectValue> Get(std::string_view key);
  // Reads `key` without waiting for it: `done` receives what Get(key) would
  // return, on a thread of this client, and this call returns at once. Keep
  // as many in flight as you like; gets of one worker share a connection,
  // so a reader prefetching many objects needs no thread per get. `done`
  // runs on a thread that completes other gets too: keep it short, do not
  // throw from it, and do not destroy the Client in it; it may call
  // GetAsync again. Over TLS, or with the hot cache on, every get takes the
  // ordinary path on a few helper threads. ~Client completes the gets still
  // in flight before it returns.
  using GetDone = std::function<void(Result<ObjectValue>)>;
  void GetAsync(std::string_view key, GetDone done);
  // Writes the object to `out` chunk by chunk; returns its size.
  Result<uint64_t> GetStream(std::string_view key, std::ostream& out,
                             const ProgressFn& progress = {});
  // Reads the object straight into `buffer`, with no second copy of the
  // whole value in memory (the Python binding's get_into); returns its size.
  // kInvalidParams when the object is larger than `buffer`: `*needed`, if
  // given, then has its size. Uses the hot cache as Get does.
  Result<uint64_t> GetInto(std::string_view key, std::span<char> buffer,
                           uint64_t* needed = nullptr);

  // Creates the object, or replaces it: in place when the size is unchanged,
  // otherwise reallocated. Pre-empts an in-flight write of the key.
  // kObjectReplicaBusy (retryable) while the object is being read.
  Result<void> Upsert(std::string_view key, std::string_view value, const PutOptions& options = {});
  Result<void> UpsertStream(std::string_view key, std::istream& in, uint64_t size,
                            const PutOptions& options = {}, const ProgressFn& progress = {});

  // With `prefetch`, an object that is only on SSD starts moving to DRAM in
  // the background (preferably this client's local_node) and the call
  // returns at once.
  Result<bool> Exist(std::string_view key, bool prefetch = false);
  Result<void> Remove(std::string_view key, bool force = false);

  // One result per item, in input order. One master round trip; one call per
  // owner node, issued in parallel.
  std::vector<Result<void>> BatchPut(const std::vector<std::pair<std::string, std::string>>& items,
                                     const PutOptions& options = {});
  std::vector<Result<void>> BatchUpsert(
      const std::vector<std::pair<std::string, std::string>>& items,
      const PutOptions& options = {});
  std::vector<Result<ObjectValue>> BatchGet(const std::vector<std::string>& keys);
  // BatchGet into caller buffers: keys[i] is read into buffers[i]; one
  // result per key, its size or its error (kInvalidParams: larger than its
  // buffer). Every key fails with kInvalidParams when the counts differ.
  std::vector<Result<uint64_t>> BatchGetInto(const std::vector<std::string>& keys,
                                             const std::vector<std::span<char>>& buffers);
  std::vector<Result<bool>> BatchExist(const std::vector<std::string>& keys, bool prefetch = false);
  std::vector<Result<void>> BatchRemove(const std::vector<std::string>& keys, bool force = false);

  // Plan-based write (docs/design.md, "Plan-based writes") for a producer on
  // the target node: reserves `size` bytes in a memory tier (VRAM, else DRAM)
  // of options.preferred_node, else local_node, else the master's pick.
  // `upsert` replaces an existing object, routed to its owner.
  // kTierNotFound when the node has no memory tier it can share.
  Result<WritePlan> OpenForWrite(std::string_view key, uint64_t size,
                                 const PutOptions& options = {}, bool upsert = false);
  // Publishes the plan's bytes. kIllegalClient when the plan was pre-empted
  // by another write of the key or discarded after its timeout.
  Result<void> Commit(const WritePlan& plan);
  // Gives the plan's space back without publishing anything.
  Result<void> Revoke(const WritePlan& plan);
  // Owner, tier and placement of an object; see ObjectPlacement.
  Result<ObjectPlacement> GetLocation(std::string_view key);

  Result<std::vector<NodeRecord>> ListNodes();
  Result<WorkerCounters> Stats(const std::string& node_id);
  Result<ObjectInspection> Inspect(std::string_view key);
  HotCacheCounters hot_cache_counters() const;
  TransportCounters transport_counters() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  // PutStream and UpsertStream: one chunk of `in` in memory at a time.
  Result<void> WriteStream(std::string_view key, std::istream& in, uint64_t size,
                           const PutOptions& options, const ProgressFn& progress, bool upsert);
  // Get and Put without joining other callers' batches: what a batch falls
  // back to for a key it cannot settle, and what a lone caller runs.
  Result<ObjectValue> GetAlone(std::string_view key);
  // Get through the combiner of the key's remembered owner; nullopt when
  // the owner is not remembered or the shared call did not settle the key.
  std::optional<Result<ObjectValue>> GetWithOthers(std::string_view key);
  Result<void> PutAlone(std::string_view key, std::string_view value, const PutOptions& options);
  // What a put combiner (common/call_combiner.h) sends for puts with
  // `options`: one reply per put, in order; a batch of one goes alone, and
  // nullopt leaves a put to its caller.
  struct CombinedPut {
    std::string_view key;
    std::string_view value;
  };
  std::vector<std::optional<Result<void>>> PutTogether(const PutOptions& options,
                                                       std::span<const CombinedPut* const> puts);
  // BatchPut of views of the caller's keys and values (no copy of them).
  std::vector<Result<void>> BatchPutViews(std::span<const ValueView> items,
                                          const PutOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mooncake
