// Object lifecycle over real processes (docs/design.md, "Flows"): hard and soft
// pins under pressure, the eviction order, leases against Remove, Upsert in
// place / resized / against readers / pre-empting a two-phase write, the
// discard of abandoned writes, pins across a worker restart, and a mixed
// concurrent workload that must never expose a torn or invented value.
//
// Each test starts its own master and one or two workers with tiers of a few
// MiB; every wait is bounded.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "mooncake_rpc/WorkerService.h"
#include "tests/integration/test_cluster.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
using Clock = std::chrono::steady_clock;
using WorkerRpc = RpcChannel<rpc::WorkerServiceClient>;

std::string Key(std::string_view prefix, int i) { return std::string(prefix) + std::to_string(i); }

// PutOptions spelled out (designated initializers that skip members warn).
PutOptions Opt(bool hard_pin, bool soft_pin, std::string node = "", std::string tier = "") {
  PutOptions o;
  o.hard_pin = hard_pin;
  o.soft_pin = soft_pin;
  o.preferred_node = std::move(node);
  o.preferred_tier = std::move(tier);
  return o;
}
PutOptions HardPin(std::string tier = "") { return Opt(true, false, "", std::move(tier)); }
PutOptions SoftPin(std::string tier = "") { return Opt(false, true, "", std::move(tier)); }
PutOptions On(std::string node, std::string tier = "") {
  return Opt(false, false, std::move(node), std::move(tier));
}

class LifecycleTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(40);
  }

  WorkerCounters StatsOf(Client& client, const std::string& node) {
    auto stats = client.Stats(node);
    EXPECT_TRUE(IsOk(stats)) << "Stats(" << node << ")";
    return stats ? *stats : WorkerCounters{};
  }

  // Bytes used in `tier` ("dram"/"ssd") of `node`; -1 on error.
  int64_t UsedIn(Client& client, const std::string& node, std::string_view tier) {
    auto stats = client.Stats(node);
    if (!stats) return -1;
    const TierCounters* t = FindTier(*stats, tier);
    return t == nullptr ? -1 : static_cast<int64_t>(t->usage.used);
  }

  static std::string TierOf(Client& client, const std::string& key) {
    auto info = client.Inspect(key);
    return info ? info->tier : std::string();
  }

  // A raw Thrift connection to worker `node`, at the address the master has.
  std::unique_ptr<WorkerRpc> RawWorker(Client& client, const std::string& node) {
    auto nodes = client.ListNodes();
    if (!nodes) {
      ADD_FAILURE() << "ListNodes failed: " << ToString(nodes.error());
      return nullptr;
    }
    for (const auto& n : *nodes) {
      if (n.node_id == node) return std::make_unique<WorkerRpc>(n.host, n.port);
    }
    ADD_FAILURE() << "no node " << node << " in ListNodes";
    return nullptr;
  }

  TestCluster cluster_;
};

// ---------------------------------------------------------------------------
// Hard pins under pressure

TEST_F(LifecycleTest, HardPinnedObjectsSurviveFillingEveryTierSeveralTimesOver) {
  // Given one node with DRAM 8 MiB and SSD 16 MiB, holding four hard-pinned
  // objects: three placed in DRAM, one placed on SSD.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 8 * kMiB, .ssd = 16 * kMiB}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  std::map<std::string, std::string> pinned;
  for (int i = 0; i < 3; ++i) pinned[Key("pinned-dram-", i)] = PatternBytes(10 + i, kMiB);
  pinned["pinned-ssd"] = PatternBytes(20, kMiB);
  for (const auto& [key, value] : pinned) {
    PutOptions options = HardPin();
    if (key == "pinned-ssd") options.preferred_tier = "ssd";
    ASSERT_TRUE(IsOk(client->Put(key, value, options))) << key;
  }
  std::map<std::string, ObjectInspection> placed;
  for (const auto& [key, value] : pinned) {
    auto info = client->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key;
    EXPECT_TRUE(info->hard_pinned) << key << ": " << Describe(info);
    EXPECT_EQ(info->tier, key == "pinned-ssd" ? "ssd" : "dram") << key << ": " << Describe(info);
    placed[key] = *info;
  }

  // When 72 unpinned 1 MiB objects (three times DRAM + SSD) are put on it.
  constexpr int kFillers = 72;
  int put_ok = 0;
  for (int i = 0; i < kFillers; ++i) {
    auto put = client->Put(Key("filler-", i), PatternBytes(1000 + i, kMiB));
    EXPECT_TRUE(IsOk(put)) << "filler-" << i << ": unpinned objects must make room for new puts";
    if (put) ++put_ok;
  }

  // Expect pressure to have happened (demotions and drops) ...
  auto stats = StatsOf(*client, "w1");
  const TierCounters* dram = FindTier(stats, "dram");
  ASSERT_NE(dram, nullptr);
  EXPECT_GT(dram->demotions_out, 0) << "DRAM never demoted anything";
  EXPECT_GT(stats.dropped + stats.moved_out, 0) << "SSD never evicted anything";
  // ... and every hard-pinned object where it was, still pinned, byte for byte.
  for (const auto& [key, value] : pinned) {
    auto info = client->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key << " disappeared";
    EXPECT_TRUE(info->hard_pinned) << key << ": " << Describe(info);
    EXPECT_EQ(info->node_id, "w1") << key;
    EXPECT_EQ(info->tier, placed[key].tier) << key << " was moved: " << Describe(info);
    EXPECT_EQ(info->offset, placed[key].offset) << key << " was moved: " << Describe(info);
    EXPECT_EQ(info->version, placed[key].version) << key;
  }
  for (const auto& [key, value] : pinned) EXPECT_TRUE(ReadsBack(*client, key, value));
  // Unpinned objects are either intact or cleanly gone.
  int present = 0;
  for (int i = 0; i < kFillers; ++i) {
    auto got = client->Get(Key("filler-", i));
    if (got) {
      ++present;
      EXPECT_TRUE(got->data == PatternBytes(1000 + i, kMiB)) << "filler-" << i << " corrupted";
    } else {
      EXPECT_TRUE(FailsWith(got, ErrorCode::kObjectNotFound)) << "filler-" << i;
    }
  }
  EXPECT_GT(present, 0);
  EXPECT_LT(present, kFillers) << "nothing was evicted although tiers were overfilled";
}

