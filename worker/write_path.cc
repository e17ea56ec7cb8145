#include "worker/write_path.h"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "common/log.h"

namespace mooncake {
namespace {

// The most writes of a batch that one step handles in one hold of ctx_.mu,
// so that readers never wait behind a whole large batch.
constexpr size_t kMaxWritesPerHold = 64;

// Runs step(i) for every i in [0, n) under `mu`, taken afresh every
// kMaxWritesPerHold steps.
template <typename Step>
void ForEachLocked(std::mutex& mu, size_t n, Step step) {
  for (size_t begin = 0; begin < n; begin += kMaxWritesPerHold) {
    std::lock_guard lock(mu);
    for (size_t i = begin; i < std::min(n, begin + kMaxWritesPerHold); ++i) step(i);
  }
}

}  // namespace

bool WrittenRanges::Add(uint64_t offset, uint64_t length) {
  if (length == 0) return true;
  uint64_t begin = offset;
  uint64_t end = offset + length;
  // Merge every range that overlaps or touches [begin, end).
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
  auto first = it;
  while (it != ranges_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    ++it;
  }
  size_t merged = static_cast<size_t>(std::distance(first, it));
  if (merged == 0 && ranges_.size() >= kMaxRanges) return false;
  ranges_.erase(first, it);
  ranges_.emplace(begin, end);
  return true;
}

bool WrittenRanges::Covers(uint64_t size) const {
  if (size == 0) return true;
  return ranges_.size() == 1 && ranges_.begin()->first == 0 && ranges_.begin()->second >= size;
}

WritePath::WritePath(BackendContext& ctx, ObjectTable& table, Mover& mover, WorkQueue& work)
    : ctx_(ctx), table_(table), mover_(mover), work_(work) {}

template <typename Step>
auto WritePath::LockedThenRelease(Step&& step) {
  std::vector<std::string> release;
  auto result = [&] {
    std::lock_guard lock(ctx_.mu);
    return step(release);
  }();
  ReleaseAbandonedOwnership(release);
  return result;
}

// ---------------------------------------------------------------------------
// Two-phase writes
//
// A write goes through six steps: Reserve (under ctx_.mu), find space
// (outside it: it may evict), Place (under it), copy the bytes (outside),
// Commit (under it, persisting outside) and Publish (claim outside, finish
// under it). The *Locked steps are shared by the two-phase calls (Start,
// Chunk, End), which lock for each step, and whole values (WriteWhole,
// WriteWholeMany, through WriteWave), which lock once per step for up to
// kMaxWritesPerHold writes: with many writer threads, a batch of 16 keys
// written one by one took ctx_.mu 112 times and spent a sixth of the
// worker's CPU waiting.

Result<void> WritePath::WriteWhole(const std::string& key, std::string_view value,
                                   const ObjectOptions& options, WriteMode mode) {
  const WholeWrite write{key, value, options, mode};
  Result<void> result;
  WriteWave(std::span(&write, 1), std::span(&result, 1));
  return result;
}

std::vector<Result<void>> WritePath::WriteWholeMany(const std::vector<WholeWrite>& writes) {
  std::vector<Result<void>> results(writes.size());
  if (KeysDistinct(writes)) {
    WriteWave(writes, results);
    return results;
  }
  // A key comes twice. Each wave holds distinct keys, so that a later write
  // of a key meets the earlier one complete, as a later call would.
  for (size_t begin = 0; begin < writes.size();) {
    std::unordered_set<std::string_view> keys;
    size_t end = begin;
    while (end < writes.size() && keys.insert(writes[end].key).second) ++end;
    WriteWave(std::span(writes).subspan(begin, end - begin),
              std::span(results).subspan(begin, end - begin));
    begin = end;
  }
  return results;
}

bool WritePath::KeysDistinct(std::span<const WholeWrite> writes) {
  // One sorted array, where a set of the keys cost an allocation per key.
  std::vector<std::string_view> keys;
  keys.reserve(writes.size());
  for (const WholeWrite& w : writes) keys.push_back(w.key);
  std::ranges::sort(keys);
  return std::ranges::adjacent_find(keys) == keys.end();
}

void WritePath::WriteWave(std::span<const WholeWrite> writes, std::span<Result<void>> results) {
  std::vector<std::optional<Reservation>> reserved = ReserveWave(writes, results);
  for (size_t i = 0; i < writes.size(); ++i) {
    if (!reserved[i]) continue;
    if (auto copied = CopyWhole(*reserved[i], writes[i].value); !copied) {
      results[i] = copied;
      reserved[i].reset();
    }
  }
  PublishWave(CommitWave(writes, reserved, results), results);
}

std::vector<std::optional<WritePath::Reservation>> WritePath::ReserveWave(
    std::span<const WholeWrite> writes, std::span<Result<void>> results) {
  const size_t n = writes.size();
  std::vector<std::optional<Reservation>> reserved(n);
  ReplacedSpace replaced;  // see ReplacedSpace for when each part is freed
  for (size_t i = 0; i < n; ++i) {
    const WholeWrite& w = writes[i];
    if (auto valid = CheckWrite(w.key, w.value.size(), w.options); !valid) results[i] = valid;
  }
  ForEachLocked(ctx_.mu, n, [&](size_t i) {
    if (!results[i]) return;
    const WholeWrite& w = writes[i];
    auto reservation = ReserveLocked(w.key, w.value.size(), w.options, w.mode, {}, false, replaced);
    if (reservation) {
      reserved[i] = std::move(*reservation);
    } else {
      results[i] = Err(reservation.error());
    }
  });
  replaced.free_now.clear();
  std::vector<std::optional<SpaceFound>> found(n);
  for (size_t i = 0; i < n; ++i) {
    if (reserved[i] && !reserved[i]->allocation) {
      found[i] = FindSpace(writes[i].value.size(), writes[i].options, writes[i].mode, false);
    }
  }
  replaced.free_after.clear();
  std::vector<std::string> release_keys;
  ForEachLocked(ctx_.mu, n, [&](size_t i) {
    if (!found[i]) return;
    auto placed = PlaceLocked(reserved[i]->handle, writes[i].key, *found[i], release_keys);
    if (placed) {
      reserved[i]->allocation = std::move(*placed);
    } else {
      results[i] = Err(placed.error());
      reserved[i].reset();
    }
  });
  ReleaseAbandonedOwnership(release_keys);
  return reserved;
}

std::vector<std::optional<WritePath::CommittedWrite>> WritePath::CommitWave(
    std::span<const WholeWrite> writes, std::span<const std::optional<Reservation>> reserved,
    std::span<Result<void>> results) {
  const size_t n = writes.size();
  std::vector<std::optional<Committing>> committing(n);
  ForEachLocked(ctx_.mu, n, [&](size_t i) {
    if (!reserved[i]) return;
    auto begun = BeginCommitLocked(reserved[i]->handle, writes[i].value.size());
    if (begun) {
      committing[i] = std::move(*begun);
    } else {
      results[i] = Err(begun.error());
    }
  });
  for (auto& c : committing) {
    if (c) MakeDurable(*c);
  }
  std::vector<std::optional<CommittedWrite>> committed(n);
  std::vector<std::string> release;
  ForEachLocked(ctx_.mu, n, [&](size_t i) {
    if (!committing[i]) return;
    auto done = EndCommitLocked(std::move(*committing[i]), release);
    if (!done) {
      results[i] = Err(done.error());
    } else if (*done) {
      committed[i] = std::move(**done);
    }
  });
  ReleaseAbandonedOwnership(release);
  return committed;
}

void WritePath::PublishWave(std::vector<std::optional<CommittedWrite>> committed,
                            std::span<Result<void>> results) {
  // One claim call for the wave instead of one round trip per object.
  // The keys move to the claim and back: a copy of each cost an allocation.
  std::vector<std::string> keys;
  std::vector<size_t> claim_of(committed.size(), SIZE_MAX);
  for (size_t i = 0; i < committed.size(); ++i) {
    if (!committed[i] || !committed[i]->write.NeedsClaim()) continue;
    claim_of[i] = keys.size();
    keys.push_back(std::move(committed[i]->write.key));
  }
  // A lone claim goes through Claim, which group-commits it with the claims
  // of concurrent puts; a batch's claims are one call of their own.
  const uint64_t registrations = ctx_.directory->registrations();
  std::vector<Result<void>> claims = keys.size() == 1
                                         ? std::vector<Result<void>>{ctx_.directory->Claim(keys[0])}
                                         : ctx_.directory->ClaimMany(keys);
  for (size_t i = 0; i < committed.size(); ++i) {
    if (claim_of[i] != SIZE_MAX) committed[i]->write.key = std::move(keys[claim_of[i]]);
  }
  std::vector<std::string> release;
  std::vector<size_t> claim_again;
  ForEachLocked(ctx_.mu, committed.size(), [&](size_t i) {
    if (!committed[i]) return;
    if (claim_of[i] == SIZE_MAX) {
      results[i] = FinishPublishLocked(committed[i]->write, committed[i]->version, {}, release);
    } else if (auto published = PublishUnlessRegisteredLocked(registrations, *committed[i],
                                                              claims[claim_of[i]], release)) {
      results[i] = *published;
    } else {
      claim_again.push_back(i);
    }
  });
  ReleaseAbandonedOwnership(release);
  for (size_t i : claim_again) results[i] = ClaimThenPublish(*committed[i]);
}

std::optional<Result<void>> WritePath::PublishUnlessRegisteredLocked(
    uint64_t registrations, const CommittedWrite& committed, const Result<void>& claimed,
    std::vector<std::string>& release) {
  if (ctx_.directory->registrations() != registrations) return std::nullopt;
  return FinishPublishLocked(committed.write, committed.version, claimed, release);
}

Result<void> WritePath::ClaimThenPublish(const CommittedWrite& committed) {
  // Registrations come one at a time and seconds apart, so one more round
  // nearly always settles it. Past the last, the master may not know the
  // key: the put fails as one whose claim went unanswered.
  constexpr int kMaxClaimRounds = 3;
  for (int round = 1;; ++round) {
    const uint64_t registrations = ctx_.directory->registrations();
    Result<void> claimed = ctx_.directory->Claim(committed.write.key);
    auto published = LockedThenRelease([&](std::vector<std::string>& release) {
      if (round < kMaxClaimRounds) {
        return PublishUnlessRegisteredLocked(registrations, committed, claimed, release);
      }
      if (ctx_.directory->registrations() != registrations) claimed = Err(ErrorCode::kRpcFail);
      return std::optional(
          FinishPublishLocked(committed.write, committed.version, claimed, release));
    });
    if (published) return *published;
    MC_LOG_INFO("claiming again after this node registered key={}", committed.write.key);
  }
}

bool WritePath::TryWriteWholeAsync(const std::string& key, std::string_view value,
                                   const ObjectOptions& options,
                                   std::function<void(Result<void>)> done) {
  if (options.hard_pin) return false;
  const size_t first = options.preferred_tier >= 0 ? options.preferred_tier : 0;
  if (first >= ctx_.tiers.size() || ctx_.tiers[first]->kind() != TierKind::kDram) return false;
  if (auto valid = CheckWrite(key, value.size(), options); !valid) {
    done(valid);
    return true;
  }
  // Space first, and only what is free: making room would evict, which
  // waits for slower tiers. Freed again (AllocationPtr) if the key is taken.
  CacheTier& tier = *ctx_.tiers[first];
  auto location = tier.Allocate(value.size());
  if (!location) return false;
  const SpaceFound found = std::make_pair(first, std::make_shared<Allocation>(&tier, *location));
  Result<Reservation> reserved = Err(ErrorCode::kInternalError);
  {
    ReplacedSpace replaced;  // a create replaces nothing
    std::vector<std::string> release_keys;
    std::lock_guard lock(ctx_.mu);
    reserved = ReserveLocked(key, value.size(), options, WriteMode::kCreate, {},
                             /*direct=*/false, replaced);
    if (reserved) {
      // Cannot fail: the space is found and the write was reserved just
      // now, in this hold of ctx_.mu.
      auto placed = PlaceLocked(reserved->handle, key, found, release_keys);
      MC_DCHECK(placed.has_value() && release_keys.empty());
      if (placed) {
        reserved->allocation = std::move(*placed);
      } else {
        reserved = Err(placed.error());
      }
    }
  }
  // Continuations run without ctx_.mu.
  if (!reserved) {
    done(Err(reserved.error()));
    return true;
  }
  if (auto copied = CopyWhole(*reserved, value); !copied) {
    done(copied);
    return true;
  }
  auto committed = Commit(reserved->handle, value.size());
  if (!committed || !*committed) {
    done(committed ? Result<void>{} : Err(committed.error()));
    return true;
  }
  const uint64_t registrations = ctx_.directory->registrations();
  ctx_.directory->ClaimAsync(key, [this, registrations, write = std::move(**committed),
                                   done = std::move(done)](Result<void> claimed) {
    auto published = LockedThenRelease([&](std::vector<std::string>& release) {
      return PublishUnlessRegisteredLocked(registrations, write, claimed, release);
    });
    // Claimed again on the directory's thread: rare, as registrations are.
    done(published ? *published : ClaimThenPublish(write));
  });
  return true;
}

Result<void> WritePath::CopyWhole(const Reservation& reserved, std::string_view value) {
  const Allocation& space = *reserved.allocation;
  for (uint64_t offset = 0; offset < value.size(); offset += kRpcChunkBytes) {
    std::string_view slice = value.substr(offset, kRpcChunkBytes);
    auto bytes = std::as_bytes(std::span(slice.data(), slice.size()));
    if (auto written = space.tier->Write(space.location, offset, bytes); !written) {
      Revoke(reserved.handle);
      return written;
    }
  }
  ctx_.CountWritten(space.tier, value.size());
  return {};
}

Result<void> WritePath::CheckWrite(const std::string& key, uint64_t size,
                                   const ObjectOptions& options) const {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  if (options.preferred_tier >= static_cast<int>(ctx_.tiers.size())) {
    return Err(ErrorCode::kTierNotFound);
  }
  bool fits_somewhere = std::any_of(ctx_.tiers.begin(), ctx_.tiers.end(),
                                    [size](const auto& tier) { return size <= tier->capacity(); });
  if (!fits_somewhere) return Err(ErrorCode::kNoAvailableHandle);
  return {};
}

Result<uint64_t> WritePath::Start(const std::string& key, uint64_t size,
                                  const ObjectOptions& options, WriteMode mode,
                                  const AdoptedFrom& adopted, bool direct) {
  if (auto valid = CheckWrite(key, size, options); !valid) return Err(valid.error());
  Reservation reserved;
  // free_after is freed on return, after the new space is found.
  ReplacedSpace replaced;
  {
    std::lock_guard lock(ctx_.mu);
    auto reservation = ReserveLocked(key, size, options, mode, adopted, direct, replaced);
    if (!reservation) return Err(reservation.error());
    reserved = std::move(*reservation);
  }
  replaced.free_now.clear();
  if (reserved.allocation) return reserved.handle;  // in place

  SpaceFound found = FindSpace(size, options, mode, direct);
  std::vector<std::string> release_keys;
  Result<AllocationPtr> placed = Err(ErrorCode::kInternalError);
  {
    std::lock_guard lock(ctx_.mu);
    placed = PlaceLocked(reserved.handle, key, found, release_keys);
  }
  ReleaseAbandonedOwnership(release_keys);
  if (!placed) return Err(placed.error());
  return reserved.handle;
}

Result<WritePath::Reservation> WritePath::ReserveLocked(const std::string& key, uint64_t size,
                                                        const ObjectOptions& options,
                                                        WriteMode mode, const AdoptedFrom& adopted,
                                                        bool direct, ReplacedSpace& replaced) {
  if (!releasing_.empty() && releasing_.contains(key)) return Err(ErrorCode::kObjectReplicaBusy);
  // Reserve the key first so a concurrent Put of it fails fast instead of
  // allocating (and evicting) for nothing.
  PendingWrite pending;
  pending.key = key;
  pending.size = size;
  pending.mode = mode;
  pending.options = options;
  if (mode == WriteMode::kAdopt) pending.adopted = adopted;
  pending.direct = direct;
  pending.deadline = SteadyClock::now() + ctx_.options.put_start_discard_timeout;
  // The key's record is listed up to now (if complete and published), and
  // not from here on, until the commit.
  pending.listings = table_.listings();
  uint64_t handle = handles_.Next();
  Object* record = nullptr;
  if (mode == WriteMode::kUpsert) {
    if (auto cleared = ClearForUpsertLocked(key, pending, replaced); !cleared) {
      return Err(cleared.error());
    }
    record = &table_.Emplace(key, Placeholder(pending, handle), ObjectState::kWriting, pending.tier,
                             pending.was_published, SteadyClock::now());
  } else {
    // A put of a new key, the common case: one hash lookup reserves it.
    record = table_.EmplaceIfAbsent(key, Placeholder(pending, handle), ObjectState::kWriting,
                                    pending.tier, /*published=*/false, SteadyClock::now());
    if (record == nullptr) return Err(ErrorCode::kObjectAlreadyExists);
  }
  pending.object = table_.Ref(*record);
  AllocationPtr in_place = pending.in_place ? pending.allocation : nullptr;
  pending_.emplace(handle, std::move(pending));
  return Reservation{handle, std::move(in_place)};
}

Object WritePath::Placeholder(const PendingWrite& pending, uint64_t handle) {
  Object placeholder;
  placeholder.id = table_.NextObjectId();
  placeholder.size = pending.size;
  placeholder.write_handle = handle;
  placeholder.options = pending.options;
  placeholder.allocation = pending.allocation;
  return placeholder;
}

Result<void> WritePath::ClearForUpsertLocked(const std::string& key, PendingWrite& pending,
                                             ReplacedSpace& replaced) {
  Object* existing = table_.Find(key);
  // Absent here, it is created here, even if this node handed it to
  // another one once: the claim at publish is a compare-and-set, so while
  // that node still owns it the upsert fails (FinishPublishLocked), and once
  // it is gone there the upsert creates it.
  if (existing == nullptr) return {};
  Object& old = *existing;
  if (old.readers > 0 || old.moving() || old.transferring() || old.adopted() || old.removing() ||
      ctx_.ClaimingLocked(key)) {
    return Err(ErrorCode::kObjectReplicaBusy);
  }
  // Pins are a property of the key: they survive an upsert.
  pending.options.hard_pin |= old.options.hard_pin;
  pending.options.soft_pin |= old.options.soft_pin;
  pending.was_published = old.published();
  if (!old.complete()) {
    // Pre-empt the write in flight: its writer's next call fails.
    auto previous = pending_.find(old.write_handle);
    if (previous != pending_.end()) {
      pending.was_published |= previous->second.was_published;
      pending.claim_uncertain |= previous->second.claim_uncertain;
      // Not listed since that write's reserve either.
      pending.listings = previous->second.listings;
      if (previous->second.written_from_outside()) {
        QuarantineLocked(previous->second.allocation);
      } else {
        replaced.free_after.push_back(previous->second.allocation);
      }
      pending_.erase(previous);
    }
  }
  // In place only over a complete object: a pre-empted writer may still
  // be copying a chunk into the location of a write in flight, so that
  // location is never handed to the next writer.
  pending.in_place = old.complete() && old.allocation && old.size == pending.size &&
                     (!pending.direct || ctx_.shared_regions[old.tier()].has_value());
  if (pending.in_place) {
    pending.allocation = old.allocation;
    pending.tier = old.tier();
  } else {
    // Other size: a complete old value's space goes before the new space
    // is looked for (docs/design.md, "Upsert"). If none is found even so,
    // the upsert fails and leaves the key absent, as a revoked one does. A
    // write in flight's space is its pending write's, dealt with above.
    (old.complete() ? replaced.free_now : replaced.free_after).push_back(old.allocation);
  }
  replaced.free_now.push_back(old.durable_copy);
  table_.Erase(old);
  return {};
}

WritePath::SpaceFound WritePath::FindSpace(uint64_t size, const ObjectOptions& options,
                                           WriteMode mode, bool direct) {
  // An adopted object takes only the room the master saw: it never pushes
  // this node's own objects out of the cluster. A strict tier (adopt with a
  // preferred tier) must land exactly there.
  size_t first = options.preferred_tier >= 0 ? options.preferred_tier : 0;
  size_t last = mode == WriteMode::kAdopt && options.preferred_tier >= 0 ? first : ctx_.last_tier();
  if (direct) last = std::min<size_t>(last, LastShareableTier());
  return mover_.AllocateIn(first, last, size, /*allow_drop=*/mode != WriteMode::kAdopt);
}

Result<AllocationPtr> WritePath::PlaceLocked(uint64_t handle, const std::string& key,
                                             const SpaceFound& found,
                                             std::vector<std::string>& release_keys) {
  auto it = pending_.find(handle);
  if (it == pending_.end()) return Err(ErrorCode::kIllegalClient);  // pre-empted meanwhile
  if (!found) {
    RevokeLocked(handle, /*writer_gone=*/true, release_keys);
    return Err(found.error());
  }
  const auto& [tier, allocation] = *found;
  it->second.tier = tier;
  it->second.allocation = allocation;
  Object* object = table_.Resolve(it->second.object, key);
  MC_DCHECK(object != nullptr);
  table_.SetTier(*object, tier);
  object->allocation = allocation;
  return allocation;
}

Result<PendingWrite*> WritePath::WriterCallLocked(uint64_t handle) {
  auto pending = pending_.find(handle);
  if (pending == pending_.end() || pending->second.committing) {
    return Err(ErrorCode::kIllegalClient);
  }
  if (!pending->second.placed()) return Err(ErrorCode::kReplicaIsNotReady);
  return &pending->second;
}

Result<void> WritePath::Chunk(uint64_t handle, uint64_t offset, std::string_view data) {
  AllocationPtr allocation;
  {
    std::lock_guard lock(ctx_.mu);
    auto write = WriterCallLocked(handle);
    if (!write) return Err(write.error());
    PendingWrite& pending = **write;
    if (data.empty() || offset > pending.size || data.size() > pending.size - offset) {
      return Err(ErrorCode::kInvalidParams);
    }
    allocation = pending.allocation;
    ++pending.chunks_in_flight;
  }
  auto bytes = std::as_bytes(std::span(data.data(), data.size()));
  auto written = allocation->tier->Write(allocation->location, offset, bytes);
  if (written) ctx_.CountWritten(allocation->tier, bytes.size());
  std::lock_guard lock(ctx_.mu);
  auto pending = pending_.find(handle);
  if (pending == pending_.end()) {
    chunks_landed_.notify_all();            // a commit waiting for this chunk looks again
    return Err(ErrorCode::kIllegalClient);  // pre-empted
  }
  if (--pending->second.chunks_in_flight == 0) chunks_landed_.notify_all();
  if (!written) return written;
  if (!pending->second.written.Add(offset, data.size())) return Err(ErrorCode::kInvalidParams);
  return {};
}

Result<void> WritePath::End(uint64_t handle) {
  auto committed = Commit(handle);
  if (!committed) return Err(committed.error());
  if (!*committed) return {};  // an adopted object: its sender's claim stands
  // An upsert of a key this node already owns needs no new claim, unless a
  // registration missed its key while it was written.
  if ((*committed)->write.NeedsClaim()) return ClaimThenPublish(**committed);
  return LockedThenRelease([&](std::vector<std::string>& release) {
    return FinishPublishLocked((*committed)->write, (*committed)->version, {}, release);
  });
}

Result<PlacedWrite> WritePath::StartPlaced(const std::string& key, uint64_t size,
                                           const ObjectOptions& options) {
  // Only the tier a write starts at is known before its space is found: a
  // write bound for a tier outside host memory (VRAM first, or an SSD
  // asked for) is left to Put, not reserved and revoked.
  size_t first = options.preferred_tier < 0 ? 0 : static_cast<size_t>(options.preferred_tier);
  if (first >= ctx_.tiers.size() || ctx_.tiers[first]->kind() != TierKind::kDram) {
    return Err(ErrorCode::kTierNotFound);
  }
  auto handle = Start(key, size, options, WriteMode::kCreate, /*adopted=*/{},
                      /*direct=*/false);
  if (!handle) return Err(handle.error());
  AllocationPtr space;
  {
    std::lock_guard lock(ctx_.mu);
    if (auto pending = pending_.find(*handle); pending != pending_.end()) {
      space = pending->second.allocation;
    }
  }
  std::byte* bytes = space ? space->tier->WritableHostAddress(space->location) : nullptr;
  if (bytes == nullptr) {
    // Host memory was full and the space is on a slower tier.
    Revoke(*handle);
    return Err(ErrorCode::kTierNotFound);
  }
  return PlacedWrite{.handle = *handle, .bytes = std::span(bytes, size), .hold = std::move(space)};
}

Result<void> WritePath::EndPlaced(uint64_t handle) {
  {
    std::lock_guard lock(ctx_.mu);
    auto pending = WriterCallLocked(handle);
    if (!pending) return Err(pending.error());
    PendingWrite& write = **pending;
    write.written.MarkAll(write.size);
    ctx_.CountWritten(write.allocation->tier, write.size);
  }
  return End(handle);
}

Result<std::optional<WritePath::CommittedWrite>> WritePath::Commit(uint64_t handle,
                                                                   uint64_t bytes_copied) {
  Result<Committing> committing = Err(ErrorCode::kInternalError);
  {
    std::unique_lock lock(ctx_.mu);
    // A chunk still being copied would land on the complete object.
    chunks_landed_.wait(lock, [&] {
      auto pending = pending_.find(handle);
      return pending == pending_.end() || pending->second.chunks_in_flight == 0;
    });
    committing = BeginCommitLocked(handle, bytes_copied);
  }
  if (!committing) return Err(committing.error());
  MakeDurable(*committing);
  return LockedThenRelease([&](std::vector<std::string>& release) {
    return EndCommitLocked(std::move(*committing), release);
  });
}

Result<WritePath::Committing> WritePath::BeginCommitLocked(uint64_t handle, uint64_t bytes_copied) {
  auto pending = WriterCallLocked(handle);
  if (!pending) return Err(pending.error());
  PendingWrite& write = **pending;
  if (bytes_copied > 0) write.written.Add(0, bytes_copied);
  if (!write.written.Covers(write.size)) {
    return Err(ErrorCode::kInvalidParams);  // the writer may still send the rest
  }
  write.committing = true;
  Committing c{.handle = handle, .write = write};
  if (c.write.mode == WriteMode::kAdopt) {
    c.version = c.write.adopted.version;
    table_.ObserveVersion(c.version);
  } else {
    c.version = table_.NextVersion();
  }
  return c;
}

void WritePath::MakeDurable(Committing& c) {
  const PendingWrite& write = c.write;
  DurableObjectMeta meta{write.key, write.allocation->location, c.version, write.options.hard_pin,
                         write.options.soft_pin};
  c.persisted = write.allocation->tier->Persist(meta);
  if (c.persisted && write.options.hard_pin) {
    // A hard pin survives a restart: without its copy on the SSD it could
    // not, so a put of a new key fails as a persist failure does. An upsert
    // of a key held here has let its old value go already, and failing would
    // drop the key, which a hard pin never is: it stays, in DRAM only, with
    // WriteThrough's warning.
    auto copy = WriteThrough(write.key, write.allocation, write.size, c.version, write.options);
    if (copy) {
      c.durable_copy = std::move(*copy);
    } else if (!(write.mode == WriteMode::kUpsert && write.was_published)) {
      c.persisted = Err(copy.error());
    }
  }
}

Result<std::optional<WritePath::CommittedWrite>> WritePath::EndCommitLocked(
    Committing c, std::vector<std::string>& release) {
  const PendingWrite& write = c.write;
  auto pending = pending_.find(c.handle);
  if (pending == pending_.end()) return Err(ErrorCode::kIllegalClient);
  // A put's claim that landed while this committed may have handed the key
  // to this write (FinishPublishLocked).
  c.write.was_published = pending->second.was_published;
  c.write.claim_uncertain = pending->second.claim_uncertain;
  // From here on the record is complete, and listed by any registration;
  // one that listed while it was written may have purged the key and not
  // announced it (see PendingWrite::listings).
  c.write.unannounced = table_.listings() != pending->second.listings;
  pending_.erase(pending);
  Object* object = table_.Resolve(write.object, write.key);
  if (object == nullptr) return Err(ErrorCode::kIllegalClient);
  if (!c.persisted) {
    // The key is gone here now: one owned here must go at the master too.
    table_.Erase(*object);
    if (write.was_published) ReleaseLaterLocked(write.key, release);
    return Err(c.persisted.error());
  }
  Object& o = *object;
  auto now = SteadyClock::now();
  o.version = c.version;
  o.write_handle = 0;
  table_.Touch(o, now);
  o.durable_copy = std::move(c.durable_copy);
  Millis soft_ttl = write.options.soft_pin_ttl.count() > 0
                        ? std::min(write.options.soft_pin_ttl, kMaxSoftPinTtl)
                        : ctx_.options.soft_pin_ttl;
  o.soft_pin_until = now + soft_ttl;
  if (write.mode == WriteMode::kAdopt) {
    table_.SetState(o, ObjectState::kAdopted);
    o.adopted_at = now;
    mover_.NoteAdoptedLocked(write.key, write.object.id, write.adopted.sender);
    ctx_.counters.moved_in.fetch_add(1, std::memory_order_relaxed);
    return std::optional<CommittedWrite>{};
  }
  table_.SetState(o, ObjectState::kComplete);
  if (write.was_published && write.NeedsClaim()) ++ctx_.claiming[write.key];  // until published
  return std::optional<CommittedWrite>{CommittedWrite{std::move(c.write), c.version}};
}

Result<void> WritePath::FinishPublishLocked(const PendingWrite& write, uint64_t version,
                                            const Result<void>& claimed,
                                            std::vector<std::string>& release) {
  if (write.was_published && write.NeedsClaim()) {
    auto claiming = ctx_.claiming.find(write.key);
    if (claiming != ctx_.claiming.end() && --claiming->second == 0) ctx_.claiming.erase(claiming);
  }
  Object* object = table_.Resolve(write.object, write.key);
  if (!claimed) {
    if (object != nullptr) table_.Erase(*object);
    // A claim whose answer was lost (a timeout, a broken connection) may
    // have been applied, and the master would then point here at nothing.
    // The release removes the key only where this node owns it, so it is
    // sent for any failure but another node's ownership.
    if (claimed.error() != ErrorCode::kObjectAlreadyExists) MayOwnLocked(write.key, release);
    // An upsert of a key this node handed to the node that still owns it:
    // the caller re-locates it there.
    if (claimed.error() == ErrorCode::kObjectAlreadyExists && write.mode == WriteMode::kUpsert &&
        mover_.MovedAwayLocked(write.key)) {
      return Err(ErrorCode::kNotOwner);
    }
    return claimed;
  }
  if (object != nullptr) {
    table_.MarkPublished(*object);
  } else if (Object* current = table_.Find(write.key); current == nullptr) {
    // Replaced, and the replacement revoked or lost: the master points here
    // at nothing.
    ReleaseLaterLocked(write.key, release);
  } else if (auto upsert = pending_.find(current->write_handle); upsert != pending_.end()) {
    // Replaced by an upsert still being written, which now owns the key at
    // the master: revoked or removed, it releases the key; committed, it
    // needs no claim of its own. (One already committed sent its own claim.)
    // Its record says so too, which is what a remove reads.
    upsert->second.was_published = true;
    table_.MarkPublished(*current);
  }
  mover_.ForgetMoveLocked(write.key);  // owned here again
  auto& counter = write.mode == WriteMode::kUpsert ? ctx_.counters.upserts : ctx_.counters.puts;
  counter.fetch_add(1, std::memory_order_relaxed);
  if (mover_.DemotionDueLocked()) work_.SignalLocked();
  MC_LOG_DEBUG("published key={} version={} in_place={}", write.key, version, write.in_place);
  return {};
}

void WritePath::MayOwnLocked(const std::string& key, std::vector<std::string>& release) {
  Object* current = table_.Find(key);
  if (current == nullptr) {
    ReleaseLaterLocked(key, release);
    return;
  }
  // Another write of the key took over while the claim was out: a release
  // now could land after that write's own claim and take the key from it.
  // One still being written claims on commit as it would have, and
  // releases if dropped; a committed one's claim decides on its own.
  auto writer = pending_.find(current->write_handle);
  if (current->complete() || writer == pending_.end()) return;
  writer->second.was_published = true;
  writer->second.claim_uncertain = true;
  table_.MarkPublished(*current);
}

Result<AllocationPtr> WritePath::WriteThrough(const std::string& key, const AllocationPtr& primary,
                                              uint64_t size, uint64_t version,
                                              const ObjectOptions& options) {
  if (!ctx_.options.hard_pin_write_through) return nullptr;
  size_t durable = ctx_.last_tier();
  if (ctx_.tiers[durable]->kind() != TierKind::kSsd || primary->tier == ctx_.tiers[durable].get()) {
    return nullptr;
  }
  auto placed = mover_.AllocateIn(durable, durable, size, /*allow_drop=*/true);
  if (!placed) {
    MC_LOG_WARN("hard pin write-through failed key={} error={}", key, ToString(placed.error()));
    return Err(placed.error());
  }
  auto copy = placed->second;
  DurableObjectMeta meta{key, copy->location, version, true, options.soft_pin};
  if (!Mover::CopyBetweenTiers(*primary, *copy, size, &ctx_)) {
    MC_LOG_WARN("hard pin write-through failed key={} error=copy", key);
    return Err(ErrorCode::kInternalError);
  }
  if (auto persisted = copy->tier->Persist(meta); !persisted) {
    MC_LOG_WARN("hard pin write-through failed key={} error={}", key, ToString(persisted.error()));
    return Err(persisted.error());
  }
  return copy;
}

Result<void> WritePath::Revoke(uint64_t handle) {
  return LockedThenRelease([&](std::vector<std::string>& release) -> Result<void> {
    // Not before it is placed: its writer has not had the handle yet, and
    // Start revokes it itself if no space is found.
    if (auto pending = WriterCallLocked(handle); !pending) return Err(pending.error());
    RevokeLocked(handle, /*writer_gone=*/true, release);
    return {};
  });
}

void WritePath::RevokeLocked(uint64_t handle, bool writer_gone, std::vector<std::string>& release) {
  auto pending = pending_.find(handle);
  if (pending == pending_.end()) return;
  if (pending->second.written_from_outside() && !writer_gone) {
    QuarantineLocked(pending->second.allocation);
  }
  if (pending->second.was_published) ReleaseLaterLocked(pending->second.key, release);
  if (Object* object = table_.Resolve(pending->second.object, pending->second.key)) {
    table_.Erase(*object);
  }
  pending_.erase(pending);
}

void WritePath::ForgetLocked(uint64_t handle) {
  auto pending = pending_.find(handle);
  if (pending == pending_.end()) return;
  // A producer mapping the space, or a peer's RDMA write, may still be
  // copying into it: it must not go to the next write before their time is
  // up.
  if (pending->second.written_from_outside()) QuarantineLocked(pending->second.allocation);
  pending_.erase(pending);
}

void WritePath::ReleaseLaterLocked(const std::string& key, std::vector<std::string>& release) {
  ReleasingLocked(key);
  release.push_back(key);
}

void WritePath::ReleaseAbandonedOwnership(const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  // The keys are gone here (their values replaced and the replacements
  // revoked or lost, or their claims failed), so the master must stop
  // pointing at this node: all of them in one call per master shard. A key
  // it does not name this node for is already as it should be.
  std::vector<Result<void>> released = ctx_.directory->ReleaseMany(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < released.size() && !released[i] && released[i].error() != ErrorCode::kObjectNotFound &&
        released[i].error() != ErrorCode::kNotOwner) {
      MC_LOG_WARN("release of a key no longer here failed key={} error={}", keys[i],
                  ToString(released[i].error()));
    }
  }
  std::lock_guard lock(ctx_.mu);
  for (const std::string& key : keys) ReleasedLocked(key);
}

