#include "worker/tiered_cache_backend.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace mooncake {

// Tier space held by an object, a pending write or an in-flight copy. The
// space returns to the tier when the last holder lets go.
struct TieredCacheBackend::Allocation {
  CacheTier* tier;
  TierLocation location;
  // Cleared at shutdown for committed objects, so a durable tier keeps them
  // for recovery instead of deleting them.
  std::atomic<bool> free_on_release{true};

  Allocation(CacheTier* t, TierLocation loc) : tier(t), location(loc) {}
  ~Allocation() {
    if (free_on_release.load()) tier->Free(location);
  }
};

struct TieredCacheBackend::Object {
  uint64_t id = 0;           // tells apart successive objects stored under one key
  size_t tier = 0;           // change through SetTierLocked (the LRU index)
  AllocationPtr allocation;  // null while a write is still allocating
  // Write-through copy of a hard-pinned object in the durable tier.
  AllocationPtr durable_copy;
  uint64_t size = 0;
  bool complete = false;
  bool published = false;     // claimed in the directory
  bool moving = false;        // a mover copies it or a drop is being announced
  bool transferring = false;  // being handed to another node
  bool removing = false;      // Remove is telling the master
  bool promotion_queued = false;
  // A reader on this node was told where the object lives (Locate): it is
  // not moved before this.
  SteadyClock::time_point placement_held_until;
  // Adopted from another node; ours once the master names us.
  bool adopted_unconfirmed = false;
  SteadyClock::time_point adopted_at;
  SteadyClock::time_point soft_pin_until;
  uint64_t write_handle = 0;  // the pending write, while !complete
  uint64_t version = 0;
  ObjectOptions options;
  int readers = 0;
  SteadyClock::time_point last_access;  // change through TouchLocked (the LRU index)
  SteadyClock::time_point lease_until;
  const std::string* key = nullptr;  // the objects_ node's key, set by EmplaceLocked
};

struct TieredCacheBackend::PendingWrite {
  std::string key;
  uint64_t object_id = 0;
  size_t tier = 0;
  AllocationPtr allocation;
  uint64_t size = 0;
  uint64_t bytes_written = 0;
  bool committing = false;
  WriteMode mode = WriteMode::kCreate;
  bool in_place = false;       // an upsert writing over the object's own bytes
  bool was_published = false;  // the key was owned here before this write
  uint64_t adopted_version = 0;
  bool direct = false;  // a producer writes the bytes itself (plan-based write)
  ObjectOptions options;
  SteadyClock::time_point deadline;

  // Bytes may reach the space from outside this process, past the writer's
  // last call here: a producer's mapping, or a peer's RDMA WRITE (adopts).
  // Such space is quarantined, not reused at once, when the write is dropped.
  bool written_from_outside() const { return direct || mode == WriteMode::kAdopt; }
};

struct TieredCacheBackend::TierCounters {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> promotions_in{0};
  std::atomic<uint64_t> demotions_out{0};
  std::atomic<uint64_t> evictions{0};
};

namespace {

// Rounds of evict-then-allocate before giving up; fragmentation can make one
// round free enough bytes that are still not contiguous.
constexpr int kAllocationRounds = 8;
constexpr uint64_t kCopyBufferBytes = kRpcChunkBytes;

}  // namespace

TieredCacheBackend::TieredCacheBackend(std::vector<std::unique_ptr<CacheTier>> tiers,
                                       OwnerDirectory* directory, BackendOptions options)
    : tiers_(std::move(tiers)),
      directory_(directory),
      options_(options),
      counters_(new TierCounters[tiers_.size()]) {
  lru_.resize(tiers_.size());
  pinned_bytes_.resize(tiers_.size(), 0);
  for (const auto& tier : tiers_) {
    auto region = tier->ExportRegion();
    shared_regions_.push_back(region ? std::optional(*region) : std::nullopt);
  }
  // Handles double as plan epochs, which must not repeat across restarts.
  next_handle_ = static_cast<uint64_t>(WallMillis()) * 1000;
}

TieredCacheBackend::~TieredCacheBackend() {
  std::lock_guard lock(mu_);
  for (auto& [key, object] : objects_) {
    if (!object.complete) continue;
    if (object.allocation) object.allocation->free_on_release = false;
    if (object.durable_copy) object.durable_copy->free_on_release = false;
  }
}

std::vector<std::string> TieredCacheBackend::Recover() {
  std::vector<std::string> keys;
  auto now = SteadyClock::now();
  std::lock_guard lock(mu_);
  for (size_t t = 0; t < tiers_.size(); ++t) {
    for (DurableObjectMeta& meta : tiers_[t]->Recover()) {
      auto allocation = std::make_shared<Allocation>(tiers_[t].get(), meta.location);
      if (objects_.contains(meta.key)) continue;  // a duplicate: freed with `allocation`
      Object object;
      object.id = next_object_id_++;
      object.tier = t;
      object.allocation = std::move(allocation);
      object.size = meta.location.size;
      object.complete = true;
      object.published = true;
      object.version = meta.version;
      object.options = {.hard_pin = meta.hard_pinned, .soft_pin = meta.soft_pinned};
      object.last_access = now;
      // The remaining time of a soft pin is not persisted; a restart grants
      // the default duration again rather than silently dropping the pin.
      object.soft_pin_until = now + options_.soft_pin_ttl;
      next_version_ = std::max(next_version_, meta.version + 1);
      keys.push_back(meta.key);
      EmplaceLocked(meta.key, std::move(object));
    }
  }
  // Versions only ever rise, also across restarts of this node: DRAM-only
  // objects are not recovered, so start past any version handed out before
  // (microseconds of wall time) as well as past every recovered one.
  next_version_ = std::max(next_version_, static_cast<uint64_t>(WallMillis()) * 1000);
  MC_LOG_INFO("backend recovered objects={}", keys.size());
  return keys;
}

// ---------------------------------------------------------------------------
// Writes

Result<void> TieredCacheBackend::Put(const std::string& key, std::string_view value,
                                     const ObjectOptions& options) {
  return WriteWhole(key, value, options, WriteMode::kCreate);
}