TEST_F(LifecycleTest, TiersFullOfHardPinnedObjectsMakePutFailAndMoveNothing) {
  // Given one node (DRAM 4 MiB, SSD 8 MiB, no write-through) whose tiers get
  // filled with hard-pinned 1 MiB objects until a put is refused.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker(
      "w1",
      {.dram = 4 * kMiB, .ssd = 8 * kMiB, .extra_args = {"--hard-pin-write-through", "false"}}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  std::map<std::string, std::string> pinned;
  Result<void> refused;
  for (int i = 0; i < 20; ++i) {
    std::string key = Key("pinned-", i);
    std::string value = PatternBytes(50 + i, kMiB);
    refused = client->Put(key, value, HardPin());
    if (!refused) break;
    pinned[key] = value;
  }
  // Expect the refusal to be "no space", once both tiers are full.
  EXPECT_TRUE(FailsWith(refused, ErrorCode::kNoAvailableHandle));
  EXPECT_GE(pinned.size(), 10u) << "DRAM + SSD hold 12 MiB";
  EXPECT_LE(pinned.size(), 12u) << "more hard-pinned MiB than the tiers hold";
  std::map<std::string, ObjectInspection> placed;
  for (const auto& [key, value] : pinned) {
    auto info = client->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key;
    placed[key] = *info;
  }
  auto before = StatsOf(*client, "w1");

  // When more objects are put: unpinned, hard-pinned, and soft-pinned.
  EXPECT_TRUE(
      FailsWith(client->Put("unpinned", PatternBytes(90, kMiB)), ErrorCode::kNoAvailableHandle));
  EXPECT_TRUE(FailsWith(client->Put("pinned-more", PatternBytes(91, kMiB), HardPin()),
                        ErrorCode::kNoAvailableHandle));
  EXPECT_TRUE(FailsWith(client->Put("soft", PatternBytes(92, kMiB), SoftPin()),
                        ErrorCode::kNoAvailableHandle));
  EXPECT_TRUE(
      FailsWith(client->Upsert("upserted", PatternBytes(93, kMiB)), ErrorCode::kNoAvailableHandle));

  // Expect none of them to exist, and nothing pinned moved, dropped or changed.
  for (const std::string key : {"unpinned", "pinned-more", "soft", "upserted"}) {
    auto exists = client->Exist(key);
    ASSERT_TRUE(IsOk(exists)) << key;
    EXPECT_FALSE(*exists) << key;
  }
  auto after = StatsOf(*client, "w1");
  EXPECT_EQ(after.dropped, 0);
  EXPECT_EQ(after.moved_out, 0);
  for (const char* tier : {"dram", "ssd"}) {
    const TierCounters* b = FindTier(before, tier);
    const TierCounters* a = FindTier(after, tier);
    ASSERT_TRUE(a != nullptr && b != nullptr) << tier;
    EXPECT_EQ(a->usage.used, b->usage.used) << tier;
    EXPECT_EQ(a->usage.objects, b->usage.objects) << tier;
    EXPECT_EQ(a->demotions_out, b->demotions_out) << tier;
    EXPECT_EQ(a->evictions, 0) << tier;
  }
  for (const auto& [key, value] : pinned) {
    auto info = client->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key << " disappeared";
    EXPECT_TRUE(info->hard_pinned) << key;
    EXPECT_EQ(info->tier, placed[key].tier) << key << ": " << Describe(info);
    EXPECT_EQ(info->offset, placed[key].offset) << key << ": " << Describe(info);
    EXPECT_TRUE(ReadsBack(*client, key, value));
  }
}

// ---------------------------------------------------------------------------
// Eviction order

