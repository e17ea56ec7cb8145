// Wire contract between clients, workers and the master.
// Error codes keep Mooncake Store's names and numbers; our own live at -2000.

namespace cpp mooncake.rpc
namespace py mooncake_rpc

enum ErrorCode {
  OK = 0,
  INTERNAL_ERROR = -1,
  NO_AVAILABLE_HANDLE = -200,
  INVALID_KEY = -400,
  INVALID_PARAMS = -600,
  ILLEGAL_CLIENT = -601,
  REPLICA_IS_NOT_READY = -703,
  OBJECT_NOT_FOUND = -704,
  OBJECT_ALREADY_EXISTS = -705,
  OBJECT_HAS_LEASE = -706,
  OBJECT_REPLICA_BUSY = -714,
  TRANSFER_FAIL = -800,
  RPC_FAIL = -900,
  RPC_TIMEOUT = -901,
  NOT_OWNER = -2001,
  TIER_NOT_FOUND = -2002,
  NODE_NOT_FOUND = -2003,
  // A standby master (HA on etcd) answered: ask MasterRole.leader_address,
  // or etcd, for the leader and retry there.
  NOT_LEADER = -2004,
}

struct ReplicateConfig {
  1: bool with_soft_pin = false,
  2: bool with_hard_pin = false,
  // Node id to place the object on; empty lets the client choose.
  3: string preferred_node = "",
  // How long a soft pin lasts; 0 takes the worker's soft_pin_ttl (30 min).
  // Capped at 24 h.
  4: i64 soft_pin_ttl_ms = 0,
  // "vram", "dram" or "ssd": the tier a Put prefers; empty means the fastest
  // tier with room.
  5: string preferred_tier = "",
}

struct TierUsage {
  1: string name,
  2: string kind,
  3: i64 capacity,
  4: i64 used,
  5: i64 objects,
}

struct NodeInfo {
  1: string node_id,
  2: string host,
  3: i32 port,
  4: list<TierUsage> tiers,
  5: bool alive,
  // Milliseconds since the Unix epoch of the last heartbeat the master saw.
  6: i64 last_heartbeat_ms,
}

struct LocationResult {
  1: ErrorCode code,
  2: string node_id,
  3: string host,
  4: i32 port,
}

struct PutOwnerResult {
  1: ErrorCode code,
  // The owner after the call: this node on success, the winner otherwise.
  2: string owner,
}

struct PickNodeResult {
  1: ErrorCode code,
  2: NodeInfo node,
}

struct AnnounceResult {
  1: ErrorCode code,
  // Keys another node already owns; the announcing node must drop its copy.
  2: list<string> rejected,
}

// What a master is in an HA group (docs/ha.md); a master without --etcd is
// always the leader of its own one-master group.
struct MasterRole {
  1: bool is_leader,
  // host:port of the current leader's RPC endpoint; empty when unknown.
  2: string leader_address,
  3: string cluster_name,
  // This master's own RPC address as published in etcd.
  4: string self_address,
}

service MasterService {
  ErrorCode RegisterNode(1: NodeInfo node),
  // NODE_NOT_FOUND tells the worker to register again and re-announce.
  ErrorCode Heartbeat(1: string node_id, 2: list<TierUsage> tiers),
  LocationResult GetLocation(1: string key),
  list<LocationResult> BatchGetLocation(1: list<string> keys),
  // Compare-and-set: succeeds only if the key has no owner.
  PutOwnerResult PutOwner(1: string key, 2: string node_id),
  // PutOwner for many keys of one node in one call (a worker's group
  // commit); one result per key, in order.
  list<PutOwnerResult> BatchPutOwner(1: list<string> keys, 2: string node_id),
  // Swaps the owner only if it is still `expected_owner`.
  ErrorCode UpdateOwner(1: string key, 2: string expected_owner, 3: string new_owner),
  // Removes the key only if `node_id` owns it.
  ErrorCode RemoveOwner(1: string key, 2: string node_id),
  // RemoveOwner for many keys of one node in one call (a worker's
  // BatchRemove); one code per key, in order.
  list<ErrorCode> BatchRemoveOwner(1: list<string> keys, 2: string node_id),
  AnnounceResult AnnounceKeys(1: string node_id, 2: list<string> keys),
  PickNodeResult PickNode(1: i64 size, 2: list<string> exclude),
  list<NodeInfo> ListNodes(),
  MasterRole GetRole(),
}