Result<void> TieredCacheBackend::Upsert(const std::string& key, std::string_view value,
                                        const ObjectOptions& options) {
  return WriteWhole(key, value, options, WriteMode::kUpsert);
}

Result<void> TieredCacheBackend::WriteWhole(const std::string& key, std::string_view value,
                                            const ObjectOptions& options, WriteMode mode) {
  auto handle = PutStart(key, value.size(), options, mode);
  if (!handle) return Err(handle.error());
  for (uint64_t offset = 0; offset < value.size(); offset += kRpcChunkBytes) {
    auto written = PutChunk(*handle, offset, value.substr(offset, kRpcChunkBytes));
    if (!written) {
      PutRevoke(*handle);
      return written;
    }
  }
  return PutEnd(*handle);
}

Result<uint64_t> TieredCacheBackend::PutStart(const std::string& key, uint64_t size,
                                              const ObjectOptions& options, WriteMode mode,
                                              uint64_t adopted_version) {
  return StartWrite(key, size, options, mode, adopted_version, /*direct=*/false);
}

Result<uint64_t> TieredCacheBackend::StartWrite(const std::string& key, uint64_t size,
                                                const ObjectOptions& options, WriteMode mode,
                                                uint64_t adopted_version, bool direct) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  if (options.preferred_tier >= static_cast<int>(tiers_.size())) {
    return Err(ErrorCode::kTierNotFound);
  }
  bool fits_somewhere = std::any_of(tiers_.begin(), tiers_.end(),
                                    [size](const auto& tier) { return size <= tier->capacity(); });
  if (!fits_somewhere) return Err(ErrorCode::kNoAvailableHandle);

  // Reserve the key first so a concurrent Put of it fails fast instead of
  // allocating (and evicting) for nothing.
  uint64_t handle, object_id;
  PendingWrite pending;
  pending.key = key;
  pending.size = size;
  pending.mode = mode;
  pending.options = options;
  pending.adopted_version = adopted_version;
  pending.direct = direct;
  pending.deadline = SteadyClock::now() + options_.put_start_discard_timeout;
  std::vector<AllocationPtr> released;  // freed after the lock is dropped
  {
    std::lock_guard lock(mu_);
    auto existing = objects_.find(key);
    // An upsert of a key this node handed to another one belongs there: the
    // caller re-locates instead of creating a second object here.
    if (existing == objects_.end() && mode == WriteMode::kUpsert && moved_to_.contains(key)) {
      return Err(ErrorCode::kNotOwner);
    }
    if (existing != objects_.end()) {
      if (mode != WriteMode::kUpsert) return Err(ErrorCode::kObjectAlreadyExists);
      Object& old = existing->second;
      if (old.readers > 0 || old.moving || old.transferring || old.adopted_unconfirmed ||
          old.removing) {
        return Err(ErrorCode::kObjectReplicaBusy);
      }
      // Pins are a property of the key: they survive an upsert.
      pending.options.hard_pin |= old.options.hard_pin;
      pending.options.soft_pin |= old.options.soft_pin;
      pending.was_published = old.published;
      if (!old.complete) {
        // Pre-empt the write in flight: its writer's next call fails.
        auto previous = pending_.find(old.write_handle);
        if (previous != pending_.end()) {
          pending.was_published |= previous->second.was_published;
          if (previous->second.written_from_outside()) {
            QuarantineLocked(previous->second.allocation);
          } else {
            released.push_back(previous->second.allocation);
          }
          pending_.erase(previous);
        }
      }
      // In place only over a complete object: a pre-empted writer may still
      // be copying a chunk into the location of a write in flight, so that
      // location is never handed to the next writer.
      pending.in_place = old.complete && old.allocation && old.size == size &&
                         (!direct || shared_regions_[old.tier].has_value());
      if (pending.in_place) {
        pending.allocation = old.allocation;
        pending.tier = old.tier;
      } else {
        released.push_back(old.allocation);
      }
      released.push_back(old.durable_copy);
      EraseLocked(existing);
    }
    handle = next_handle_++;
    object_id = next_object_id_++;
    Object placeholder;
    placeholder.id = object_id;
    placeholder.size = size;
    placeholder.write_handle = handle;
    placeholder.options = pending.options;
    placeholder.published = pending.was_published;
    placeholder.allocation = pending.allocation;
    placeholder.tier = pending.tier;
    placeholder.last_access = SteadyClock::now();
    EmplaceLocked(key, std::move(placeholder));
    pending.object_id = object_id;
    pending_.emplace(handle, pending);
  }
  if (pending.in_place) return handle;

  // An adopted object takes only the room the master saw: it never pushes
  // this node's own objects out of the cluster. A strict tier (adopt with a
  // preferred tier) must land exactly there.
  size_t first = options.preferred_tier >= 0 ? options.preferred_tier : 0;
  size_t last =
      mode == WriteMode::kAdopt && options.preferred_tier >= 0 ? first : tiers_.size() - 1;
  if (direct) last = std::min<size_t>(last, LastShareableTier());
  auto placed = AllocateIn(first, last, size, /*allow_drop=*/mode != WriteMode::kAdopt);
  std::optional<std::string> release_key;
  Result<uint64_t> outcome = handle;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(handle);
    if (it == pending_.end()) return Err(ErrorCode::kIllegalClient);  // pre-empted meanwhile
    if (!placed) {
      release_key = RevokeLocked(handle, /*writer_gone=*/true);
      outcome = Err(placed.error());
    } else {
      auto& [tier, allocation] = *placed;
      it->second.tier = tier;
      it->second.allocation = allocation;
      auto object = objects_.find(key);
      SetTierLocked(object->second, tier);
      object->second.allocation = allocation;
    }
  }
  if (release_key) ReleaseAbandonedOwnership({*release_key});
  return outcome;
}

