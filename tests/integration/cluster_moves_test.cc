// Objects moving between nodes over real processes (docs/design.md, "Flows"):
// exist-with-prefetch (to the owner's DRAM, to the requesting client's node,
// and the fallback when that node is full of hard pins), inter-node eviction
// when a node's last tier is full, a source worker killed at each step of a
// move, and a master restart with keys spread over three workers.
//
// Each test starts a master and three workers with tiers of a few MiB; every
// wait is bounded.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
using Clock = std::chrono::steady_clock;

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
PutOptions On(std::string node, std::string tier = "") {
  return Opt(false, false, std::move(node), std::move(tier));
}

// Adopted copies are confirmed against the master quickly in these tests.
const std::vector<std::string> kFastAdopt = {"--adopt-confirm-delay-ms", "500"};

class ClusterMovesTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(40);
  }

  // Given a master and workers w1, w2, w3.
  void GivenThreeNodes(WorkerOptions w1, WorkerOptions w2, WorkerOptions w3,
                       std::vector<std::string> master_args = {}) {
    ASSERT_TRUE(cluster_.StartMaster(std::move(master_args)));
    ASSERT_TRUE(cluster_.StartWorker("w1", std::move(w1)));
    ASSERT_TRUE(cluster_.StartWorker("w2", std::move(w2)));
    ASSERT_TRUE(cluster_.StartWorker("w3", std::move(w3)));
  }

  static WorkerOptions Small(uint64_t dram_mib, uint64_t ssd_mib,
                             std::vector<std::string> extra = {}) {
    WorkerOptions o{.dram = dram_mib * kMiB, .ssd = ssd_mib * kMiB};
    o.extra_args = kFastAdopt;
    o.extra_args.insert(o.extra_args.end(), extra.begin(), extra.end());
    return o;
  }

  WorkerCounters StatsOf(Client& client, const std::string& node) {
    auto stats = client.Stats(node);
    EXPECT_TRUE(IsOk(stats)) << "Stats(" << node << ")";
    return stats ? *stats : WorkerCounters{};
  }

  void SourceDiesDuringAMove(const std::string& crash_at);

  TestCluster cluster_;
};

// ---------------------------------------------------------------------------
// Prefetch

TEST_F(ClusterMovesTest, ExistWithPrefetchPromotesAnSsdOnlyObjectIntoTheOwnersDram) {
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(Small(16, 64), Small(16, 64), Small(16, 64)));
  auto client = cluster_.NewClient();  // names no node of its own
  ASSERT_TRUE(client);
  const std::string value = PatternBytes(1, kMiB);
  ASSERT_TRUE(IsOk(client->Put("cold", value, On("w1", "ssd"))));
  auto before = client->Inspect("cold");
  ASSERT_TRUE(IsOk(before));
  ASSERT_EQ(before->tier, "ssd") << Describe(before);
  auto stats_before = StatsOf(*client, "w1");

  // When the key is probed with prefetch.
  auto start = Clock::now();
  auto exists = client->Exist("cold", /*prefetch=*/true);
  auto took = Clock::now() - start;
  ASSERT_TRUE(IsOk(exists));
  EXPECT_TRUE(*exists);
  EXPECT_LT(took, 500ms) << "exist with prefetch must not wait for the promotion";

  // Expect it in w1's DRAM soon, counted, byte for byte.
  Result<ObjectInspection> info = before;
  EXPECT_TRUE(Eventually(
      [&] {
        info = client->Inspect("cold");
        return info && info->tier == "dram";
      },
      5s))
      << Describe(info);
  EXPECT_EQ(info->node_id, "w1");
  EXPECT_EQ(info->version, before->version) << "a promotion is not a new version";
  auto stats = StatsOf(*client, "w1");
  EXPECT_EQ(stats.prefetch_started, stats_before.prefetch_started + 1);
  EXPECT_TRUE(Eventually(
      [&] { return StatsOf(*client, "w1").prefetch_succeeded > stats_before.prefetch_succeeded; },
      5s));
  EXPECT_EQ(StatsOf(*client, "w1").prefetch_failed, stats_before.prefetch_failed);
  EXPECT_TRUE(ReadsBack(*client, "cold", value));
}

