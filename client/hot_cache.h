#pragma once

// Private to client/: HotCache, the optional client-side LRU of recently read
// objects (ClientConfig::local_hot_cache_bytes; 0 turns it off).
//
// What it holds: whole values of objects this client read remotely, with the
// owner node and version the owner reported and the time the read STARTED
// (not ended: the object may have been replaced while the read was in flight,
// so the start is the latest moment the copy is known to be current).
//
// Admission: an object larger than 1/8 of the budget is never cached, so one
// big read cannot flush everything else. Eviction is LRU by bytes.
//
// Filling is asynchronous: after a remote read the client Offer()s the value;
// a background thread inserts it. The queue is bounded (count and bytes);
// when it is full the offer is dropped, so a read never waits for the cache.
//
// Staleness bound (the text the README carries):
//   * Objects of at least hot_cache_validate_min_bytes (default 64 KiB) are
//     never served stale: every hit first asks the current owner (master
//     GetLocation + worker Inspect, two small RPCs) for the object's node and
//     version, and the cached copy is served only when both are unchanged;
//     otherwise it is dropped and the object is read remotely.
//   * Smaller objects are served without asking while younger than
//     hot_cache_max_staleness_ms (default 1000 ms), measured from the start of
//     the read that fetched them; after that a hit revalidates the same way.
//     So an upsert or remove by ANOTHER client becomes visible to this client
//     after at most hot_cache_max_staleness_ms for small objects.
//   * This client's own Put/Upsert/Remove (their batch, stream and async
//     forms too, and a plan's upsert OpenForWrite, Commit and Revoke) drop
//     the entry at once (a put that succeeds found the key
//     absent, so a copy cached before is of a removed object), and a fill
//     from a read that started before the invalidation is discarded, so a
//     client always reads its own writes.
//   * Only Get consults and fills the cache; GetStream, BatchGet and Exist go
//     to the owner every time.
//
// Thread-safety: every public method is safe from any thread. mu_ guards the
// LRU (lru_, index_, bytes_), the fill queue (queue_, queued_bytes_,
// stopping_) and the invalidation record (invalidated_, floor_); counters are
// atomics. The filler thread takes mu_ only to pop and to insert; values are
// shared immutable strings, so Lookup copies a pointer under the lock.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "client/client.h"

namespace mooncake {

class HotCache {
 public:
  using Clock = std::chrono::steady_clock;

  // One cached object. `data` is shared and never modified.
  struct Entry {
    std::shared_ptr<const std::string> data;
    std::string node_id;
    int64_t version = 0;
    Clock::time_point fetched;
  };

  // Fills waiting for the background thread, at most.
  static constexpr size_t kMaxQueuedFills = 64;
  // Cap on invalidation records; past it they collapse into one floor.
  static constexpr size_t kMaxInvalidations = 4096;

  // `background` false inserts offers synchronously (unit tests).
  explicit HotCache(uint64_t capacity_bytes, bool background = true);
  ~HotCache();
  HotCache(const HotCache&) = delete;
  HotCache& operator=(const HotCache&) = delete;

  bool enabled() const { return capacity_ > 0; }
  uint64_t capacity() const { return capacity_; }
  // Whether an object of `size` bytes may be cached at all (<= 1/8 budget).
  bool Admits(uint64_t size) const;

  // Taken before a remote read starts; a later Erase of the key makes the
  // read's Offer a no-op, since its bytes may predate the write.
  uint64_t Ticket();

  // The entry, marked most recently used; nullopt on a miss. Counts nothing:
  // the caller knows whether the hit survives validation.
  std::optional<Entry> Lookup(const std::string& key);
  // Queues a fill (or drops it when the queue is full); returns at once.
  void Offer(std::string key, Entry entry, uint64_t ticket);
  // Inserts now, evicting LRU entries; false if not admitted or invalidated.
  bool Insert(const std::string& key, Entry entry, uint64_t ticket);
  // Marks a validated entry fresh again (same version, new fetch time).
  void Refresh(const std::string& key, int64_t version, Clock::time_point fetched);
  // Drops the entry and any fill of it from a read that started earlier.
  void Erase(const std::string& key);
  // Waits until the fill queue is empty; false on timeout. For tests.
  bool WaitIdle(std::chrono::milliseconds timeout);

  void CountHit() { hits_.fetch_add(1, std::memory_order_relaxed); }
  void CountMiss() { misses_.fetch_add(1, std::memory_order_relaxed); }
  void CountValidation() { validations_.fetch_add(1, std::memory_order_relaxed); }
  void CountStale() { stale_.fetch_add(1, std::memory_order_relaxed); }
  HotCacheCounters counters() const;

 private:
  struct Node {
    std::string key;
    Entry entry;
  };
  struct Fill {
    std::string key;
    Entry entry;
    uint64_t ticket = 0;
  };

  void FillLoop();
  bool InsertLocked(const std::string& key, Entry entry, uint64_t ticket);
  void EraseLocked(const std::string& key);
  bool InvalidatedLocked(const std::string& key, uint64_t ticket) const;
  static uint64_t SizeOf(const Entry& entry) { return entry.data ? entry.data->size() : 0; }

  const uint64_t capacity_;
  const bool background_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // fills queued or stopping
  std::condition_variable idle_;  // queue drained
  std::list<Node> lru_;           // front: most recently used
  std::unordered_map<std::string, std::list<Node>::iterator> index_;
  uint64_t bytes_ = 0;
  std::deque<Fill> queue_;
  uint64_t queued_bytes_ = 0;
  bool stopping_ = false;
  uint64_t next_ticket_ = 1;
  std::unordered_map<std::string, uint64_t> invalidated_;  // key -> ticket at Erase
  uint64_t floor_ = 0;  // fills with tickets below this are discarded
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> validations_{0};
  std::atomic<uint64_t> stale_{0};
  std::thread filler_;  // last: starts after every member above exists
};

}  // namespace mooncake