Result<void> TieredCacheBackend::PutChunk(uint64_t handle, uint64_t offset, std::string_view data) {
  AllocationPtr allocation;
  {
    std::lock_guard lock(mu_);
    auto pending = pending_.find(handle);
    if (pending == pending_.end() || pending->second.committing) {
      return Err(ErrorCode::kIllegalClient);
    }
    if (data.empty() || offset > pending->second.size ||
        data.size() > pending->second.size - offset) {
      return Err(ErrorCode::kInvalidParams);
    }
    allocation = pending->second.allocation;
  }
  auto bytes = std::as_bytes(std::span(data.data(), data.size()));
  if (auto written = allocation->tier->Write(allocation->location, offset, bytes); !written) {
    return written;
  }
  std::lock_guard lock(mu_);
  auto pending = pending_.find(handle);
  if (pending == pending_.end()) return Err(ErrorCode::kIllegalClient);  // pre-empted
  pending->second.bytes_written += data.size();
  return {};
}

Result<void> TieredCacheBackend::PutEnd(uint64_t handle) {
  PendingWrite write;
  uint64_t version;
  {
    std::lock_guard lock(mu_);
    auto pending = pending_.find(handle);
    if (pending == pending_.end() || pending->second.committing) {
      return Err(ErrorCode::kIllegalClient);
    }
    if (pending->second.bytes_written < pending->second.size) {
      return Err(ErrorCode::kInvalidParams);  // the writer may still send the rest
    }
    pending->second.committing = true;
    write = pending->second;
    if (write.mode == WriteMode::kAdopt) {
      version = write.adopted_version;
      next_version_ = std::max(next_version_, version + 1);
    } else {
      version = next_version_++;
    }
  }

  DurableObjectMeta meta{write.key, write.allocation->location, version, write.options.hard_pin,
                         write.options.soft_pin};
  auto persisted = write.allocation->tier->Persist(meta);
  AllocationPtr durable_copy;
  if (persisted && write.options.hard_pin) {
    durable_copy = WriteThrough(write.key, write.allocation, write.size, version, write.options);
  }
  {
    std::lock_guard lock(mu_);
    bool still_ours = pending_.erase(handle) > 0;
    auto object = objects_.find(write.key);
    if (!still_ours || object == objects_.end() || object->second.id != write.object_id) {
      return Err(ErrorCode::kIllegalClient);
    }
    if (!persisted) {
      EraseLocked(object);
      return persisted;
    }
    Object& o = object->second;
    auto now = SteadyClock::now();
    o.complete = true;
    o.version = version;
    o.write_handle = 0;
    TouchLocked(o, now);
    o.durable_copy = std::move(durable_copy);
    Millis soft_ttl = write.options.soft_pin_ttl.count() > 0
                          ? std::min(write.options.soft_pin_ttl, kMaxSoftPinTtl)
                          : options_.soft_pin_ttl;
    o.soft_pin_until = now + soft_ttl;
    if (write.mode == WriteMode::kAdopt) {
      o.adopted_unconfirmed = true;
      o.adopted_at = now;
      unconfirmed_adopts_.emplace_back(write.key, write.object_id);
      moved_in_.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
  }
  return FinishPublish(write, version);
}

Result<void> TieredCacheBackend::FinishPublish(const PendingWrite& write, uint64_t version) {
  // An upsert of a key this node already owns needs no new claim.
  auto claimed = write.was_published ? Result<void>{} : directory_->Claim(write.key);
  std::lock_guard lock(mu_);
  if (!claimed) {
    EraseIfSameLocked(write.key, write.object_id);
    return claimed;
  }
  auto object = objects_.find(write.key);
  if (object != objects_.end() && object->second.id == write.object_id) {
    object->second.published = true;
  }
  moved_to_.erase(write.key);  // owned here again
  auto& counter = write.mode == WriteMode::kUpsert ? upserts_ : puts_;
  counter.fetch_add(1, std::memory_order_relaxed);
  if (AnyTierAboveHighWatermark()) SignalWorkLocked();
  MC_LOG_DEBUG("published key={} version={} in_place={}", write.key, version, write.in_place);
  return {};
}

TieredCacheBackend::AllocationPtr TieredCacheBackend::WriteThrough(const std::string& key,
                                                                   const AllocationPtr& primary,
                                                                   uint64_t size, uint64_t version,
                                                                   const ObjectOptions& options) {
  if (!options_.hard_pin_write_through) return nullptr;
  size_t durable = tiers_.size() - 1;
  if (tiers_[durable]->kind() != TierKind::kSsd || primary->tier == tiers_[durable].get()) {
    return nullptr;
  }
  auto placed = AllocateIn(durable, durable, size, /*allow_drop=*/true);
  if (!placed) {
    MC_LOG_WARN("hard pin write-through failed key={} error={}", key, ToString(placed.error()));
    return nullptr;
  }
  auto copy = placed->second;
  DurableObjectMeta meta{key, copy->location, version, true, options.soft_pin};
  if (!CopyBetweenTiers(*primary, *copy, size) || !copy->tier->Persist(meta)) {
    MC_LOG_WARN("hard pin write-through failed key={} error=copy", key);
    return nullptr;
  }
  return copy;
}

// ---------------------------------------------------------------------------
// Plan-based writes

int TieredCacheBackend::LastShareableTier() const {
  int last = -1;
  for (size_t t = 0; t < shared_regions_.size(); ++t) {
    if (shared_regions_[t]) last = static_cast<int>(t);
  }
  return last;
}

Result<DirectWritePlan> TieredCacheBackend::OpenForWrite(const std::string& key, uint64_t size,
                                                         const ObjectOptions& options,
                                                         WriteMode mode) {
  if (mode == WriteMode::kAdopt) return Err(ErrorCode::kInvalidParams);
  int last = LastShareableTier();
  if (last < 0 || options.preferred_tier > last) return Err(ErrorCode::kTierNotFound);
  if (options.preferred_tier >= 0 && !shared_regions_[options.preferred_tier]) {
    return Err(ErrorCode::kTierNotFound);
  }
  // Start at the fastest tier that can share: a VRAM tier whose arena could
  // not be exported must not take the plan.
  ObjectOptions placement = options;
  if (placement.preferred_tier < 0) {
    while (!shared_regions_[++placement.preferred_tier]) {
    }
  }
  auto handle = StartWrite(key, size, placement, mode, /*adopted_version=*/0, /*direct=*/true);
  if (!handle) return Err(handle.error());
  auto target = PendingWriteTarget(*handle);
  if (target && !shared_regions_[target->tier]) target = Err(ErrorCode::kTierNotFound);
  if (!target) {
    PutRevoke(*handle);
    return Err(target.error());
  }
  return DirectWritePlan{.epoch = *handle,
                         .target = *target,
                         .region = *shared_regions_[target->tier],
                         .timeout = options_.put_start_discard_timeout};
}

Result<WriteTarget> TieredCacheBackend::PendingWriteTarget(uint64_t handle) const {
  std::lock_guard lock(mu_);
  auto pending = pending_.find(handle);
  if (pending == pending_.end() || !pending->second.allocation) {
    return Err(ErrorCode::kIllegalClient);
  }
  const PendingWrite& write = pending->second;
  return WriteTarget{.tier = write.tier,
                     .tier_name = std::string(tiers_[write.tier]->name()),
                     .location = write.allocation->location};
}

Result<void> TieredCacheBackend::CommitDirect(uint64_t handle, std::string_view key) {
  {
    std::lock_guard lock(mu_);
    auto pending = pending_.find(handle);
    if (pending == pending_.end() || (!key.empty() && pending->second.key != key)) {
      return Err(ErrorCode::kIllegalClient);
    }
    // Only writes opened for direct placement may skip counting bytes.
    if (!pending->second.direct && pending->second.mode != WriteMode::kAdopt) {
      return Err(ErrorCode::kInvalidParams);
    }
    pending->second.bytes_written = pending->second.size;
  }
  return PutEnd(handle);
}

void TieredCacheBackend::QuarantineLocked(AllocationPtr allocation) {
  if (!allocation) return;
  quarantine_.push_back(
      {SteadyClock::now() + options_.put_start_discard_timeout, std::move(allocation)});
}

void TieredCacheBackend::ReleaseQuarantine() {
  std::vector<AllocationPtr> released;  // freed after the lock is dropped
  std::lock_guard lock(mu_);
  auto now = SteadyClock::now();
  while (!quarantine_.empty() && quarantine_.front().until <= now) {
    released.push_back(std::move(quarantine_.front().allocation));
    quarantine_.pop_front();
  }
}

Result<void> TieredCacheBackend::PutRevoke(uint64_t handle) {
  std::optional<std::string> release_key;
  {
    std::lock_guard lock(mu_);
    auto pending = pending_.find(handle);
    if (pending == pending_.end() || pending->second.committing) {
      return Err(ErrorCode::kIllegalClient);
    }
    release_key = RevokeLocked(handle, /*writer_gone=*/true);
  }
  if (release_key) ReleaseAbandonedOwnership({*release_key});
  return {};
}

std::optional<std::string> TieredCacheBackend::RevokeLocked(uint64_t handle, bool writer_gone) {
  auto pending = pending_.find(handle);
  if (pending == pending_.end()) return std::nullopt;
  if (pending->second.written_from_outside() && !writer_gone) {
    QuarantineLocked(pending->second.allocation);
  }
  std::optional<std::string> release_key;
  if (pending->second.was_published) release_key = pending->second.key;
  EraseIfSameLocked(pending->second.key, pending->second.object_id);
  pending_.erase(pending);
  return release_key;
}

void TieredCacheBackend::ReleaseAbandonedOwnership(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    // The old value was replaced in place or freed: the key is gone here, so
    // the master must stop pointing at this node.
    if (auto released = directory_->Release(key); !released) {
      MC_LOG_WARN("release after revoked upsert failed key={} error={}", key,
                  ToString(released.error()));
    }
  }
}

