// HotCache: the client-side LRU. Synchronous mode (background = false) makes
// offers land at once, so capacity and eviction order are deterministic; one
// test covers the background filler.

#include "client/hot_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace mooncake {
namespace {

using namespace std::chrono_literals;

HotCache::Entry Value(size_t size, int64_t version = 1, std::string node = "n1") {
  return HotCache::Entry{std::make_shared<const std::string>(size, 'x'), std::move(node), version,
                         HotCache::Clock::now()};
}

TEST(HotCacheTest, DisabledCacheHoldsNothing) {
  HotCache cache(0, /*background=*/false);
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(cache.Admits(1));
  EXPECT_FALSE(cache.Insert("k", Value(1), cache.Ticket()));
  EXPECT_FALSE(cache.Lookup("k"));
}

TEST(HotCacheTest, ObjectsOverAnEighthOfTheBudgetAreNotCached) {
  HotCache cache(8000, /*background=*/false);
  EXPECT_TRUE(cache.Admits(1000));
  EXPECT_FALSE(cache.Admits(1001));
  EXPECT_FALSE(cache.Insert("big", Value(1001), cache.Ticket()));
  EXPECT_TRUE(cache.Insert("ok", Value(1000), cache.Ticket()));
  EXPECT_FALSE(cache.Lookup("big"));
  EXPECT_TRUE(cache.Lookup("ok"));
}

TEST(HotCacheTest, StaysWithinCapacityAndEvictsLeastRecentlyUsed) {
  HotCache cache(8000, /*background=*/false);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(cache.Insert("k" + std::to_string(i), Value(1000), cache.Ticket()));
  }
  EXPECT_EQ(cache.counters().bytes, 8000u);
  EXPECT_EQ(cache.counters().entries, 8u);
  // Touch k0 so k1 becomes the least recently used.
  ASSERT_TRUE(cache.Lookup("k0"));
  ASSERT_TRUE(cache.Insert("k8", Value(1000), cache.Ticket()));
  EXPECT_TRUE(cache.Lookup("k0"));
  EXPECT_FALSE(cache.Lookup("k1"));
  EXPECT_TRUE(cache.Lookup("k2"));
  // A 1000-byte entry arriving when 500 bytes are short evicts one more.
  ASSERT_TRUE(cache.Insert("k9", Value(1000), cache.Ticket()));
  EXPECT_FALSE(cache.Lookup("k3"));
  EXPECT_LE(cache.counters().bytes, 8000u);
  EXPECT_EQ(cache.counters().entries, 8u);
}

TEST(HotCacheTest, ReplacingAnEntryAccountsBytesOnce) {
  HotCache cache(8000, /*background=*/false);
  ASSERT_TRUE(cache.Insert("k", Value(1000, 1), cache.Ticket()));
  ASSERT_TRUE(cache.Insert("k", Value(500, 2), cache.Ticket()));
  EXPECT_EQ(cache.counters().bytes, 500u);
  EXPECT_EQ(cache.Lookup("k")->version, 2);
  // An older copy of the same node never replaces a newer one.
  EXPECT_FALSE(cache.Insert("k", Value(500, 1), cache.Ticket()));
  EXPECT_EQ(cache.Lookup("k")->version, 2);
}

TEST(HotCacheTest, EraseDropsTheEntryAndFillsFromEarlierReads) {
  HotCache cache(8000, /*background=*/false);
  ASSERT_TRUE(cache.Insert("k", Value(100), cache.Ticket()));
  uint64_t before = cache.Ticket();  // a read that started before the write
  cache.Erase("k");
  EXPECT_FALSE(cache.Lookup("k"));
  EXPECT_EQ(cache.counters().bytes, 0u);
  EXPECT_FALSE(cache.Insert("k", Value(100, 1), before));
  // A read that started after the write may fill it again.
  EXPECT_TRUE(cache.Insert("k", Value(100, 2), cache.Ticket()));
  // Other keys are unaffected by the invalidation.
  EXPECT_TRUE(cache.Insert("other", Value(100), before));
}

TEST(HotCacheTest, ManyInvalidationsCollapseIntoAFloor) {
  HotCache cache(1 << 20, /*background=*/false);
  uint64_t old_ticket = cache.Ticket();
  for (size_t i = 0; i <= HotCache::kMaxInvalidations; ++i) cache.Erase("e" + std::to_string(i));
  // Whatever was forgotten, a fill older than the invalidations is refused.
  EXPECT_FALSE(cache.Insert("e1", Value(10), old_ticket));
  EXPECT_TRUE(cache.Insert("e1", Value(10), cache.Ticket()));
}

TEST(HotCacheTest, RefreshMovesTheFetchTimeForwardOnlyForTheSameVersion) {
  HotCache cache(8000, /*background=*/false);
  auto entry = Value(10, 3);
  auto old_time = entry.fetched;
  ASSERT_TRUE(cache.Insert("k", entry, cache.Ticket()));
  auto later = old_time + 5s;
  cache.Refresh("k", 2, later);
  EXPECT_EQ(cache.Lookup("k")->fetched, old_time);
  cache.Refresh("k", 3, later);
  EXPECT_EQ(cache.Lookup("k")->fetched, later);
}

TEST(HotCacheTest, BackgroundFillerInsertsOffers) {
  HotCache cache(8000);
  cache.Offer("k", Value(100), cache.Ticket());
  cache.Offer("big", Value(5000), cache.Ticket());  // not admitted
  ASSERT_TRUE(cache.WaitIdle(5s));
  EXPECT_TRUE(cache.Lookup("k"));
  EXPECT_FALSE(cache.Lookup("big"));
  EXPECT_EQ(cache.counters().entries, 1u);
}

TEST(HotCacheTest, CountersCount) {
  HotCache cache(8000, /*background=*/false);
  cache.CountHit();
  cache.CountMiss();
  cache.CountMiss();
  cache.CountValidation();
  cache.CountStale();
  auto c = cache.counters();
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.misses, 2u);
  EXPECT_EQ(c.validations, 1u);
  EXPECT_EQ(c.stale, 1u);
}

}  // namespace
}  // namespace mooncake
