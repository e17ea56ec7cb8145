#pragma once

// The SSD tier's on-disk layout inside RocksDB: how data chunks and object
// metadata are keyed, and how a metadata record is encoded. Kept apart from
// SsdTier so the format, which must stay readable across versions, is read
// and changed in one place.
//
//   data column family:  DataKey(id, chunk) -> the chunk's bytes
//   "meta" column family: 'm' + id -> EncodeMeta(meta)   (committed object)
//                         'p' + id -> ""                 (write in progress)
//   file kDeferredDeletesFile: kDeferredSlots slots of EncodeDeferredSlot(id)
//
// Thread-safety: pure functions.

#include <array>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

#include "tiers/cache_tier.h"

namespace mooncake::ssd_format {

inline constexpr char kMetaCfName[] = "meta";
// Key prefixes inside the meta column family. A meta record marks a committed
// object; a pending marker is written in the same batch as an object's chunks
// so that Open can find (and drop) data that was never committed without
// scanning the data column family.
inline constexpr char kMetaPrefix = 'm';
inline constexpr char kPendingPrefix = 'p';

// Object ids are below this, so id + 1 never wraps: a record naming a larger
// id is damaged (Open deletes it) and Allocate never hands one out.
inline constexpr uint64_t kIdLimit = 1ull << 63;

// Big-endian keys sort by (id, chunk) numerically, so one object's chunks are
// contiguous, from DataKey(id, 0) to DataKey(id, 2^64 - 1).
std::string DataKey(uint64_t id, uint64_t chunk);
// `prefix` followed by the big-endian id: 9 bytes.
std::string PrefixedKey(char prefix, uint64_t id);
// The big-endian uint64 at `p` (8 bytes).
uint64_t ReadBigEndian64(const char* p);

// The format version EncodeMeta writes (the first byte of a meta record).
inline constexpr uint8_t kMetaFormatVersion = 1;

// Why DecodeMeta could not read a record. A record of a newer format is
// well-formed data this release cannot interpret (left after a rollback): it
// must be kept, not treated as damage. Any other record that does not decode
// (cut short, trailing bytes, a format version never written) is damaged.
enum class MetaDecodeError {
  kMalformed,
  kNewerFormat,
};

// Versioned metadata record: the first byte is the format version.
std::string EncodeMeta(const DurableObjectMeta& meta);
std::expected<DurableObjectMeta, MetaDecodeError> DecodeMeta(std::string_view in);

// Ids whose delete RocksDB could not take (no room on the disk for the
// tombstones) are recorded in this file, next to RocksDB's own, so that a
// restart does not bring the objects back. The file is written in full (zeros)
// when the tier opens and afterwards only overwritten in place: on a file
// system that does not copy on write, recording an id then needs no free
// space. RocksDB ignores files whose names it does not know.
inline constexpr char kDeferredDeletesFile[] = "MOONCAKE-DEFERRED-DELETES";
inline constexpr size_t kDeferredSlotBytes = 16;
inline constexpr size_t kDeferredSlots = 1024;
// A slot holds the id and its complement (little-endian), so a slot torn by a
// crash reads as empty rather than as another id. Id 0 encodes an empty slot.
std::array<char, kDeferredSlotBytes> EncodeDeferredSlot(uint64_t id);
// The id in a slot, or 0 for an empty or torn one.
uint64_t DecodeDeferredSlot(const char* slot);

}  // namespace mooncake::ssd_format