Result<void> TieredCacheBackend::AdoptAbort(const std::string& key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Err(ErrorCode::kObjectNotFound);
  if (!it->second.adopted_unconfirmed) return Err(ErrorCode::kInvalidParams);
  EraseLocked(it);
  return {};
}

// ---------------------------------------------------------------------------
// Reads

Result<ReadSlice> TieredCacheBackend::Get(const std::string& key, uint64_t offset,
                                          uint64_t length) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  gets_.fetch_add(1, std::memory_order_relaxed);
  AllocationPtr allocation;
  uint64_t object_id, size;
  size_t tier;
  ReadSlice slice;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) {
      get_misses_.fetch_add(1, std::memory_order_relaxed);
      return Err(ErrorCode::kObjectNotFound);
    }
    Object& object = it->second;
    if (!object.complete) return Err(ErrorCode::kReplicaIsNotReady);
    if (offset > object.size) return Err(ErrorCode::kInvalidParams);
    auto now = SteadyClock::now();
    object.readers++;
    TouchLocked(object, now);
    object.lease_until = now + options_.kv_lease_ttl;
    allocation = object.allocation;
    object_id = object.id;
    size = object.size;
    tier = object.tier;
    slice.total_size = object.size;
    slice.version = object.version;
  }

  uint64_t remaining = size - offset;
  uint64_t want = length == 0 ? remaining : std::min(length, remaining);
  want = std::min(want, kRpcChunkBytes);
  slice.data.resize(want);
  auto out = std::as_writable_bytes(std::span(slice.data.data(), slice.data.size()));
  auto read =
      want == 0 ? Result<void>{} : allocation->tier->Read(allocation->location, offset, out);

  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  bool same = it != objects_.end() && it->second.id == object_id;
  if (same) it->second.readers--;
  if (!read) return Err(read.error());
  if (offset == 0) counters_[tier].hits.fetch_add(1, std::memory_order_relaxed);
  bool read_to_end = offset + want == size;
  if (same && read_to_end && tier > 0 && options_.promote_on_get) {
    QueuePromotionLocked(it->second, {.key = key, .requester_node = "", .prefetch = false});
  }
  return slice;
}

Result<bool> TieredCacheBackend::Exist(const std::string& key, bool prefetch,
                                       const std::string& requester_node) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end() || !it->second.complete) {
    // Absent, or being written: a prefetch has nothing to do.
    if (prefetch && it != objects_.end()) prefetch_skipped_.fetch_add(1);
    return false;
  }
  Object& object = it->second;
  auto now = SteadyClock::now();
  TouchLocked(object, now);
  object.lease_until = now + options_.kv_lease_ttl;
  if (!prefetch) return true;
  bool only_on_ssd = tiers_.size() > 1 && object.tier == tiers_.size() - 1 &&
                     tiers_[object.tier]->kind() == TierKind::kSsd;
  // An adopted copy may move up inside this node; RunPromotion will not hand
  // it on to another node before it is confirmed as ours.
  bool busy = object.moving || object.transferring || object.promotion_queued;
  if (!only_on_ssd || busy) {
    prefetch_skipped_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  prefetch_started_.fetch_add(1, std::memory_order_relaxed);
  QueuePromotionLocked(object, {.key = key, .requester_node = requester_node, .prefetch = true});
  return true;
}