struct GetResult {
  1: ErrorCode code,
  2: binary data,
  // Whole size of the object; `data` may be a slice of it.
  3: i64 total_size,
  4: i64 version,
  // With NOT_OWNER: the node id that owns the key now, when known.
  5: string owner_hint,
}

struct PutStartResult {
  1: ErrorCode code,
  2: i64 handle,
  // Where the space was allocated: lets an RDMA sender write straight into
  // a registered arena (AdoptStart). Empty tier / -1 when not applicable.
  3: string tier = "",
  4: i64 tier_offset = -1,
}

// How a process on the worker's own node reaches a memory tier's bytes
// without a copy through the worker.
enum MemoryHandleKind {
  // Not mappable (the SSD tier): read through Get.
  NONE = 0,
  // The host (DRAM) arena: open `path` and mmap it; same node, same user.
  HOST_FILE = 1,
  // The VRAM arena: hipIpcOpenMemHandle(ipc_handle) on device `device_index`.
  DEVICE_IPC = 2,
}

struct MemoryHandle {
  1: MemoryHandleKind kind = MemoryHandleKind.NONE,
  2: string path = "",
  // The runtime's IPC memory handle (the bytes of a hipIpcMemHandle_t).
  3: binary ipc_handle,
  4: i32 device_index = -1,
  // Bytes of the whole region; offsets below are relative to its start.
  5: i64 region_size = 0,
  // The exporting machine's boot id: a handle is only valid there.
  6: string machine_id = "",
}

// A plan-based write (docs/design.md, "Plan-based writes"): the producer
// writes `size` bytes at `offset` of `memory` itself, then calls
// Commit(key, epoch). A plan not committed within `timeout_ms` is discarded
// like any two-phase write.
struct WritePlan {
  1: ErrorCode code,
  2: string node_id,
  3: string tier,
  4: MemoryHandle memory,
  5: i64 offset,
  6: i64 size,
  // Identifies this write; Commit and PutRevoke take it.
  7: i64 epoch,
  8: i64 timeout_ms,
}

// Where an object lives, for readers on the owner's node (device readers).
// The placement holds (the object is neither moved nor evicted) for
// `hold_ms`; a reader re-checks `version` after reading to detect an upsert.
struct Placement {
  1: ErrorCode code,
  2: string node_id,
  3: string tier,
  4: MemoryHandle memory,
  5: i64 offset,
  6: i64 size,
  7: i64 version,
  8: i64 hold_ms,
  // With NOT_OWNER: the node id that owns the key now, when known.
  9: string owner_hint,
}

// One side of an RDMA reliable connection (ibverbs RC queue pair).
struct RdmaEndpoint {
  1: i32 lid,
  // 16 bytes; all zero when the port is addressed by LID only.
  2: binary gid,
  3: i32 qp_num,
  4: i32 psn,
  // An ibv_mtu value.
  5: i32 mtu,
}

// A memory region registered for remote access.
struct RdmaRegion {
  1: string tier,
  2: i64 addr,
  3: i64 length,
  4: i32 rkey,
}

struct RdmaConnectResult {
  // TIER_NOT_FOUND when this worker has no RDMA device; `reason` says why
  // and the caller falls back to TCP (PutChunk / Get).
  1: ErrorCode code,
  2: RdmaEndpoint endpoint,
  3: list<RdmaRegion> regions,
  4: string reason,
}

struct PutItem {
  1: string key,
  2: binary value,
  3: ReplicateConfig config,
}

struct ObjectInfo {
  1: ErrorCode code,
  2: string tier,
  3: i64 offset,
  4: i64 size,
  5: i64 version,
  6: bool hard_pinned,
  7: bool soft_pinned,
  8: string state,
  9: i32 readers,
  10: i64 lease_remaining_ms,
  11: i64 idle_ms,
}

struct TierStats {
  1: TierUsage usage,
  2: i64 hits,
  3: i64 promotions_in,
  4: i64 demotions_out,
  5: i64 evictions,
}

struct WorkerStats {
  1: string node_id,
  2: list<TierStats> tiers,
  3: i64 gets,
  4: i64 get_misses,
  5: i64 puts,
  6: i64 removes,
  7: i64 dropped,
  8: i64 upserts,
  9: i64 prefetch_started,
  10: i64 prefetch_succeeded,
  11: i64 prefetch_failed,
  12: i64 prefetch_skipped,
  13: i64 moved_out,
  14: i64 moved_in,
  15: i64 pinned_bytes,
}

