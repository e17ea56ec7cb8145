#include "worker/tiered_cache_backend.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/log.h"
#include "worker/backend_context.h"
#include "worker/maintenance.h"
#include "worker/mover.h"
#include "worker/object_table.h"
#include "worker/write_path.h"

namespace mooncake {

TieredCacheBackend::TieredCacheBackend(std::vector<std::unique_ptr<CacheTier>> tiers,
                                       OwnerDirectory* directory, BackendOptions options)
    : ctx_(std::make_unique<BackendContext>(std::move(tiers), directory, options)),
      table_(std::make_unique<ObjectTable>(ctx_->tiers.size())),
      mover_(std::make_unique<Mover>(*ctx_, *table_)),
      work_(std::make_unique<WorkQueue>(*ctx_)),
      writer_(std::make_unique<WritePath>(*ctx_, *table_, *mover_, *work_)),
      maintenance_(std::make_unique<Maintenance>(*work_, *writer_, *mover_)) {}

TieredCacheBackend::~TieredCacheBackend() {
  std::lock_guard lock(ctx_->mu);
  table_->KeepCommittedOnRelease();
}

void TieredCacheBackend::set_peer_transfer(PeerTransfer* peers) { ctx_->peers = peers; }

int TieredCacheBackend::TierIndex(std::string_view name) const { return ctx_->TierIndex(name); }

namespace {

struct RecoveredCopy {
  size_t tier;
  DurableObjectMeta meta;
};

// True if `a` is a newer copy of its key than `b`: the higher version, else
// (same version, same tier) the higher id, which that tier handed out later.
bool IsNewer(const RecoveredCopy& a, const RecoveredCopy& b) {
  if (a.meta.version != b.meta.version) return a.meta.version > b.meta.version;
  return a.tier == b.tier && a.meta.location.offset > b.meta.location.offset;
}

// For each key, the index in `copies` of its newest copy. A key has more than
// one copy when an older copy's delete was lost (e.g. the disk had no room
// for it); serving the older one would bring back a value overwritten since.
std::unordered_map<std::string_view, size_t> NewestCopies(
    const std::vector<RecoveredCopy>& copies) {
  std::unordered_map<std::string_view, size_t> newest;
  for (size_t i = 0; i < copies.size(); ++i) {
    auto [it, added] = newest.try_emplace(copies[i].meta.key, i);
    if (!added && IsNewer(copies[i], copies[it->second])) it->second = i;
  }
  return newest;
}

}  // namespace

std::vector<std::string> TieredCacheBackend::Recover() {
  std::vector<std::string> keys;
  auto now = SteadyClock::now();
  std::lock_guard lock(ctx_->mu);
  std::vector<RecoveredCopy> copies;
  for (size_t t = 0; t < ctx_->tiers.size(); ++t) {
    for (DurableObjectMeta& meta : ctx_->tiers[t]->Recover()) {
      copies.push_back({.tier = t, .meta = std::move(meta)});
    }
  }
  const auto newest = NewestCopies(copies);
  for (size_t i = 0; i < copies.size(); ++i) {
    const auto& [t, meta] = copies[i];
    auto allocation = std::make_shared<Allocation>(ctx_->tiers[t].get(), meta.location);
    // Older copies are freed (deleted from their tier) with `allocation`.
    if (newest.at(meta.key) != i || table_->Contains(meta.key)) continue;
    Object object;
    object.id = table_->NextObjectId();
    object.allocation = std::move(allocation);
    object.size = meta.location.size;
    object.version = meta.version;
    object.options = {.hard_pin = meta.hard_pinned, .soft_pin = meta.soft_pinned};
    // The remaining time of a soft pin is not persisted; a restart grants
    // the default duration again rather than silently dropping the pin.
    object.soft_pin_until = now + ctx_->options.soft_pin_ttl;
    table_->ObserveVersion(meta.version);
    keys.push_back(meta.key);
    table_->Emplace(meta.key, std::move(object), ObjectState::kComplete, t, /*published=*/true,
                    now);
  }
  // Versions only ever rise, also across restarts of this node: DRAM-only
  // objects are not recovered, so start past any version handed out before
  // (microseconds of wall time) as well as past every recovered one.
  table_->ObserveVersion(static_cast<uint64_t>(WallMillis()) * 1000 - 1);
  MC_LOG_INFO("backend recovered objects={}", keys.size());
  return keys;
}

// ---------------------------------------------------------------------------
// Writes: see worker/write_path.h

Result<void> TieredCacheBackend::Put(const std::string& key, std::string_view value,
                                     const ObjectOptions& options) {
  return writer_->WriteWhole(key, value, options, WriteMode::kCreate);
}

bool TieredCacheBackend::TryPutAsync(const std::string& key, std::string_view value,
                                     const ObjectOptions& options,
                                     std::function<void(Result<void>)> done) {
  return writer_->TryWriteWholeAsync(key, value, options, std::move(done));
}

std::vector<Result<void>> TieredCacheBackend::PutMany(const std::vector<WholeWrite>& writes) {
  return writer_->WriteWholeMany(writes);
}

Result<void> TieredCacheBackend::Upsert(const std::string& key, std::string_view value,
                                        const ObjectOptions& options) {
  return writer_->WriteWhole(key, value, options, WriteMode::kUpsert);
}

Result<uint64_t> TieredCacheBackend::PutStart(const std::string& key, uint64_t size,
                                              const ObjectOptions& options, WriteMode mode,
                                              const AdoptedFrom& adopted) {
  return writer_->Start(key, size, options, mode, adopted, /*direct=*/false);
}

Result<void> TieredCacheBackend::PutChunk(uint64_t handle, uint64_t offset, std::string_view data) {
  return writer_->Chunk(handle, offset, data);
}

Result<void> TieredCacheBackend::PutEnd(uint64_t handle) { return writer_->End(handle); }

Result<void> TieredCacheBackend::PutRevoke(uint64_t handle) { return writer_->Revoke(handle); }

Result<PlacedWrite> TieredCacheBackend::StartPlacedPut(const std::string& key, uint64_t size,
                                                       const ObjectOptions& options) {
  return writer_->StartPlaced(key, size, options);
}

Result<void> TieredCacheBackend::EndPlacedPut(uint64_t handle) {
  return writer_->EndPlaced(handle);
}

Result<DirectWritePlan> TieredCacheBackend::OpenForWrite(const std::string& key, uint64_t size,
                                                         const ObjectOptions& options,
                                                         WriteMode mode) {
  return writer_->OpenForWrite(key, size, options, mode);
}

Result<void> TieredCacheBackend::CommitDirect(uint64_t handle, std::string_view key) {
  return writer_->CommitDirect(handle, key);
}

Result<WriteTarget> TieredCacheBackend::PendingWriteTarget(uint64_t handle) const {
  return writer_->Target(handle);
}

Result<void> TieredCacheBackend::AdoptAbort(const std::string& key) {
  return mover_->AdoptAbort(key);
}

Result<void> TieredCacheBackend::ConfirmAdoptSoon(const std::string& key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(ctx_->mu);
  if (auto queued = mover_->ConfirmSoonLocked(key); !queued) return queued;
  work_->SignalLocked();
  return {};
}

// ---------------------------------------------------------------------------
// Reads

namespace {

// Keys a batch (ReadManyInPlace, ReadableFromHostMemory, NotHeld) handles
// per hold of the lock: bounds how long one batch keeps other requests
// waiting, and how many objects a BatchGet pins at once.
constexpr size_t kKeysPerLockHold = 64;

// Looks `keys` up a run of kKeysPerLockHold per hold of ctx.mu and passes
// each key's record (null: absent) to visit(i, object), the lock held. A
// visit that answers false ends the walk.
template <typename Visit>
void FindInRuns(BackendContext& ctx, ObjectTable& table, std::span<const std::string> keys,
                Visit visit) {
  for (size_t first = 0; first < keys.size(); first += kKeysPerLockHold) {
    const size_t count = std::min(keys.size() - first, kKeysPerLockHold);
    Object* found[kKeysPerLockHold];
    std::lock_guard lock(ctx.mu);
    table.FindMany(keys.subspan(first, count), std::span(found, count));
    for (size_t i = 0; i < count; ++i) {
      if (!visit(first + i, found[i])) return;
    }
  }
}

// A put (or upsert) committed here whose claim is still on its way to the
// master: the claim may yet fail (another node put the key), and the value
// go with it, so it is not served before the master names this node; a
// reader would otherwise get a value whose put then answers
// OBJECT_ALREADY_EXISTS. An adopted copy is not ours yet either, but it is
// the key's value (its sender's claim stands): it is served.
bool AwaitingClaim(const Object& object) {
  return object.state() == ObjectState::kComplete && !object.published();
}

// A read between its two locked steps: the object is pinned (a reader) and
// its allocation held, so the copy-out needs no lock.
struct PinnedRead {
  AllocationPtr allocation;
  ObjectRef object;
  uint64_t size = 0;
  size_t tier = 0;
  uint64_t offset = 0;
  uint64_t want = 0;  // bytes to copy out
};

// Caller holds ctx.mu. Pins `object` (null: its key is absent) for a read
// of [offset, offset + length) (length 0: to the end; at most
// kRpcChunkBytes) and grants its lease; `slice` gets the object's size and
// version.
Result<PinnedRead> PinLocked(BackendContext& ctx, ObjectTable& table, Object* object,
                             uint64_t offset, uint64_t length, SteadyClock::time_point now,
                             ReadSlice& slice) {
  if (object == nullptr) {
    if (offset == 0) ctx.counters.get_misses.fetch_add(1, std::memory_order_relaxed);
    return Err(ErrorCode::kObjectNotFound);
  }
  if (!object->complete() || AwaitingClaim(*object)) return Err(ErrorCode::kReplicaIsNotReady);
  if (offset > object->size) return Err(ErrorCode::kInvalidParams);
  table.BeginRead(*object, now, ctx.options.kv_lease_ttl);
  slice.total_size = object->size;
  slice.version = object->version;
  uint64_t remaining = object->size - offset;
  uint64_t want = length == 0 ? remaining : std::min(length, remaining);
  return PinnedRead{.allocation = object->allocation,
                    .object = table.Ref(*object),
                    .size = object->size,
                    .tier = object->tier(),
                    .offset = offset,
                    .want = std::min(want, kRpcChunkBytes)};
}

// Copies the pinned bytes out of their tier, without the lock.
Result<void> CopyOut(const PinnedRead& pinned, std::string& data) {
  Result<void> read;
  // Straight from the tier into the reply's buffer: no zero-fill first.
  // Uses `want`, not the callback's size: libstdc++ 12 passes the grown
  // capacity there (30 for 16..29 bytes), which would read past the object.
  data.resize_and_overwrite(pinned.want, [&](char* buffer, size_t) -> size_t {
    if (pinned.want == 0) return 0;
    read = pinned.allocation->tier->Read(pinned.allocation->location, pinned.offset,
                                         std::as_writable_bytes(std::span(buffer, pinned.want)));
    return read ? pinned.want : 0;
  });
  return read;
}

// The pinned bytes in a buffer their tier lends, for tiers that have one
// (kNoAvailableHandle otherwise, or when none is free: use CopyOut).
Result<std::unique_ptr<LentBytes>> ReadLent(const PinnedRead& pinned) {
  if (pinned.want == 0) return Err(ErrorCode::kNoAvailableHandle);
  return pinned.allocation->tier->ReadLent(pinned.allocation->location, pinned.offset, pinned.want);
}

// Caller holds ctx.mu. Lets go of a pinned read that copied out (`copied`),
// counts it and queues a promotion when it read an object below the top tier
// to its end.
void UnpinLocked(BackendContext& ctx, ObjectTable& table, WorkQueue& work, const std::string& key,
                 const PinnedRead& pinned, const Result<void>& copied) {
  Object* object = table.Resolve(pinned.object, key);
  if (object != nullptr) table.EndRead(*object);
  if (!copied) return;
  BackendCounters& counters = ctx.counters;
  counters.tier[pinned.tier].read_bytes.fetch_add(pinned.want, std::memory_order_relaxed);
  // A batch's piece past its reply budget (no bytes; objects are never
  // empty) read nothing: the client's Get of it counts the hit.
  if (pinned.offset == 0 && pinned.want > 0) {
    counters.tier[pinned.tier].hits.fetch_add(1, std::memory_order_relaxed);
  }
  bool read_to_end = pinned.offset + pinned.want == pinned.size;
  if (object != nullptr && read_to_end && pinned.tier > 0 && ctx.options.promote_on_get) {
    work.QueuePromotionLocked(*object, {.key = key, .requester_node = "", .prefetch = false});
  }
}

// Lets go of a pinned read (UnpinLocked) however the reader's scope ends,
// an exception from the copy or the visitor included: a pin left behind
// would keep the object from ever moving or being evicted.
class ScopedUnpin {
 public:
  ScopedUnpin(BackendContext& ctx, ObjectTable& table, WorkQueue& work, const std::string& key,
              const PinnedRead& pinned, const Result<void>& copied)
      : ctx_(ctx), table_(table), work_(work), key_(key), pinned_(pinned), copied_(copied) {}
  ScopedUnpin(const ScopedUnpin&) = delete;
  ScopedUnpin& operator=(const ScopedUnpin&) = delete;
  ~ScopedUnpin() {
    std::lock_guard lock(ctx_.mu);
    UnpinLocked(ctx_, table_, work_, key_, pinned_, copied_);
  }

