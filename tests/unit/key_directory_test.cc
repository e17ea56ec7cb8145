#include "master/key_directory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace mooncake {
namespace {

constexpr uint32_t kNone = KeyDirectory::kNone;

std::string Key(int i) { return "key-" + std::to_string(i); }

// Every key the directory holds, by iteration.
std::map<std::string, uint32_t> Contents(const KeyDirectory& dir) {
  std::map<std::string, uint32_t> out;
  dir.ForEach([&](std::string_view key, uint32_t owner) {
    EXPECT_TRUE(out.emplace(std::string(key), owner).second) << "visited twice: " << key;
  });
  return out;
}

TEST(KeyDirectoryTest, ClaimIsFirstWriterWins) {
  KeyDirectory dir;
  EXPECT_EQ(dir.Find("k"), kNone);
  EXPECT_EQ(dir.Claim("k", 1), 1u);
  EXPECT_EQ(dir.Claim("k", 2), 1u);  // taken: answers the owner
  EXPECT_EQ(dir.Claim("k", 1), 1u);  // the owner again: idempotent
  EXPECT_EQ(dir.Find("k"), 1u);
  EXPECT_EQ(dir.Find("k2"), kNone);
  EXPECT_EQ(dir.size(), 1u);
}

TEST(KeyDirectoryTest, CompareAndSwapAndRemoveIfCheckTheOwner) {
  KeyDirectory dir;
  EXPECT_EQ(dir.CompareAndSwap("k", 1, 2), kNone);  // absent: nothing created
  EXPECT_EQ(dir.Find("k"), kNone);
  ASSERT_EQ(dir.Claim("k", 1), 1u);
  EXPECT_EQ(dir.CompareAndSwap("k", 3, 2), 1u);  // not the expected owner
  EXPECT_EQ(dir.Find("k"), 1u);
  EXPECT_EQ(dir.CompareAndSwap("k", 1, 2), 1u);  // swapped
  EXPECT_EQ(dir.Find("k"), 2u);
  EXPECT_EQ(dir.RemoveIf("k", 1), 2u);  // not the owner: kept
  EXPECT_EQ(dir.Find("k"), 2u);
  EXPECT_EQ(dir.RemoveIf("k", 2), 2u);  // removed
  EXPECT_EQ(dir.Find("k"), kNone);
  EXPECT_EQ(dir.RemoveIf("k", 2), kNone);
  EXPECT_EQ(dir.size(), 0u);
  EXPECT_EQ(dir.Claim("k", 3), 3u);  // free to claim again
}

TEST(KeyDirectoryTest, GrowsAndShrinksKeepingEveryKey) {
  KeyDirectory dir;
  constexpr int kKeys = 200000;
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(dir.Claim(Key(i), i % 7), static_cast<uint32_t>(i % 7));
  EXPECT_EQ(dir.size(), static_cast<size_t>(kKeys));
  size_t full = dir.memory_bytes();
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(dir.Find(Key(i)), static_cast<uint32_t>(i % 7)) << i;
  // Remove all but every 16th key: tables shrink, arenas compact.
  for (int i = 0; i < kKeys; ++i) {
    if (i % 16 != 0) {
      ASSERT_EQ(dir.RemoveIf(Key(i), i % 7), static_cast<uint32_t>(i % 7));
    }
  }
  EXPECT_EQ(dir.size(), static_cast<size_t>(kKeys / 16));
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(dir.Find(Key(i)), i % 16 == 0 ? static_cast<uint32_t>(i % 7) : kNone) << i;
  }
  EXPECT_LT(dir.memory_bytes(), full / 4);
  for (int i = 0; i < kKeys; i += 16)
    ASSERT_EQ(dir.RemoveIf(Key(i), i % 7), static_cast<uint32_t>(i % 7));
  EXPECT_EQ(dir.size(), 0u);
  EXPECT_EQ(dir.memory_bytes(), 0u);  // empty shards hold nothing
}

