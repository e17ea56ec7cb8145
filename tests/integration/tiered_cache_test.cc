// End-to-end behaviour of the tiered cache: a real mooncake-master and two
// real mooncake-worker processes on 127.0.0.1, driven through
// mooncake::Client. Each test builds its own small cluster (tiers of a few
// MiB), so tests run in parallel and the suite stays short.

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class TieredCacheTest : public ::testing::Test {
 protected:
  // Given a master and two workers, w1 and w2, on loopback.
  void GivenTwoNodes(WorkerOptions w1 = {}, WorkerOptions w2 = {}) {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", w1));
    ASSERT_TRUE(cluster_.StartWorker("w2", w2));
  }

  // Stats of `node`, failing the test if the call fails.
  WorkerCounters StatsOf(Client& client, const std::string& node) {
    auto stats = client.Stats(node);
    EXPECT_TRUE(IsOk(stats)) << "Stats(" << node << ")";
    return stats ? *stats : WorkerCounters{};
  }

  // The tier ("dram"/"ssd") Inspect reports for `key`, or "" on error.
  static std::string TierOf(Client& client, const std::string& key) {
    auto info = client.Inspect(key);
    return info ? info->tier : std::string();
  }

  // Expects Get(key) to return exactly `expected`.
  static ::testing::AssertionResult ReadsBack(Client& client, const std::string& key,
                                              const std::string& expected) {
    auto got = client.Get(key);
    if (!got) {
      return ::testing::AssertionFailure()
             << "Get(" << key << ") failed with " << ToString(got.error());
    }
    if (got->data.size() != expected.size()) {
      return ::testing::AssertionFailure() << "Get(" << key << ") returned " << got->data.size()
                                           << " bytes, expected " << expected.size();
    }
    if (got->data != expected) {
      size_t i = 0;
      while (i < expected.size() && got->data[i] == expected[i]) ++i;
      return ::testing::AssertionFailure()
             << "Get(" << key << ") returned different bytes from offset " << i;
    }
    return ::testing::AssertionSuccess();
  }

  TestCluster cluster_;
};

std::string Key(std::string_view prefix, int i) { return std::string(prefix) + std::to_string(i); }

// ---------------------------------------------------------------------------

TEST_F(TieredCacheTest, PutOnOneNodeIsReadByteForByteFromAnother) {
  ASSERT_NO_FATAL_FAILURE(GivenTwoNodes());
  auto on_w1 = cluster_.NewClient("w1");
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(on_w1 && on_w2);

  // When a client co-located with w1 puts values of several sizes, one of
  // them larger than a single RPC chunk, with every byte value in them.
  const std::map<std::string, std::string> values = {
      {"tiny", std::string("a\0b\xff", 4)},
      {"kv-block", PatternBytes(1, 64 << 10)},
      {"one-mib", PatternBytes(2, kMiB)},
      {"chunked", PatternBytes(3, 2 * kRpcChunkBytes + 12345)},
  };
  for (const auto& [key, value] : values) {
    ASSERT_TRUE(IsOk(on_w1->Put(key, value))) << "Put(" << key << ")";
  }

  // Expect a client on w2 to read each back byte for byte, owned by w1.
  for (const auto& [key, value] : values) {
    EXPECT_TRUE(ReadsBack(*on_w2, key, value));
    auto exists = on_w2->Exist(key);
    ASSERT_TRUE(IsOk(exists));
    EXPECT_TRUE(*exists) << key;
    auto info = on_w2->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << "Inspect(" << key << ")";
    EXPECT_EQ(info->node_id, "w1") << key;
    EXPECT_EQ(info->size, static_cast<int64_t>(value.size())) << key;
  }

  // And a put of an existing key does not overwrite it.
  EXPECT_TRUE(FailsWith(on_w2->Put("one-mib", "other"), ErrorCode::kObjectAlreadyExists));
  EXPECT_TRUE(ReadsBack(*on_w1, "one-mib", values.at("one-mib")));
}

