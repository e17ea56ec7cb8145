// The SSD tier's on-disk format: keys sort by (object, chunk) and metadata
// records survive a round trip; damaged records and those of a newer format
// are refused, each with its own reason.

#include "tiers/ssd_format.h"

#include <gtest/gtest.h>

#include <string>

namespace mooncake::ssd_format {
namespace {

DurableObjectMeta SampleMeta() {
  DurableObjectMeta meta;
  meta.key = std::string("model/\0layer-7", 14);
  meta.location.offset = 42;
  meta.location.size = (5ull << 32) + 17;
  meta.version = 9;
  meta.hard_pinned = true;
  meta.soft_pinned = false;
  return meta;
}

TEST(SsdFormatTest, DataKeysSortByObjectThenChunk) {
  EXPECT_LT(DataKey(1, 255), DataKey(1, 256));
  EXPECT_LT(DataKey(1, ~0ull), DataKey(2, 0));
  EXPECT_LT(DataKey(255, 0), DataKey(256, 0));
  EXPECT_EQ(DataKey(7, 3).size(), 16u);
}

TEST(SsdFormatTest, PrefixedKeysCarryTheIdBigEndian) {
  const std::string key = PrefixedKey(kMetaPrefix, 0x0102030405060708ull);
  ASSERT_EQ(key.size(), 9u);
  EXPECT_EQ(key[0], kMetaPrefix);
  EXPECT_EQ(ReadBigEndian64(key.data() + 1), 0x0102030405060708ull);
}

TEST(SsdFormatTest, MetaRoundTripsEveryField) {
  const DurableObjectMeta meta = SampleMeta();
  auto decoded = DecodeMeta(EncodeMeta(meta));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->key, meta.key);
  EXPECT_EQ(decoded->location.offset, meta.location.offset);
  EXPECT_EQ(decoded->location.size, meta.location.size);
  EXPECT_EQ(decoded->version, meta.version);
  EXPECT_TRUE(decoded->hard_pinned);
  EXPECT_FALSE(decoded->soft_pinned);
}

// A damaged record and one of a newer format are both refused, but told
// apart: Open deletes the first and must keep the second (a rollback).
TEST(SsdFormatTest, DamagedMetaIsMalformedAndANewerFormatIsToldApart) {
  const std::string encoded = EncodeMeta(SampleMeta());
  ASSERT_EQ(static_cast<uint8_t>(encoded[0]), kMetaFormatVersion);
  auto error_of = [](std::string_view in) {
    auto decoded = DecodeMeta(in);
    EXPECT_FALSE(decoded);
    return decoded ? MetaDecodeError{} : decoded.error();
  };
  EXPECT_EQ(error_of(encoded.substr(0, encoded.size() - 1)), MetaDecodeError::kMalformed);
  EXPECT_EQ(error_of(encoded + "x"), MetaDecodeError::kMalformed);  // trailing bytes
  EXPECT_EQ(error_of(""), MetaDecodeError::kMalformed);
  std::string never_written = encoded;
  never_written[0] = 0;
  EXPECT_EQ(error_of(never_written), MetaDecodeError::kMalformed);
  // A newer release may change the layout after the version byte entirely.
  std::string newer = encoded;
  newer[0] = static_cast<char>(kMetaFormatVersion + 1);
  EXPECT_EQ(error_of(newer), MetaDecodeError::kNewerFormat);
  EXPECT_EQ(error_of(newer.substr(0, 1)), MetaDecodeError::kNewerFormat);
  EXPECT_EQ(error_of("\xff"), MetaDecodeError::kNewerFormat);
}

}  // namespace
}  // namespace mooncake::ssd_format
