#pragma once

// The value types and interfaces of the TieredCacheBackend's public API:
// what callers pass in (options, the directory and peer interfaces) and what
// they get back (slices, plans, snapshots, stats). Included by
// worker/tiered_cache_backend.h, the folder's public header, and by the
// backend's parts, which must not include the backend itself.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "tiers/cache_tier.h"

namespace mooncake {

// Who owns which key, cluster-wide. The worker implements it over the
// master's Thrift API; the backend calls it without holding its own lock.
class OwnerDirectory {
 public:
  virtual ~OwnerDirectory() = default;
  // Compare-and-set: claims `key` for this node. kObjectAlreadyExists if
  // another node owns it.
  virtual Result<void> Claim(const std::string& key) = 0;
  // Claim for each key, one result each in order. A directory that can
  // claim many keys in one round trip overrides this.
  virtual std::vector<Result<void>> ClaimMany(const std::vector<std::string>& keys) {
    std::vector<Result<void>> results;
    results.reserve(keys.size());
    for (const auto& key : keys) results.push_back(Claim(key));
    return results;
  }
  // Claim without waiting for the answer: `done` runs once with it, on
  // whichever thread the directory answers from (this one, for a directory
  // that cannot claim asynchronously). It should not wait for long.
  virtual void ClaimAsync(const std::string& key, std::function<void(Result<void>)> done) {
    done(Claim(key));
  }
  // How many times this node registered with the directory. A registration
  // forgets the claims made before it and re-announces the keys published
  // by then, so a claim answered under one count and published under
  // another must be made again. It moves once the registration has purged
  // and before it lists the keys to announce. Constant for a directory that
  // never forgets.
  virtual uint64_t registrations() const { return 0; }
  // For a copy of `key` that `sender` handed here and the directory never
  // came to name this node for: whether the key was removed since it was
  // sent. True when no node owns it while `sender` is alive: a sender that
  // died had its keys forgotten, and then the copy is all that is left of
  // the key. kNodeNotFound when the directory does not know this node (it
  // restarted, or declared us dead): it cannot tell until we register
  // again. False from a directory that cannot tell.
  virtual Result<bool> RemovedSinceSent(const std::string& /*key*/, const std::string& /*sender*/) {
    return false;
  }
  // Whether this node owns `key`: false when another node does,
  // kObjectNotFound when none does. A directory that cannot tell says true.
  virtual Result<bool> OwnedHere(const std::string& /*key*/) { return true; }
  // Whether no node owns `key` while the directory knows this node alive,
  // so it did not forget this node's keys: a copy of the key here that the
  // master never came to name again is no longer the key's. kNodeNotFound
  // when the directory does not know this node. False from a directory that
  // cannot tell.
  virtual Result<bool> UnownedWhileHere(const std::string& /*key*/) { return false; }
  // The node that owns `key`; kObjectNotFound when none does. A directory
  // that cannot tell answers kInternalError.
  virtual Result<std::string> OwnerOf(const std::string& /*key*/) {
    return Err(ErrorCode::kInternalError);
  }
  // Gives up ownership of `key` (only if this node owns it).
  virtual Result<void> Release(const std::string& key) = 0;
  // Release for each key, one result each in order. A directory that can
  // release many keys in one round trip overrides this.
  virtual std::vector<Result<void>> ReleaseMany(const std::vector<std::string>& keys) {
    std::vector<Result<void>> results;
    results.reserve(keys.size());
    for (const auto& key : keys) results.push_back(Release(key));
    return results;
  }
};

// Reads bytes [offset, offset + out.size()) of the object being transferred.
using ObjectReader = std::function<Result<void>(uint64_t offset, std::span<std::byte> out)>;

// The bytes of an object being transferred.
struct ObjectSource {
  ObjectReader read;
  // Where the bytes lie in this process's memory (a DRAM arena), valid for
  // the whole transfer, so an RDMA sender can write from it without a copy;
  // null when they must be read (SSD, VRAM).
  const std::byte* host_address = nullptr;
};

struct ObjectOptions;

// Hands objects to other nodes (inter-node eviction, prefetch to a client's
// node). The worker implements it over Thrift; the backend calls it without
// holding its own lock.
class PeerTransfer {
 public:
  virtual ~PeerTransfer() = default;
  // Streams the object to `target` (empty: the node the master picks by free
  // space, excluding this one) and swaps ownership at the master with
  // UpdateOwner(key, this node, target). Only on success may the caller free
  // its copy; on failure the target's copy has been dropped, or is left to
  // the target to settle. With `dram_only` the target must place it in DRAM.
  // Returns the new owner. kNoAvailableHandle when no node has room.
  // kRpcTimeout when the target may hold a copy and the hand-over's outcome
  // is not known (the swap's answer was lost and the master did not name the
  // target afterwards): the caller keeps its copy and asks again later (the
  // target settles its own).
  virtual Result<std::string> Transfer(const std::string& key, uint64_t size, uint64_t version,
                                       const ObjectOptions& options, const ObjectSource& source,
                                       const std::string& target, bool dram_only) = 0;
};

struct BackendOptions {
  // Background demotion starts above high and stops at low (of capacity).
  double high_watermark = 0.90;
  double low_watermark = 0.80;
  // Reads of an object in a lower tier queue its promotion to the top tier.
  bool promote_on_get = true;
  // Soft-pinned objects may be evicted, but only after every unpinned one.
  bool allow_evict_soft_pinned = true;
  // Each read protects the object from eviction and Remove for this long.
  Millis kv_lease_ttl{10000};
  // An adopted object not yet confirmed as ours is checked against the
  // master after this long (the sender's UpdateOwner has finished by then).
  Millis adopt_confirm_delay{30000};
  // Default duration of a soft pin.
  Millis soft_pin_ttl{30 * 60 * 1000};
  // Hard-pinned objects placed in a volatile tier are also written to the
  // durable tier, so they survive a worker restart.
  bool hard_pin_write_through = true;
  // A two-phase write not committed within this is discarded.
  Millis put_start_discard_timeout{30000};
};

// Every object record holds one: the flags come last so that the struct
// has no padding inside (16 bytes, not 24).
struct ObjectOptions {
  // How long a soft pin lasts from when the object becomes readable;
  // 0 means BackendOptions::soft_pin_ttl. Capped at kMaxSoftPinTtl.
  Millis soft_pin_ttl{0};
  // Index of the tier a write prefers (for Put with preferred_tier); the
  // backend falls back to lower tiers when it has no room. -1: fastest.
  int preferred_tier = -1;
  bool hard_pin = false;
  bool soft_pin = false;
};

inline constexpr Millis kMaxSoftPinTtl{24 * 3600 * 1000};

// How PutStart treats an existing object of the key.
enum class WriteMode {
  kCreate,  // Put: fails with kObjectAlreadyExists
  kUpsert,  // Upsert: replaces it (in place when the size is unchanged)
  kAdopt,   // inter-node move: stored complete but unowned until confirmed
};

// Where an adopted copy (WriteMode::kAdopt) comes from.
struct AdoptedFrom {
  uint64_t version = 0;  // the object's version at the sender, kept here
  // The sending node's id. A copy the master never came to name is kept only
  // if its key was not removed meanwhile, which the directory tells by
  // whether the sender still lives (OwnerDirectory::RemovedSinceSent); ""
  // (a sender of an older release) leaves that to the claim alone.
  std::string sender;
};

// One object of a batched write (TieredCacheBackend::PutMany): views of the
// caller's key and bytes, which outlive the call.
struct WholeWrite {
  const std::string& key;
  std::string_view value;
  ObjectOptions options;
  WriteMode mode = WriteMode::kCreate;
};

// One slice of an object read by Get.
struct ReadSlice {
  std::string data;
  uint64_t total_size = 0;
  uint64_t version = 0;
};

// A slice read in place (TieredCacheBackend::ReadInPlace): the object's
// size and version; its bytes are passed beside it.
struct ReadInfo {
  uint64_t total_size = 0;
  uint64_t version = 0;
};
// Receives a slice's bytes where they lie; they stay valid (the object is
// pinned) only until it returns.
using ReadVisitor = std::function<void(const ReadInfo& info, std::span<const std::byte> bytes)>;

// One key of a batch read in place (TieredCacheBackend::ReadManyInPlace):
// its size and version and its bytes, or why it could not be read.
struct ReadPiece {
  Result<ReadInfo> info;
  std::span<const std::byte> bytes;
};
// Receives every key's piece at once; the bytes stay valid (the objects are
// pinned) only until it returns.
using ReadManyVisitor = std::function<void(std::span<const ReadPiece> pieces)>;

// A Put whose value the caller receives straight into the object's space
// (TieredCacheBackend::StartPlacedPut): `bytes`, in host memory, stays
// allocated while `hold` lives, even if the write is pre-empted meanwhile.
struct PlacedWrite {
  uint64_t handle = 0;
  std::span<std::byte> bytes;
  std::shared_ptr<const void> hold;
};

// Where a write's space was allocated.
struct WriteTarget {
  size_t tier = 0;
  std::string tier_name;
  TierLocation location;
};

// A plan-based write (docs/design.md, "Plan-based writes"): a producer on
// this node maps `region` and writes the object's bytes at
// `target.location` itself, then commits with `epoch`.
struct DirectWritePlan {
  uint64_t epoch = 0;  // the write's handle: CommitDirect and PutRevoke take it
  WriteTarget target;
  SharedRegion region;
  Millis timeout{0};  // discarded unless committed within this
};

// Where a complete object lives, for readers on this node. While `hold`
// lasts the object is neither moved nor evicted; an upsert may still
// rewrite it, which a reader detects by `version` changing.
struct LocatedObject {
  WriteTarget where;
  uint64_t size = 0;
  uint64_t version = 0;
  std::optional<SharedRegion> region;  // absent for tiers that cannot share (SSD)
  Millis hold{0};
};

struct ObjectSnapshot {
  std::string tier;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t version = 0;
  bool hard_pinned = false;
  bool soft_pinned = false;
  std::string state;  // "writing", "complete"
  int readers = 0;
  int64_t lease_remaining_ms = 0;
  int64_t idle_ms = 0;
};

struct TierSnapshot {
  std::string name;
  TierKind kind;
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t objects = 0;
  uint64_t hits = 0;           // reads served from this tier
  uint64_t promotions_in = 0;  // objects moved up into this tier
  uint64_t demotions_out = 0;  // objects moved down out of this tier
  uint64_t evictions = 0;      // objects dropped from the node out of this tier
  uint64_t pinned_bytes = 0;   // bytes of hard-pinned objects placed here
  uint64_t read_bytes = 0;     // bytes read from the tier by the worker
  uint64_t written_bytes = 0;  // bytes written to the tier by the worker
};

struct BackendStats {
  std::vector<TierSnapshot> tiers;
  uint64_t gets = 0;        // object reads: Gets at offset 0 (see docs/reference.md)
  uint64_t get_misses = 0;  // Gets at offset 0 of keys not here
  uint64_t puts = 0;
  uint64_t removes = 0;
  uint64_t dropped = 0;  // objects dropped from the cluster for lack of space
  uint64_t upserts = 0;
  uint64_t prefetch_started = 0;
  uint64_t prefetch_succeeded = 0;
  uint64_t prefetch_failed = 0;
  uint64_t prefetch_skipped = 0;  // already in DRAM, being written, or queued
  uint64_t moved_out = 0;         // objects handed to another node
  uint64_t moved_in = 0;          // objects adopted from another node
};

}  // namespace mooncake