// Random claims, swaps and removes against std::unordered_map: exercises
// probe runs, wrap-around and backward-shift deletion over many resizes.
TEST(KeyDirectoryTest, MatchesAReferenceMapUnderRandomOperations) {
  KeyDirectory dir;
  std::unordered_map<std::string, uint32_t> model;
  std::mt19937 rng(12345);
  // A small key space makes collisions between operations frequent.
  std::uniform_int_distribution<int> key_of(0, 5000), op_of(0, 9), owner_of(0, 3);
  for (int step = 0; step < 300000; ++step) {
    std::string key = Key(key_of(rng));
    uint32_t owner = owner_of(rng);
    auto it = model.find(key);
    uint32_t expected = it == model.end() ? kNone : it->second;
    int op = op_of(rng);
    if (op < 5) {
      ASSERT_EQ(dir.Claim(key, owner), expected == kNone ? owner : expected);
      if (expected == kNone) model[key] = owner;
    } else if (op < 7) {
      ASSERT_EQ(dir.RemoveIf(key, owner), expected);
      if (expected == owner) model.erase(key);
    } else if (op < 8) {
      ASSERT_EQ(dir.CompareAndSwap(key, owner, (owner + 1) % 4), expected);
      if (expected == owner) model[key] = (owner + 1) % 4;
    } else {
      ASSERT_EQ(dir.Find(key), expected);
    }
  }
  ASSERT_EQ(dir.size(), model.size());
  auto contents = Contents(dir);
  std::map<std::string, uint32_t> sorted(model.begin(), model.end());
  EXPECT_EQ(contents, sorted);
}