 private:
  BackendContext& ctx_;
  ObjectTable& table_;
  WorkQueue& work_;
  const std::string& key_;
  const PinnedRead& pinned_;
  const Result<void>& copied_;
};

}  // namespace

Result<ReadSlice> TieredCacheBackend::Get(const std::string& key, uint64_t offset,
                                          uint64_t length) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  // A client reads an object in kRpcChunkBytes pieces; only the piece at
  // offset 0 starts an object read, so only it counts a get, a hit or a miss.
  if (offset == 0) ctx_->counters.gets.fetch_add(1, std::memory_order_relaxed);
  ReadSlice slice;
  Result<PinnedRead> pinned;
  {
    std::lock_guard lock(ctx_->mu);
    pinned =
        PinLocked(*ctx_, *table_, table_->Find(key), offset, length, SteadyClock::now(), slice);
  }
  if (!pinned) return Err(pinned.error());
  // Nothing was read (no hit, no promotion) unless CopyOut returns.
  Result<void> copied = Err(ErrorCode::kInternalError);
  {
    ScopedUnpin unpin(*ctx_, *table_, *work_, key, *pinned, copied);
    copied = CopyOut(*pinned, slice.data);
  }
  if (!copied) return Err(ReadFailed(key, offset, copied.error()));
  return slice;
}

