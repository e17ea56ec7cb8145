#include "worker/mover.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace mooncake {

namespace {

// Rounds of evict-then-allocate before giving up; fragmentation can make one
// round free enough bytes that are still not contiguous.
constexpr int kAllocationRounds = 8;
constexpr uint64_t kCopyBufferBytes = kRpcChunkBytes;

// The master did not answer a call (away, or no leader to be found): what
// the call asked may or may not have been applied there.
bool Unanswered(ErrorCode error) {
  return error == ErrorCode::kRpcTimeout || error == ErrorCode::kRpcFail ||
         error == ErrorCode::kNotLeader;
}

}  // namespace

// ---------------------------------------------------------------------------
// Placement and eviction

Result<std::pair<size_t, AllocationPtr>> Mover::AllocateIn(size_t first_tier, size_t last_tier,
                                                           uint64_t size, bool allow_drop) {
  for (size_t t = first_tier; t <= last_tier && t < ctx_.tiers.size(); ++t) {
    CacheTier& tier = *ctx_.tiers[t];
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

bool Mover::MakeRoom(size_t tier, uint64_t bytes, bool allow_drop) {
  bool last = tier == ctx_.last_tier();
  if (last && !allow_drop) return false;
  uint64_t capacity = ctx_.tiers[tier]->capacity();
  uint64_t used = ctx_.tiers[tier]->used();
  uint64_t free = capacity > used ? capacity - used : 0;
  // A tier recovered into a smaller capacity holds more than it may: the
  // excess has to go as well, or every round frees `bytes`, the allocation
  // still fails, and the put fails after dropping objects for nothing.
  uint64_t excess = used > capacity ? used - capacity : 0;
  uint64_t short_by = bytes > free ? bytes - free : 0;
  short_by = excess > UINT64_MAX - short_by ? UINT64_MAX : short_by + excess;
  // Free at least a quarter of `bytes` even when the tier is not short, so a
  // fragmented arena gains a contiguous block over successive rounds.
  uint64_t wanted = std::max<uint64_t>(short_by, bytes / 4 + 1);
  auto victims = PickVictims(tier, wanted);
  if (victims.empty()) return false;
  bool any = false;
  for (const std::string& key : victims) any |= EvictOne(key, tier, allow_drop);
  return any;
}

bool Mover::EvictOne(const std::string& key, size_t t, bool allow_drop) {
  if (t == ctx_.last_tier()) return allow_drop && EvictFromLastTier(key, t);
  // The victim's own room is made on the same terms: a promotion that
  // demotes a DRAM victim must not push an SSD object out of the node.
  return MoveObject(key, t + 1, ctx_.last_tier(), allow_drop);
}

std::vector<std::string> Mover::PickVictims(size_t tier, uint64_t bytes) {
  std::lock_guard lock(ctx_.mu);
  return table_.PickVictims(tier, bytes, SteadyClock::now(), ctx_.options.allow_evict_soft_pinned);
}

bool Mover::EvictableNowLocked(const Object& object) const {
  auto now = SteadyClock::now();
  bool soft = ctx_.options.allow_evict_soft_pinned;
  // A drop or hand-over while its commit's claim is out could reach the
  // master before the claim (BackendContext::claiming).
  if (ctx_.ClaimingLocked(object.key())) return false;
  return ObjectTable::IsEvictable(object, now, 0, soft) ||
         ObjectTable::IsEvictable(object, now, 1, soft);
}

bool Mover::MoveObject(const std::string& key, size_t first_tier, size_t last_tier,
                       bool allow_drop) {
  AllocationPtr source;
  uint64_t object_id, version, size;
  size_t from;
  ObjectOptions object_options;
  {
    std::lock_guard lock(ctx_.mu);
    Object* object = table_.Find(key);
    if (object == nullptr || !object->complete() || object->moving() || object->transferring() ||
        object->placement_held_until > SteadyClock::now()) {
      return false;
    }
    // Already where it was to go: two evictors picked the same victim, and
    // the other one moved it first. Copying it again would only churn.
    if (object->tier() >= first_tier && object->tier() <= last_tier) return false;
    // A demotion evicts the object from its tier, and a victim picked a
    // while ago may have been pinned, leased or replaced since.
    if (first_tier > object->tier() && !EvictableNowLocked(*object)) return false;
    table_.SetMove(*object, MoveState::kCopying);
    source = object->allocation;
    object_id = object->id;
    version = object->version;
    size = object->size;
    from = object->tier();
    object_options = object->options;
  }
  auto finish = [&](bool moved) {
    std::lock_guard lock(ctx_.mu);
    if (Object* object = table_.FindSame(key, object_id)) table_.SetMove(*object, MoveState::kIdle);
    return moved;
  };

  auto placed = AllocateIn(first_tier, last_tier, size, allow_drop);
  if (!placed) return finish(false);
  auto& [to, target] = *placed;
  if (!CopyBetweenTiers(*source, *target, size, &ctx_)) return finish(false);
  ctx_.counters.moved_bytes.fetch_add(size, std::memory_order_relaxed);
  DurableObjectMeta meta{key, target->location, version, object_options.hard_pin,
                         object_options.soft_pin};
  if (!target->tier->Persist(meta)) return finish(false);

  std::lock_guard lock(ctx_.mu);
  Object* object = table_.FindSame(key, object_id);
  if (object == nullptr) return false;
  table_.SetMove(*object, MoveState::kIdle);
  // Removed, rewritten or re-placed while we copied: our copy is stale.
  if (object->version != version || object->allocation != source) return false;
  // A hard-pinned object promoted out of the durable tier keeps its durable
  // copy there, so it still survives a restart.
  bool keep_source = object_options.hard_pin && ctx_.options.hard_pin_write_through &&
                     source->tier->kind() == TierKind::kSsd && !object->durable_copy;
  if (keep_source) object->durable_copy = source;
  object->allocation = target;
  table_.SetTier(*object, to);
  if (to < from) {
    ctx_.counters.tier[to].promotions_in.fetch_add(1, std::memory_order_relaxed);
  } else {
    ctx_.counters.tier[from].demotions_out.fetch_add(1, std::memory_order_relaxed);
  }
  MC_LOG_DEBUG("moved key={} from={} to={} size={}", key, ctx_.tiers[from]->name(),
               ctx_.tiers[to]->name(), size);
  return true;
}

bool Mover::EvictFromLastTier(const std::string& key, size_t tier) {
  if (ctx_.peers == nullptr) return DropObject(key, tier);
  auto moved = TransferOut(key, /*target=*/"", /*dram_only=*/false);
  if (moved) {
    ctx_.counters.tier[tier].evictions.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // Only when no node has room does an object leave the cluster, or when
  // its bytes will never read back: kept, it would stay at the head of the
  // tier's recency order, the first victim of every eviction and refused by
  // each, so the tier could never make room again.
  if (moved.error() == ErrorCode::kNoAvailableHandle) return DropObject(key, tier);
  if (Damaged(key)) return DropObject(key, tier, DropReason::kDamaged);
  if (moved.error() == ErrorCode::kNotOwner) {
    std::lock_guard lock(ctx_.mu);
    return table_.Find(key) == nullptr;  // TransferOut erased a copy not ours: its space is free
  }
  return false;
}

ObjectOptions Mover::OptionsForCopyLocked(const Object& object, SteadyClock::time_point now) {
  ObjectOptions options = object.options;
  if (!options.soft_pin) return options;
  // What is left of the soft pin, not a fresh one: a move is no use of the
  // object, so a pin that ended stays ended (1 ms at least: 0 would mean
  // the receiver's default).
  if (object.soft_pin_until <= now) {
    options.soft_pin = false;
  } else {
    options.soft_pin_ttl =
        std::max(Millis(1), std::chrono::ceil<Millis>(object.soft_pin_until - now));
  }
  return options;
}

Result<void> Mover::TransferOut(const std::string& key, const std::string& target, bool dram_only) {
  AllocationPtr source;
  uint64_t object_id, version, size;
  ObjectOptions object_options;
  {
    std::lock_guard lock(ctx_.mu);
    Object* object = table_.Find(key);
    if (object == nullptr) return Err(ErrorCode::kObjectNotFound);
    // Only a complete, owned object that nothing else works on leaves, and
    // hard-pinned objects never leave their node.
    // Nor one whose commit's claim is out (BackendContext::claiming), even
    // for a prefetch: its swap could reach the master before the claim.
    if (object->state() != ObjectState::kComplete || !object->published() || object->moving() ||
        object->options.hard_pin || object->placement_held_until > SteadyClock::now() ||
        ctx_.ClaimingLocked(key)) {
      return Err(ErrorCode::kObjectReplicaBusy);
    }
    // An eviction (no target) takes only what may be evicted now; a
    // prefetch for a client elsewhere moves even a leased object to it.
    if (target.empty() && !EvictableNowLocked(*object)) return Err(ErrorCode::kObjectReplicaBusy);
    table_.SetState(*object, ObjectState::kTransferring);
    source = object->allocation;
    object_id = object->id;
    version = object->version;
    size = object->size;
    object_options = OptionsForCopyLocked(*object, SteadyClock::now());
  }
  // `source` keeps the space alive (and unmoved: kTransferring) until the
  // transfer returns, so its host address stays valid throughout.
  ObjectSource bytes{.read =
                         [&source, this](uint64_t offset, std::span<std::byte> out) {
                           auto read = source->tier->Read(source->location, offset, out);
                           if (read) ctx_.CountRead(source->tier, out.size());
                           return read;
                         },
                     .host_address = source->tier->HostAddress(source->location)};
  // Before the transfer: a registration while it runs counts as one since.
  const uint64_t registrations = ctx_.directory->registrations();
  auto moved = ctx_.peers->Transfer(key, size, version, object_options, bytes, target, dram_only);

  std::lock_guard lock(ctx_.mu);
  Object* object = table_.FindSame(key, object_id);
  if (!moved) {
    if (object == nullptr) return Err(moved.error());
    // The master refused the hand-over because another node owns the key:
    // this copy is not the key's any more and goes, as a refused release's
    // does (DropObject). One the master does not know (kObjectNotFound) is
    // kept: a master that restarted, or forgot this node, learns its keys
    // from an announcement that may not have reached the key yet.
    if (moved.error() == ErrorCode::kNotOwner) {
      table_.Erase(*object);
      MC_LOG_WARN("erased a copy the master says is not this node's key={} error={}", key,
                  ToString(moved.error()));
      return Err(moved.error());
    }
    table_.SetState(*object, ObjectState::kComplete);
    if (moved.error() == ErrorCode::kRpcTimeout && unsettled_.size() < kMaxUnsettled) {
      unsettled_.push_back({.key = key, .object_id = object_id, .registrations = registrations});
    }
    return Err(moved.error());
  }
  // The master names the new owner: only now may this copy go (docs/design.md,
  // "Inter-node eviction", step 4). Readers still copying keep its bytes alive.
  if (object != nullptr) table_.Erase(*object);
  RememberMoveLocked(key, *moved);
  ctx_.counters.moved_out.fetch_add(1, std::memory_order_relaxed);
  ctx_.counters.moved_bytes.fetch_add(size, std::memory_order_relaxed);
  MC_LOG_DEBUG("moved out key={} to={} size={}", key, *moved, size);
  return {};
}

bool Mover::Damaged(const std::string& key) const {
  std::lock_guard lock(ctx_.mu);
  const Object* object = table_.Find(key);
  return object != nullptr && DamagedLocked(*object);
}

bool Mover::DropIfDamaged(const std::string& key) {
  size_t tier;
  {
    std::lock_guard lock(ctx_.mu);
    const Object* object = table_.Find(key);
    if (object == nullptr || !DamagedLocked(*object)) return false;
    tier = object->tier();
  }
  return DropObject(key, tier, DropReason::kDamaged);
}

bool Mover::DamagedLocked(const Object& object) {
  return object.allocation != nullptr &&
         object.allocation->tier->Damaged(object.allocation->location);
}

bool Mover::DropObject(const std::string& key, size_t tier, DropReason reason) {
  uint64_t object_id;
  {
    std::lock_guard lock(ctx_.mu);
    Object* object = table_.Find(key);
    if (object == nullptr || object->tier() != tier) return false;
    // A damaged object goes even while leased (a failed read leases it too)
    // or pinned: nothing of it can be served any more.
    // Damaged still, checked under this hold: a write (a same-size upsert
    // in place) may have given it healthy bytes since it was found damaged.
    const bool may_go = reason == DropReason::kDamaged
                            ? object->state() == ObjectState::kComplete && object->published() &&
                                  !object->moving() && !ctx_.ClaimingLocked(key) &&
                                  DamagedLocked(*object)
                            : EvictableNowLocked(*object);
    if (!may_go) return false;
    // Keeps other evictors off it while we ask the master.
    table_.SetMove(*object, MoveState::kDropping);
    object_id = object->id;
  }
  auto released = ctx_.directory->Release(key);
  std::unique_lock lock(ctx_.mu);
  Object* object = table_.FindSame(key, object_id);
  if (object == nullptr) return false;
  if (!released && released.error() != ErrorCode::kObjectNotFound &&
      released.error() != ErrorCode::kNotOwner) {
    // The master may still point here: keep the data (put back to idle by
    // ClaimKeptCopies).
    MC_LOG_WARN("drop failed key={} error={}", key, ToString(released.error()));
    lock.unlock();
    ClaimKeptCopies({{.key = key, .object_id = object_id, .dropping = true}});
    return false;
  }
  table_.Erase(*object);
  ctx_.counters.tier[tier].evictions.fetch_add(1, std::memory_order_relaxed);
  uint64_t dropped = ctx_.counters.dropped.fetch_add(1, std::memory_order_relaxed) + 1;
  // Data loss: the cluster no longer holds this key.
  if (reason == DropReason::kDamaged) {
    MC_LOG_ERROR("dropped key={} tier={} reason=damaged dropped_total={}", key,
                 ctx_.tiers[tier]->name(), dropped);
  } else {
    MC_LOG_WARN("dropped key={} tier={} reason=no_space dropped_total={}", key,
                ctx_.tiers[tier]->name(), dropped);
  }
  return true;
}

Result<void> Mover::CopyBetweenTiers(const Allocation& from, const Allocation& to, uint64_t size,
                                     BackendContext* ctx) {
  // Where a side lies in host memory (the DRAM arena) the other tier reads
  // into it or writes from it directly: no bounce buffer, and a VRAM tier
  // that registered the arena moves the bytes in one DMA.
  const std::byte* source = from.tier->HostAddress(from.location);
  std::byte* target = source == nullptr ? to.tier->WritableHostAddress(to.location) : nullptr;
  std::vector<std::byte> buffer;
  if (source == nullptr && target == nullptr) buffer.resize(std::min(size, kCopyBufferBytes));
  for (uint64_t offset = 0; offset < size; offset += kCopyBufferBytes) {
    const uint64_t n = std::min(kCopyBufferBytes, size - offset);
    if (source != nullptr) {
      if (auto written = to.tier->Write(to.location, offset, {source + offset, n}); !written) {
        return written;
      }
    } else if (target != nullptr) {
      if (auto read = from.tier->Read(from.location, offset, {target + offset, n}); !read) {
        return read;
      }
    } else {
      auto chunk = std::span(buffer.data(), n);
      if (auto read = from.tier->Read(from.location, offset, chunk); !read) return read;
      if (auto written = to.tier->Write(to.location, offset, chunk); !written) return written;
    }
    if (ctx != nullptr) {
      ctx->CountRead(from.tier, n);
      ctx->CountWritten(to.tier, n);
    }
  }
  return {};
}

uint64_t Mover::EvictTier(size_t t, double target_ratio) {
  CacheTier& tier = *ctx_.tiers[t];
  uint64_t before = tier.used();
  auto target = static_cast<uint64_t>(target_ratio * tier.capacity());
  if (before <= target) return 0;
  for (const std::string& key : PickVictims(t, before - target)) {
    if (tier.used() <= target) break;
    EvictOne(key, t, /*allow_drop=*/true);
  }
  uint64_t after = tier.used();
  return before > after ? before - after : 0;
}

Mover::MoveTotals Mover::ReadMoveTotals() const {
  MoveTotals totals;
  for (size_t t = 0; t < ctx_.tiers.size(); ++t) {
    const TierCounters& c = ctx_.counters.tier[t];
    totals.promotions.push_back(c.promotions_in.load(std::memory_order_relaxed));
    totals.demotions.push_back(c.demotions_out.load(std::memory_order_relaxed));
    totals.evictions.push_back(c.evictions.load(std::memory_order_relaxed));
  }
  totals.moved_out = ctx_.counters.moved_out.load(std::memory_order_relaxed);
  totals.dropped = ctx_.counters.dropped.load(std::memory_order_relaxed);
  totals.moved_bytes = ctx_.counters.moved_bytes.load(std::memory_order_relaxed);
  return totals;
}

void Mover::LogMoveSummary() {
  MoveTotals now = ReadMoveTotals();
  if (logged_.promotions.size() != now.promotions.size()) {
    logged_.promotions.assign(now.promotions.size(), 0);
    logged_.demotions.assign(now.promotions.size(), 0);
    logged_.evictions.assign(now.promotions.size(), 0);
  }
  uint64_t moves = (now.moved_out - logged_.moved_out) + (now.dropped - logged_.dropped);
  std::string per_tier;
  for (size_t t = 0; t < now.promotions.size(); ++t) {
    uint64_t in = now.promotions[t] - logged_.promotions[t];
    uint64_t down = now.demotions[t] - logged_.demotions[t];
    uint64_t out = now.evictions[t] - logged_.evictions[t];
    moves += in + down;
    if (in + down + out == 0) continue;
    per_tier += fmt::format(" {}=promoted_in:{},demoted_out:{},evicted:{}", ctx_.tiers[t]->name(),
                            in, down, out);
  }
  if (moves == 0 && per_tier.empty()) return;
  MC_LOG_INFO("maintenance moves={} bytes={} moved_out={} dropped={}{}", moves,
              now.moved_bytes - logged_.moved_bytes, now.moved_out - logged_.moved_out,
              now.dropped - logged_.dropped, per_tier);
  logged_ = std::move(now);
}

void Mover::DemoteAboveWatermarks() {
  // The last tier has nowhere below it: it evicts only when an allocation
  // needs the space, never ahead of time.
  for (size_t t = 0; t < ctx_.last_tier(); ++t) {
    CacheTier& tier = *ctx_.tiers[t];
    auto low = static_cast<uint64_t>(ctx_.options.low_watermark * tier.capacity());
    // Read once: frees meanwhile could take a second reading below `low`.
    uint64_t used = tier.used();
    bool above_high = AboveHighWatermark(tier, used);
    if (above_high) {
      for (const std::string& key : PickVictims(t, used - std::min(used, low))) {
        if (tier.used() <= low) break;
        MoveObject(key, t + 1, ctx_.last_tier(), /*allow_drop=*/true);
      }
    }
    std::lock_guard lock(ctx_.mu);
    came_short_[t] = above_high && tier.used() > low;
  }
}

bool Mover::AboveHighWatermark(const CacheTier& tier, uint64_t used) const {
  return used > ctx_.options.high_watermark * tier.capacity();
}

bool Mover::AnyTierAboveHighWatermark() const {
  for (size_t t = 0; t < ctx_.last_tier(); ++t) {
    if (AboveHighWatermark(*ctx_.tiers[t], ctx_.tiers[t]->used())) return true;
  }
  return false;
}

bool Mover::DemotionDueLocked() const {
  for (size_t t = 0; t < ctx_.last_tier(); ++t) {
    if (!came_short_[t] && AboveHighWatermark(*ctx_.tiers[t], ctx_.tiers[t]->used())) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Promotion and prefetch

void Mover::Promote(const PromotionTask& task) {
  size_t tier;
  {
    std::lock_guard lock(ctx_.mu);
    Object* object = table_.Find(task.key);
    if (object == nullptr) {
      if (task.prefetch) ctx_.counters.prefetch_failed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    object->promotion_queued = false;
    tier = object->tier();
  }
  if (tier == 0) {
    // Rewritten into the top tier since it was queued: a started prefetch
    // still ends counted, so started = succeeded + failed holds.
    if (task.prefetch) ctx_.counters.prefetch_succeeded.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A prefetch for a client on another node moves the object into that
  // node's DRAM, ownership included; if that node has no room, it comes up
  // here instead.
  if (task.prefetch && !task.requester_node.empty() && ctx_.peers != nullptr) {
    if (TransferOut(task.key, task.requester_node, /*dram_only=*/true)) {
      ctx_.counters.prefetch_succeeded.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  // A promotion may push colder objects down, but never out of the node. A
  // prefetch brings the object to DRAM (docs/design.md, "Exist and prefetch"),
  // not above it.
  size_t top = task.prefetch ? std::min(PrefetchTier(), tier - 1) : 0;
  bool promoted = MoveObject(task.key, top, tier - 1, /*allow_drop=*/false);
  if (!task.prefetch) return;
  auto& counter = promoted ? ctx_.counters.prefetch_succeeded : ctx_.counters.prefetch_failed;
  counter.fetch_add(1, std::memory_order_relaxed);
  if (!promoted) MC_LOG_WARN("prefetch failed key={} reason=no_dram_room", task.key);
}

size_t Mover::PrefetchTier() const {
  for (size_t t = 0; t < ctx_.tiers.size(); ++t) {
    if (ctx_.tiers[t]->kind() == TierKind::kDram) return t;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Adopted objects and hand-over memory

Result<void> Mover::AdoptAbort(const std::string& key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::lock_guard lock(ctx_.mu);
  Object* object = table_.Find(key);
  if (object == nullptr) return Err(ErrorCode::kObjectNotFound);
  if (!object->adopted()) return Err(ErrorCode::kInvalidParams);
  table_.Erase(*object);
  return {};
}

void Mover::ClaimKeptCopies(const std::vector<KeptCopy>& kept) {
  if (kept.empty()) return;
  std::vector<std::string> keys;
  keys.reserve(kept.size());
  for (const KeptCopy& copy : kept) keys.push_back(copy.key);
  const uint64_t registrations = ctx_.directory->registrations();
  std::vector<Result<void>> claimed = ctx_.directory->ClaimMany(keys);
  std::vector<std::string> gone;  // claimed, but nothing of the key is here any more
  {
    std::lock_guard lock(ctx_.mu);
    // A registration since the claims were sent may have purged them, and
    // released these copies as not held (they are on their way out): each
    // is claimed again, as one whose claim went unanswered.
    const bool registered_since = ctx_.directory->registrations() != registrations;
    for (size_t i = 0; i < kept.size(); ++i) {
      Object* object = table_.FindSame(kept[i].key, kept[i].object_id);
      if (object == nullptr) {
        if (claimed[i] && table_.Find(kept[i].key) == nullptr) gone.push_back(kept[i].key);
        continue;
      }
      if (!claimed[i] && claimed[i].error() == ErrorCode::kObjectAlreadyExists) {
        MC_LOG_WARN("erased a copy kept after a failed release: another node owns key={}",
                    kept[i].key);
        table_.Erase(*object);
        continue;
      }
      // Not answered: the master may have forgotten the key (the release
      // landed) or not; the copy stays on its way out, still readable, and
      // is claimed again on the next maintenance pass (RetryKeptCopyClaims).
      if ((registered_since || (!claimed[i] && Unanswered(claimed[i].error()))) &&
          retry_claims_.size() < kMaxRetryClaims) {
        retry_claims_.push_back(kept[i]);
        continue;
      }
      // Claimed: the master names this node, as before. Refused otherwise
      // (its key table full, say), or past the bound: nothing better to do
      // now (the next registration announces it).
      if (kept[i].dropping) {
        table_.SetMove(*object, MoveState::kIdle);
      } else {
        table_.SetState(*object, ObjectState::kComplete);
      }
    }
  }
  if (!gone.empty()) ctx_.directory->ReleaseMany(gone);
}

void Mover::RetryKeptCopyClaims() {
  std::vector<KeptCopy> retry;
  {
    std::lock_guard lock(ctx_.mu);
    retry.swap(retry_claims_);
  }
  ClaimKeptCopies(retry);
}

void Mover::SettleHandOvers() {
  std::vector<UnsettledHandOver> asking;
  {
    std::lock_guard lock(ctx_.mu);
    asking.swap(unsettled_);
  }
  bool master_answers = true;
  for (UnsettledHandOver& hand_over : asking) {
    // Once the master did not answer, the rest wait for the next pass rather
    // than each waiting out a timeout here, holding up the other maintenance.
    Result<bool> owned = Err(ErrorCode::kRpcTimeout);
    if (master_answers) owned = ctx_.directory->OwnedHere(hand_over.key);
    // No owner: removed since, unless the master forgot this node (it
    // restarted, or declared us dead) and has not had the announcement.
    const bool unowned = !owned && owned.error() == ErrorCode::kObjectNotFound;
    const bool registered_since = ctx_.directory->registrations() != hand_over.registrations;
    Result<bool> removed = false;
    if (unowned && !registered_since) removed = ctx_.directory->UnownedWhileHere(hand_over.key);
    if (!removed && Unanswered(removed.error())) master_answers = false;
    std::lock_guard lock(ctx_.mu);
    Object* object = table_.FindSame(hand_over.key, hand_over.object_id);
    if (object == nullptr) continue;
    // Ours (the swap was not applied), or unknown to a master that forgot
    // this node and since had its registration: stays.
    if ((owned && *owned) || (unowned && registered_since)) continue;
    // Only a master that names another node, or none while it knew this
    // node throughout, lets the copy go; any other answer (away, a standby,
    // a failure, a master that does not know this node now) is asked again
    // on the next pass.
    const bool gone = owned ? !*owned : (removed && *removed);
    if (!gone || object->state() != ObjectState::kComplete || object->moving()) {
      if (!owned && Unanswered(owned.error())) master_answers = false;
      unsettled_.push_back(std::move(hand_over));
      continue;
    }
    if (owned) {
      MC_LOG_INFO("erased a copy whose hand-over the master applied after all key={}",
                  hand_over.key);
      ctx_.counters.moved_out.fetch_add(1, std::memory_order_relaxed);
      ctx_.counters.moved_bytes.fetch_add(object->size, std::memory_order_relaxed);
    } else {
      MC_LOG_INFO(
          "erased the copy of an unsettled hand-over whose key no node owns any more key={}",
          hand_over.key);
    }
    table_.Erase(*object);
  }
}

void Mover::NoteAdoptedLocked(const std::string& key, uint64_t object_id,
                              const std::string& sender) {
  unconfirmed_adopts_.push_back({.key = key,
                                 .object_id = object_id,
                                 .sender = sender,
                                 .registrations = ctx_.directory->registrations()});
}

Result<void> Mover::ConfirmSoonLocked(const std::string& key) {
  const Object* object = table_.Find(key);
  if (object == nullptr || !object->adopted()) return Err(ErrorCode::kObjectNotFound);
  if (confirm_soon_.size() >= kMaxConfirmSoon) return {};
  // No sender: the master named this node, so no owner there now would not
  // mean the key was removed (RemovedSinceSent) and the claim decides.
  confirm_soon_.push_back({.key = key,
                           .object_id = object->id,
                           .registrations = ctx_.directory->registrations(),
                           .soon = true});
  return {};
}

void Mover::ConfirmAdoptedObjects() {
  std::vector<UnconfirmedAdopt> due;
  {
    std::lock_guard lock(ctx_.mu);
    for (UnconfirmedAdopt& adopt : confirm_soon_) {
      const Object* object = table_.FindSame(adopt.key, adopt.object_id);
      if (object != nullptr && object->adopted()) due.push_back(std::move(adopt));
    }
    confirm_soon_.clear();
    auto deadline = SteadyClock::now() - ctx_.options.adopt_confirm_delay;
    while (!unconfirmed_adopts_.empty()) {
      const UnconfirmedAdopt& next = unconfirmed_adopts_.front();
      Object* object = table_.FindSame(next.key, next.object_id);
      bool waiting = object != nullptr && object->adopted();
      if (waiting && object->adopted_at > deadline) break;  // and so is every later one
      if (waiting) due.push_back(std::move(unconfirmed_adopts_.front()));
      unconfirmed_adopts_.pop_front();
    }
  }
  for (size_t i = 0; i < due.size(); ++i) {
    if (ConfirmAdopted(std::move(due[i]))) continue;
    // The master did not answer: the rest wait for the next pass rather
    // than each waiting out a timeout here, holding up the other
    // maintenance (SettleHandOvers does the same). A sender's request to
    // confirm soon is let go: the copy keeps its own turn.
    std::lock_guard lock(ctx_.mu);
    for (size_t j = i + 1; j < due.size(); ++j) {
      if (!due[j].soon) unconfirmed_adopts_.push_back(std::move(due[j]));
    }
    break;
  }
}

std::optional<bool> Mover::RemovedSinceSent(const UnconfirmedAdopt& adopt, bool* unanswered) {
  *unanswered = false;
  if (adopt.sender.empty()) return false;
  const uint64_t registrations = ctx_.directory->registrations();
  // Registered again since: the master may have restarted after the swap
  // named this node and the sender let its copy go, and not know the key.
  if (registrations != adopt.registrations) return false;
  auto removed = ctx_.directory->RemovedSinceSent(adopt.key, adopt.sender);
  if (!removed) {
    const ErrorCode error = removed.error();
    // Only no answer at all ends the pass's questions: a shard that forgot
    // this node says nothing of the other shards' keys.
    *unanswered = Unanswered(error);
    if (*unanswered || error == ErrorCode::kNodeNotFound) return std::nullopt;
    return false;  // the claim decides, as before the sender was known
  }
  if (ctx_.directory->registrations() != registrations) return std::nullopt;
  return *removed;
}

bool Mover::ConfirmAdopted(UnconfirmedAdopt adopt) {
  const std::string& key = adopt.key;
  {
    // Confirmed already (queued both soon and in turn), aborted or replaced.
    std::lock_guard lock(ctx_.mu);
    const Object* object = table_.FindSame(key, adopt.object_id);
    if (object == nullptr || !object->adopted()) return true;
  }
  bool unanswered = false;
  std::optional<bool> removed = RemovedSinceSent(adopt, &unanswered);
  if (removed.value_or(false)) {
    std::lock_guard lock(ctx_.mu);
    Object* object = table_.FindSame(key, adopt.object_id);
    if (object == nullptr || !object->adopted()) return true;
    MC_LOG_INFO("dropping adopted copy of a key removed since it was sent key={} sender={}", key,
                adopt.sender);
    table_.Erase(*object);
    return true;
  }
  if (!removed.has_value()) {
    std::lock_guard lock(ctx_.mu);
    if (!adopt.soon) unconfirmed_adopts_.push_back(std::move(adopt));
    return !unanswered;
  }
  // Claim is idempotent for the owner: it succeeds if the sender's
  // UpdateOwner named us, or if nobody owns the key any more (sender died
  // and was purged); it fails if the sender still owns it (its swap failed).
  const uint64_t registrations = ctx_.directory->registrations();
  auto claimed = ctx_.directory->Claim(key);
  const bool owned_elsewhere = !claimed && claimed.error() == ErrorCode::kObjectAlreadyExists;
  // The sender may still own the key because its swap has not reached the
  // master yet (a slow master, a short --adopt-confirm-delay-ms): dropping
  // the copy now would leave the master naming this node, once the swap
  // lands, for a key it no longer has. Such a copy waits another delay, a
  // few times at most; the sender's AdoptAbort drops it sooner.
  bool sender_owns = false;
  if (owned_elsewhere && !adopt.soon && !adopt.sender.empty() &&
      adopt.sender_waits < kMaxSenderWaits) {
    auto owner = ctx_.directory->OwnerOf(key);
    sender_owns = owner && *owner == adopt.sender;
  }
  std::lock_guard lock(ctx_.mu);
  // The master answered, and not with an owner: no room for the key in its
  // table (so it names no node), or a claim it can never grant.
  const bool refused = !claimed && (claimed.error() == ErrorCode::kNoAvailableHandle ||
                                    claimed.error() == ErrorCode::kInvalidKey ||
                                    claimed.error() == ErrorCode::kInvalidParams);
  if (refused) ++adopt.refusals;
  const bool answered = claimed || !Unanswered(claimed.error());
  // A confirmation its sender asked for that the master does not grant is
  // stale or early: the copy keeps its own turn in the queue.
  if (adopt.soon && !claimed) return answered;
  Object* object = table_.FindSame(key, adopt.object_id);
  if (sender_owns && object != nullptr && object->adopted()) {
    ++adopt.sender_waits;
    object->adopted_at = SteadyClock::now();
    unconfirmed_adopts_.push_back(std::move(adopt));
    return answered;
  }
  // Retried later while the master is away, and after this node registered
  // again since the claim was sent: that registration may have purged the
  // claim and listed the keys to announce without this one. A refused claim
  // is retried a few times (the master's table may gain room), no more.
  if (ctx_.directory->registrations() != registrations ||
      (!claimed && !owned_elsewhere && adopt.refusals < kMaxConfirmRefusals)) {
    if (!adopt.soon) unconfirmed_adopts_.push_back(std::move(adopt));
    return answered;
  }
  if (object == nullptr) return answered;
  if (refused) {
    MC_LOG_WARN("dropping adopted copy the master would not confirm key={} error={} tries={}", key,
                ToString(claimed.error()), adopt.refusals);
    table_.Erase(*object);
  } else if (claimed) {
    table_.SetState(*object, ObjectState::kComplete);
    table_.MarkPublished(*object);
    ForgetMoveLocked(key);  // owned here again
  } else {
    MC_LOG_INFO("dropping adopted copy owned elsewhere key={}", key);
    table_.Erase(*object);
  }
  return answered;
}

std::string Mover::MovedToLocked(const std::string& key) const {
  auto it = moved_to_.find(key);
  return it == moved_to_.end() ? std::string() : it->second;
}

void Mover::RememberMoveLocked(const std::string& key, const std::string& node) {
  // A bounded memory of recent hand-overs, so a stale client gets a hint
  // instead of a second master round trip.
  constexpr size_t kMaxRemembered = 65536;
  if (moved_to_.insert_or_assign(key, node).second) moved_order_.push_back(key);
  while (moved_order_.size() > kMaxRemembered) {
    moved_to_.erase(moved_order_.front());
    moved_order_.pop_front();
  }
}

}  // namespace mooncake