Result<LocatedObject> TieredCacheBackend::Locate(const std::string& key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Err(ErrorCode::kObjectNotFound);
  Object& object = it->second;
  if (!object.complete || object.moving || object.transferring) {
    return Err(ErrorCode::kReplicaIsNotReady);
  }
  auto now = SteadyClock::now();
  TouchLocked(object, now);
  object.lease_until = now + options_.kv_lease_ttl;
  LocatedObject placement{.where = {.tier = object.tier,
                                    .tier_name = std::string(tiers_[object.tier]->name()),
                                    .location = object.allocation->location},
                          .size = object.size,
                          .version = object.version,
                          .region = shared_regions_[object.tier],
                          .hold = options_.kv_lease_ttl};
  if (placement.region) object.placement_held_until = now + options_.kv_lease_ttl;
  return placement;
}

std::string TieredCacheBackend::MovedTo(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = moved_to_.find(key);
  return it == moved_to_.end() ? std::string() : it->second;
}

void TieredCacheBackend::RememberMoveLocked(const std::string& key, const std::string& node) {
  // A bounded memory of recent hand-overs, so a stale client gets a hint
  // instead of a second master round trip.
  constexpr size_t kMaxRemembered = 65536;
  if (moved_to_.insert_or_assign(key, node).second) moved_order_.push_back(key);
  while (moved_order_.size() > kMaxRemembered) {
    moved_to_.erase(moved_order_.front());
    moved_order_.pop_front();
  }
}

// ---------------------------------------------------------------------------
// Removal

Result<void> TieredCacheBackend::Remove(const std::string& key, bool force) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  uint64_t object_id;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return Err(ErrorCode::kObjectNotFound);
    Object& object = it->second;
    if (!object.complete) {
      // Removing a key that is still being written revokes that write; if it
      // was an upsert of an owned key, the master is told below.
      bool was_published = object.published;
      pending_.erase(object.write_handle);
      EraseLocked(it);
      removes_.fetch_add(1, std::memory_order_relaxed);
      if (!was_published) return {};
      object_id = 0;  // nothing left here once the master is told
    } else {
      // Handing it to another node: the outcome decides who must remove it.
      if (object.transferring || object.adopted_unconfirmed) {
        return Err(ErrorCode::kObjectReplicaBusy);
      }
      bool leased = object.readers > 0 || object.lease_until > SteadyClock::now();
      if (leased && !force) return Err(ErrorCode::kObjectHasLease);
      if (object.removing) return Err(ErrorCode::kObjectReplicaBusy);
      // Until the master has answered, no upsert may take this object over:
      // it would inherit an ownership that is about to vanish.
      object.removing = true;
      object_id = object.id;
    }
  }
  // The directory goes first: if the master cannot be told, nothing changes
  // and the caller gets the error, rather than the master pointing at a node
  // that no longer has the object.
  auto released = directory_->Release(key);
  bool failed = !released && released.error() != ErrorCode::kObjectNotFound &&
                released.error() != ErrorCode::kNotOwner;
  if (object_id == 0) return failed ? released : Result<void>{};
  std::lock_guard lock(mu_);
  if (failed) {
    auto it = objects_.find(key);
    if (it != objects_.end() && it->second.id == object_id) it->second.removing = false;
    return released;
  }
  EraseIfSameLocked(key, object_id);
  removes_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void TieredCacheBackend::DropLocal(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  if (!it->second.complete) pending_.erase(it->second.write_handle);
  EraseLocked(it);
}

void TieredCacheBackend::EraseIfSameLocked(const std::string& key, uint64_t object_id) {
  auto it = objects_.find(key);
  if (it != objects_.end() && it->second.id == object_id) EraseLocked(it);
}

TieredCacheBackend::ObjectMap::iterator TieredCacheBackend::EmplaceLocked(const std::string& key,
                                                                          Object object) {
  auto [it, inserted] = objects_.emplace(key, std::move(object));
  it->second.key = &it->first;
  lru_[it->second.tier].insert({it->second.last_access, it->second.id, it->second.key});
  if (it->second.options.hard_pin) pinned_bytes_[it->second.tier] += it->second.size;
  return it;
}

void TieredCacheBackend::EraseLocked(ObjectMap::iterator it) {
  const Object& object = it->second;
  lru_[object.tier].erase({object.last_access, object.id, nullptr});
  if (object.options.hard_pin) pinned_bytes_[object.tier] -= object.size;
  objects_.erase(it);
}

void TieredCacheBackend::TouchLocked(Object& object, SteadyClock::time_point now) {
  lru_[object.tier].erase({object.last_access, object.id, nullptr});
  object.last_access = now;
  lru_[object.tier].insert({object.last_access, object.id, object.key});
}

void TieredCacheBackend::SetTierLocked(Object& object, size_t tier) {
  lru_[object.tier].erase({object.last_access, object.id, nullptr});
  if (object.options.hard_pin) {
    pinned_bytes_[object.tier] -= object.size;
    pinned_bytes_[tier] += object.size;
  }
  object.tier = tier;
  lru_[object.tier].insert({object.last_access, object.id, object.key});
}

int TieredCacheBackend::TierIndex(std::string_view name) const {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (tiers_[t]->name() == name) return static_cast<int>(t);
  }
  return -1;
}

// ---------------------------------------------------------------------------
// Placement and eviction