ErrorCode TieredCacheBackend::ReadFailed(const std::string& key, uint64_t offset, ErrorCode error) {
  // Tiers answer kInternalError for bytes they cannot give back.
  if (error != ErrorCode::kInternalError || !mover_->DropIfDamaged(key)) return error;
  if (offset == 0) ctx_->counters.get_misses.fetch_add(1, std::memory_order_relaxed);
  return ErrorCode::kObjectNotFound;
}

Result<void> TieredCacheBackend::ReadInPlace(const std::string& key, uint64_t offset,
                                             uint64_t length, const ReadVisitor& visit) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  if (offset == 0) ctx_->counters.gets.fetch_add(1, std::memory_order_relaxed);
  ReadSlice slice;  // its size and version; the bytes are viewed, not copied
  Result<PinnedRead> pinned;
  {
    std::lock_guard lock(ctx_->mu);
    pinned =
        PinLocked(*ctx_, *table_, table_->Find(key), offset, length, SteadyClock::now(), slice);
  }
  if (!pinned) return Err(pinned.error());
  Result<void> copied;
  ScopedUnpin unpin(*ctx_, *table_, *work_, key, *pinned, copied);
  const Allocation& allocation = *pinned->allocation;
  const ReadInfo info{.total_size = slice.total_size, .version = slice.version};
  if (const std::byte* base = allocation.tier->HostAddress(allocation.location)) {
    visit(info, std::span(base + pinned->offset, pinned->want));
    return {};
  }
  // Into a buffer the tier lends where it has one free (VRAM: one DMA into
  // pinned memory, no staging copy), else into the slice.
  if (auto lent = ReadLent(*pinned); lent) {
    visit(info, (*lent)->bytes());
    return {};
  } else if (lent.error() != ErrorCode::kNoAvailableHandle) {
    copied = Err(lent.error());
    return Err(ReadFailed(key, offset, lent.error()));
  }
  copied = CopyOut(*pinned, slice.data);
  if (!copied) return Err(ReadFailed(key, offset, copied.error()));
  visit(info, std::as_bytes(std::span(slice.data)));
  return {};
}