TEST_F(ClusterMovesTest, ExistWithPrefetchMovesTheObjectToTheRequestingClientsNode) {
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(Small(16, 64), Small(16, 64), Small(16, 64)));
  auto writer = cluster_.NewClient("w1");
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(writer && on_w2);
  const std::string value = PatternBytes(2, 3 * kMiB);
  ASSERT_TRUE(IsOk(writer->Put("shard", value, On("w1", "ssd"))));
  auto before = writer->Inspect("shard");
  ASSERT_TRUE(IsOk(before));
  ASSERT_EQ(before->node_id, "w1");
  ASSERT_EQ(before->tier, "ssd");
  auto w1_before = StatsOf(*writer, "w1");
  auto w2_before = StatsOf(*writer, "w2");

  // When a client on w2 (which has room) probes it with prefetch.
  auto start = Clock::now();
  auto exists = on_w2->Exist("shard", /*prefetch=*/true);
  auto took = Clock::now() - start;
  ASSERT_TRUE(IsOk(exists));
  EXPECT_TRUE(*exists);
  EXPECT_LT(took, 500ms);

  // Expect w2 to become the owner, with the object in its DRAM, intact.
  Result<ObjectInspection> info = before;
  EXPECT_TRUE(Eventually(
      [&] {
        info = on_w2->Inspect("shard");
        return info && info->node_id == "w2";
      },
      5s))
      << Describe(info);
  EXPECT_EQ(info->tier, "dram") << Describe(info);
  EXPECT_EQ(info->size, static_cast<int64_t>(value.size()));
  EXPECT_TRUE(ReadsBack(*on_w2, "shard", value));
  EXPECT_TRUE(ReadsBack(*writer, "shard", value));
  // Counted on both sides; w1 no longer holds it (its SSD is empty again).
  WorkerCounters w1;
  EXPECT_TRUE(Eventually(
      [&] {
        w1 = StatsOf(*writer, "w1");
        const TierCounters* ssd = FindTier(w1, "ssd");
        return w1.moved_out > w1_before.moved_out &&
               w1.prefetch_succeeded > w1_before.prefetch_succeeded && ssd != nullptr &&
               ssd->usage.objects == 0;
      },
      3s))
      << "moved_out=" << w1.moved_out << " prefetch_succeeded=" << w1.prefetch_succeeded
      << " ssd objects=" << (FindTier(w1, "ssd") ? FindTier(w1, "ssd")->usage.objects : 0);
  EXPECT_GT(w1.prefetch_started, w1_before.prefetch_started);
  EXPECT_EQ(w1.prefetch_failed, w1_before.prefetch_failed);
  EXPECT_GT(StatsOf(*writer, "w2").moved_in, w2_before.moved_in);
  // And after the adopt confirmation, w2 still owns it, for good.
  EXPECT_TRUE(Eventually(
      [&] {
        info = on_w2->Inspect("shard");
        return info && info->state == "complete";
      },
      3s))
      << Describe(info);
  EXPECT_EQ(info->node_id, "w2") << Describe(info);
  EXPECT_TRUE(ReadsBack(*writer, "shard", value));
}

