#include "tiers/ssd_format.h"

#include <algorithm>

namespace mooncake::ssd_format {
namespace {

void AppendBigEndian64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}

// Meta value layout (little-endian fields, versioned so it can evolve):
//   u8 format_version | u64 offset | u64 size | u64 version | u8 flags |
//   u32 key_len | key bytes
// flags: bit 0 hard_pinned, bit 1 soft_pinned.
constexpr size_t kMetaFixedBytes = 1 + 8 + 8 + 8 + 1 + 4;

template <typename T>
void AppendLittleEndian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

template <typename T>
T ReadLittleEndian(const char*& p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<uint8_t>(p[i])) << (8 * i);
  p += sizeof(T);
  return v;
}

}  // namespace

uint64_t ReadBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string DataKey(uint64_t id, uint64_t chunk) {
  std::string key;
  key.reserve(16);
  AppendBigEndian64(key, id);
  AppendBigEndian64(key, chunk);
  return key;
}

std::string PrefixedKey(char prefix, uint64_t id) {
  std::string key(1, prefix);
  AppendBigEndian64(key, id);
  return key;
}

std::string EncodeMeta(const DurableObjectMeta& meta) {
  std::string out;
  out.reserve(kMetaFixedBytes + meta.key.size());
  out.push_back(static_cast<char>(kMetaFormatVersion));
  AppendLittleEndian<uint64_t>(out, meta.location.offset);
  AppendLittleEndian<uint64_t>(out, meta.location.size);
  AppendLittleEndian<uint64_t>(out, meta.version);
  const uint8_t flags = (meta.hard_pinned ? 1 : 0) | (meta.soft_pinned ? 2 : 0);
  AppendLittleEndian<uint8_t>(out, flags);
  AppendLittleEndian<uint32_t>(out, static_cast<uint32_t>(meta.key.size()));
  out.append(meta.key);
  return out;
}

std::expected<DurableObjectMeta, MetaDecodeError> DecodeMeta(std::string_view in) {
  // Only the version byte is read from a newer record: its layout may differ.
  if (!in.empty() && static_cast<uint8_t>(in[0]) > kMetaFormatVersion) {
    return std::unexpected(MetaDecodeError::kNewerFormat);
  }
  if (in.size() < kMetaFixedBytes || static_cast<uint8_t>(in[0]) != kMetaFormatVersion) {
    return std::unexpected(MetaDecodeError::kMalformed);
  }
  const char* p = in.data() + 1;
  DurableObjectMeta meta;
  meta.location.offset = ReadLittleEndian<uint64_t>(p);
  meta.location.size = ReadLittleEndian<uint64_t>(p);
  meta.version = ReadLittleEndian<uint64_t>(p);
  const auto flags = ReadLittleEndian<uint8_t>(p);
  const auto key_len = ReadLittleEndian<uint32_t>(p);
  if (in.size() != kMetaFixedBytes + key_len) return std::unexpected(MetaDecodeError::kMalformed);
  meta.hard_pinned = (flags & 1) != 0;
  meta.soft_pinned = (flags & 2) != 0;
  meta.key.assign(p, key_len);
  return meta;
}

std::array<char, kDeferredSlotBytes> EncodeDeferredSlot(uint64_t id) {
  std::array<char, kDeferredSlotBytes> slot{};
  if (id == 0) return slot;  // all zeros: empty
  std::string bytes;
  AppendLittleEndian<uint64_t>(bytes, id);
  AppendLittleEndian<uint64_t>(bytes, ~id);
  std::copy(bytes.begin(), bytes.end(), slot.begin());
  return slot;
}

uint64_t DecodeDeferredSlot(const char* slot) {
  const uint64_t id = ReadLittleEndian<uint64_t>(slot);
  const uint64_t check = ReadLittleEndian<uint64_t>(slot);
  return check == ~id ? id : 0;
}

}  // namespace mooncake::ssd_format