void TieredCacheBackend::ReadManyInPlace(const std::vector<std::string>& keys, uint64_t budget,
                                         const ReadManyVisitor& visit) {
  const size_t count = keys.size();
  std::vector<ReadPiece> pieces(count);
  std::vector<Result<PinnedRead>> pinned(count);
  std::vector<Result<void>> copied(count);
  std::vector<std::string> copies(count);  // for tiers outside host memory
  uint64_t gets = 0;                       // valid keys, less those past the budget
  for (size_t i = 0; i < count; ++i) {
    if (auto valid = ValidateKey(keys[i]); !valid) {
      pinned[i] = Err(valid.error());
    } else {
      ++gets;
    }
  }
  // Released however this returns, `visit` throwing included, a run of keys
  // per hold of the lock as they were pinned.
  struct UnpinAll {
    TieredCacheBackend& backend;
    const std::vector<std::string>& keys;
    const std::vector<Result<PinnedRead>>& pinned;
    const std::vector<Result<void>>& copied;
    size_t pinned_keys = 0;  // keys [0, pinned_keys) went through PinLocked
    ~UnpinAll() {
      for (size_t first = 0; first < pinned_keys; first += kKeysPerLockHold) {
        std::lock_guard lock(backend.ctx_->mu);
        for (size_t i = first; i < std::min(pinned_keys, first + kKeysPerLockHold); ++i) {
          if (!pinned[i] || pinned[i]->want == 0) continue;  // not pinned, or let go
          UnpinLocked(*backend.ctx_, *backend.table_, *backend.work_, keys[i], *pinned[i],
                      copied[i]);
        }
      }
    }
  } unpin{*this, keys, pinned, copied};
  for (size_t first = 0; first < count; first += kKeysPerLockHold) {
    const size_t last = std::min(count, first + kKeysPerLockHold);
    std::lock_guard lock(ctx_->mu);
    auto now = SteadyClock::now();
    Object* found[kKeysPerLockHold];
    table_->FindMany(std::span(keys).subspan(first, last - first), std::span(found, last - first));
    for (size_t i = first; i < last; ++i) {
      if (!pinned[i]) continue;
      ReadSlice meta;
      pinned[i] = PinLocked(*ctx_, *table_, found[i - first], 0, kRpcChunkBytes, now, meta);
      pieces[i].info = ReadInfo{.total_size = meta.total_size, .version = meta.version};
      if (!pinned[i]) continue;
      PinnedRead& read = *pinned[i];
      read.want = std::min(read.want, budget);
      budget -= read.want;
      if (read.want > 0) continue;
      // Past the budget it gets its size and version and no bytes (objects
      // are never empty): let go of it now, not once the reply is sent, which
      // a peer slow to read can stretch to the send timeout, keeping its
      // upserts busy and the object in place. Its lease stays. The client
      // reads it with a Get at offset 0, the read that counts.
      table_->EndRead(*found[i - first]);
      --gets;
    }
    unpin.pinned_keys = last;
  }
  for (size_t i = 0; i < count; ++i) {
    if (!pinned[i]) {
      pieces[i].info = Err(pinned[i].error());
      continue;
    }
    const PinnedRead& read = *pinned[i];
    if (read.want == 0) continue;  // past the budget, let go already
    const Allocation& allocation = *read.allocation;
    // Copied for tiers outside host memory, not lent: a batch would hold a
    // 4 MiB read buffer per key, and on an H100 lending gained nothing here.
    if (const std::byte* base = allocation.tier->HostAddress(allocation.location)) {
      pieces[i].bytes = std::span(base + read.offset, read.want);
    } else if (copied[i] = CopyOut(read, copies[i]); copied[i]) {
      pieces[i].bytes = std::as_bytes(std::span(copies[i]));
    } else {
      pieces[i].info = Err(ReadFailed(keys[i], 0, copied[i].error()));
    }
  }
  ctx_->counters.gets.fetch_add(gets, std::memory_order_relaxed);
  visit(pieces);
}

