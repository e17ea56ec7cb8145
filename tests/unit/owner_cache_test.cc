#include "client/owner_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace mooncake {
namespace {

std::string Key(int i) { return "kv-cache-block/layer-7/request-" + std::to_string(i); }

TEST(OwnerCacheTest, RemembersUpdatesAndForgets) {
  OwnerCache cache(1 << 20);
  EXPECT_FALSE(cache.Find("a").has_value());
  cache.Remember("a", "node-1");
  EXPECT_EQ(cache.Find("a"), "node-1");
  cache.Remember("a", "node-2");  // the owner moved
  EXPECT_EQ(cache.Find("a"), "node-2");
  EXPECT_EQ(cache.entries(), 1u);
  cache.Forget("a");
  EXPECT_FALSE(cache.Find("a").has_value());
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_LE(cache.bytes(), 1u << 20);
}

TEST(OwnerCacheTest, ZeroBudgetKeepsNothing) {
  OwnerCache cache(0);
  cache.Remember("a", "node-1");
  EXPECT_FALSE(cache.Find("a").has_value());
  EXPECT_EQ(cache.entries(), 0u);
}

TEST(OwnerCacheTest, StaysWithinItsByteBudget) {
  const uint64_t budget = 256 << 10;
  OwnerCache cache(budget);
  for (int i = 0; i < 50000; ++i) cache.Remember(Key(i), "node-" + std::to_string(i % 7));
  EXPECT_LE(cache.bytes(), budget);
  // It still holds a useful share: at least a quarter of what fits.
  EXPECT_GE(cache.entries(), budget / OwnerCache::kEntryBytes / 4);
  // The newest keys are the ones kept.
  EXPECT_EQ(cache.Find(Key(49999)), "node-" + std::to_string(49999 % 7));
  EXPECT_FALSE(cache.Find(Key(0)).has_value());
}

TEST(OwnerCacheTest, KeysInUseSurviveEviction) {
  OwnerCache cache(64 << 10);
  cache.Remember("hot", "node-hot");
  for (int i = 0; i < 20000; ++i) {
    cache.Remember(Key(i), "node-1");
    // Read now and then, the hot key is never its bucket's least recently
    // used entry, so it is never the one replaced.
    if (i % 50 == 0) {
      ASSERT_EQ(cache.Find("hot"), "node-hot") << i;
    }
  }
  EXPECT_EQ(cache.Find("hot"), "node-hot");
}

TEST(OwnerCacheTest, HoldsAMillionKeysInItsDefaultBudget) {
  OwnerCache cache(256ull << 20);
  for (int i = 0; i < 1000000; ++i) cache.Remember(Key(i), "worker-12");
  // Every key is still there: the default budget is meant for millions.
  EXPECT_EQ(cache.entries(), 1000000u);
  EXPECT_EQ(cache.Find(Key(0)), "worker-12");
  EXPECT_EQ(cache.Find(Key(999999)), "worker-12");
}

TEST(OwnerCacheTest, AnEntryCostsTheSameWhateverTheKeyLength) {
  // Keys of KV-cache blocks are long (a prefix hash per block); what an
  // entry costs must not grow with them.
  const uint64_t budget = 64 << 10;
  OwnerCache cache(budget);
  auto long_key = [](int i) { return std::string(4096, 'k') + std::to_string(i); };
  for (int i = 0; i < 500; ++i) cache.Remember(long_key(i), "node-1");
  EXPECT_LE(cache.bytes(), budget);
  EXPECT_EQ(cache.entries(), 500u);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(cache.Find(long_key(i)), "node-1") << i;
}

TEST(OwnerCacheTest, OwnersOnNodesPastTheInternLimitAreNotRemembered) {
  OwnerCache cache(1 << 20);
  for (uint32_t n = 0; n < OwnerCache::kMaxNodes; ++n) {
    cache.Remember("key-" + std::to_string(n), "node-" + std::to_string(n));
  }
  cache.Remember("one-more", "node-past-the-limit");
  // Not remembered (reads of it ask the master), and nothing else is lost:
  // known nodes still take new keys.
  EXPECT_FALSE(cache.Find("one-more").has_value());
  EXPECT_EQ(cache.Find("key-0"), "node-0");
  cache.Remember("another", "node-7");
  EXPECT_EQ(cache.Find("another"), "node-7");
  EXPECT_EQ(cache.Find("key-4095"), "node-4095");
}

TEST(OwnerCacheTest, ConcurrentUseKeepsEntriesConsistent) {
  OwnerCache cache(1 << 20);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        std::string key = "t" + std::to_string(t) + "-" + std::to_string(i % 500);
        std::string node = "node-" + std::to_string(t);
        cache.Remember(key, node);
        auto found = cache.Find(key);
        // Only this thread writes its keys: a hit must be its own owner.
        if (found && *found != node) ++wrong;
        if (i % 7 == 0) cache.Forget(key);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.bytes(), 1u << 20);
}

}  // namespace
}  // namespace mooncake
