#include "client/owner_cache.h"

#include <utility>

namespace mooncake {

OwnerCache::OwnerCache(uint64_t budget_bytes) : generation_budget_(budget_bytes / kShards / 2) {}

uint64_t OwnerCache::EntryBytes(std::string_view key, std::string_view node_id) {
  // A hash node (next pointer, cached hash, two std::string headers), its
  // bucket pointer and allocator overhead, plus the strings' heap bytes
  // when they outgrow the small-string buffer.
  constexpr uint64_t kNodeBytes = 96;
  constexpr size_t kInlineChars = 15;
  auto heap = [](size_t n) { return n > kInlineChars ? n + 1 : 0; };
  return kNodeBytes + heap(key.size()) + heap(node_id.size());
}

OwnerCache::Shard& OwnerCache::ShardOf(std::string_view key) {
  return shards_[std::hash<std::string_view>{}(key) % kShards];
}

std::optional<std::string> OwnerCache::Find(std::string_view key) {
  if (generation_budget_ == 0) return std::nullopt;
  Shard& shard = ShardOf(key);
  std::lock_guard lock(shard.mu);
  if (auto it = shard.young.find(key); it != shard.young.end()) return it->second;
  auto it = shard.old.find(key);
  if (it == shard.old.end()) return std::nullopt;
  // In use: move it to the young generation so the next turnover keeps it.
  auto node = shard.old.extract(it);
  shard.old_bytes -= EntryBytes(node.key(), node.mapped());
  std::string owner = node.mapped();
  InsertLocked(shard, std::move(node.key()), std::move(node.mapped()));
  return owner;
}

void OwnerCache::Remember(std::string_view key, std::string_view node_id) {
  if (generation_budget_ == 0) return;
  Shard& shard = ShardOf(key);
  std::lock_guard lock(shard.mu);
  // One hash lookup, not three: each is a few cache misses in a table of
  // millions, and a put remembers every key it writes. A copy of `key` left
  // in the old generation is shadowed (Find looks in the young one first)
  // and goes with that generation at the next turnover.
  InsertLocked(shard, std::string(key), std::string(node_id));
}

void OwnerCache::Forget(std::string_view key) {
  if (generation_budget_ == 0) return;
  Shard& shard = ShardOf(key);
  std::lock_guard lock(shard.mu);
  EraseLocked(shard.young, shard.young_bytes, key);
  EraseLocked(shard.old, shard.old_bytes, key);
}

void OwnerCache::InsertLocked(Shard& shard, std::string key, std::string node_id) {
  uint64_t bytes = EntryBytes(key, node_id);
  if (shard.young_bytes + bytes > generation_budget_) {
    // Turn over: the old generation goes, the young one ages.
    shard.old = std::exchange(shard.young, Generation{});
    shard.old_bytes = std::exchange(shard.young_bytes, 0);
    if (bytes > generation_budget_) return;  // larger than a generation: not kept
  }
  // try_emplace leaves its arguments alone when the key is there already.
  auto [it, inserted] = shard.young.try_emplace(std::move(key), std::move(node_id));
  if (!inserted) {
    shard.young_bytes -= EntryBytes(it->first, it->second);
    it->second = std::move(node_id);
  }
  shard.young_bytes += bytes;
}

void OwnerCache::EraseLocked(Generation& generation, uint64_t& bytes, std::string_view key) {
  auto it = generation.find(key);
  if (it == generation.end()) return;
  bytes -= EntryBytes(it->first, it->second);
  generation.erase(it);
}

uint64_t OwnerCache::bytes() const {
  uint64_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    total += shard.young_bytes + shard.old_bytes;
  }
  return total;
}

size_t OwnerCache::entries() const {
  size_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    total += shard.young.size() + shard.old.size();
  }
  return total;
}

}  // namespace mooncake