bool TieredCacheBackend::ReadableFromHostMemory(std::span<const std::string> keys) const {
  // Asked on an epoll loop thread for a whole BatchGet (up to a frame's
  // worth of keys): a run of keys per lock hold, as the read takes them, or
  // every other call on the node would wait for the whole list.
  bool readable = true;
  FindInRuns(*ctx_, *table_, keys, [&](size_t, const Object* object) {
    if (object == nullptr || !object->allocation) return true;
    const Allocation& allocation = *object->allocation;
    readable = allocation.tier->HostAddress(allocation.location) != nullptr;
    return readable;
  });
  return readable;
}

Result<bool> TieredCacheBackend::Exist(const std::string& key, bool prefetch,
                                       const std::string& requester_node) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  BackendCounters& counters = ctx_->counters;
  std::lock_guard lock(ctx_->mu);
  Object* object = table_->Find(key);
  if (object == nullptr || !object->complete() || AwaitingClaim(*object)) {
    // Absent, or being written (a put waiting for its claim too): a
    // prefetch has nothing to do. A key owned here and being rewritten (an
    // upsert) still exists: a get of it waits for the new value.
    if (prefetch && object != nullptr) counters.prefetch_skipped.fetch_add(1);
    return object != nullptr && object->published();
  }
  table_->GrantLease(*object, SteadyClock::now(), ctx_->options.kv_lease_ttl);
  if (!prefetch) return true;
  const auto& tiers = ctx_->tiers;
  bool only_on_ssd = tiers.size() > 1 && object->tier() == ctx_->last_tier() &&
                     tiers[object->tier()]->kind() == TierKind::kSsd;
  // An adopted copy may move up inside this node; the mover will not hand
  // it on to another node before it is confirmed as ours.
  bool busy = object->moving() || object->transferring() || object->promotion_queued;
  if (!only_on_ssd || busy) {
    counters.prefetch_skipped.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  counters.prefetch_started.fetch_add(1, std::memory_order_relaxed);
  work_->QueuePromotionLocked(*object,
                              {.key = key, .requester_node = requester_node, .prefetch = true});
  return true;
}

