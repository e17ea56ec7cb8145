#include "tiers/arena_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace mooncake {
namespace {

TEST(ArenaAllocatorTest, RoundsOffsetsAndSizesToAlignment) {
  ArenaAllocator alloc(1 << 20, 64);
  auto a = alloc.Allocate(1);
  auto b = alloc.Allocate(65);
  auto c = alloc.Allocate(64);
  ASSERT_TRUE(a && b && c);
  for (uint64_t off : {*a, *b, *c}) EXPECT_EQ(off % 64, 0u);
  EXPECT_EQ(alloc.used(), 64u + 128u + 64u);
  EXPECT_EQ(alloc.allocation_count(), 3u);

  ArenaAllocator page(1 << 20, 4096);
  auto p = page.Allocate(1);
  auto q = page.Allocate(4097);
  ASSERT_TRUE(p && q);
  EXPECT_EQ(*p % 4096, 0u);
  EXPECT_EQ(*q % 4096, 0u);
  EXPECT_EQ(page.used(), 4096u + 8192u);
}

TEST(ArenaAllocatorTest, ZeroSizeReturnsNullopt) {
  ArenaAllocator alloc(4096);
  EXPECT_FALSE(alloc.Allocate(0));
  EXPECT_EQ(alloc.used(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 0u);
}

TEST(ArenaAllocatorTest, BestFitPicksSmallestSufficientHole) {
  ArenaAllocator alloc(1024, 64);
  auto a = alloc.Allocate(256);  // [0, 256)
  auto s1 = alloc.Allocate(64);  // separator so holes cannot merge
  auto b = alloc.Allocate(128);  // [320, 448)
  auto s2 = alloc.Allocate(64);
  auto c = alloc.Allocate(512);  // the rest
  ASSERT_TRUE(a && s1 && b && s2 && c);
  EXPECT_EQ(alloc.used(), 1024u);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 320u);

  alloc.Free(*a);
  alloc.Free(*b);
  // First fit would take offset 0; best fit takes the 128-byte hole.
  auto small = alloc.Allocate(100);
  ASSERT_TRUE(small);
  EXPECT_EQ(*small, 320u);
  auto big = alloc.Allocate(200);
  ASSERT_TRUE(big);
  EXPECT_EQ(*big, 0u);
  EXPECT_FALSE(alloc.Allocate(64));
}

TEST(ArenaAllocatorTest, FreeingEverythingInRandomOrderRestoresOneBlock) {
  constexpr uint64_t kCapacity = 64 * 4096;
  ArenaAllocator alloc(kCapacity, 64);
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> size_dist(1, 2000);
  std::vector<uint64_t> offsets;
  while (auto off = alloc.Allocate(size_dist(rng))) offsets.push_back(*off);
  ASSERT_GT(offsets.size(), 100u);
  // Fill whatever small holes remain so the arena is completely used.
  while (auto off = alloc.Allocate(64)) offsets.push_back(*off);
  EXPECT_EQ(alloc.used(), kCapacity);
  EXPECT_EQ(alloc.largest_free_block(), 0u);

  std::shuffle(offsets.begin(), offsets.end(), rng);
  for (uint64_t off : offsets) alloc.Free(off);
  EXPECT_EQ(alloc.used(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 0u);
  EXPECT_EQ(alloc.largest_free_block(), kCapacity);
  auto whole = alloc.Allocate(kCapacity);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, 0u);
}

TEST(ArenaAllocatorTest, ExhaustionReturnsNulloptAndFreeMakesRoom) {
  ArenaAllocator alloc(1024, 64);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) {
    auto off = alloc.Allocate(64);
    ASSERT_TRUE(off);
    offsets.push_back(*off);
  }
  EXPECT_FALSE(alloc.Allocate(1));
  EXPECT_FALSE(alloc.Allocate(2048));
  alloc.Free(offsets[7]);
  auto again = alloc.Allocate(10);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, offsets[7]);
}

TEST(ArenaAllocatorTest, UnknownOffsetFreeIsIgnored) {
  ArenaAllocator alloc(1024, 64);
  auto a = alloc.Allocate(64);
  ASSERT_TRUE(a);
  alloc.Free(*a + 64);
  alloc.Free(999999);
  EXPECT_EQ(alloc.used(), 64u);
  alloc.Free(*a);
  alloc.Free(*a);  // double free is a no-op, not a double credit
  EXPECT_EQ(alloc.used(), 0u);
  EXPECT_EQ(alloc.largest_free_block(), 1024u);
}

TEST(ArenaAllocatorTest, FragmentationLimitsLargestBlockUntilNeighboursFree) {
  ArenaAllocator alloc(16 * 64, 64);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) offsets.push_back(*alloc.Allocate(64));
  for (int i = 0; i < 16; i += 2) alloc.Free(offsets[i]);
  EXPECT_EQ(alloc.used(), 8u * 64);
  EXPECT_EQ(alloc.largest_free_block(), 64u);
  EXPECT_FALSE(alloc.Allocate(128));  // half free, but no two adjacent units

  alloc.Free(offsets[1]);  // joins holes 0,1,2 into one 192-byte block
  EXPECT_EQ(alloc.largest_free_block(), 192u);
  auto joined = alloc.Allocate(192);
  ASSERT_TRUE(joined);
  EXPECT_EQ(*joined, 0u);
}

TEST(ArenaAllocatorTest, ConcurrentAllocateFreeKeepsAccountingExactAndBlocksDisjoint) {
  constexpr uint64_t kCapacity = 1 << 20;
  constexpr int kThreads = 8;
  ArenaAllocator alloc(kCapacity, 64);
  // A shadow of the arena: each thread stamps its blocks with its id and
  // checks the stamp before freeing, which fails if two blocks ever overlap.
  std::vector<std::atomic<uint8_t>> shadow(kCapacity);
  std::atomic<bool> overlap{false};

  auto worker = [&](int tid) {
    std::mt19937_64 rng(tid);
    std::uniform_int_distribution<uint64_t> size_dist(1, 4096);
    std::vector<std::pair<uint64_t, uint64_t>> held;
    auto release = [&](size_t i) {
      auto [off, size] = held[i];
      for (uint64_t b = off; b < off + size; ++b) {
        if (shadow[b].exchange(0) != tid + 1) overlap = true;
      }
      alloc.Free(off);
      held[i] = held.back();
      held.pop_back();
    };
    for (int iter = 0; iter < 3000; ++iter) {
      if (held.empty() || rng() % 3 != 0) {
        uint64_t size = size_dist(rng);
        if (auto off = alloc.Allocate(size)) {
          for (uint64_t b = *off; b < *off + size; ++b) {
            if (shadow[b].exchange(tid + 1) != 0) overlap = true;
          }
          held.emplace_back(*off, size);
        } else if (!held.empty()) {
          release(rng() % held.size());
        }
      } else {
        release(rng() % held.size());
      }
    }
    while (!held.empty()) release(held.size() - 1);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();

  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(alloc.used(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 0u);
  EXPECT_EQ(alloc.largest_free_block(), kCapacity);
}

}  // namespace
}  // namespace mooncake