TEST_F(ClusterMovesTest, PrefetchLandsInTheOwnersDramWhenTheRequestersDramIsFullOfHardPins) {
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(Small(16, 64), Small(8, 64), Small(16, 64)));
  auto writer = cluster_.NewClient("w1");
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(writer && on_w2);

  // Given w2's DRAM full of hard-pinned objects.
  std::map<std::string, std::string> pinned;
  bool spilled = false;
  for (int i = 0; i < 12 && !spilled; ++i) {
    std::string key = Key("w2-pinned-", i);
    pinned[key] = PatternBytes(100 + i, kMiB);
    ASSERT_TRUE(IsOk(on_w2->Put(key, pinned[key], Opt(true, false, "w2"))));
    auto info = on_w2->Inspect(key);
    ASSERT_TRUE(IsOk(info));
    ASSERT_EQ(info->node_id, "w2");
    spilled = info->tier != "dram";
  }
  ASSERT_TRUE(spilled) << "w2's DRAM never filled";
  {
    auto w2 = StatsOf(*writer, "w2");
    const TierCounters* dram = FindTier(w2, "dram");
    ASSERT_NE(dram, nullptr);
    ASSERT_LT(dram->usage.capacity - dram->usage.used, kMiB) << "w2's DRAM still has room";
  }
  // And an SSD-only object owned by w1.
  const std::string value = PatternBytes(3, kMiB);
  ASSERT_TRUE(IsOk(writer->Put("cold", value, On("w1", "ssd"))));
  ASSERT_EQ(writer->Inspect("cold")->tier, "ssd");
  auto w1_before = StatsOf(*writer, "w1");

  // When a client on w2 probes it with prefetch.
  auto exists = on_w2->Exist("cold", /*prefetch=*/true);
  ASSERT_TRUE(IsOk(exists));
  EXPECT_TRUE(*exists);

  // Expect it in the owner's DRAM instead, owner unchanged.
  Result<ObjectInspection> info = Err(ErrorCode::kObjectNotFound);
  EXPECT_TRUE(Eventually(
      [&] {
        info = writer->Inspect("cold");
        return info && info->tier == "dram";
      },
      5s))
      << Describe(info);
  EXPECT_EQ(info->node_id, "w1") << Describe(info);
  EXPECT_TRUE(Eventually(
      [&] { return StatsOf(*writer, "w1").prefetch_succeeded > w1_before.prefetch_succeeded; },
      5s));
  EXPECT_EQ(StatsOf(*writer, "w1").moved_out, w1_before.moved_out);
  EXPECT_TRUE(ReadsBack(*on_w2, "cold", value));
  // And w2's hard-pinned objects did not move.
  for (const auto& [key, v] : pinned) {
    auto p = writer->Inspect(key);
    ASSERT_TRUE(IsOk(p)) << key;
    EXPECT_EQ(p->node_id, "w2") << key;
    EXPECT_TRUE(p->hard_pinned) << key;
    EXPECT_TRUE(ReadsBack(*writer, key, v));
  }
  auto w2 = StatsOf(*writer, "w2");
  EXPECT_EQ(w2.moved_in, 0);
}

TEST_F(ClusterMovesTest, PrefetchOfAnObjectAlreadyInDramChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(Small(16, 64), Small(16, 64), Small(16, 64)));
  auto writer = cluster_.NewClient("w1");
  auto on_w2 = cluster_.NewClient("w2");
  ASSERT_TRUE(writer && on_w2);
  const std::string value = PatternBytes(4, kMiB);
  ASSERT_TRUE(IsOk(writer->Put("warm", value, On("w1"))));
  auto before = writer->Inspect("warm");
  ASSERT_TRUE(IsOk(before));
  ASSERT_EQ(before->tier, "dram");
  auto w1_before = StatsOf(*writer, "w1");
  auto w2_before = StatsOf(*writer, "w2");

  // When clients with and without a node of their own probe it with prefetch.
  for (Client* c : {writer.get(), on_w2.get()}) {
    auto exists = c->Exist("warm", /*prefetch=*/true);
    ASSERT_TRUE(IsOk(exists));
    EXPECT_TRUE(*exists);
  }
  auto batch = on_w2->BatchExist({"warm"}, /*prefetch=*/true);
  ASSERT_EQ(batch.size(), 1u);
  ASSERT_TRUE(IsOk(batch[0]));
  EXPECT_TRUE(*batch[0]);
  std::this_thread::sleep_for(500ms);  // room for a (wrong) background move

  // Expect nothing started or moved, and the skips counted.
  auto w1 = StatsOf(*writer, "w1");
  auto w2 = StatsOf(*writer, "w2");
  EXPECT_EQ(w1.prefetch_started, w1_before.prefetch_started);
  EXPECT_EQ(w1.prefetch_succeeded, w1_before.prefetch_succeeded);
  EXPECT_EQ(w1.prefetch_failed, w1_before.prefetch_failed);
  EXPECT_GE(w1.prefetch_skipped, w1_before.prefetch_skipped + 3);
  EXPECT_EQ(w1.moved_out, w1_before.moved_out);
  EXPECT_EQ(w2.moved_in, w2_before.moved_in);
  EXPECT_EQ(TotalPromotionsIn(w1), TotalPromotionsIn(w1_before));
  auto after = writer->Inspect("warm");
  ASSERT_TRUE(IsOk(after));
  EXPECT_EQ(after->node_id, "w1");
  EXPECT_EQ(after->tier, "dram");
  EXPECT_EQ(after->offset, before->offset);
  EXPECT_EQ(after->version, before->version);
  EXPECT_TRUE(ReadsBack(*on_w2, "warm", value));
}