void WritePath::ReleasedLocked(const std::string& key) {
  auto releasing = releasing_.find(key);
  if (releasing != releasing_.end() && --releasing->second == 0) releasing_.erase(releasing);
}

void WritePath::DiscardExpiredWrites() {
  std::vector<std::string> release;
  {
    std::lock_guard lock(ctx_.mu);
    auto now = SteadyClock::now();
    std::vector<uint64_t> expired;
    for (const auto& [handle, pending] : pending_) {
      // One not yet placed is not abandoned: its Start is still finding it
      // space, and places or revokes it.
      if (!pending.committing && pending.placed() && pending.deadline <= now) {
        expired.push_back(handle);
      }
    }
    for (uint64_t handle : expired) {
      MC_LOG_WARN("discarded abandoned write key={} size={}", pending_[handle].key,
                  pending_[handle].size);
      RevokeLocked(handle, /*writer_gone=*/false, release);
    }
  }
  ReleaseAbandonedOwnership(release);
}

// ---------------------------------------------------------------------------
// Plan-based writes and quarantine

int WritePath::LastShareableTier() const {
  int last = -1;
  for (size_t t = 0; t < ctx_.shared_regions.size(); ++t) {
    if (ctx_.shared_regions[t]) last = static_cast<int>(t);
  }
  return last;
}

