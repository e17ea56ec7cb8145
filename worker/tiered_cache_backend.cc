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
  uint64_t id = 0;  // tells apart successive objects stored under one key
  size_t tier = 0;
  AllocationPtr allocation;  // null while a write is still allocating
  uint64_t size = 0;
  bool complete = false;
  bool published = false;  // claimed in the directory
  bool moving = false;     // a mover copies it or a drop is being announced
  bool promotion_queued = false;
  uint64_t write_handle = 0;  // the pending write, while !complete
  uint64_t version = 0;
  ObjectOptions options;
  int readers = 0;
  SteadyClock::time_point last_access;
  SteadyClock::time_point lease_until;
};

struct TieredCacheBackend::PendingWrite {
  std::string key;
  uint64_t object_id = 0;
  size_t tier = 0;
  AllocationPtr allocation;
  uint64_t size = 0;
  uint64_t bytes_written = 0;
  bool committing = false;
  ObjectOptions options;
  SteadyClock::time_point deadline;
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
      counters_(new TierCounters[tiers_.size()]) {}

TieredCacheBackend::~TieredCacheBackend() {
  std::lock_guard lock(mu_);
  for (auto& [key, object] : objects_) {
    if (object.complete && object.allocation) object.allocation->free_on_release = false;
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
      next_version_ = std::max(next_version_, meta.version + 1);
      keys.push_back(meta.key);
      objects_.emplace(std::move(meta.key), std::move(object));
    }
  }
  MC_LOG_INFO("backend recovered objects={}", keys.size());
  return keys;
}

// ---------------------------------------------------------------------------
// Writes

Result<void> TieredCacheBackend::Put(const std::string& key, std::string_view value,
                                     const ObjectOptions& options) {
  auto handle = PutStart(key, value.size(), options);
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
                                              const ObjectOptions& options) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  bool fits_somewhere = std::any_of(tiers_.begin(), tiers_.end(),
                                    [size](const auto& tier) { return size <= tier->capacity(); });
  if (!fits_somewhere) return Err(ErrorCode::kNoAvailableHandle);

  // Reserve the key first so a concurrent Put of it fails fast instead of
  // allocating (and evicting) for nothing.
  uint64_t handle, object_id;
  {
    std::lock_guard lock(mu_);
    if (objects_.contains(key)) return Err(ErrorCode::kObjectAlreadyExists);
    handle = next_handle_++;
    object_id = next_object_id_++;
    Object placeholder;
    placeholder.id = object_id;
    placeholder.size = size;
    placeholder.write_handle = handle;
    placeholder.options = options;
    placeholder.last_access = SteadyClock::now();
    objects_.emplace(key, std::move(placeholder));
    PendingWrite pending;
    pending.key = key;
    pending.object_id = object_id;
    pending.size = size;
    pending.options = options;
    pending.deadline = SteadyClock::now() + options_.put_start_discard_timeout;
    pending_.emplace(handle, std::move(pending));
  }

  auto placed = AllocateIn(0, tiers_.size() - 1, size, /*allow_drop=*/true);
  std::lock_guard lock(mu_);
  auto pending = pending_.find(handle);
  if (!placed) {
    if (pending != pending_.end()) {
      EraseIfSameLocked(key, object_id);
      pending_.erase(pending);
    }
    return Err(placed.error());
  }
  if (pending == pending_.end()) return Err(ErrorCode::kIllegalClient);  // revoked meanwhile
  auto& [tier, allocation] = *placed;
  pending->second.tier = tier;
  pending->second.allocation = allocation;
  auto object = objects_.find(key);
  object->second.tier = tier;
  object->second.allocation = allocation;
  return handle;
}