// ---------------------------------------------------------------------------
// Inter-node eviction

TEST_F(ClusterMovesTest, FillingANodePastItsLastTierMovesObjectsToOtherNodes) {
  // Given w1 with DRAM 8 MiB + SSD 16 MiB, and two roomier peers.
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(Small(8, 16), Small(16, 64), Small(16, 64)));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);

  // When 40 objects of 1 MiB are put on w1 explicitly.
  constexpr int kCount = 40;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(IsOk(client->Put(Key("fill-", i), PatternBytes(500 + i, kMiB), On("w1"))))
        << "fill-" << i;
  }

  // Expect the oldest ones handed to w2/w3 (master owners changed), none
  // dropped, every one intact.
  std::map<std::string, int> owners;
  std::set<int> moved;
  for (int i = 0; i < kCount; ++i) {
    auto info = client->Inspect(Key("fill-", i));
    ASSERT_TRUE(IsOk(info)) << "fill-" << i << " lost";
    owners[info->node_id]++;
    if (info->node_id != "w1") moved.insert(i);
  }
  EXPECT_GE(moved.size(), static_cast<size_t>(kCount - 24))
      << "w1 holds at most 24 MiB, yet only " << moved.size() << " objects left it";
  EXPECT_TRUE(moved.contains(0)) << "the least recently used object stayed on w1";
  for (const auto& [node, n] : owners) std::cout << node << " owns " << n << "\n";
  // (A background demotion may still be handing one over: wait until both
  // sides agree.)
  WorkerCounters w1, w2, w3;
  EXPECT_TRUE(Eventually(
      [&] {
        w1 = StatsOf(*client, "w1");
        w2 = StatsOf(*client, "w2");
        w3 = StatsOf(*client, "w3");
        return w1.moved_out > 0 && w1.moved_out == w2.moved_in + w3.moved_in;
      },
      5s))
      << "w1 moved_out=" << w1.moved_out << " w2 moved_in=" << w2.moved_in
      << " w3 moved_in=" << w3.moved_in;
  EXPECT_EQ(w1.dropped + w2.dropped + w3.dropped, 0) << "objects were dropped with room left";
  for (int i = 0; i < kCount; ++i) {
    EXPECT_TRUE(ReadsBack(*client, Key("fill-", i), PatternBytes(500 + i, kMiB)));
  }
  // And after the adopt confirmation the new owners hold them for good.
  std::string pending;
  EXPECT_TRUE(Eventually(
      [&] {
        pending.clear();
        for (int i : moved) {
          auto info = client->Inspect(Key("fill-", i));
          if (!info || info->node_id == "w1" || info->state != "complete") {
            pending += Key("fill-", i) + ": " + Describe(info) + "; ";
          }
        }
        return pending.empty();
      },
      5s))
      << pending;
  EXPECT_TRUE(ReadsBack(*client, "fill-0", PatternBytes(500, kMiB)));
}