Result<DirectWritePlan> WritePath::OpenForWrite(const std::string& key, uint64_t size,
                                                const ObjectOptions& options, WriteMode mode) {
  if (mode == WriteMode::kAdopt) return Err(ErrorCode::kInvalidParams);
  const auto& regions = ctx_.shared_regions;
  int last = LastShareableTier();
  if (last < 0 || options.preferred_tier > last) return Err(ErrorCode::kTierNotFound);
  if (options.preferred_tier >= 0 && !regions[options.preferred_tier]) {
    return Err(ErrorCode::kTierNotFound);
  }
  // Start at the fastest tier that can share: a VRAM tier whose arena could
  // not be exported must not take the plan.
  ObjectOptions placement = options;
  if (placement.preferred_tier < 0) {
    while (!regions[++placement.preferred_tier]) {
    }
  }
  auto handle = Start(key, size, placement, mode, /*adopted=*/{}, /*direct=*/true);
  if (!handle) return Err(handle.error());
  auto target = Target(*handle);
  if (target && !regions[target->tier]) target = Err(ErrorCode::kTierNotFound);
  if (!target) {
    Revoke(*handle);
    return Err(target.error());
  }
  return DirectWritePlan{.epoch = *handle,
                         .target = *target,
                         .region = *regions[target->tier],
                         .timeout = ctx_.options.put_start_discard_timeout};
}