Result<LocatedObject> TieredCacheBackend::Locate(const std::string& key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(ctx_->mu);
  Object* object = table_->Find(key);
  if (object == nullptr) return Err(ErrorCode::kObjectNotFound);
  if (!object->complete() || AwaitingClaim(*object) || object->moving() || object->transferring()) {
    return Err(ErrorCode::kReplicaIsNotReady);
  }
  auto now = SteadyClock::now();
  Millis ttl = ctx_->options.kv_lease_ttl;
  table_->GrantLease(*object, now, ttl);
  LocatedObject placement{.where = {.tier = object->tier(),
                                    .tier_name = std::string(ctx_->tiers[object->tier()]->name()),
                                    .location = object->allocation->location},
                          .size = object->size,
                          .version = object->version,
                          .region = ctx_->shared_regions[object->tier()],
                          .hold = ttl};
  if (placement.region) object->placement_held_until = now + ttl;
  return placement;
}

std::string TieredCacheBackend::MovedTo(const std::string& key) const {
  std::lock_guard lock(ctx_->mu);
  return mover_->MovedToLocked(key);
}

// ---------------------------------------------------------------------------
// Removal

Result<void> TieredCacheBackend::Remove(const std::string& key, bool force) {
  return std::move(RemoveMany({key}, force).front());
}