Result<void> TieredCacheBackend::PutChunk(uint64_t handle, uint64_t offset,
                                          std::string_view data) {
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
  PendingWrite snapshot;
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
    snapshot = pending->second;
    version = next_version_++;
  }

  DurableObjectMeta meta{snapshot.key, snapshot.allocation->location, version,
                         snapshot.options.hard_pin, snapshot.options.soft_pin};
  auto persisted = snapshot.allocation->tier->Persist(meta);
  {
    std::lock_guard lock(mu_);
    bool still_ours = pending_.erase(handle) > 0;
    auto object = objects_.find(snapshot.key);
    if (!still_ours || object == objects_.end() || object->second.id != snapshot.object_id) {
      return Err(ErrorCode::kIllegalClient);
    }
    if (!persisted) {
      objects_.erase(object);
      return persisted;
    }
    object->second.complete = true;
    object->second.version = version;
    object->second.write_handle = 0;
    object->second.last_access = SteadyClock::now();
  }

  auto claimed = directory_->Claim(snapshot.key);
  std::lock_guard lock(mu_);
  if (!claimed) {
    EraseIfSameLocked(snapshot.key, snapshot.object_id);
    return claimed;
  }
  auto object = objects_.find(snapshot.key);
  if (object != objects_.end() && object->second.id == snapshot.object_id) {
    object->second.published = true;
  }
  puts_.fetch_add(1, std::memory_order_relaxed);
  if (AnyTierAboveHighWatermark()) SignalWorkLocked();
  return {};
}

Result<void> TieredCacheBackend::PutRevoke(uint64_t handle) {
  std::lock_guard lock(mu_);
  auto pending = pending_.find(handle);
  if (pending == pending_.end() || pending->second.committing) {
    return Err(ErrorCode::kIllegalClient);
  }
  EraseIfSameLocked(pending->second.key, pending->second.object_id);
  pending_.erase(pending);
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
    object.last_access = now;
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
  auto read = want == 0 ? Result<void>{} : allocation->tier->Read(allocation->location, offset, out);

  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  bool same = it != objects_.end() && it->second.id == object_id;
  if (same) it->second.readers--;
  if (!read) return Err(read.error());
  if (offset == 0) counters_[tier].hits.fetch_add(1, std::memory_order_relaxed);
  bool read_to_end = offset + want == size;
  if (same && read_to_end && tier > 0 && options_.promote_on_get) QueuePromotionLocked(it->second, key);
  return slice;
}

Result<bool> TieredCacheBackend::Exist(const std::string& key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end() || !it->second.complete) return false;
  auto now = SteadyClock::now();
  it->second.last_access = now;
  it->second.lease_until = now + options_.kv_lease_ttl;
  return true;
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
      // Removing a key that is still being written revokes that write.
      pending_.erase(object.write_handle);
      objects_.erase(it);
      removes_.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    bool leased = object.readers > 0 || object.lease_until > SteadyClock::now();
    if (leased && !force) return Err(ErrorCode::kObjectHasLease);
    object_id = object.id;
  }
  // The directory goes first: if the master cannot be told, nothing changes
  // and the caller gets the error, rather than the master pointing at a node
  // that no longer has the object.
  auto released = directory_->Release(key);
  if (!released && released.error() != ErrorCode::kObjectNotFound &&
      released.error() != ErrorCode::kNotOwner) {
    return released;
  }
  std::lock_guard lock(mu_);
  EraseIfSameLocked(key, object_id);
  removes_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void TieredCacheBackend::DropLocal(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  if (!it->second.complete) pending_.erase(it->second.write_handle);
  objects_.erase(it);
}

void TieredCacheBackend::EraseIfSameLocked(const std::string& key, uint64_t object_id) {
  auto it = objects_.find(key);
  if (it != objects_.end() && it->second.id == object_id) objects_.erase(it);
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
  auto victims = PickVictims(tier, std::max<uint64_t>(bytes > free ? bytes - free : 0, bytes / 4 + 1));
  if (victims.empty()) return false;
  bool any = false;
  for (const std::string& key : victims) {
    any |= last ? DropObject(key, tier) : MoveObject(key, tier + 1, tiers_.size() - 1, true);
  }
  return any;
}