service WorkerService {
  ErrorCode Put(1: string key, 2: binary value, 3: ReplicateConfig config),
  // Creates or replaces the object; see docs/design.md, "Upsert".
  ErrorCode Upsert(1: string key, 2: binary value, 3: ReplicateConfig config),
  // Two-phase write for values larger than one message. `upsert` replaces an
  // existing object (pre-empting an in-flight write of it) instead of failing.
  PutStartResult PutStart(1: string key, 2: i64 size, 3: ReplicateConfig config,
                          4: bool upsert = false),
  ErrorCode PutChunk(1: i64 handle, 2: i64 offset, 3: binary data),
  ErrorCode PutEnd(1: i64 handle),
  ErrorCode PutRevoke(1: i64 handle),
  // Reads [offset, offset + length) of the object; length 0 reads to the end,
  // capped at the server's chunk size.
  GetResult Get(1: string key, 2: i64 offset, 3: i64 length),
  // 1 exists, 0 does not, negative is an ErrorCode. With `prefetch`, an
  // object only on SSD is promoted to DRAM in the background, preferably on
  // `requester_node` (the caller's own node) when it has room.
  i32 Exist(1: string key, 2: bool prefetch = false, 3: string requester_node = ""),
  ErrorCode Remove(1: string key, 2: bool force),
  list<ErrorCode> BatchPut(1: list<PutItem> items),
  list<ErrorCode> BatchUpsert(1: list<PutItem> items),
  list<GetResult> BatchGet(1: list<string> keys),
  list<i32> BatchExist(1: list<string> keys, 2: bool prefetch = false,
                       3: string requester_node = ""),
  list<ErrorCode> BatchRemove(1: list<string> keys, 2: bool force),
  ObjectInfo Inspect(1: string key),
  WorkerStats Stats(),

  // Inter-node moves: the source streams an object to this node with
  // AdoptStart + PutChunk + AdoptEnd. The copy is complete but not owned
  // until the master's UpdateOwner names this node; AdoptAbort drops it.
  // `sender` is the sending node's id: a copy the master never came to name
  // is kept only if its key was not removed meanwhile (docs/design.md,
  // "Inter-node eviction"); "" (a sender of an older release) skips that check.
  PutStartResult AdoptStart(1: string key, 2: i64 size, 3: ReplicateConfig config,
                            4: i64 version, 5: string sender = ""),
  // `written_directly`: the sender wrote the bytes itself (RDMA WRITE into
  // the allocation AdoptStart reported) instead of sending PutChunks.
  ErrorCode AdoptEnd(1: i64 handle, 2: bool written_directly = false),
  ErrorCode AdoptAbort(1: string key),
  // The sender's UpdateOwner named this node: the adopted copy is confirmed
  // at the master soon (by the maintenance thread) rather than after
  // --adopt-confirm-delay-ms, so that upserts and removes of the key are not
  // refused OBJECT_REPLICA_BUSY for that long. OBJECT_NOT_FOUND when no
  // adopted copy of the key is here.
  ErrorCode AdoptConfirm(1: string key),

  // Plan-based writes by producers on this node (docs/design.md,
  // "Plan-based writes").
  // Allocates in a memory tier (VRAM first, else DRAM; config.preferred_tier
  // narrows it) and returns where to write. `upsert` replaces an existing
  // object as Upsert does.
  WritePlan OpenForWrite(1: string key, 2: i64 size, 3: ReplicateConfig config,
                         4: bool upsert = false),
  // Publishes a plan's bytes. ILLEGAL_CLIENT when the plan was pre-empted,
  // discarded after its timeout, or names another key.
  ErrorCode Commit(1: string key, 2: i64 epoch),
  // Owner, tier and placement of a complete object; grants a lease and holds
  // the placement for Placement.hold_ms.
  Placement GetPlacement(1: string key),

  // Sets up an RDMA connection from `initiator_node` to this worker: returns
  // this side's queue pair, connected to `initiator`, and the regions the
  // initiator may READ/WRITE.
  RdmaConnectResult RdmaConnect(1: string initiator_node, 2: RdmaEndpoint initiator),
}