Result<std::pair<size_t, TieredCacheBackend::AllocationPtr>> TieredCacheBackend::AllocateIn(
    size_t first_tier, size_t last_tier, uint64_t size, bool allow_drop) {
  for (size_t t = first_tier; t <= last_tier && t < tiers_.size(); ++t) {
    CacheTier& tier = *tiers_[t];
    if (size > tier.capacity()) continue;
    for (int round = 0; round < kAllocationRounds; ++round) {
      if (auto location = tier.Allocate(size)) {
        return std::make_pair(t, std::make_shared<Allocation>(&tier, *location));
      }
      if (!MakeRoom(t, size, allow_drop)) break;
    }
  }
  return Err(ErrorCode::kNoAvailableHandle);
}

bool TieredCacheBackend::MakeRoom(size_t tier, uint64_t bytes, bool allow_drop) {
  bool last = tier + 1 == tiers_.size();
  if (last && !allow_drop) return false;
  uint64_t capacity = tiers_[tier]->capacity();
  uint64_t used = tiers_[tier]->used();
  uint64_t free = capacity > used ? capacity - used : 0;
  // Free at least `bytes` beyond what is free, so a fragmented arena gains a
  // contiguous block over successive rounds.
  uint64_t wanted = std::max<uint64_t>(bytes > free ? bytes - free : 0, bytes / 4 + 1);
  auto victims = PickVictims(tier, wanted);
  if (victims.empty()) return false;
  bool any = false;
  for (const std::string& key : victims) {
    any |= last ? EvictFromLastTier(key, tier)
                : MoveObject(key, tier + 1, tiers_.size() - 1, /*allow_drop=*/true);
  }
  return any;
}

bool TieredCacheBackend::IsEvictableLocked(const Object& object, SteadyClock::time_point now,
                                           int pass) const {
  if (!object.complete || !object.published || object.moving || object.transferring ||
      object.removing || object.readers > 0 || object.adopted_unconfirmed) {
    return false;
  }
  if (object.options.hard_pin || object.lease_until > now) return false;
  bool soft_pinned = object.options.soft_pin && object.soft_pin_until > now;
  if (pass == 0) return !soft_pinned;
  return soft_pinned && options_.allow_evict_soft_pinned;
}

std::vector<std::string> TieredCacheBackend::PickVictims(size_t tier, uint64_t bytes) const {
  std::vector<std::string> victims;
  uint64_t freed = 0;
  std::lock_guard lock(mu_);
  auto now = SteadyClock::now();
  // Unpinned before soft-pinned; within a pass, least recently used first.
  for (int pass = 0; pass < 2 && freed < bytes; ++pass) {
    for (const LruEntry& entry : lru_[tier]) {
      if (freed >= bytes) break;
      const Object& object = objects_.find(*entry.key)->second;
      if (!IsEvictableLocked(object, now, pass)) continue;
      victims.push_back(*entry.key);
      freed += object.size;
    }
  }
  return victims;
}

bool TieredCacheBackend::MoveObject(const std::string& key, size_t first_tier, size_t last_tier,
                                    bool allow_drop) {
  AllocationPtr source;
  uint64_t object_id, version, size;
  size_t from;
  ObjectOptions object_options;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end() || !it->second.complete || it->second.moving ||
        it->second.transferring || it->second.placement_held_until > SteadyClock::now()) {
      return false;
    }
    // Already where it was to go: two evictors picked the same victim, and
    // the other one moved it first. Copying it again would only churn.
    if (it->second.tier >= first_tier && it->second.tier <= last_tier) return false;
    Object& object = it->second;
    object.moving = true;
    source = object.allocation;
    object_id = object.id;
    version = object.version;
    size = object.size;
    from = object.tier;
    object_options = object.options;
  }
  auto finish = [&](bool moved) {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it != objects_.end() && it->second.id == object_id) it->second.moving = false;
    return moved;
  };

  auto placed = AllocateIn(first_tier, last_tier, size, allow_drop);
  if (!placed) return finish(false);
  auto& [to, target] = *placed;
  if (!CopyBetweenTiers(*source, *target, size)) return finish(false);
  DurableObjectMeta meta{key, target->location, version, object_options.hard_pin,
                         object_options.soft_pin};
  if (!target->tier->Persist(meta)) return finish(false);

  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end() || it->second.id != object_id) return false;
  Object& object = it->second;
  object.moving = false;
  // Removed, rewritten or re-placed while we copied: our copy is stale.
  if (object.version != version || object.allocation != source) return false;
  // A hard-pinned object promoted out of the durable tier keeps its durable
  // copy there, so it still survives a restart.
  bool keep_source = object_options.hard_pin && options_.hard_pin_write_through &&
                     source->tier->kind() == TierKind::kSsd && !object.durable_copy;
  if (keep_source) object.durable_copy = source;
  object.allocation = target;
  SetTierLocked(object, to);
  if (to < from) {
    counters_[to].promotions_in.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters_[from].demotions_out.fetch_add(1, std::memory_order_relaxed);
  }
  MC_LOG_DEBUG("moved key={} from={} to={} size={}", key, tiers_[from]->name(), tiers_[to]->name(),
               size);
  return true;
}

bool TieredCacheBackend::EvictFromLastTier(const std::string& key, size_t tier) {
  if (peers_ == nullptr) return DropObject(key, tier);
  auto moved = TransferOut(key, /*target=*/"", /*dram_only=*/false);
  if (moved) {
    counters_[tier].evictions.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // Only when no node has room does an object leave the cluster.
  if (moved.error() == ErrorCode::kNoAvailableHandle) return DropObject(key, tier);
  return false;
}

Result<void> TieredCacheBackend::TransferOut(const std::string& key, const std::string& target,
                                             bool dram_only) {
  AllocationPtr source;
  uint64_t object_id, version, size;
  ObjectOptions object_options;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return Err(ErrorCode::kObjectNotFound);
    Object& object = it->second;
    // Hard-pinned objects never leave their node.
    if (!object.complete || !object.published || object.moving || object.transferring ||
        object.adopted_unconfirmed || object.removing || object.options.hard_pin ||
        object.placement_held_until > SteadyClock::now()) {
      return Err(ErrorCode::kObjectReplicaBusy);
    }
    object.transferring = true;
    source = object.allocation;
    object_id = object.id;
    version = object.version;
    size = object.size;
    object_options = object.options;
  }
  // `source` keeps the space alive (and unmoved: `transferring`) until the
  // transfer returns, so its host address stays valid throughout.
  ObjectSource bytes{.read =
                         [&source](uint64_t offset, std::span<std::byte> out) {
                           return source->tier->Read(source->location, offset, out);
                         },
                     .host_address = source->tier->HostAddress(source->location)};
  auto moved = peers_->Transfer(key, size, version, object_options, bytes, target, dram_only);

  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  bool same = it != objects_.end() && it->second.id == object_id;
  if (!moved) {
    if (same) it->second.transferring = false;
    return Err(moved.error());
  }
  // The master names the new owner: only now may this copy go (DESIGN.md,
  // inter-node eviction step 4). Readers still copying keep its bytes alive.
  if (same) EraseLocked(it);
  RememberMoveLocked(key, *moved);
  moved_out_.fetch_add(1, std::memory_order_relaxed);
  MC_LOG_INFO("moved out key={} to={} size={}", key, *moved, size);
  return {};
}