// Puts 1 MiB objects on w1 until it dies at its crash point; checks that every
// key is then readable byte for byte or absent, never owned by a node that
// lacks it, before and after w1 restarts.
void ClusterMovesTest::SourceDiesDuringAMove(const std::string& crash_at) {
  // Given a master that declares a node dead after 1 s, a small w1 that
  // kills itself at `crash_at` of its first outgoing move, and two peers.
  WorkerOptions w1 = Small(8, 16, {"--test-crash-at", crash_at});
  w1.promote_on_get = false;  // reads must not trigger more moves on restart
  ASSERT_NO_FATAL_FAILURE(
      GivenThreeNodes(w1, Small(16, 64), Small(16, 64), {"--node-ttl-ms", "1000"}));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);

  // When objects are put on w1 until it dies moving one of them out.
  std::map<std::string, std::string> values;
  bool died = false;
  for (int i = 0; i < 60 && !died; ++i) {
    std::string key = Key("crash-", i);
    values[key] = PatternBytes(700 + i, kMiB);
    auto put = client->Put(key, values[key], On("w1"));
    if (!put)
      died = !cluster_.IsRunning("w1") || Eventually([&] { return !cluster_.IsRunning("w1"); }, 2s);
    if (!put && !died) FAIL() << key << ": " << ToString(put.error()) << " with w1 alive";
  }
  ASSERT_TRUE(died) << "w1 never reached its crash point " << crash_at;

  // Expect, once the master has dropped the dead node, every key readable
  // byte for byte or cleanly absent.
  auto reader = cluster_.NewClient();
  ASSERT_TRUE(reader);
  std::map<std::string, std::string> outcome;  // key -> "ok@node" / "absent" / error
  auto settle = [&] {
    outcome.clear();
    bool settled = true;
    for (const auto& [key, value] : values) {
      auto got = reader->Get(key);
      if (got) {
        auto info = reader->Inspect(key);
        outcome[key] = got->data == value ? "ok@" + (info ? info->node_id : "?") : "WRONG BYTES";
      } else if (got.error() == ErrorCode::kObjectNotFound) {
        outcome[key] = "absent";
      } else {
        outcome[key] = std::string(ToString(got.error()));
        settled = false;
      }
    }
    return settled;
  };
  auto show = [&] {
    std::string out;
    for (const auto& [key, o] : outcome) out += key + "=" + o + " ";
    return out;
  };
  EXPECT_TRUE(Eventually(settle, 10s, 200ms)) << "keys still unreachable: " << show();
  std::vector<std::string> readable;
  for (const auto& [key, o] : outcome) {
    EXPECT_NE(o, "WRONG BYTES") << key;
    EXPECT_NE(o, "ok@w1") << key << " served by a dead node";
    if (o.starts_with("ok@")) readable.push_back(key);
    if (o == "absent") {
      auto exists = reader->Exist(key);
      ASSERT_TRUE(IsOk(exists)) << key;
      EXPECT_FALSE(*exists) << key << " exists but cannot be read";
    }
  }
  std::cout << crash_at << ": " << show() << "\n";
  auto w2 = StatsOf(*reader, "w2");
  auto w3 = StatsOf(*reader, "w3");
  EXPECT_GE(w2.moved_in + w3.moved_in, 1) << "the crash did not happen during a move";
  if (crash_at == "after_hand_over") {
    // The master named the target before w1 died: the moved key lives on.
    EXPECT_GE(readable.size(), 1u) << "the handed-over key was lost: " << show();
  }
  // Stays so after the target confirmed (or dropped) its adopted copy.
  std::this_thread::sleep_for(700ms);
  ASSERT_TRUE(settle()) << show();
  for (const std::string& key : readable) {
    EXPECT_TRUE(outcome[key].starts_with("ok@")) << key << " was readable, now " << outcome[key];
  }

  // When w1 comes back with its SSD objects.
  ASSERT_TRUE(cluster_.RestartWorker("w1"));

  // Expect again every key intact or absent, and nothing readable lost.
  EXPECT_TRUE(Eventually(settle, 10s, 200ms)) << show();
  for (const auto& [key, o] : outcome) {
    EXPECT_NE(o, "WRONG BYTES") << key;
  }
  for (const std::string& key : readable) {
    EXPECT_TRUE(outcome[key].starts_with("ok@"))
        << key << " was readable before w1 restarted, now " << outcome[key];
  }
  EXPECT_TRUE(cluster_.IsRunning("w1"));
}