TEST_F(TieredCacheTest, FullDramDemotesToSsdAndGetPromotesBack) {
  // Given w1 with a 16 MiB DRAM tier.
  constexpr uint64_t kDram = 16 * kMiB;
  ASSERT_NO_FATAL_FAILURE(GivenTwoNodes({.dram = kDram, .ssd = 256 * kMiB}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);

  // When 48 values of 1 MiB (three times its DRAM) are put on w1.
  constexpr int kCount = 48;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(IsOk(client->Put(Key("obj-", i), PatternBytes(100 + i, kMiB)))) << i;
  }

  // Expect objects demoted to SSD, DRAM within its capacity, nothing lost.
  WorkerCounters stats;
  const bool demoted = Eventually([&] {
    stats = StatsOf(*client, "w1");
    const TierCounters* ssd = FindTier(stats, "ssd");
    const TierCounters* dram = FindTier(stats, "dram");
    return ssd != nullptr && dram != nullptr && ssd->usage.objects > 0 && dram->demotions_out > 0 &&
           dram->usage.objects + ssd->usage.objects == static_cast<uint64_t>(kCount);
  });
  const TierCounters* dram = FindTier(stats, "dram");
  const TierCounters* ssd = FindTier(stats, "ssd");
  ASSERT_TRUE(dram != nullptr && ssd != nullptr) << "w1 reports no dram or no ssd tier";
  EXPECT_TRUE(demoted) << "dram objects=" << dram->usage.objects
                       << " demotions_out=" << dram->demotions_out
                       << " ssd objects=" << ssd->usage.objects << " (expected " << kCount
                       << " in all)";
  EXPECT_LE(dram->usage.used, kDram);
  EXPECT_LE(dram->usage.used, dram->usage.capacity);
  EXPECT_EQ(dram->usage.capacity, kDram);

  // When an object that is on SSD is read.
  std::string on_ssd;
  int on_ssd_index = -1;
  for (int i = 0; i < kCount && on_ssd.empty(); ++i) {
    if (TierOf(*client, Key("obj-", i)) == "ssd") {
      on_ssd = Key("obj-", i);
      on_ssd_index = i;
    }
  }
  ASSERT_FALSE(on_ssd.empty()) << "Inspect shows no object on SSD";
  const int64_t promotions_before = TotalPromotionsIn(StatsOf(*client, "w1"));
  auto reader = cluster_.NewClient("w2");
  ASSERT_TRUE(reader);
  EXPECT_TRUE(ReadsBack(*reader, on_ssd, PatternBytes(100 + on_ssd_index, kMiB)));

  // Expect it back in DRAM and counted as a promotion.
  EXPECT_TRUE(Eventually([&] { return TierOf(*client, on_ssd) == "dram"; }))
      << on_ssd << " is still on " << TierOf(*client, on_ssd) << " after a Get";
  EXPECT_TRUE(Eventually([&] {
    return TotalPromotionsIn(StatsOf(*client, "w1")) > promotions_before;
  })) << "promotions_in did not grow from "
      << promotions_before;

  // And every object, wherever it is now, still reads back byte for byte,
  // with DRAM kept within its capacity through the promotions.
  for (int i = 0; i < kCount; ++i) {
    EXPECT_TRUE(ReadsBack(*reader, Key("obj-", i), PatternBytes(100 + i, kMiB)));
  }
  stats = StatsOf(*client, "w1");
  dram = FindTier(stats, "dram");
  ASSERT_NE(dram, nullptr);
  EXPECT_LE(dram->usage.used, kDram);
}

TEST_F(TieredCacheTest, OnTheEpollEngineReadsFromDramAndSsdAndWritesAllComplete) {
  // Given a master and w1 on --rpc-engine epoll, whose loop threads answer
  // reads from DRAM and hand puts, removes and reads from SSD to the pool.
  const std::vector<std::string> epoll = {"--rpc-engine", "epoll"};
  ASSERT_TRUE(cluster_.StartMaster(epoll));
  ASSERT_TRUE(
      cluster_.StartWorker("w1", {.dram = 8 * kMiB, .ssd = 128 * kMiB, .extra_args = epoll}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);

  // When 24 values of 1 MiB (three times the DRAM) are put.
  constexpr int kCount = 24;
  std::vector<std::string> keys;
  for (int i = 0; i < kCount; ++i) {
    keys.push_back(Key("e-", i));
    ASSERT_TRUE(IsOk(client->Put(keys.back(), PatternBytes(300 + i, kMiB)))) << i;
  }
  int on_ssd = 0;
  for (const auto& key : keys) on_ssd += TierOf(*client, key) == "ssd" ? 1 : 0;
  ASSERT_GT(on_ssd, 0) << "nothing was demoted to SSD";

  // Expect single gets and one batch get of keys on both tiers to read back.
  for (int i = 0; i < kCount; ++i) {
    EXPECT_TRUE(ReadsBack(*client, keys[i], PatternBytes(300 + i, kMiB)));
  }
  auto batch = client->BatchGet(keys);
  ASSERT_EQ(batch.size(), keys.size());
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(IsOk(batch[i])) << keys[i];
    EXPECT_EQ(batch[i]->data, PatternBytes(300 + i, kMiB)) << keys[i];
  }
  // And removes and small puts on the same connections still answer.
  EXPECT_TRUE(IsOk(client->Remove(keys[0], /*force=*/true)));  // a get leased it
  EXPECT_TRUE(FailsWith(client->Get(keys[0]), ErrorCode::kObjectNotFound));
  EXPECT_TRUE(IsOk(client->Put("e-small", "v")));
  EXPECT_TRUE(ReadsBack(*client, "e-small", "v"));
}