TEST_F(LifecycleTest, EvictionTakesUnpinnedThenSoftPinnedAndNeverHardPinned) {
  // Given one node with DRAM 8 MiB (watermarks 0.9 / 0.8) and no leases, and
  // in DRAM, oldest first: two hard-pinned, two soft-pinned, two unpinned.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker(
      "w1", {.dram = 8 * kMiB, .ssd = 64 * kMiB, .extra_args = {"--kv-lease-ttl-ms", "0"}}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  std::map<std::string, std::string> values;
  auto put = [&](const std::string& key, uint64_t size, const PutOptions& options, uint64_t seed) {
    values[key] = PatternBytes(seed, size);
    return client->Put(key, values[key], options);
  };
  ASSERT_TRUE(IsOk(put("hard-1", kMiB, HardPin(), 1)));
  ASSERT_TRUE(IsOk(put("hard-2", kMiB, HardPin(), 2)));
  ASSERT_TRUE(IsOk(put("soft-1", kMiB, SoftPin(), 3)));
  ASSERT_TRUE(IsOk(put("soft-2", kMiB, SoftPin(), 4)));
  ASSERT_TRUE(IsOk(put("plain-1", kMiB, {}, 5)));
  ASSERT_TRUE(IsOk(put("plain-2", kMiB, {}, 6)));
  for (const auto& [key, value] : values) {
    ASSERT_EQ(TierOf(*client, key), "dram") << key << ": " << Describe(client->Inspect(key));
  }
  const auto hard_1 = client->Inspect("hard-1");
  const auto hard_2 = client->Inspect("hard-2");
  ASSERT_TRUE(IsOk(hard_1) && IsOk(hard_2));
  auto state = [&] {
    std::string out;
    for (const auto& [key, value] : values) out += key + "=" + TierOf(*client, key) + " ";
    return out;
  };

  // When two more unpinned objects push DRAM past its high watermark.
  ASSERT_TRUE(IsOk(put("plain-3", kMiB, {}, 7)));
  ASSERT_TRUE(IsOk(put("plain-4", kMiB, {}, 8)));

  // Expect the least recently used UNPINNED objects demoted, although the
  // soft-pinned ones are older.
  EXPECT_TRUE(Eventually(
      [&] { return TierOf(*client, "plain-1") == "ssd" && TierOf(*client, "plain-2") == "ssd"; },
      5s))
      << state();
  for (const char* key : {"hard-1", "hard-2", "soft-1", "soft-2"}) {
    EXPECT_EQ(TierOf(*client, key), "dram") << key << " demoted while unpinned objects were "
                                            << "left: " << state();
  }

  // When an unpinned 5 MiB object needs more room than the unpinned objects
  // in DRAM free.
  ASSERT_TRUE(IsOk(put("big", 5 * kMiB, {}, 9)));

  // Expect every unpinned object gone from DRAM, soft-pinned ones next (the
  // least recently used first), hard-pinned ones untouched.
  EXPECT_TRUE(Eventually(
      [&] {
        return TierOf(*client, "plain-3") == "ssd" && TierOf(*client, "plain-4") == "ssd" &&
               TierOf(*client, "soft-1") == "ssd";
      },
      5s))
      << state();
  EXPECT_EQ(TierOf(*client, "hard-1"), "dram") << state();
  EXPECT_EQ(TierOf(*client, "hard-2"), "dram") << state();
  if (TierOf(*client, "soft-2") == "dram") {
    EXPECT_EQ(TierOf(*client, "soft-1"), "ssd") << "the newer soft pin went first: " << state();
  }
  auto soft = client->Inspect("soft-1");
  ASSERT_TRUE(IsOk(soft));
  EXPECT_TRUE(soft->soft_pinned) << "demotion must keep the soft pin: " << Describe(soft);

  // When an unpinned 7 MiB object is put: it fits DRAM only if the
  // hard-pinned objects left.
  ASSERT_TRUE(IsOk(put("huge", 7 * kMiB, {}, 10)));

  // Expect it on SSD and the hard-pinned objects exactly where they were.
  EXPECT_EQ(TierOf(*client, "huge"), "ssd") << state();
  for (const auto& [key, before] : {std::pair{"hard-1", hard_1}, std::pair{"hard-2", hard_2}}) {
    auto info = client->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key;
    EXPECT_EQ(info->tier, "dram") << key << ": " << Describe(info);
    EXPECT_EQ(info->offset, before->offset) << key << ": " << Describe(info);
    EXPECT_TRUE(info->hard_pinned) << key;
  }
  auto stats = StatsOf(*client, "w1");
  EXPECT_EQ(stats.dropped, 0) << "SSD had room; nothing should leave the node";
  // And every object still reads back byte for byte.
  for (const auto& [key, value] : values) EXPECT_TRUE(ReadsBack(*client, key, value));
}

// ---------------------------------------------------------------------------
// Leases and Remove

TEST_F(LifecycleTest, RemoveUnderLeaseIsRefusedUnlessForced) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 * kMiB, .ssd = 32 * kMiB}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  const std::string value = PatternBytes(7, 64 * kKiB);
  ASSERT_TRUE(IsOk(client->Put("leased", value)));

  // When it is read (a 10 s lease by default).
  ASSERT_TRUE(ReadsBack(*client, "leased", value));
  auto info = client->Inspect("leased");
  ASSERT_TRUE(IsOk(info));
  EXPECT_GT(info->lease_remaining_ms, 0) << Describe(info);

  // Expect Remove to answer OBJECT_HAS_LEASE and leave it readable...
  EXPECT_TRUE(FailsWith(client->Remove("leased"), ErrorCode::kObjectHasLease));
  EXPECT_TRUE(ReadsBack(*client, "leased", value));
  // ... and a forced Remove to remove it.
  EXPECT_TRUE(IsOk(client->Remove("leased", /*force=*/true)));
  EXPECT_TRUE(FailsWith(client->Get("leased"), ErrorCode::kObjectNotFound));
  auto exists = client->Exist("leased");
  ASSERT_TRUE(IsOk(exists));
  EXPECT_FALSE(*exists);
  // The key can be put again.
  EXPECT_TRUE(IsOk(client->Put("leased", "again")));
  EXPECT_TRUE(ReadsBack(*client, "leased", "again"));

  // A soft pin does not block Remove; a hard pin is lifted by Remove.
  ASSERT_TRUE(IsOk(client->Put("soft", "s", SoftPin())));
  EXPECT_TRUE(IsOk(client->Remove("soft")));
  ASSERT_TRUE(IsOk(client->Put("hard", "h", HardPin())));
  EXPECT_TRUE(IsOk(client->Remove("hard")));
  for (const char* key : {"soft", "hard"}) {
    auto e = client->Exist(key);
    ASSERT_TRUE(IsOk(e)) << key;
    EXPECT_FALSE(*e) << key;
  }
  // Removing an absent key says so.
  EXPECT_TRUE(FailsWith(client->Remove("never-there"), ErrorCode::kObjectNotFound));
}

// ---------------------------------------------------------------------------
// Upsert