std::vector<Result<void>> TieredCacheBackend::RemoveMany(const std::vector<std::string>& keys,
                                                         bool force) {
  std::vector<Result<void>> results(keys.size());
  std::vector<PendingRemoval> removals(keys.size());
  {
    std::lock_guard lock(ctx_->mu);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (auto valid = ValidateKey(keys[i]); !valid) {
        removals[i].done = Err(valid.error());
      } else {
        removals[i] = BeginRemoveLocked(keys[i], force);
      }
    }
  }
  // The directory goes first: if the master cannot be told, nothing changes
  // and the caller gets the error, rather than the master pointing at a node
  // that no longer has the object. All the keys it must hear of go in one
  // call (one per master shard).
  std::vector<size_t> told;
  std::vector<std::string> release;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (removals[i].done) {
      results[i] = *removals[i].done;
    } else {
      told.push_back(i);
      release.push_back(keys[i]);
    }
  }
  if (told.empty()) return results;
  std::vector<Result<void>> released = ctx_->directory->ReleaseMany(release);
  std::vector<Mover::KeptCopy> kept;
  {
    std::lock_guard lock(ctx_->mu);
    for (size_t j = 0; j < told.size(); ++j) {
      size_t i = told[j];
      results[i] = FinishRemoveLocked(keys[i], removals[i].object_id, released[j]);
      if (!results[i] && table_->FindSame(keys[i], removals[i].object_id) != nullptr) {
        kept.push_back({.key = keys[i], .object_id = removals[i].object_id});
      }
    }
  }
  mover_->ClaimKeptCopies(kept);
  return results;
}

TieredCacheBackend::PendingRemoval TieredCacheBackend::BeginRemoveLocked(const std::string& key,
                                                                         bool force) {
  Object* object = table_->Find(key);
  if (object == nullptr) return {.done = Err(ErrorCode::kObjectNotFound)};
  if (!object->complete()) {
    // An upsert of a key owned here: the master must be told first, and if
    // it cannot be, the object is to stay as it was, but the upsert has let
    // the old value go and cannot be rolled back. Busy until the upsert is
    // committed or revoked (retry), as for a put whose claim is in flight.
    if (object->published()) return {.done = Err(ErrorCode::kObjectReplicaBusy)};
    // A key whose first put is still being written, unknown to the master:
    // removing it revokes that write.
    writer_->ForgetLocked(object->write_handle);
    table_->Erase(*object);
    ctx_->counters.removes.fetch_add(1, std::memory_order_relaxed);
    return {.done = Result<void>{}};
  }
  // Handing it to another node, the outcome decides who must remove it;
  // its claim at the master still in flight (a put's, an adopt's), a release
  // sent now could reach the master first, and the claim would then leave
  // the master pointing here at a key this node no longer has.
  if (object->transferring() || object->adopted() || !object->published() ||
      ctx_->ClaimingLocked(key)) {
    return {.done = Err(ErrorCode::kObjectReplicaBusy)};
  }
  bool leased = ObjectTable::IsLeased(*object, SteadyClock::now());
  if (leased && !force) return {.done = Err(ErrorCode::kObjectHasLease)};
  if (object->removing()) return {.done = Err(ErrorCode::kObjectReplicaBusy)};
  // Until the master has answered, no upsert may take this object over: it
  // would inherit an ownership that is about to vanish.
  table_->SetState(*object, ObjectState::kRemoving);
  return {.object_id = object->id};
}