// w2 has the most room, so the master names it for every eviction, and it
// heartbeats fine, but it advertises an address no peer can connect to. w1,
// whose only tier is full, moves its victims to w3 instead, and every put
// on w1 succeeds (was: each eviction stopped at w2, and puts failed
// NO_AVAILABLE_HANDLE).
TEST_F(ClusterMovesTest, EvictionsGoPastANodePeersCannotReach) {
  ASSERT_NO_FATAL_FAILURE(
      GivenThreeNodes(Small(8, 0), Small(256, 0, {"--advertise-host", "127.0.0.2"}), Small(64, 0)));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  constexpr int kCount = 20;
  for (int i = 0; i < kCount; ++i) {
    EXPECT_TRUE(IsOk(client->Put(Key("far-", i), PatternBytes(700 + i, kMiB), On("w1"))))
        << "far-" << i;
  }
  WorkerCounters w1, w3;
  EXPECT_TRUE(Eventually(
      [&] {
        w1 = StatsOf(*client, "w1");
        w3 = StatsOf(*client, "w3");
        return w3.moved_in > 0 && w1.moved_out == w3.moved_in;
      },
      5s))
      << "w1 moved_out=" << w1.moved_out << " w3 moved_in=" << w3.moved_in;
  EXPECT_EQ(w1.dropped + w3.dropped, 0) << "objects were dropped with room left on w3";
  for (int i = 0; i < kCount; ++i) {
    EXPECT_TRUE(ReadsBack(*client, Key("far-", i), PatternBytes(700 + i, kMiB)));
  }
}

TEST_F(ClusterMovesTest, SourceKilledAfterAdoptLeavesEveryKeyIntactOrAbsent) {
  SourceDiesDuringAMove("after_adopt");
}

TEST_F(ClusterMovesTest, SourceKilledAfterHandOverLeavesEveryKeyIntactOrAbsent) {
  SourceDiesDuringAMove("after_hand_over");
}

// The master applies a hand-over but its answer is lost (as on a timeout):
// the sender must not take the move back, or the master would name a node
// whose copy was dropped. It asks the master who owns the key, and every
// moved key stays readable where the master says.
TEST_F(ClusterMovesTest, AHandOverWhoseAnswerIsLostLeavesEveryKeyReadable) {
  // Given a small w1 whose hand-overs all lose their answers, and two peers.
  WorkerOptions w1 = Small(8, 16, {"--test-crash-at", "hand_over_answer_lost"});
  w1.promote_on_get = false;  // reads must not trigger more moves
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(w1, Small(16, 64), Small(16, 64)));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);

  // When more is put on w1 than it holds, so that it moves objects out.
  std::map<std::string, std::string> values;
  for (int i = 0; i < 40; ++i) {
    std::string key = Key("lost-answer-", i);
    values[key] = PatternBytes(900 + i, kMiB);
    ASSERT_TRUE(IsOk(client->Put(key, values[key], On("w1")))) << key;
  }
  auto reader = cluster_.NewClient();
  ASSERT_TRUE(reader);
  EXPECT_TRUE(Eventually(
      [&] { return StatsOf(*reader, "w2").moved_in + StatsOf(*reader, "w3").moved_in >= 1; }, 5s))
      << "w1 never moved an object out";

  // Expect every key readable byte for byte, now and after the targets
  // confirmed their adopted copies.
  for (int round = 0; round < 2; ++round) {
    for (const auto& [key, value] : values) {
      auto got = reader->Get(key);
      ASSERT_TRUE(IsOk(got)) << key << " (round " << round << "): " << ToString(got.error());
      EXPECT_TRUE(got->data == value) << key << " read back wrong";
    }
    std::this_thread::sleep_for(700ms);  // past --adopt-confirm-delay-ms
  }
}

