#include "tiers/dram_tier.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace mooncake {
namespace {

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

std::unique_ptr<DramTier> MakeTier(uint64_t capacity) {
  auto tier = DramTier::Create("dram0", capacity);
  EXPECT_TRUE(tier.has_value());
  return tier ? std::move(*tier) : nullptr;
}

TEST(DramTierTest, CreateRejectsZeroCapacityAndReportsIdentity) {
  auto bad = DramTier::Create("x", 0);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), ErrorCode::kInvalidParams);

  auto tier = MakeTier(1 << 20);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->name(), "dram0");
  EXPECT_EQ(tier->kind(), TierKind::kDram);
  EXPECT_EQ(ToString(tier->kind()), "dram");
  EXPECT_EQ(ToString(TierKind::kVram), "vram");
  EXPECT_EQ(ToString(TierKind::kSsd), "ssd");
  EXPECT_EQ(tier->capacity(), 1u << 20);
  EXPECT_EQ(tier->arena_size(), 1u << 20);
  ASSERT_NE(tier->arena_base(), nullptr);
}

TEST(DramTierTest, RoundTripIsByteExactAndLandsInTheArena) {
  auto tier = MakeTier(8 << 20);
  ASSERT_TRUE(tier);
  auto loc = tier->Allocate((1 << 20) + 3);
  ASSERT_TRUE(loc);
  const auto data = RandomBytes(loc->size, 7);
  // Write in uneven pieces to exercise offsets inside the location.
  const std::span<const std::byte> all(data);
  ASSERT_TRUE(tier->Write(*loc, 0, all.first(1000)));
  ASSERT_TRUE(tier->Write(*loc, 1000, all.subspan(1000, 500000)));
  ASSERT_TRUE(tier->Write(*loc, 501000, all.subspan(501000)));

  std::vector<std::byte> out(loc->size);
  ASSERT_TRUE(tier->Read(*loc, 0, out));
  EXPECT_EQ(out, data);
  std::vector<std::byte> part(12345);
  ASSERT_TRUE(tier->Read(*loc, 777, part));
  EXPECT_EQ(0, std::memcmp(part.data(), data.data() + 777, part.size()));
  EXPECT_EQ(0, std::memcmp(tier->arena_base() + loc->offset, data.data(), data.size()));
}

TEST(DramTierTest, ObjectsDoNotOverwriteEachOther) {
  auto tier = MakeTier(1 << 20);
  ASSERT_TRUE(tier);
  auto a = tier->Allocate(1000);
  auto b = tier->Allocate(1000);
  ASSERT_TRUE(a && b);
  const auto da = RandomBytes(1000, 1);
  const auto db = RandomBytes(1000, 2);
  ASSERT_TRUE(tier->Write(*a, 0, da));
  ASSERT_TRUE(tier->Write(*b, 0, db));
  std::vector<std::byte> out(1000);
  ASSERT_TRUE(tier->Read(*a, 0, out));
  EXPECT_EQ(out, da);
  ASSERT_TRUE(tier->Read(*b, 0, out));
  EXPECT_EQ(out, db);
}

TEST(DramTierTest, OutOfRangeAccessIsInvalidParams) {
  auto tier = MakeTier(1 << 16);
  ASSERT_TRUE(tier);
  auto loc = tier->Allocate(100);
  ASSERT_TRUE(loc);
  std::vector<std::byte> two(2);
  EXPECT_EQ(tier->Write(*loc, 99, two).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Read(*loc, 99, two).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Read(*loc, 101, std::span<std::byte>()).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Write(*loc, UINT64_MAX, two).error(), ErrorCode::kInvalidParams);
  EXPECT_TRUE(tier->Write(*loc, 98, two));
  EXPECT_TRUE(tier->Read(*loc, 100, std::span<std::byte>()));

  // A location that does not fit in the arena is rejected, not dereferenced.
  TierLocation outside{.offset = (1 << 16) - 10, .size = 100};
  EXPECT_EQ(tier->Read(outside, 0, two).error(), ErrorCode::kInvalidParams);
  TierLocation wrap{.offset = UINT64_MAX - 1, .size = 4};
  EXPECT_EQ(tier->Write(wrap, 0, two).error(), ErrorCode::kInvalidParams);
}

TEST(DramTierTest, CapacityExhaustionAndRecovery) {
  auto tier = MakeTier(4096);
  ASSERT_TRUE(tier);
  auto whole = tier->Allocate(4096);
  ASSERT_TRUE(whole);
  auto more = tier->Allocate(1);
  ASSERT_FALSE(more);
  EXPECT_EQ(more.error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(tier->Allocate(0).error(), ErrorCode::kInvalidParams);
  tier->Free(*whole);
  EXPECT_TRUE(tier->Allocate(4096));
}

TEST(DramTierTest, UsedCountsAlignedBytesAndObjectCountLiveAllocations) {
  auto tier = MakeTier(1 << 20);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->used(), 0u);
  auto a = tier->Allocate(1);
  auto b = tier->Allocate(100);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->size, 1u);  // the location keeps the requested size
  EXPECT_EQ(tier->used(), 64u + 128u);
  EXPECT_EQ(tier->object_count(), 2u);
  tier->Free(*a);
  EXPECT_EQ(tier->used(), 128u);
  EXPECT_EQ(tier->object_count(), 1u);
  tier->Free(*b);
  EXPECT_EQ(tier->used(), 0u);
  EXPECT_EQ(tier->object_count(), 0u);
}

}  // namespace
}  // namespace mooncake