bool TieredCacheBackend::DropObject(const std::string& key, size_t tier) {
  uint64_t object_id;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end() || it->second.tier != tier) return false;
    auto now = SteadyClock::now();
    if (!IsEvictableLocked(it->second, now, 0) && !IsEvictableLocked(it->second, now, 1)) {
      return false;
    }
    it->second.moving = true;  // keeps other evictors off it while we ask the master
    object_id = it->second.id;
  }
  auto released = directory_->Release(key);
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end() || it->second.id != object_id) return false;
  if (!released && released.error() != ErrorCode::kObjectNotFound &&
      released.error() != ErrorCode::kNotOwner) {
    it->second.moving = false;  // the master still points here; keep the data
    MC_LOG_WARN("drop failed key={} error={}", key, ToString(released.error()));
    return false;
  }
  EraseLocked(it);
  counters_[tier].evictions.fetch_add(1, std::memory_order_relaxed);
  dropped_.fetch_add(1, std::memory_order_relaxed);
  MC_LOG_INFO("dropped key={} tier={} reason=no_space", key, tiers_[tier]->name());
  return true;
}

Result<void> TieredCacheBackend::CopyBetweenTiers(const Allocation& from, const Allocation& to,
                                                  uint64_t size) {
  std::vector<std::byte> buffer(std::min(size, kCopyBufferBytes));
  for (uint64_t offset = 0; offset < size; offset += buffer.size()) {
    auto chunk = std::span(buffer.data(), std::min<uint64_t>(buffer.size(), size - offset));
    if (auto read = from.tier->Read(from.location, offset, chunk); !read) return read;
    if (auto written = to.tier->Write(to.location, offset, chunk); !written) return written;
  }
  return {};
}

Result<uint64_t> TieredCacheBackend::EvictTier(std::string_view tier_name, double target_ratio) {
  int index = TierIndex(tier_name);
  if (index < 0) return Err(ErrorCode::kTierNotFound);
  if (!(target_ratio >= 0.0 && target_ratio <= 1.0)) return Err(ErrorCode::kInvalidParams);
  size_t t = static_cast<size_t>(index);
  CacheTier& tier = *tiers_[t];
  uint64_t before = tier.used();
  auto target = static_cast<uint64_t>(target_ratio * tier.capacity());
  if (before <= target) return 0;
  bool last = t + 1 == tiers_.size();
  for (const std::string& key : PickVictims(t, before - target)) {
    if (tier.used() <= target) break;
    if (last) {
      EvictFromLastTier(key, t);
    } else {
      MoveObject(key, t + 1, tiers_.size() - 1, /*allow_drop=*/true);
    }
  }
  uint64_t after = tier.used();
  return before > after ? before - after : 0;
}

// ---------------------------------------------------------------------------
// Background work

void TieredCacheBackend::RunMaintenance() {
  DiscardExpiredWrites();
  ReleaseQuarantine();
  RunQueuedPromotions();
  DemoteAboveWatermarks();
  ConfirmAdoptedObjects();
}

void TieredCacheBackend::WaitForWork(Millis timeout) {
  std::unique_lock lock(mu_);
  work_cv_.wait_for(lock, timeout, [this] { return work_queued_; });
  work_queued_ = false;
}

void TieredCacheBackend::SignalWorkLocked() {
  work_queued_ = true;
  work_cv_.notify_one();
}

bool TieredCacheBackend::AnyTierAboveHighWatermark() const {
  for (size_t t = 0; t + 1 < tiers_.size(); ++t) {
    const CacheTier& tier = *tiers_[t];
    if (tier.used() > options_.high_watermark * tier.capacity()) return true;
  }
  return false;
}

void TieredCacheBackend::QueuePromotionLocked(Object& object, PromotionTask task) {
  if (object.promotion_queued) return;
  object.promotion_queued = true;
  promotions_.push_back(std::move(task));
  SignalWorkLocked();
}

void TieredCacheBackend::RunQueuedPromotions() {
  std::deque<PromotionTask> queue;
  {
    std::lock_guard lock(mu_);
    queue.swap(promotions_);
  }
  for (const PromotionTask& task : queue) RunPromotion(task);
}

