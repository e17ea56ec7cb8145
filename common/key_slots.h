#pragma once

// Key slots of a sharded master directory (docs/scale.md): every key maps to
// one of kKeySlots slots exactly as in Redis Cluster, and a SlotTable assigns
// every slot to one master shard. Clients and workers route each key-level
// master call by the slot of its key.
//
// Thread-safety: KeySlot is a pure function; a SlotTable is immutable after
// construction, so const methods are safe from any number of threads.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace mooncake {

// Redis Cluster's slot count: small enough that a table of owners per slot
// is 32 KiB, large enough to move load between hundreds of shards finely.
inline constexpr uint32_t kKeySlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection)
// of `data`, the checksum Redis Cluster uses for slots.
uint16_t Crc16Xmodem(std::string_view data);

// The slot of `key`: Crc16Xmodem(key) mod kKeySlots, with Redis Cluster's
// hash tag rule: when the key holds a '{' followed later by a '}' with at
// least one byte between them, only the bytes between the first '{' and the
// first '}' after it are hashed. So "{user1000}.following" and
// "{user1000}.followers" share a slot, while "{}x" and "x{" hash whole
// (empty or unclosed tags are no tags).
uint32_t KeySlot(std::string_view key);

// One contiguous run of slots [first, last] owned by one shard.
struct SlotRange {
  uint32_t first = 0;
  uint32_t last = 0;
  uint32_t shard = 0;  // index into SlotTable's shards
};

// A static assignment of all kKeySlots slots to shards. Every slot has
// exactly one shard; a shard may own several ranges. Shards are numbered
// 0..shard_count()-1 in order of first appearance.
class SlotTable {
 public:
  // `shards` contiguous ranges of (almost) equal size, shard i owning the
  // i-th; `addresses` names each shard's master (empty: unnamed shards).
  // kInvalidParams when shards is 0 or over kKeySlots, or when `addresses`
  // is neither empty nor one per shard.
  static Result<SlotTable> Even(uint32_t shards, std::vector<std::string> addresses = {});

  // Parses a static list "FIRST-LAST=HOST:PORT[,...]" (or "SLOT=HOST:PORT"
  // for a single slot), e.g. "0-8191=127.0.0.1:50051,8192-16383=127.0.0.1:50052".
  // Ranges sharing an address belong to one shard. kInvalidParams for a
  // malformed entry or address, a slot out of range, an overlap or a gap;
  // `why` (when not null) then says which.
  static Result<SlotTable> Parse(std::string_view text, std::string* why = nullptr);

  // The list Parse reads back, ranges in slot order. Unnamed shards print
  // as "#INDEX", which Parse rejects: only named tables round-trip.
  std::string Format() const;

  uint32_t shard_count() const { return static_cast<uint32_t>(addresses_.size()); }
  uint32_t ShardOfSlot(uint32_t slot) const { return owner_[slot % kKeySlots]; }
  uint32_t ShardOf(std::string_view key) const { return owner_[KeySlot(key)]; }
  // The master of `shard`; empty for an unnamed shard.
  const std::string& address(uint32_t shard) const { return addresses_.at(shard); }
  const std::vector<SlotRange>& ranges() const { return ranges_; }

 private:
  SlotTable() = default;
  // Fills owner_ from ranges_, which must cover every slot once.
  void BuildOwners();

  std::vector<SlotRange> ranges_;       // in slot order, adjacent ranges of one shard merged
  std::vector<std::string> addresses_;  // one per shard
  std::vector<uint16_t> owner_;         // kKeySlots entries: the shard of each slot
};

}  // namespace mooncake