// On the epoll engine a put's reply waits for its claim without holding a
// thread (worker/worker_processor.h): concurrent puts of one key still have
// exactly one winner, every other put is answered once, and each value reads
// back as put.
TEST_F(TieredCacheTest, OnTheEpollEngineConcurrentPutsAreEachAnsweredOnceWithOneWinnerPerKey) {
  const std::vector<std::string> epoll = {"--rpc-engine", "epoll"};
  ASSERT_TRUE(cluster_.StartMaster(epoll));
  ASSERT_TRUE(
      cluster_.StartWorker("w1", {.dram = 64 * kMiB, .ssd = 128 * kMiB, .extra_args = epoll}));
  constexpr int kThreads = 8;
  constexpr int kPutsEach = 60;
  std::vector<std::unique_ptr<Client>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(cluster_.NewClient("w1"));
    ASSERT_TRUE(clients.back());
  }
  std::atomic<int> shared_wins{0}, shared_refusals{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Client& client = *clients[t];
      for (int i = 0; i < kPutsEach; ++i) {
        // Every few puts, a put of a key all threads race for.
        if (i % 10 == 0) {
          auto raced = client.Put(Key("raced-", i), PatternBytes(7000 + t, 4096));
          if (IsOk(raced)) {
            ++shared_wins;
          } else if (FailsWith(raced, ErrorCode::kObjectAlreadyExists)) {
            ++shared_refusals;
          } else {
            ++failures;
          }
        }
        if (!IsOk(client.Put(Key("t" + std::to_string(t) + "-", i),
                             PatternBytes(t * 1000 + i, 4096 + 97 * i)))) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0) << cluster_.AllLogTails();
  constexpr int kRaced = kPutsEach / 10;
  EXPECT_EQ(shared_wins.load(), kRaced);  // one winner per raced key
  EXPECT_EQ(shared_refusals.load(), kRaced * (kThreads - 1));
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPutsEach; ++i) {
      ASSERT_TRUE(ReadsBack(*clients[0], Key("t" + std::to_string(t) + "-", i),
                            PatternBytes(t * 1000 + i, 4096 + 97 * i)))
          << t << "/" << i;
    }
  }
  // Each raced key holds the bytes of exactly one of the racers.
  for (int i = 0; i < kPutsEach; i += 10) {
    auto got = clients[0]->Get(Key("raced-", i));
    ASSERT_TRUE(IsOk(got)) << i;
    int matches = 0;
    for (int t = 0; t < kThreads; ++t) matches += got->data == PatternBytes(7000 + t, 4096) ? 1 : 0;
    EXPECT_EQ(matches, 1) << "raced-" << i;
  }
}