Result<WriteTarget> WritePath::Target(uint64_t handle) const {
  std::lock_guard lock(ctx_.mu);
  auto pending = pending_.find(handle);
  if (pending == pending_.end()) return Err(ErrorCode::kIllegalClient);
  if (!pending->second.placed()) return Err(ErrorCode::kReplicaIsNotReady);
  const PendingWrite& write = pending->second;
  return WriteTarget{.tier = write.tier,
                     .tier_name = std::string(ctx_.tiers[write.tier]->name()),
                     .location = write.allocation->location};
}

Result<void> WritePath::CommitDirect(uint64_t handle, std::string_view key) {
  {
    std::lock_guard lock(ctx_.mu);
    auto pending = pending_.find(handle);
    if (pending == pending_.end() || (!key.empty() && pending->second.key != key)) {
      return Err(ErrorCode::kIllegalClient);
    }
    auto write = WriterCallLocked(handle);
    if (!write) return Err(write.error());
    // Only writes opened for direct placement may skip counting bytes.
    if (!(*write)->direct && (*write)->mode != WriteMode::kAdopt) {
      return Err(ErrorCode::kInvalidParams);
    }
    (*write)->written.MarkAll((*write)->size);
  }
  return End(handle);
}

void WritePath::QuarantineLocked(AllocationPtr allocation) {
  if (!allocation) return;
  quarantine_.push_back(
      {SteadyClock::now() + ctx_.options.put_start_discard_timeout, std::move(allocation)});
}

void WritePath::ReleaseQuarantine() {
  std::vector<AllocationPtr> released;  // freed after the lock is dropped
  std::lock_guard lock(ctx_.mu);
  auto now = SteadyClock::now();
  while (!quarantine_.empty() && quarantine_.front().until <= now) {
    released.push_back(std::move(quarantine_.front().allocation));
    quarantine_.pop_front();
  }
}

}  // namespace mooncake