// The sender tells the new owner once the master named it (AdoptConfirm),
// so the owner takes upserts and removes of a moved key at once, not only
// after its own check (--adopt-confirm-delay-ms, 30 s by default here).
TEST_F(ClusterMovesTest, ANewOwnerTakesUpsertsAndRemovesOfAMovedKeyAtOnce) {
  // Given a small w1 and two roomier peers that check adopted copies late.
  WorkerOptions w1 = Small(8, 16);
  WorkerOptions late{.dram = 16 * kMiB, .ssd = 64 * kMiB};
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(w1, late, late));
  auto client = cluster_.NewClient("w1");
  ASSERT_TRUE(client);
  // When more is put on w1 than it holds, so that it moves the oldest out.
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(IsOk(client->Put(Key("moved-", i), PatternBytes(300 + i, kMiB), On("w1"))));
  }
  std::vector<std::string> moved;
  for (int i = 0; i < 40 && moved.size() < 2; ++i) {
    auto info = client->Inspect(Key("moved-", i));
    ASSERT_TRUE(IsOk(info)) << Key("moved-", i);
    if (info->node_id != "w1") moved.push_back(Key("moved-", i));
  }
  ASSERT_EQ(moved.size(), 2u) << "w1 moved fewer than two objects out";
  // Expect the new owners to take an upsert of one and a (forced) remove of
  // the other within seconds; each was refused OBJECT_REPLICA_BUSY until the
  // owner's own check.
  const std::string replaced = PatternBytes(77, kMiB);
  Result<void> upserted = Err(ErrorCode::kInternalError);
  EXPECT_TRUE(Eventually([&] { return IsOk(upserted = client->Upsert(moved[0], replaced)); }, 5s))
      << ToString(upserted.error());
  EXPECT_TRUE(ReadsBack(*client, moved[0], replaced));
  Result<void> removed = Err(ErrorCode::kInternalError);
  EXPECT_TRUE(
      Eventually([&] { return IsOk(removed = client->Remove(moved[1], /*force=*/true)); }, 5s))
      << ToString(removed.error());
  EXPECT_FALSE(IsOk(client->Get(moved[1])));
}

// ---------------------------------------------------------------------------
// Master restart

TEST_F(ClusterMovesTest, MasterRestartLosesNoKeyALiveWorkerHolds) {
  // Given 12 objects of 1 MiB on each of three nodes with 8 MiB of DRAM, so
  // some of each node's are on SSD.
  ASSERT_NO_FATAL_FAILURE(GivenThreeNodes(Small(8, 64), Small(8, 64), Small(8, 64)));
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  std::map<std::string, std::pair<std::string, std::string>> expected;  // key -> node, value
  int seed = 900;
  for (const std::string node : {"w1", "w2", "w3"}) {
    for (int i = 0; i < 12; ++i) {
      std::string key = node + "-obj-" + std::to_string(i);
      expected[key] = {node, PatternBytes(seed++, kMiB)};
      ASSERT_TRUE(IsOk(client->Put(key, expected[key].second, On(node)))) << key;
    }
  }
  std::map<std::string, int> on_ssd;
  ASSERT_TRUE(Eventually(
      [&] {
        on_ssd.clear();
        for (const auto& [key, nv] : expected) {
          auto info = client->Inspect(key);
          if (info && info->tier == "ssd") on_ssd[nv.first]++;
        }
        return on_ssd.size() == 3;
      },
      5s))
      << "not every node demoted objects to SSD";

  // When the master restarts.
  ASSERT_TRUE(cluster_.RestartMaster());

  // Expect every key found again, on its node, byte for byte.
  auto fresh = cluster_.NewClient();
  ASSERT_TRUE(fresh);
  size_t found = 0;
  EXPECT_TRUE(Eventually(
      [&] {
        found = 0;
        for (const auto& [key, nv] : expected) {
          auto info = fresh->Inspect(key);
          if (info && info->node_id == nv.first) ++found;
        }
        return found == expected.size();
      },
      15s, 200ms))
      << found << " of " << expected.size() << " keys back after the master restart";
  for (const auto& [key, nv] : expected) EXPECT_TRUE(ReadsBack(*fresh, key, nv.second));
  // The client made before the restart works too.
  EXPECT_TRUE(Eventually([&] { return client->Get("w3-obj-0").has_value(); }, 10s, 200ms));
  EXPECT_TRUE(ReadsBack(*client, "w2-obj-5", expected["w2-obj-5"].second));
}

}  // namespace
}  // namespace mooncake::testing