TEST_F(LifecycleTest, UpsertInPlaceKeepsTheLocationAndResizingFreesTheOldSpace) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 * kMiB, .ssd = 32 * kMiB}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  const int64_t base = UsedIn(*client, "w1", "dram");
  ASSERT_GE(base, 0);

  ASSERT_TRUE(IsOk(client->Put("obj", PatternBytes(1, kMiB))));
  auto v1 = client->Inspect("obj");
  ASSERT_TRUE(IsOk(v1));
  ASSERT_EQ(v1->tier, "dram");
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), base + static_cast<int64_t>(kMiB));

  // Same size: in place, a higher version, no second copy.
  ASSERT_TRUE(IsOk(client->Upsert("obj", PatternBytes(2, kMiB))));
  auto v2 = client->Inspect("obj");
  ASSERT_TRUE(IsOk(v2));
  EXPECT_EQ(v2->node_id, v1->node_id);
  EXPECT_EQ(v2->tier, v1->tier) << Describe(v1) << " -> " << Describe(v2);
  EXPECT_EQ(v2->offset, v1->offset) << Describe(v1) << " -> " << Describe(v2);
  EXPECT_GT(v2->version, v1->version) << Describe(v1) << " -> " << Describe(v2);
  EXPECT_EQ(v2->state, "complete");
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), base + static_cast<int64_t>(kMiB));
  EXPECT_TRUE(ReadsBack(*client, "obj", PatternBytes(2, kMiB)));
  auto got = client->Get("obj");
  ASSERT_TRUE(IsOk(got));
  EXPECT_EQ(got->version, v2->version);

  // Larger: reallocated, the old 1 MiB freed.
  ASSERT_TRUE(IsOk(client->Upsert("obj", PatternBytes(3, 3 * kMiB))));
  auto v3 = client->Inspect("obj");
  ASSERT_TRUE(IsOk(v3));
  EXPECT_GT(v3->version, v2->version);
  EXPECT_EQ(v3->size, static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), base + static_cast<int64_t>(3 * kMiB))
      << "the old location was not freed";
  EXPECT_TRUE(ReadsBack(*client, "obj", PatternBytes(3, 3 * kMiB)));

  // Smaller: reallocated, usage goes back down.
  ASSERT_TRUE(IsOk(client->Upsert("obj", PatternBytes(4, 512 * kKiB))));
  auto v4 = client->Inspect("obj");
  ASSERT_TRUE(IsOk(v4));
  EXPECT_GT(v4->version, v3->version);
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), base + static_cast<int64_t>(512 * kKiB));
  EXPECT_TRUE(ReadsBack(*client, "obj", PatternBytes(4, 512 * kKiB)));
  ASSERT_TRUE(IsOk(client->Remove("obj", /*force=*/true)));
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), base);

  // A hard pin survives upserts that do not ask for it, in place and resized.
  ASSERT_TRUE(IsOk(client->Put("pinned", PatternBytes(5, 64 * kKiB), HardPin())));
  ASSERT_TRUE(IsOk(client->Upsert("pinned", PatternBytes(6, 64 * kKiB))));
  auto p1 = client->Inspect("pinned");
  ASSERT_TRUE(IsOk(p1));
  EXPECT_TRUE(p1->hard_pinned) << "in-place upsert dropped the hard pin";
  ASSERT_TRUE(IsOk(client->Upsert("pinned", PatternBytes(7, 128 * kKiB))));
  auto p2 = client->Inspect("pinned");
  ASSERT_TRUE(IsOk(p2));
  EXPECT_TRUE(p2->hard_pinned) << "resizing upsert dropped the hard pin";
  EXPECT_TRUE(ReadsBack(*client, "pinned", PatternBytes(7, 128 * kKiB)));
}

// Whether an upsert meets a read in progress is up to the scheduler here, so
// this test requires only what holds for every interleaving: no torn or
// invented value, OBJECT_REPLICA_BUSY or not-ready as the only refusals, and
// the last accepted value kept. That an upsert meeting an active reader is
// answered OBJECT_REPLICA_BUSY is pinned deterministically (a read held open)
// by BackendTest.UpsertDuringReadsAnswersBusyAndReadersSeeWholeValues.
TEST_F(LifecycleTest, UpsertsDuringContinuousReadsNeverExposeTornValues) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 32 * kMiB, .ssd = 32 * kMiB}));
  auto writer = cluster_.NewClient("w1");
  ASSERT_TRUE(writer);
  constexpr uint64_t kSize = 4 * kMiB;
  std::vector<std::string> values;
  for (int i = 0; i < 4; ++i) values.push_back(PatternBytes(100 + i, kSize));
  ASSERT_TRUE(IsOk(writer->Put("hot", values[0])));
  ASSERT_EQ(TierOf(*writer, "hot"), "dram");

  // When several clients read it continuously ...
  constexpr int kReaders = 4;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reads_ok{0}, reads_retryable{0}, torn{0}, unexpected{0};
  std::mutex mu;
  std::vector<std::string> problems;
  std::vector<std::unique_ptr<Client>> reader_clients;
  for (int r = 0; r < kReaders; ++r) {
    reader_clients.push_back(cluster_.NewClient());
    ASSERT_TRUE(reader_clients.back());
  }
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      Client& c = *reader_clients[r];
      while (!stop.load()) {
        auto got = c.Get("hot");
        if (got) {
          bool known = std::any_of(values.begin(), values.end(),
                                   [&](const std::string& v) { return got->data == v; });
          if (known) {
            reads_ok++;
          } else {
            torn++;
            std::lock_guard lock(mu);
            problems.push_back("reader " + std::to_string(r) + " got " +
                               std::to_string(got->data.size()) +
                               " bytes matching no written value");
          }
        } else if (got.error() == ErrorCode::kReplicaIsNotReady ||
                   got.error() == ErrorCode::kObjectReplicaBusy) {
          reads_retryable++;
        } else {
          unexpected++;
          std::lock_guard lock(mu);
          problems.push_back("reader " + std::to_string(r) + ": " +
                             std::string(ToString(got.error())));
        }
      }
    });
  }

  // ... and another upserts same-sized values until both sides made progress
  // and an upsert met a reader a few times, for at most 5 s.
  int busy = 0, upserted = 0, other = 0;
  int last_ok = 0;
  std::map<std::string, int> other_errors;
  const auto deadline = Clock::now() + 5s;
  int attempt = 1;
  for (; Clock::now() < deadline; ++attempt) {
    auto r = writer->Upsert("hot", values[attempt % values.size()]);
    if (r) {
      ++upserted;
      last_ok = attempt % static_cast<int>(values.size());
    } else if (r.error() == ErrorCode::kObjectReplicaBusy) {
      ++busy;
    } else {
      ++other;
      other_errors[std::string(ToString(r.error()))]++;
    }
    if (busy >= 3 && upserted >= 3 && reads_ok.load() >= 3) break;
  }
  stop = true;
  for (auto& t : readers) t.join();
  std::cout << "upserts ok=" << upserted << " busy=" << busy << " other=" << other
            << "; reads ok=" << reads_ok << " retryable=" << reads_retryable << "\n";

  // Expect no refusal but OBJECT_REPLICA_BUSY and never a value nobody wrote.
  for (const auto& [code, n] : other_errors) {
    ADD_FAILURE() << "Upsert failed " << n << " times with " << code;
  }
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(unexpected.load(), 0);
  for (size_t i = 0; i < std::min<size_t>(problems.size(), 10); ++i) ADD_FAILURE() << problems[i];
  // With the readers gone nothing may refuse an upsert, and a read sees it
  // whole.
  last_ok = attempt % static_cast<int>(values.size());
  ASSERT_TRUE(IsOk(writer->Upsert("hot", values[last_ok]))) << "an upsert with no reader left";
  // And the object holds the last value that was accepted.
  EXPECT_TRUE(ReadsBack(*writer, "hot", values[last_ok]));
  auto info = writer->Inspect("hot");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(info->readers, 0) << Describe(info);
  EXPECT_EQ(UsedIn(*writer, "w1", "dram"), static_cast<int64_t>(kSize))
      << "in-place upserts left extra copies";
}

