#include "client/hot_cache.h"

#include <utility>

namespace mooncake {

HotCache::HotCache(uint64_t capacity_bytes, bool background)
    : capacity_(capacity_bytes), background_(background) {
  // No thread for a disabled cache: most clients run without one.
  if (enabled() && background_) filler_ = std::thread([this] { FillLoop(); });
}

HotCache::~HotCache() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (filler_.joinable()) filler_.join();
}

bool HotCache::Admits(uint64_t size) const {
  return enabled() && size > 0 && size <= capacity_ / 8;
}

uint64_t HotCache::Ticket() {
  std::lock_guard lock(mu_);
  return next_ticket_++;
}

std::optional<HotCache::Entry> HotCache::Lookup(const std::string& key) {
  if (!enabled()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->entry;
}

void HotCache::Offer(std::string key, Entry entry, uint64_t ticket) {
  if (!Admits(SizeOf(entry))) return;
  if (!background_) {
    Insert(key, std::move(entry), ticket);
    return;
  }
  uint64_t size = SizeOf(entry);
  {
    std::lock_guard lock(mu_);
    // Bounded in count and bytes: a burst of reads must not pile up copies.
    if (stopping_ || queue_.size() >= kMaxQueuedFills || queued_bytes_ + size > capacity_) return;
    queued_bytes_ += size;
    queue_.push_back(Fill{std::move(key), std::move(entry), ticket});
  }
  wake_.notify_one();
}

bool HotCache::Insert(const std::string& key, Entry entry, uint64_t ticket) {
  if (!Admits(SizeOf(entry))) return false;
  std::lock_guard lock(mu_);
  return InsertLocked(key, std::move(entry), ticket);
}

bool HotCache::InsertLocked(const std::string& key, Entry entry, uint64_t ticket) {
  if (InvalidatedLocked(key, ticket)) return false;
  auto existing = index_.find(key);
  // Never replace a copy with an older one (two reads racing an upsert).
  if (existing != index_.end() && existing->second->entry.node_id == entry.node_id &&
      existing->second->entry.version > entry.version) {
    return false;
  }
  EraseLocked(key);
  uint64_t size = SizeOf(entry);
  while (bytes_ + size > capacity_ && !lru_.empty()) EraseLocked(lru_.back().key);
  lru_.push_front(Node{key, std::move(entry)});
  index_[key] = lru_.begin();
  bytes_ += size;
  return true;
}

void HotCache::Refresh(const std::string& key, int64_t version, Clock::time_point fetched) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end() || it->second->entry.version != version) return;
  if (fetched > it->second->entry.fetched) it->second->entry.fetched = fetched;
}

void HotCache::Erase(const std::string& key) {
  if (!enabled()) return;
  std::lock_guard lock(mu_);
  EraseLocked(key);
  if (invalidated_.size() >= kMaxInvalidations) {
    // Forget the per-key record; discard every fill taken before now instead.
    invalidated_.clear();
    floor_ = next_ticket_;
  }
  invalidated_[key] = next_ticket_++;
}

void HotCache::EraseLocked(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  bytes_ -= SizeOf(it->second->entry);
  lru_.erase(it->second);
  index_.erase(it);
}

bool HotCache::InvalidatedLocked(const std::string& key, uint64_t ticket) const {
  if (ticket < floor_) return true;
  auto it = invalidated_.find(key);
  return it != invalidated_.end() && it->second > ticket;
}

bool HotCache::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_.wait_for(lock, timeout, [this] { return queue_.empty(); });
}

void HotCache::FillLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Fill fill = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= SizeOf(fill.entry);
    // Pop and insert under one lock hold: an Erase between them would
    // otherwise miss this fill.
    InsertLocked(fill.key, std::move(fill.entry), fill.ticket);
    if (queue_.empty()) idle_.notify_all();
  }
}

HotCacheCounters HotCache::counters() const {
  HotCacheCounters c;
  c.hits = hits_.load(std::memory_order_relaxed);
  c.misses = misses_.load(std::memory_order_relaxed);
  c.validations = validations_.load(std::memory_order_relaxed);
  c.stale = stale_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  c.bytes = bytes_;
  c.entries = index_.size();
  return c;
}

}  // namespace mooncake