Result<void> TieredCacheBackend::FinishRemoveLocked(const std::string& key, uint64_t object_id,
                                                    const Result<void>& released) {
  bool failed = !released && released.error() != ErrorCode::kObjectNotFound &&
                released.error() != ErrorCode::kNotOwner;
  // Kept, still kRemoving: the caller claims it again (ClaimKeptCopies),
  // which puts it back.
  if (failed) return released;
  table_->EraseIfSame(key, object_id);
  // The master names another node (a hand-over applied whose answer was
  // lost): this copy was not the key's, and the key lives on there. Not
  // found here, so a caller that came by a stale owner asks the master and
  // removes it where it is, instead of being told it is gone.
  if (!released && released.error() == ErrorCode::kNotOwner) {
    return Err(ErrorCode::kObjectNotFound);
  }
  ctx_->counters.removes.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void TieredCacheBackend::DropLocal(const std::string& key) {
  std::lock_guard lock(ctx_->mu);
  Object* object = table_->Find(key);
  if (object == nullptr) return;
  if (!object->complete()) writer_->ForgetLocked(object->write_handle);
  table_->Erase(*object);
}

Result<uint64_t> TieredCacheBackend::EvictTier(std::string_view tier_name, double target_ratio) {
  int index = TierIndex(tier_name);
  if (index < 0) return Err(ErrorCode::kTierNotFound);
  if (!(target_ratio >= 0.0 && target_ratio <= 1.0)) return Err(ErrorCode::kInvalidParams);
  return mover_->EvictTier(static_cast<size_t>(index), target_ratio);
}

// ---------------------------------------------------------------------------
// Background work: see worker/maintenance.h

void TieredCacheBackend::RunMaintenance() { maintenance_->RunPass(); }

void TieredCacheBackend::WaitForWork(Millis timeout) { work_->Wait(timeout); }

// ---------------------------------------------------------------------------
// Introspection

Result<ObjectSnapshot> TieredCacheBackend::Inspect(const std::string& key) const {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(ctx_->mu);
  const Object* found = table_->Find(key);
  if (found == nullptr) return Err(ErrorCode::kObjectNotFound);
  const Object& object = *found;
  auto now = SteadyClock::now();
  ObjectSnapshot snapshot;
  if (object.allocation) {
    snapshot.tier = std::string(ctx_->tiers[object.tier()]->name());
    snapshot.offset = object.allocation->location.offset;
  }
  snapshot.size = object.size;
  snapshot.version = object.version;
  snapshot.hard_pinned = object.options.hard_pin;
  snapshot.soft_pinned = object.options.soft_pin && object.soft_pin_until > now;
  // Removal is reported as "complete": the object stays readable until the
  // master has answered.
  ObjectState shown =
      object.state() == ObjectState::kRemoving ? ObjectState::kComplete : object.state();
  snapshot.state = std::string(StateName(shown));
  snapshot.readers = object.readers;
  snapshot.lease_remaining_ms =
      object.lease_until > now
          ? std::chrono::duration_cast<Millis>(object.lease_until - now).count()
          : 0;
  snapshot.idle_ms = std::chrono::duration_cast<Millis>(now - object.last_access()).count();
  return snapshot;
}

BackendStats TieredCacheBackend::Stats() const {
  BackendStats stats;
  std::vector<uint64_t> pinned;
  {
    std::lock_guard lock(ctx_->mu);
    pinned = table_->pinned_bytes();
  }
  const BackendCounters& counters = ctx_->counters;
  for (size_t t = 0; t < ctx_->tiers.size(); ++t) {
    const CacheTier& tier = *ctx_->tiers[t];
    const TierCounters& c = counters.tier[t];
    stats.tiers.push_back({.name = std::string(tier.name()),
                           .kind = tier.kind(),
                           .capacity = tier.capacity(),
                           .used = tier.used(),
                           .objects = tier.object_count(),
                           .hits = c.hits.load(),
                           .promotions_in = c.promotions_in.load(),
                           .demotions_out = c.demotions_out.load(),
                           .evictions = c.evictions.load(),
                           .pinned_bytes = pinned[t],
                           .read_bytes = c.read_bytes.load(),
                           .written_bytes = c.written_bytes.load()});
  }
  stats.gets = counters.gets.load();
  stats.get_misses = counters.get_misses.load();
  stats.puts = counters.puts.load();
  stats.removes = counters.removes.load();
  stats.dropped = counters.dropped.load();
  stats.upserts = counters.upserts.load();
  stats.prefetch_started = counters.prefetch_started.load();
  stats.prefetch_succeeded = counters.prefetch_succeeded.load();
  stats.prefetch_failed = counters.prefetch_failed.load();
  stats.prefetch_skipped = counters.prefetch_skipped.load();
  stats.moved_out = counters.moved_out.load();
  stats.moved_in = counters.moved_in.load();
  return stats;
}

std::vector<std::string> TieredCacheBackend::Keys() const {
  std::lock_guard lock(ctx_->mu);
  return table_->Keys();
}

std::vector<std::string> TieredCacheBackend::NotHeld(std::span<const std::string> keys) const {
  std::vector<std::string> gone;
  FindInRuns(*ctx_, *table_, keys, [&](size_t i, const Object* object) {
    if (object == nullptr || !ObjectTable::IsHeld(*object)) gone.push_back(keys[i]);
    return true;
  });
  return gone;
}

}  // namespace mooncake