TEST_F(LifecycleTest, UpsertPreemptsAnInFlightPutStart) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 * kMiB, .ssd = 32 * kMiB}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  auto raw = RawWorker(*client, "w1");
  ASSERT_TRUE(raw);
  const int64_t base = UsedIn(*client, "w1", "dram");

  // Given a raw writer that started a two-phase put of the key on w1 and
  // sent all its bytes, but has not committed.
  const std::string stale = PatternBytes(1, kMiB);
  rpc::PutStartResult start;
  auto call = raw->Call([&](rpc::WorkerServiceClient& w) {
    w.PutStart(start, "contended", static_cast<int64_t>(stale.size()), rpc::ReplicateConfig(),
               false);
  });
  ASSERT_TRUE(IsOk(call));
  ASSERT_EQ(start.code, rpc::ErrorCode::OK);
  auto chunk =
      raw->Call([&](rpc::WorkerServiceClient& w) { return w.PutChunk(start.handle, 0, stale); });
  ASSERT_TRUE(IsOk(chunk));
  ASSERT_EQ(*chunk, rpc::ErrorCode::OK);
  auto writing = client->Get("contended");
  EXPECT_FALSE(writing.has_value()) << "an uncommitted write is readable";

  // When a client upserts the key.
  const std::string fresh = PatternBytes(2, kMiB);
  ASSERT_TRUE(IsOk(client->Upsert("contended", fresh, On("w1"))));

  // Expect the raw writer's commit to fail with ILLEGAL_CLIENT, and the new
  // value readable, in one allocation.
  auto end = raw->Call([&](rpc::WorkerServiceClient& w) { return w.PutEnd(start.handle); });
  ASSERT_TRUE(IsOk(end));
  EXPECT_EQ(FromRpc(*end), ErrorCode::kIllegalClient)
      << "pre-empted writer's PutEnd answered " << ToString(FromRpc(*end));
  EXPECT_TRUE(ReadsBack(*client, "contended", fresh));
  auto info = client->Inspect("contended");
  ASSERT_TRUE(IsOk(info));
  EXPECT_EQ(info->node_id, "w1");
  EXPECT_EQ(info->state, "complete");
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), base + static_cast<int64_t>(kMiB))
      << "the pre-empted allocation was not discarded";
  // The pre-empted handle is dead for every call.
  auto late_chunk =
      raw->Call([&](rpc::WorkerServiceClient& w) { return w.PutChunk(start.handle, 0, stale); });
  ASSERT_TRUE(IsOk(late_chunk));
  EXPECT_EQ(FromRpc(*late_chunk), ErrorCode::kIllegalClient);
  EXPECT_TRUE(ReadsBack(*client, "contended", fresh));

  // The same for a raw upsert-mode write of an existing key: pre-empted too.
  // The read just before may still hold the object for a moment after its
  // reply left (the worker lets go once the send returns): OBJECT_REPLICA_BUSY
  // is the retryable answer for that, so retry on it.
  rpc::PutStartResult start2;
  ASSERT_TRUE(Eventually([&] {
    auto call = raw->Call([&](rpc::WorkerServiceClient& w) {
      w.PutStart(start2, "contended", static_cast<int64_t>(stale.size()), rpc::ReplicateConfig(),
                 true);
    });
    return call.has_value() && start2.code != rpc::ErrorCode::OBJECT_REPLICA_BUSY;
  }));
  ASSERT_EQ(start2.code, rpc::ErrorCode::OK);
  const std::string third = PatternBytes(3, kMiB);
  ASSERT_TRUE(IsOk(client->Upsert("contended", third)));
  auto end2 = raw->Call([&](rpc::WorkerServiceClient& w) { return w.PutEnd(start2.handle); });
  ASSERT_TRUE(IsOk(end2));
  EXPECT_EQ(FromRpc(*end2), ErrorCode::kIllegalClient);
  EXPECT_TRUE(ReadsBack(*client, "contended", third));
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), base + static_cast<int64_t>(kMiB));
}