bool TieredCacheBackend::IsEvictableLocked(const Object& object, SteadyClock::time_point now,
                                           int pass) const {
  if (!object.complete || !object.published || object.moving || object.readers > 0) return false;
  if (object.options.hard_pin || object.lease_until > now) return false;
  if (pass == 0) return !object.options.soft_pin;
  return object.options.soft_pin && options_.allow_evict_soft_pinned;
}

std::vector<std::string> TieredCacheBackend::PickVictims(size_t tier, uint64_t bytes) const {
  struct Candidate {
    int pass;
    SteadyClock::time_point last_access;
    uint64_t size;
    const std::string* key;
  };
  std::vector<Candidate> candidates;
  std::vector<std::string> victims;
  std::lock_guard lock(mu_);
  auto now = SteadyClock::now();
  for (const auto& [key, object] : objects_) {
    if (object.tier != tier) continue;
    for (int pass = 0; pass < 2; ++pass) {
      if (IsEvictableLocked(object, now, pass)) {
        candidates.push_back({pass, object.last_access, object.size, &key});
      }
    }
  }
  // Unpinned before soft-pinned; within a pass, least recently used first.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.pass, a.last_access) < std::tie(b.pass, b.last_access);
  });
  uint64_t freed = 0;
  for (const Candidate& c : candidates) {
    if (freed >= bytes) break;
    victims.push_back(*c.key);
    freed += c.size;
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
    if (it == objects_.end() || !it->second.complete || it->second.moving) return false;
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
  object.allocation = target;
  object.tier = to;
  if (to < from) {
    counters_[to].promotions_in.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters_[from].demotions_out.fetch_add(1, std::memory_order_relaxed);
  }
  MC_LOG_DEBUG("moved key={} from={} to={} size={}", key, tiers_[from]->name(),
               tiers_[to]->name(), size);
  return true;
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
  objects_.erase(it);
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

// ---------------------------------------------------------------------------
// Background work

void TieredCacheBackend::RunMaintenance() {
  DiscardExpiredWrites();
  RunQueuedPromotions();
  DemoteAboveWatermarks();
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

void TieredCacheBackend::QueuePromotionLocked(Object& object, const std::string& key) {
  if (object.promotion_queued) return;
  object.promotion_queued = true;
  promotions_.push_back(key);
  SignalWorkLocked();
}

void TieredCacheBackend::RunQueuedPromotions() {
  std::deque<std::string> queue;
  {
    std::lock_guard lock(mu_);
    queue.swap(promotions_);
  }
  for (const std::string& key : queue) {
    size_t tier;
    {
      std::lock_guard lock(mu_);
      auto it = objects_.find(key);
      if (it == objects_.end()) continue;
      it->second.promotion_queued = false;
      tier = it->second.tier;
    }
    // A promotion may push colder objects down, but never out of the node.
    if (tier > 0) MoveObject(key, 0, tier - 1, /*allow_drop=*/false);
  }
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

void TieredCacheBackend::DiscardExpiredWrites() {
  std::vector<AllocationPtr> released;  // freed after the lock is dropped
  std::lock_guard lock(mu_);
  auto now = SteadyClock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    PendingWrite& pending = it->second;
    if (pending.committing || pending.deadline > now) {
      ++it;
      continue;
    }
    MC_LOG_WARN("discarded abandoned write key={} size={}", pending.key, pending.size);
    released.push_back(pending.allocation);
    EraseIfSameLocked(pending.key, pending.object_id);
    it = pending_.erase(it);
  }
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
  snapshot.soft_pinned = object.options.soft_pin;
  snapshot.state = object.complete ? "complete" : "writing";
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
                           .evictions = c.evictions.load()});
  }
  stats.gets = gets_.load();
  stats.get_misses = get_misses_.load();
  stats.puts = puts_.load();
  stats.removes = removes_.load();
  stats.dropped = dropped_.load();
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