TEST(KeyDirectoryTest, KeysAreBytesOfAnyValueAndLength) {
  KeyDirectory dir;
  std::vector<std::string> keys;
  for (int b = 0; b < 256; ++b) keys.push_back(std::string(1, static_cast<char>(b)));
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  keys.push_back(all);
  keys.push_back(std::string("a\0b", 3));
  keys.push_back(std::string("a\0c", 3));
  keys.push_back(std::string());  // the empty key is a key too
  // Length-prefix boundaries (1- and 2-byte varints) and the master's limit.
  for (size_t len : {127, 128, 129, 4095, 4096, 16383, 16384, 100000}) {
    keys.push_back(std::string(len, 'x'));
    keys.push_back(std::string(len - 1, 'x') + '\xff');
  }
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(dir.Claim(keys[i], i), i) << i;
  EXPECT_EQ(dir.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(dir.Find(keys[i]), i) << i;
  EXPECT_EQ(dir.Find(std::string("a\0d", 3)), kNone);
  EXPECT_EQ(dir.Find(std::string(4097, 'x')), kNone);
  auto contents = Contents(dir);
  ASSERT_EQ(contents.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(contents.at(keys[i]), i);
}

TEST(KeyDirectoryTest, BatchCallsAnswerEachKeyInOrder) {
  KeyDirectory dir;
  ASSERT_EQ(dir.Claim("taken", 9), 9u);
  std::vector<std::string> storage;
  for (int i = 0; i < 1000; ++i) storage.push_back(Key(i));
  storage.push_back("taken");
  storage.push_back(Key(5));  // twice in one batch: the second sees the first
  std::vector<std::string_view> keys(storage.begin(), storage.end());
  std::vector<uint32_t> owners(keys.size(), 77);
  dir.ClaimMany(keys, 1, owners);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(owners[i], 1u);
  EXPECT_EQ(owners[1000], 9u);
  EXPECT_EQ(owners[1001], 1u);
  EXPECT_EQ(dir.size(), 1001u);

  std::vector<std::string_view> probe = {"taken", "absent", keys[3], "", keys[999]};
  std::vector<uint32_t> found(probe.size(), 77);
  dir.FindMany(probe, found);
  EXPECT_EQ(found, (std::vector<uint32_t>{9, kNone, 1, kNone, 1}));
  dir.FindMany({}, {});  // an empty batch is fine
}

TEST(KeyDirectoryTest, RemoveOwnersDropsExactlyTheirKeys) {
  KeyDirectory dir;
  constexpr int kKeys = 30000;
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(dir.Claim(Key(i), i % 5), static_cast<uint32_t>(i % 5));
  std::vector<size_t> per_owner;
  std::vector<uint32_t> doomed = {1, 3, 42};
  EXPECT_EQ(dir.RemoveOwners(doomed, &per_owner), static_cast<size_t>(2 * kKeys / 5));
  EXPECT_EQ(per_owner, (std::vector<size_t>{kKeys / 5, kKeys / 5, 0}));
  EXPECT_EQ(dir.size(), static_cast<size_t>(3 * kKeys / 5));
  for (int i = 0; i < kKeys; ++i) {
    uint32_t owner = i % 5;
    ASSERT_EQ(dir.Find(Key(i)), owner == 1 || owner == 3 ? kNone : owner) << i;
  }
  auto contents = Contents(dir);
  EXPECT_EQ(contents.size(), dir.size());
  for (const auto& [key, owner] : contents) EXPECT_TRUE(owner != 1 && owner != 3) << key;
  EXPECT_EQ(dir.RemoveOwners(std::vector<uint32_t>{0, 2, 4}), static_cast<size_t>(3 * kKeys / 5));
  EXPECT_EQ(dir.size(), 0u);
  EXPECT_TRUE(Contents(dir).empty());
}

TEST(KeyDirectoryTest, ConcurrentClaimsOfTheSameKeysHaveOneWinnerEach) {
  KeyDirectory dir;
  constexpr int kThreads = 6;
  constexpr int kKeys = 20000;
  // results[t][i]: what thread t's claim of key i answered.
  std::vector<std::vector<uint32_t>> results(kThreads, std::vector<uint32_t>(kKeys));
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();
      std::vector<std::string> batch_keys;
      for (int i = 0; i < kKeys; ++i) {
        // Half the threads claim one key at a time, half in batches of 64.
        if (t % 2 == 0) {
          results[t][i] = dir.Claim(Key(i), t);
          continue;
        }
        batch_keys.push_back(Key(i));
        if (batch_keys.size() == 64 || i == kKeys - 1) {
          std::vector<std::string_view> views(batch_keys.begin(), batch_keys.end());
          dir.ClaimMany(views, t,
                        std::span(results[t]).subspan(i + 1 - views.size(), views.size()));
          batch_keys.clear();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(dir.size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    uint32_t owner = dir.Find(Key(i));
    int winners = 0;
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_EQ(results[t][i], owner) << "key " << i << " thread " << t;
      winners += owner == static_cast<uint32_t>(t);
    }
    ASSERT_EQ(winners, 1) << i;
  }
}

TEST(KeyDirectoryTest, PurgeConcurrentWithClaimsKeepsOtherOwnersKeys) {
  KeyDirectory dir;
  for (int i = 0; i < 20000; ++i) ASSERT_EQ(dir.Claim("doomed-" + std::to_string(i), 7), 7u);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (uint32_t w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 20000; ++i) {
        std::string key = "live-" + std::to_string(w) + "-" + std::to_string(i);
        ASSERT_EQ(dir.Claim(key, w), w);
        if (i % 3 == 0) {
          ASSERT_EQ(dir.RemoveIf(key, w), w);
        }
      }
    });
  }
  std::thread reader([&] {
    while (!stop) (void)dir.Find("doomed-1");
  });
  EXPECT_EQ(dir.RemoveOwners(std::vector<uint32_t>{7}), 20000u);
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  size_t expected = 0;
  for (uint32_t w = 0; w < 2; ++w) {
    for (int i = 0; i < 20000; ++i) {
      std::string key = "live-" + std::to_string(w) + "-" + std::to_string(i);
      uint32_t owner = i % 3 == 0 ? kNone : w;
      ASSERT_EQ(dir.Find(key), owner) << key;
      expected += owner != kNone;
    }
  }
  EXPECT_EQ(dir.size(), expected);
  EXPECT_EQ(dir.Find("doomed-1"), kNone);
}

}  // namespace
}  // namespace mooncake