TEST_F(LifecycleTest, AbandonedPutStartIsDiscardedAfterTheTimeout) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(
      cluster_.StartWorker("w1", {.dram = 16 * kMiB,
                                  .ssd = 32 * kMiB,
                                  .extra_args = {"--put-start-discard-timeout-ms", "300"}}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Put("neighbour", PatternBytes(1, 64 * kKiB))));
  auto raw = RawWorker(*client, "w1");
  ASSERT_TRUE(raw);
  const int64_t before = UsedIn(*client, "w1", "dram");

  // Given a writer that starts a 2 MiB put, sends half, and goes away.
  rpc::PutStartResult start;
  ASSERT_TRUE(IsOk(raw->Call([&](rpc::WorkerServiceClient& w) {
    w.PutStart(start, "abandoned", static_cast<int64_t>(2 * kMiB), rpc::ReplicateConfig(), false);
  })));
  ASSERT_EQ(start.code, rpc::ErrorCode::OK);
  auto chunk = raw->Call([&](rpc::WorkerServiceClient& w) {
    return w.PutChunk(start.handle, 0, PatternBytes(2, kMiB));
  });
  ASSERT_TRUE(IsOk(chunk));
  EXPECT_EQ(*chunk, rpc::ErrorCode::OK);
  EXPECT_EQ(UsedIn(*client, "w1", "dram"), before + static_cast<int64_t>(2 * kMiB))
      << "PutStart did not reserve the space";

  // Expect the space back within a bounded time and the key absent.
  EXPECT_TRUE(Eventually([&] { return UsedIn(*client, "w1", "dram") == before; }, 5s))
      << "tier usage stayed at " << UsedIn(*client, "w1", "dram") << ", was " << before;
  auto exists = client->Exist("abandoned");
  ASSERT_TRUE(IsOk(exists));
  EXPECT_FALSE(*exists);
  EXPECT_TRUE(FailsWith(client->Get("abandoned"), ErrorCode::kObjectNotFound));
  // And the abandoned handle's remaining calls fail.
  auto late = raw->Call([&](rpc::WorkerServiceClient& w) {
    return w.PutChunk(start.handle, static_cast<int64_t>(kMiB), PatternBytes(2, kMiB, kMiB));
  });
  ASSERT_TRUE(IsOk(late));
  EXPECT_EQ(FromRpc(*late), ErrorCode::kIllegalClient);
  auto end = raw->Call([&](rpc::WorkerServiceClient& w) { return w.PutEnd(start.handle); });
  ASSERT_TRUE(IsOk(end));
  EXPECT_EQ(FromRpc(*end), ErrorCode::kIllegalClient);
  exists = client->Exist("abandoned");
  ASSERT_TRUE(IsOk(exists));
  EXPECT_FALSE(*exists);
  // The key is free for a new put, and the neighbour was never touched.
  EXPECT_TRUE(IsOk(client->Put("abandoned", "new")));
  EXPECT_TRUE(ReadsBack(*client, "abandoned", "new"));
  EXPECT_TRUE(ReadsBack(*client, "neighbour", PatternBytes(1, 64 * kKiB)));
}

// ---------------------------------------------------------------------------
// Pins across a restart

TEST_F(LifecycleTest, HardPinnedObjectsArePinnedAndReadableAfterTheirWorkerRestarts) {
  // Given hard-pinned objects on w1, one placed in DRAM (written through to
  // SSD by default), one on SSD, and one soft-pinned on SSD.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 * kMiB, .ssd = 64 * kMiB}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  const std::string in_dram = PatternBytes(1, kMiB);
  const std::string on_ssd = PatternBytes(2, kMiB);
  const std::string soft = PatternBytes(3, 256 * kKiB);
  ASSERT_TRUE(IsOk(client->Put("pinned-dram", in_dram, HardPin())));
  ASSERT_TRUE(IsOk(client->Put("pinned-ssd", on_ssd, HardPin("ssd"))));
  ASSERT_TRUE(IsOk(client->Put("soft-ssd", soft, SoftPin("ssd"))));
  ASSERT_EQ(TierOf(*client, "pinned-dram"), "dram");
  ASSERT_EQ(TierOf(*client, "pinned-ssd"), "ssd");
  auto version_dram = client->Inspect("pinned-dram")->version;
  auto version_ssd = client->Inspect("pinned-ssd")->version;

  // When w1 is killed with SIGKILL and started again.
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(cluster_.RestartWorker("w1"));

  // Expect both hard-pinned objects back on w1, pinned, with their versions,
  // byte for byte; the soft pin survives as well.
  auto after = cluster_.NewClient();
  ASSERT_TRUE(after);
  for (const auto& [key, value, version] : {std::tuple{"pinned-dram", in_dram, version_dram},
                                            std::tuple{"pinned-ssd", on_ssd, version_ssd}}) {
    Result<ObjectInspection> info = Err(ErrorCode::kObjectNotFound);
    EXPECT_TRUE(Eventually(
        [&] {
          info = after->Inspect(key);
          return info.has_value();
        },
        10s))
        << key << " not found after the restart: " << Describe(info);
    if (!info) continue;
    EXPECT_EQ(info->node_id, "w1") << key;
    EXPECT_TRUE(info->hard_pinned) << key << " lost its hard pin: " << Describe(info);
    EXPECT_EQ(info->version, version) << key << ": " << Describe(info);
    EXPECT_TRUE(ReadsBack(*after, key, value));
  }
  auto soft_info = after->Inspect("soft-ssd");
  ASSERT_TRUE(IsOk(soft_info)) << "soft-pinned SSD object lost in the restart";
  EXPECT_TRUE(soft_info->soft_pinned) << Describe(soft_info);
  EXPECT_TRUE(ReadsBack(*after, "soft-ssd", soft));

  // And the pin still protects: filling the node does not push them out.
  for (int i = 0; i < 90; ++i) {
    EXPECT_TRUE(IsOk(after->Put(Key("filler-", i), PatternBytes(100 + i, kMiB), On("w1")))) << i;
  }
  for (const auto& [key, value] :
       {std::pair{"pinned-dram", in_dram}, std::pair{"pinned-ssd", on_ssd}}) {
    auto info = after->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key << " evicted after the restart";
    EXPECT_TRUE(info->hard_pinned);
    EXPECT_TRUE(ReadsBack(*after, key, value));
  }
}