TEST_F(TieredCacheTest, WorkerKilledWithSigkillRecoversItsSsdObjects) {
  // Given w1 with a tiny DRAM tier, so most of what it holds is on SSD.
  ASSERT_NO_FATAL_FAILURE(GivenTwoNodes({.dram = 8 * kMiB, .ssd = 256 * kMiB}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  constexpr int kCount = 24;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(IsOk(client->Put(Key("durable-", i), PatternBytes(200 + i, kMiB)))) << i;
  }
  std::vector<int> on_ssd;
  ASSERT_TRUE(Eventually([&] {
    on_ssd.clear();
    for (int i = 0; i < kCount; ++i) {
      if (TierOf(*client, Key("durable-", i)) == "ssd") on_ssd.push_back(i);
    }
    return on_ssd.size() >= kCount / 2;
  })) << "only "
      << on_ssd.size() << " of " << kCount << " objects reached SSD";

  // When w1 is killed with SIGKILL and started again on the same SSD path.
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(cluster_.RestartWorker("w1"));

  // Expect every object that was on SSD readable again, byte for byte.
  auto after = cluster_.NewClient("w2");
  ASSERT_TRUE(after);
  auto stats = after->Stats("w1");
  ASSERT_TRUE(IsOk(stats));
  const TierCounters* ssd = FindTier(*stats, "ssd");
  ASSERT_NE(ssd, nullptr);
  EXPECT_GE(ssd->usage.objects, on_ssd.size()) << "w1 recovered too few SSD objects";
  for (int i : on_ssd) {
    EXPECT_TRUE(ReadsBack(*after, Key("durable-", i), PatternBytes(200 + i, kMiB)));
    auto info = after->Inspect(Key("durable-", i));
    ASSERT_TRUE(IsOk(info));
    EXPECT_EQ(info->node_id, "w1");
  }
  // Objects that were only in DRAM are gone, cleanly: not found, never wrong.
  for (int i = 0; i < kCount; ++i) {
    if (std::find(on_ssd.begin(), on_ssd.end(), i) != on_ssd.end()) continue;
    auto got = after->Get(Key("durable-", i));
    if (got) {
      EXPECT_EQ(got->data, PatternBytes(200 + i, kMiB)) << "durable-" << i;
    } else {
      EXPECT_TRUE(FailsWith(got, ErrorCode::kObjectNotFound)) << "durable-" << i;
    }
  }
  // And the restarted node takes new objects.
  auto on_w1 = cluster_.NewClient("w1");
  ASSERT_TRUE(on_w1);
  EXPECT_TRUE(IsOk(on_w1->Put("after-restart", "fresh")));
  EXPECT_TRUE(ReadsBack(*after, "after-restart", "fresh"));
  auto info = after->Inspect("after-restart");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(info->node_id, "w1");
}

TEST_F(TieredCacheTest, ClientsFollowAWorkerThatRestartedOnAnotherPort) {
  // Given clients that have talked to w1 (and so know its address).
  ASSERT_NO_FATAL_FAILURE(GivenTwoNodes());
  auto on_w1 = cluster_.NewClient("w1");
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(on_w1 && on_w2);
  ASSERT_TRUE(IsOk(on_w1->Put("before", "v1")));
  ASSERT_TRUE(ReadsBack(*on_w2, "before", "v1"));
  const int old_port = cluster_.worker_port("w1");

  // When w1 crashes and comes back on another port (the harness uses --port 0).
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(cluster_.RestartWorker("w1"));
  ASSERT_NE(cluster_.worker_port("w1"), old_port) << "the kernel reused the port; inconclusive";

  // Expect the same clients to reach w1 at its new address: a put through the
  // client co-located with w1, read through the other one.
  EXPECT_TRUE(IsOk(on_w1->Put("after", "v2")))
      << "a client whose local node restarted on a new port cannot put any more";
  EXPECT_TRUE(ReadsBack(*on_w2, "after", "v2"));
  EXPECT_TRUE(IsOk(on_w2->Put("after-2", "v3", {.preferred_node = "w1"})))
      << "Put with preferred_node=w1 after w1 moved";
  EXPECT_TRUE(ReadsBack(*on_w1, "after-2", "v3"));
}

// A worker learns that a restarted master forgot it from its next claims, not
// only from its heartbeat: a BatchPut then registers the node again and
// claims every key, none refused as from an unknown node.
TEST_F(TieredCacheTest, ABatchPutRightAfterAMasterRestartRegistersAgainAndClaimsEveryKey) {
  // Given a worker whose heartbeat is far off, so that only its claims can
  // tell it of the restart (the test ends well inside the master's node TTL).
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.heartbeat_interval_ms = 60'000}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Put("before", "v0")));

  // When the master restarts and a batch is put at once.
  ASSERT_TRUE(cluster_.RestartMaster());
  std::vector<std::pair<std::string, std::string>> items;
  for (int i = 0; i < 20; ++i) items.emplace_back(Key("batch-", i), PatternBytes(700 + i, 2048));
  auto results = client->BatchPut(items);

  // Expect every key claimed, and the node registered a second time.
  ASSERT_EQ(results.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_TRUE(IsOk(results[i])) << items[i].first << cluster_.AllLogTails();
  }
  std::string log = cluster_.LogTail("w1", 400);
  size_t registrations = 0;
  for (size_t at = log.find("registered with master"); at != std::string::npos;
       at = log.find("registered with master", at + 1)) {
    ++registrations;
  }
  EXPECT_EQ(registrations, 2u) << log;
  auto fresh = cluster_.NewClient();
  ASSERT_TRUE(fresh);
  for (const auto& [key, value] : items) EXPECT_TRUE(ReadsBack(*fresh, key, value));
}

// A batch whose keys live on two workers makes one call to each, on the
// client's batch helpers; threads that batch at once share those helpers.
// Every answer must land at its key's position, from the right node.
TEST_F(TieredCacheTest, BatchesSpanningTwoWorkersFromManyThreadsAnswerEveryKeyInPlace) {
  // Given keys stored alternately on w1 and w2.
  ASSERT_NO_FATAL_FAILURE(GivenTwoNodes());
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  constexpr int kKeys = 64;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back(Key("spread-", i));
    PutOptions on{.preferred_node = i % 2 == 0 ? "w1" : "w2"};
    ASSERT_TRUE(IsOk(client->Put(keys.back(), PatternBytes(900 + i, 3000 + i), on))) << i;
  }
  auto on_w2 = client->Inspect(keys[1]);
  ASSERT_TRUE(IsOk(on_w2));
  ASSERT_EQ(on_w2->node_id, "w2");

  // When eight threads each run batches of both workers' keys (and one
  // missing key), in an order of their own.
  constexpr int kThreads = 8;
  constexpr int kRounds = 20;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds && failures[t].empty(); ++round) {
        std::vector<std::string> wanted;
        std::vector<int> index;
        for (int k = 0; k < 16; ++k) {
          int i = (t * 7 + round * 5 + k * 3) % kKeys;
          wanted.push_back(keys[i]);
          index.push_back(i);
        }
        wanted.push_back("spread-missing");
        auto got = client->BatchGet(wanted);
        auto exist = client->BatchExist(wanted);
        if (got.size() != wanted.size() || exist.size() != wanted.size()) {
          failures[t] = "wrong result count";
          break;
        }
        for (size_t j = 0; j < index.size(); ++j) {
          if (!got[j] || got[j]->data != PatternBytes(900 + index[j], 3000 + index[j])) {
            failures[t] = "wrong value for " + wanted[j];
          } else if (!exist[j] || !*exist[j]) {
            failures[t] = "exist says no for " + wanted[j];
          }
        }
        if (got.back() || got.back().error() != ErrorCode::kObjectNotFound) {
          failures[t] = "the missing key was not reported missing";
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();

  // Expect every answer right, and a batch remove to reach both workers.
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  auto removed = client->BatchRemove(keys, /*force=*/true);
  ASSERT_EQ(removed.size(), keys.size());
  for (int i = 0; i < kKeys; ++i) EXPECT_TRUE(IsOk(removed[i])) << keys[i];
  EXPECT_TRUE(FailsWith(client->Get(keys[0]), ErrorCode::kObjectNotFound));
  EXPECT_TRUE(FailsWith(client->Get(keys[1]), ErrorCode::kObjectNotFound));
}

TEST_F(TieredCacheTest, RestartedMasterRelearnsEveryKeyFromTheWorkers) {
  // Given keys on both workers, some in DRAM and some demoted to SSD.
  ASSERT_NO_FATAL_FAILURE(GivenTwoNodes({.dram = 16 * kMiB, .ssd = 128 * kMiB},
                                        {.dram = 16 * kMiB, .ssd = 128 * kMiB}));
  auto on_w1 = cluster_.NewClient("w1");
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(on_w1 && on_w2);
  std::map<std::string, std::pair<std::string, std::string>> expected;  // key -> (node, value)
  for (int i = 0; i < 10; ++i) {
    expected[Key("small-w1-", i)] = {"w1", PatternBytes(300 + i, 4096 + i)};
    expected[Key("small-w2-", i)] = {"w2", PatternBytes(400 + i, 8192 + i)};
  }
  for (int i = 0; i < 24; ++i) expected[Key("big-w1-", i)] = {"w1", PatternBytes(500 + i, kMiB)};
  for (const auto& [key, nv] : expected) {
    Client& c = nv.first == "w1" ? *on_w1 : *on_w2;
    ASSERT_TRUE(IsOk(c.Put(key, nv.second))) << key;
  }

  // When the master is killed and started again on the same port.
  const int port = cluster_.master_port();
  cluster_.KillMaster(SIGKILL);
  ASSERT_TRUE(cluster_.RestartMaster());
  ASSERT_EQ(cluster_.master_port(), port);

  // Expect the workers to re-announce, and every key to be found again.
  auto fresh = cluster_.NewClient();
  ASSERT_TRUE(fresh);
  size_t found = 0;
  const bool all_back = Eventually(
      [&] {
        found = 0;
        for (const auto& [key, nv] : expected) {
          auto e = fresh->Exist(key);
          if (e && *e) ++found;
        }
        return found == expected.size();
      },
      15s, 200ms);
  ASSERT_TRUE(all_back) << found << " of " << expected.size()
                        << " keys known to the master 15 s after its restart";
  for (const auto& [key, nv] : expected) {
    EXPECT_TRUE(ReadsBack(*fresh, key, nv.second));
    auto info = fresh->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key;
    EXPECT_EQ(info->node_id, nv.first) << key;
  }
  // The master knows the owners again: a second Put of a key is refused.
  EXPECT_TRUE(FailsWith(fresh->Put("small-w1-0", "x"), ErrorCode::kObjectAlreadyExists));

  // And a client made before the restart reconnects to the new master.
  EXPECT_TRUE(Eventually([&] { return on_w1->Get("small-w2-3").has_value(); }, 10s, 200ms))
      << "a client created before the master restart cannot read any more";
  EXPECT_TRUE(ReadsBack(*on_w1, "small-w2-3", expected.at("small-w2-3").second));
  EXPECT_TRUE(IsOk(on_w2->Put("after-master-restart", "v")));
  EXPECT_TRUE(ReadsBack(*fresh, "after-master-restart", "v"));
}

TEST_F(TieredCacheTest, ValueOf300MiBRoundTripsByteForByte) {
  // Given w1 with an SSD tier of 512 MiB: the value cannot fit in DRAM.
  ASSERT_NO_FATAL_FAILURE(
      GivenTwoNodes({.dram = 64 * kMiB, .ssd = 512 * kMiB}, {.dram = 16 * kMiB, .ssd = 32 * kMiB}));
  auto writer = cluster_.NewClient("w1");
  auto reader = cluster_.NewClient("w2");
  ASSERT_TRUE(writer && reader);
  constexpr uint64_t kSize = 300 * kMiB;
  constexpr uint64_t kSeed = 0x5eed;

  // When 300 MiB of a pseudo-random pattern is streamed in from w1's side.
  const auto t0 = std::chrono::steady_clock::now();
  PatternStreamBuf source(kSeed, kSize);
  std::istream in(&source);
  uint64_t last_progress = 0;
  auto put = writer->PutStream("weights-shard-0", in, kSize, {},
                               [&](uint64_t done, uint64_t) { last_progress = done; });
  ASSERT_TRUE(IsOk(put));
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(last_progress, kSize) << "progress never reported the whole value";

  // Expect it owned by w1, whole, and read back byte for byte from w2's side.
  auto info = reader->Inspect("weights-shard-0");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(info->node_id, "w1");
  EXPECT_EQ(info->size, static_cast<int64_t>(kSize));
  EXPECT_EQ(info->tier, "ssd");

  PatternCheckBuf sink(kSeed);
  std::ostream out(&sink);
  auto got = reader->GetStream("weights-shard-0", out);
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_TRUE(IsOk(got));
  out.flush();
  EXPECT_EQ(*got, kSize);
  EXPECT_EQ(sink.bytes(), kSize);
  EXPECT_EQ(sink.mismatches(), 0u)
      << "first wrong byte at offset " << sink.first_mismatch().value_or(0);
  using ms = std::chrono::milliseconds;
  std::cout << "300 MiB put " << std::chrono::duration_cast<ms>(t1 - t0).count() << " ms, get "
            << std::chrono::duration_cast<ms>(t2 - t1).count() << " ms\n";

  // And the object can be removed (forced: the read just took a lease),
  // freeing its space.
  EXPECT_TRUE(FailsWith(writer->Remove("weights-shard-0"), ErrorCode::kObjectHasLease));
  EXPECT_TRUE(IsOk(writer->Remove("weights-shard-0", /*force=*/true)));
  auto exists = reader->Exist("weights-shard-0");
  ASSERT_TRUE(IsOk(exists));
  EXPECT_FALSE(*exists);
  EXPECT_TRUE(Eventually([&] {
    auto s = reader->Stats("w1");
    const TierCounters* ssd = s ? FindTier(*s, "ssd") : nullptr;
    return ssd != nullptr && ssd->usage.used < kSize;
  })) << "w1's SSD usage did not drop after Remove";
}

TEST_F(TieredCacheTest, BadInputGetsAClearErrorAndChangesNothing) {
  // Given a cluster holding a few objects, largest tier 64 MiB.
  ASSERT_NO_FATAL_FAILURE(
      GivenTwoNodes({.dram = 16 * kMiB, .ssd = 64 * kMiB}, {.dram = 16 * kMiB, .ssd = 64 * kMiB}));
  auto client = cluster_.NewClient("w1");
  auto other = cluster_.NewClient("w2");
  ASSERT_TRUE(client && other);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(IsOk(client->Put(Key("keep-", i), PatternBytes(600 + i, 4096))));
  }
  auto snapshot = [&] {
    std::map<std::string, std::pair<uint64_t, uint64_t>> usage;  // node/tier -> used, objects
    for (const std::string node : {"w1", "w2"}) {
      for (const auto& t : StatsOf(*client, node).tiers) {
        usage[node + "/" + t.usage.name] = {t.usage.used, t.usage.objects};
      }
    }
    return usage;
  };
  const auto before = snapshot();
  ASSERT_FALSE(before.empty());

  // When keys are empty or too long.
  EXPECT_TRUE(FailsWith(client->Put("", "v"), ErrorCode::kInvalidKey));
  EXPECT_TRUE(FailsWith(client->Get(""), ErrorCode::kInvalidKey));
  EXPECT_TRUE(FailsWith(client->Exist(""), ErrorCode::kInvalidKey));
  EXPECT_TRUE(FailsWith(client->Remove(""), ErrorCode::kInvalidKey));
  const std::string too_long(kMaxKeyBytes + 1, 'k');
  EXPECT_TRUE(FailsWith(client->Put(too_long, "v"), ErrorCode::kInvalidKey));

  // When a value is empty.
  EXPECT_TRUE(FailsWith(client->Put("empty-value", ""), ErrorCode::kInvalidParams));
  std::istringstream nothing;
  EXPECT_TRUE(FailsWith(client->PutStream("empty-stream", nothing, 0), ErrorCode::kInvalidParams));

  // When a value is larger than every tier of every node (128 MiB > 64 MiB).
  constexpr uint64_t kHuge = 128 * kMiB;
  PatternStreamBuf huge_source(7, kHuge);
  std::istream huge(&huge_source);
  EXPECT_TRUE(FailsWith(client->PutStream("huge", huge, kHuge), ErrorCode::kNoAvailableHandle));
  PatternStreamBuf huge_source2(7, kHuge);
  std::istream huge2(&huge_source2);
  EXPECT_TRUE(FailsWith(other->PutStream("huge", huge2, kHuge, {.preferred_node = "w2"}),
                        ErrorCode::kNoAvailableHandle));

  // Expect none of them to exist, and the cluster unchanged.
  for (const std::string key : {"empty-value", "empty-stream", "huge"}) {
    auto exists = other->Exist(key);
    ASSERT_TRUE(IsOk(exists)) << key;
    EXPECT_FALSE(*exists) << key;
  }
  const auto after = snapshot();
  EXPECT_EQ(after, before) << "tier usage (used, objects) changed";
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(ReadsBack(*other, Key("keep-", i), PatternBytes(600 + i, 4096)));
  }
  auto nodes = client->ListNodes();
  ASSERT_TRUE(IsOk(nodes));
  ASSERT_EQ(nodes->size(), 2u);
  for (const auto& n : *nodes) EXPECT_TRUE(n.alive) << n.node_id;
  EXPECT_TRUE(cluster_.IsRunning("w1"));
  EXPECT_TRUE(cluster_.IsRunning("w2"));
  EXPECT_TRUE(cluster_.IsRunning("master"));
}

}  // namespace
}  // namespace mooncake::testing