void TieredCacheBackend::RunPromotion(const PromotionTask& task) {
  size_t tier;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(task.key);
    if (it == objects_.end()) {
      if (task.prefetch) prefetch_failed_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    it->second.promotion_queued = false;
    tier = it->second.tier;
  }
  if (tier == 0) return;
  // A prefetch for a client on another node moves the object into that
  // node's DRAM, ownership included; if that node has no room, it comes up
  // here instead.
  if (task.prefetch && !task.requester_node.empty() && peers_ != nullptr) {
    if (TransferOut(task.key, task.requester_node, /*dram_only=*/true)) {
      prefetch_succeeded_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  // A promotion may push colder objects down, but never out of the node. A
  // prefetch brings the object to DRAM (DESIGN.md "Exist"), not above it.
  size_t top = task.prefetch ? std::min(PrefetchTier(), tier - 1) : 0;
  bool promoted = MoveObject(task.key, top, tier - 1, /*allow_drop=*/false);
  if (!task.prefetch) return;
  auto& counter = promoted ? prefetch_succeeded_ : prefetch_failed_;
  counter.fetch_add(1, std::memory_order_relaxed);
  if (!promoted) MC_LOG_WARN("prefetch failed key={} reason=no_dram_room", task.key);
}

size_t TieredCacheBackend::PrefetchTier() const {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (tiers_[t]->kind() == TierKind::kDram) return t;
  }
  return 0;
}

void TieredCacheBackend::DemoteAboveWatermarks() {
  // The last tier has nowhere below it: it evicts only when an allocation
  // needs the space, never ahead of time.
  for (size_t t = 0; t + 1 < tiers_.size(); ++t) {
    CacheTier& tier = *tiers_[t];
    double high = options_.high_watermark * tier.capacity();
    double low = options_.low_watermark * tier.capacity();
    if (tier.used() <= high) continue;
    auto victims = PickVictims(t, tier.used() - static_cast<uint64_t>(low));
    for (const std::string& key : victims) {
      if (tier.used() <= low) break;
      MoveObject(key, t + 1, tiers_.size() - 1, /*allow_drop=*/true);
    }
  }
}

void TieredCacheBackend::ConfirmAdoptedObjects() {
  std::vector<std::pair<std::string, uint64_t>> due;
  {
    std::lock_guard lock(mu_);
    auto deadline = SteadyClock::now() - options_.adopt_confirm_delay;
    while (!unconfirmed_adopts_.empty()) {
      const auto& [key, object_id] = unconfirmed_adopts_.front();
      auto it = objects_.find(key);
      bool waiting =
          it != objects_.end() && it->second.id == object_id && it->second.adopted_unconfirmed;
      if (waiting && it->second.adopted_at > deadline) break;  // and so is every later one
      if (waiting) due.push_back(std::move(unconfirmed_adopts_.front()));
      unconfirmed_adopts_.pop_front();
    }
  }
  for (const auto& [key, object_id] : due) {
    // Claim is idempotent for the owner: it succeeds if the sender's
    // UpdateOwner named us, or if nobody owns the key any more (sender died
    // and was purged); it fails if the sender still owns it (its swap failed).
    auto claimed = directory_->Claim(key);
    std::lock_guard lock(mu_);
    if (!claimed && claimed.error() != ErrorCode::kObjectAlreadyExists) {
      unconfirmed_adopts_.emplace_back(key, object_id);  // the master is away: retry later
      continue;
    }
    auto it = objects_.find(key);
    if (it == objects_.end() || it->second.id != object_id) continue;
    if (claimed) {
      it->second.adopted_unconfirmed = false;
      it->second.published = true;
    } else {
      MC_LOG_INFO("dropping adopted copy owned elsewhere key={}", key);
      EraseLocked(it);
    }
  }
}

void TieredCacheBackend::DiscardExpiredWrites() {
  std::vector<std::string> release;
  {
    std::lock_guard lock(mu_);
    auto now = SteadyClock::now();
    std::vector<uint64_t> expired;
    for (const auto& [handle, pending] : pending_) {
      if (!pending.committing && pending.deadline <= now) expired.push_back(handle);
    }
    for (uint64_t handle : expired) {
      MC_LOG_WARN("discarded abandoned write key={} size={}", pending_[handle].key,
                  pending_[handle].size);
      if (auto key = RevokeLocked(handle, /*writer_gone=*/false)) release.push_back(*key);
    }
  }
  ReleaseAbandonedOwnership(release);
}

// ---------------------------------------------------------------------------
// Introspection

Result<ObjectSnapshot> TieredCacheBackend::Inspect(const std::string& key) const {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Err(ErrorCode::kObjectNotFound);
  const Object& object = it->second;
  auto now = SteadyClock::now();
  ObjectSnapshot snapshot;
  if (object.allocation) {
    snapshot.tier = std::string(tiers_[object.tier]->name());
    snapshot.offset = object.allocation->location.offset;
  }
  snapshot.size = object.size;
  snapshot.version = object.version;
  snapshot.hard_pinned = object.options.hard_pin;
  snapshot.soft_pinned = object.options.soft_pin && object.soft_pin_until > now;
  snapshot.state = !object.complete             ? "writing"
                   : object.adopted_unconfirmed ? "adopted"
                   : object.transferring        ? "transferring"
                                                : "complete";
  snapshot.readers = object.readers;
  snapshot.lease_remaining_ms =
      object.lease_until > now
          ? std::chrono::duration_cast<Millis>(object.lease_until - now).count()
          : 0;
  snapshot.idle_ms = std::chrono::duration_cast<Millis>(now - object.last_access).count();
  return snapshot;
}

BackendStats TieredCacheBackend::Stats() const {
  BackendStats stats;
  std::vector<uint64_t> pinned;
  {
    std::lock_guard lock(mu_);
    pinned = pinned_bytes_;
  }
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const CacheTier& tier = *tiers_[t];
    const TierCounters& c = counters_[t];
    stats.tiers.push_back({.name = std::string(tier.name()),
                           .kind = tier.kind(),
                           .capacity = tier.capacity(),
                           .used = tier.used(),
                           .objects = tier.object_count(),
                           .hits = c.hits.load(),
                           .promotions_in = c.promotions_in.load(),
                           .demotions_out = c.demotions_out.load(),
                           .evictions = c.evictions.load(),
                           .pinned_bytes = pinned[t]});
  }
  stats.gets = gets_.load();
  stats.get_misses = get_misses_.load();
  stats.puts = puts_.load();
  stats.removes = removes_.load();
  stats.dropped = dropped_.load();
  stats.upserts = upserts_.load();
  stats.prefetch_started = prefetch_started_.load();
  stats.prefetch_succeeded = prefetch_succeeded_.load();
  stats.prefetch_failed = prefetch_failed_.load();
  stats.prefetch_skipped = prefetch_skipped_.load();
  stats.moved_out = moved_out_.load();
  stats.moved_in = moved_in_.load();
  return stats;
}

std::vector<std::string> TieredCacheBackend::Keys() const {
  std::vector<std::string> keys;
  std::lock_guard lock(mu_);
  keys.reserve(objects_.size());
  for (const auto& [key, object] : objects_) {
    if (object.complete && object.published) keys.push_back(key);
  }
  return keys;
}

}  // namespace mooncake