// ---------------------------------------------------------------------------
// Concurrency

// A self-checking value: magic, writer id, sequence number, total size, a
// body derived from (writer, sequence), and a checksum over all of it.
constexpr uint32_t kMagic = 0x4d434b56;  // "MCKV"
constexpr size_t kHeader = 4 + 4 + 8 + 4;
constexpr size_t kTrailer = 8;

uint64_t Fnv1a(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string EncodeValue(uint32_t writer, uint64_t seq, uint32_t size) {
  std::string out(size, '\0');
  std::memcpy(out.data(), &kMagic, 4);
  std::memcpy(out.data() + 4, &writer, 4);
  std::memcpy(out.data() + 8, &seq, 8);
  std::memcpy(out.data() + 16, &size, 4);
  std::string body = PatternBytes((uint64_t{writer} << 40) ^ seq, size - kHeader - kTrailer);
  std::memcpy(out.data() + kHeader, body.data(), body.size());
  uint64_t sum = Fnv1a(std::string_view(out.data(), size - kTrailer));
  std::memcpy(out.data() + size - kTrailer, &sum, 8);
  return out;
}

// Empty if `value` is a complete value that writer `w` wrote as sequence
// `s` with s <= issued[w]; otherwise what is wrong with it.
std::string CheckValue(const std::string& value, const std::vector<std::atomic<uint64_t>>& issued) {
  if (value.size() < kHeader + kTrailer) return "too short: " + std::to_string(value.size());
  uint32_t magic, writer, size;
  uint64_t seq, sum;
  std::memcpy(&magic, value.data(), 4);
  std::memcpy(&writer, value.data() + 4, 4);
  std::memcpy(&seq, value.data() + 8, 8);
  std::memcpy(&size, value.data() + 16, 4);
  std::memcpy(&sum, value.data() + value.size() - kTrailer, 8);
  if (magic != kMagic) return "bad magic";
  if (size != value.size()) {
    return "size " + std::to_string(value.size()) + " but header says " + std::to_string(size);
  }
  if (Fnv1a(std::string_view(value.data(), value.size() - kTrailer)) != sum) return "bad checksum";
  if (writer >= issued.size()) return "unknown writer " + std::to_string(writer);
  if (seq == 0 || seq > issued[writer].load()) {
    return "writer " + std::to_string(writer) + " never wrote sequence " + std::to_string(seq);
  }
  if (value != EncodeValue(writer, seq, size)) return "body differs from what was written";
  return "";
}

TEST_F(LifecycleTest, ConcurrentMixedOperationsNeverExposeATornOrInventedValue) {
  // Given two nodes and 8 threads, each with its own client, doing put, get,
  // upsert and forced remove at random on 100 keys for 3 s.
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 64 * kMiB, .ssd = 64 * kMiB}));
  ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 64 * kMiB, .ssd = 64 * kMiB}));
  constexpr int kThreads = 8;
  constexpr int kKeys = 100;
  const std::vector<uint32_t> sizes = {64, 1000, 4096, 40000, 200000};
  std::vector<std::unique_ptr<Client>> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.push_back(cluster_.NewClient(t % 2 == 0 ? "" : (t % 4 == 1 ? "w1" : "w2")));
    ASSERT_TRUE(clients.back());
  }
  std::vector<std::atomic<uint64_t>> issued(kThreads);
  for (auto& i : issued) i = 0;
  std::mutex mu;
  std::vector<std::string> problems;
  std::map<std::string, int64_t> outcomes;  // "op code" -> count
  auto note = [&](const std::string& op, ErrorCode code, bool ok) {
    std::lock_guard lock(mu);
    outcomes[op + " " + std::string(ToString(code))]++;
    if (!ok) problems.push_back(op + " failed with " + std::string(ToString(code)));
  };
  std::atomic<int64_t> reads_checked{0};
  // The mix runs for 3 s and on until every kind of operation succeeded at
  // least once (so the checks below are never vacuous), 30 s at most.
  const auto min_end = Clock::now() + 3s;
  const auto max_end = Clock::now() + 30s;
  auto every_kind_succeeded = [&] {
    std::lock_guard lock(mu);
    return reads_checked.load() > 0 && outcomes["upsert OK"] > 0 && outcomes["put OK"] > 0 &&
           outcomes["remove OK"] > 0;
  };
  auto keep_going = [&] {
    const auto now = Clock::now();
    return now < min_end || (now < max_end && !every_kind_succeeded());
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Client& c = *clients[t];
      std::mt19937_64 rng(1234 + t);
      while (keep_going()) {
        std::string key = Key("mixed-", static_cast<int>(rng() % kKeys));
        int op = static_cast<int>(rng() % 100);
        if (op < 35) {
          auto got = c.Get(key);
          if (got) {
            std::string problem = CheckValue(got->data, issued);
            reads_checked++;
            if (!problem.empty()) {
              std::lock_guard lock(mu);
              problems.push_back("Get(" + key + "): " + problem);
            }
            note("get", ErrorCode::kOk, true);
          } else {
            ErrorCode e = got.error();
            note("get", e,
                 e == ErrorCode::kObjectNotFound || e == ErrorCode::kReplicaIsNotReady ||
                     e == ErrorCode::kObjectReplicaBusy);
          }
          continue;
        }
        if (op < 85) {
          uint32_t size = sizes[rng() % sizes.size()];
          uint64_t seq = issued[t].load() + 1;
          issued[t].store(seq);  // before the write: readers may see it at once
          std::string value = EncodeValue(static_cast<uint32_t>(t), seq, size);
          if (op < 60) {
            auto r = c.Put(key, value);
            ErrorCode e = r ? ErrorCode::kOk : r.error();
            note("put", e,
                 r || e == ErrorCode::kObjectAlreadyExists || e == ErrorCode::kIllegalClient ||
                     e == ErrorCode::kObjectReplicaBusy);
          } else {
            auto r = c.Upsert(key, value);
            ErrorCode e = r ? ErrorCode::kOk : r.error();
            note("upsert", e,
                 r || e == ErrorCode::kObjectReplicaBusy || e == ErrorCode::kIllegalClient ||
                     e == ErrorCode::kObjectAlreadyExists || e == ErrorCode::kReplicaIsNotReady);
          }
          continue;
        }
        auto r = c.Remove(key, /*force=*/true);
        ErrorCode e = r ? ErrorCode::kOk : r.error();
        note("remove", e,
             r || e == ErrorCode::kObjectNotFound || e == ErrorCode::kObjectReplicaBusy);
      }
    });
  }
  for (auto& t : threads) t.join();
  {
    std::ostringstream summary;
    for (const auto& [what, n] : outcomes) summary << what << "=" << n << " ";
    std::cout << summary.str() << "\n";
  }
  EXPECT_GT(reads_checked.load(), 0);
  EXPECT_GT(outcomes["upsert OK"], 0);
  EXPECT_GT(outcomes["put OK"], 0);
  EXPECT_GT(outcomes["remove OK"], 0);

  // Expect every key now absent or holding one complete value some writer
  // wrote, owned by a node that has it.
  auto checker = cluster_.NewClient();
  ASSERT_TRUE(checker);
  int present = 0;
  for (int k = 0; k < kKeys; ++k) {
    std::string key = Key("mixed-", k);
    auto got = checker->Get(key);
    if (!got) {
      EXPECT_TRUE(FailsWith(got, ErrorCode::kObjectNotFound)) << key;
      auto exists = checker->Exist(key);
      ASSERT_TRUE(IsOk(exists));
      EXPECT_FALSE(*exists) << key << ": Exist says yes but Get says no";
      continue;
    }
    ++present;
    std::string problem = CheckValue(got->data, issued);
    EXPECT_TRUE(problem.empty()) << key << ": " << problem;
    auto info = checker->Inspect(key);
    ASSERT_TRUE(IsOk(info)) << key;
    EXPECT_EQ(info->state, "complete") << key << ": " << Describe(info);
    EXPECT_EQ(info->size, static_cast<int64_t>(got->data.size())) << key;
  }
  EXPECT_GT(present, 0);
  for (size_t i = 0; i < std::min<size_t>(problems.size(), 20); ++i) ADD_FAILURE() << problems[i];
  if (problems.size() > 20) ADD_FAILURE() << problems.size() - 20 << " more problems";

  // And once every key is removed, each can be created again on either node
  // (no node keeps a copy the master does not know of) ...
  for (int k = 0; k < kKeys; ++k) {
    auto r = checker->Remove(Key("mixed-", k), /*force=*/true);
    if (!r) {
      EXPECT_TRUE(FailsWith(r, ErrorCode::kObjectNotFound)) << k;
    }
  }
  int refused = 0;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = Key("mixed-", k);
    for (const std::string node : {"w1", "w2"}) {
      auto put = checker->Put(key, "fresh", On(node));
      if (!put) {
        if (++refused <= 5) {
          ADD_FAILURE() << "Put(" << key << ") on " << node << " after it was removed failed with "
                        << ToString(put.error()) << "; Get says "
                        << (checker->Get(key) ? "present" : "absent");
        }
        continue;
      }
      EXPECT_TRUE(ReadsBack(*checker, key, "fresh"));
      EXPECT_TRUE(IsOk(checker->Remove(key, /*force=*/true))) << key;
    }
  }
  EXPECT_EQ(refused, 0) << "puts of absent keys refused";
  // ... and no space stays allocated on any node (no leaked pre-empted or
  // orphaned writes).
  for (int k = 0; k < kKeys; ++k) {
    auto r = checker->Remove(Key("mixed-", k), /*force=*/true);
    if (!r) {
      EXPECT_TRUE(FailsWith(r, ErrorCode::kObjectNotFound)) << k;
    }
  }
  for (const std::string node : {"w1", "w2"}) {
    EXPECT_TRUE(Eventually(
        [&] {
          auto s = checker->Stats(node);
          if (!s) return false;
          for (const auto& t : s->tiers) {
            if (t.usage.used != 0 || t.usage.objects != 0) return false;
          }
          return true;
        },
        3s))
        << node << " still holds space after every key was removed: " << [&] {
             std::string out;
             auto s = checker->Stats(node);
             if (s) {
               for (const auto& t : s->tiers) {
                 out += t.usage.name + " used=" + std::to_string(t.usage.used) +
                        " objects=" + std::to_string(t.usage.objects) + " ";
               }
             }
             return out;
           }();
  }
}

}  // namespace
}  // namespace mooncake::testing
