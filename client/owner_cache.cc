#include "client/owner_cache.h"

#include <bit>

namespace mooncake {
namespace {

// Entries a shard's table starts with (2 KiB), or its whole share if less.
constexpr size_t kInitialSlots = 128;

uint64_t HashOf(std::string_view key) { return std::hash<std::string_view>{}(key); }

}  // namespace

OwnerCache::OwnerCache(uint64_t budget_bytes)
    : max_slots_([budget_bytes] {
        uint64_t share = budget_bytes / kEntryBytes / kShards;
        return share < kWays ? 0 : static_cast<size_t>(std::bit_floor(share));
      }()) {
  if (max_slots_ > 0) names_.reserve(kMaxNodes);
}

OwnerCache::Slot* OwnerCache::BucketOf(Shard& shard, uint64_t hash) {
  size_t buckets = shard.slots.size() / kWays;  // a power of two
  // The low bits chose the shard; the bucket takes the next ones.
  return &shard.slots[((hash / kShards) & (buckets - 1)) * kWays];
}

OwnerCache::Slot* OwnerCache::Match(Slot* bucket, uint64_t hash) {
  for (size_t i = 0; i < kWays; ++i) {
    if (bucket[i].node != 0 && bucket[i].hash == hash) return &bucket[i];
  }
  return nullptr;
}

std::optional<std::string> OwnerCache::Find(std::string_view key) {
  if (max_slots_ == 0) return std::nullopt;
  uint64_t hash = HashOf(key);
  Shard& shard = ShardOf(hash);
  uint32_t node = 0;
  {
    std::lock_guard lock(shard.mu);
    if (shard.slots.empty()) return std::nullopt;
    Slot* slot = Match(BucketOf(shard, hash), hash);
    if (slot == nullptr) return std::nullopt;
    slot->stamp = ++shard.clock;  // in use: the last one its bucket gives up
    node = slot->node;
  }
  // Interned names never change or move (see names_).
  return names_[node - 1];
}

void OwnerCache::Remember(std::string_view key, std::string_view node_id) {
  if (max_slots_ == 0) return;
  uint32_t node = Intern(node_id);
  if (node == 0) return;
  uint64_t hash = HashOf(key);
  Shard& shard = ShardOf(hash);
  std::lock_guard lock(shard.mu);
  if (shard.slots.empty()) shard.slots.resize(std::min(kInitialSlots, max_slots_));
  if (Slot* slot = Match(BucketOf(shard, hash), hash)) {
    slot->node = node;
    slot->stamp = ++shard.clock;
    return;
  }
  Slot entry{hash, node, ++shard.clock};
  // While the table may grow, no entry is given up: a full bucket (or a
  // table over three quarters full) doubles it instead.
  if (shard.slots.size() < max_slots_ &&
      (shard.used + 1 > shard.slots.size() / 4 * 3 || !HasRoom(BucketOf(shard, hash)))) {
    Grow(shard);
  }
  Place(shard, entry);
}

void OwnerCache::Forget(std::string_view key) {
  if (max_slots_ == 0) return;
  uint64_t hash = HashOf(key);
  Shard& shard = ShardOf(hash);
  std::lock_guard lock(shard.mu);
  if (shard.slots.empty()) return;
  if (Slot* slot = Match(BucketOf(shard, hash), hash)) {
    *slot = Slot{};
    --shard.used;
  }
}

void OwnerCache::Place(Shard& shard, const Slot& entry) {
  Slot* bucket = BucketOf(shard, entry.hash);
  Slot* target = &bucket[0];
  for (size_t i = 0; i < kWays; ++i) {
    if (bucket[i].node == 0) {
      target = &bucket[i];
      ++shard.used;
      break;
    }
    // Unsigned distance from now: right across the clock's wrap.
    if (shard.clock - bucket[i].stamp > shard.clock - target->stamp) target = &bucket[i];
  }
  *target = entry;
}

bool OwnerCache::HasRoom(const Slot* bucket) {
  for (size_t i = 0; i < kWays; ++i) {
    if (bucket[i].node == 0) return true;
  }
  return false;
}

void OwnerCache::Grow(Shard& shard) {
  std::vector<Slot, HugePageAllocator<Slot>> old;
  old.swap(shard.slots);
  // The hash is the whole key as far as the table is concerned, so entries
  // move to their new buckets without their keys. A bucket that overflows
  // even so (rare: an eighth of its entries' hashes agreeing on one more
  // bit) doubles the table again while the budget allows.
  for (size_t size = old.size() * 2;; size *= 2) {
    shard.slots.assign(size, Slot{});
    shard.used = 0;
    bool overflowed = false;
    for (const Slot& slot : old) {
      if (slot.node == 0) continue;
      if (size < max_slots_ && !HasRoom(BucketOf(shard, slot.hash))) {
        overflowed = true;
        break;
      }
      Place(shard, slot);
    }
    if (!overflowed) return;
  }
}

uint32_t OwnerCache::Intern(std::string_view node_id) {
  {
    std::shared_lock lock(names_mu_);
    if (auto it = ids_.find(node_id); it != ids_.end()) return it->second;
  }
  std::unique_lock lock(names_mu_);
  if (auto it = ids_.find(node_id); it != ids_.end()) return it->second;
  if (names_.size() >= kMaxNodes) return 0;
  names_.emplace_back(node_id);  // within the reservation: nothing moves
  auto number = static_cast<uint32_t>(names_.size());
  ids_.emplace(std::string(node_id), number);
  return number;
}

uint64_t OwnerCache::bytes() const {
  uint64_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    total += shard.slots.size() * kEntryBytes;
  }
  return total;
}

size_t OwnerCache::entries() const {
  size_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    total += shard.used;
  }
  return total;
}

}  // namespace mooncake
