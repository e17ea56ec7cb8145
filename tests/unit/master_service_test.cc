#include "master/master_service.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http/admin_server.h"
#include "master/admin_routes.h"
#include "master/leader_election.h"
#include "master/master_config.h"
#include "master/master_handler.h"
#include "master/master_server.h"
#include "mooncake_rpc/MasterService.h"
#include "tests/raw_rpc.h"
#include "thrift/rpc_channel.h"
#include "worker/master_link.h"

namespace mooncake {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// A clock the test moves by hand, so node death needs no sleeping.
class ManualClock {
 public:
  SteadyClock::time_point now() const { return start_ + Millis(offset_ms_.load()); }
  void Advance(Millis by) { offset_ms_ += by.count(); }

 private:
  const SteadyClock::time_point start_ = SteadyClock::now();
  std::atomic<int64_t> offset_ms_{0};
};

NodeRecord Node(const std::string& id, uint64_t capacity = kGiB, uint64_t used = 0) {
  NodeRecord node;
  node.node_id = id;
  node.host = "127.0.0.1";
  node.port = 9000 + static_cast<int>(id.back());
  node.tiers.push_back(TierUsage{"dram", "dram", capacity, used, 0});
  return node;
}

// A service with a manual clock and a 1 s TTL; nodes a, b, c registered.
class MasterServiceTest : public ::testing::Test {
 protected:
  MasterServiceTest() : service_(Options()) {
    for (const char* id : {"a", "b", "c"}) EXPECT_TRUE(service_.RegisterNode(Node(id)));
  }

  MasterOptions Options() {
    MasterOptions options;
    options.node_ttl = Millis(1000);
    options.now = [this] { return clock_.now(); };
    return options;
  }

  // Keeps every node but `silent` alive while time passes the TTL.
  void KillNode(const std::string& silent) {
    clock_.Advance(Millis(1001));
    for (const auto& node : service_.ListNodes()) {
      if (node.node_id != silent && node.alive) {
        ASSERT_TRUE(service_.Heartbeat(node.node_id, node.tiers));
      }
    }
    EXPECT_EQ(service_.ExpireDeadNodes(), 1u);
  }

  std::string OwnerOf(const std::string& key) {
    auto loc = service_.GetLocation(key);
    return loc ? loc->node_id : "<" + std::string(ToString(loc.error())) + ">";
  }

  ManualClock clock_;
  MasterService service_;
};

TEST_F(MasterServiceTest, PutOwnerIsCompareAndSet) {
  ASSERT_TRUE(service_.PutOwner("k", "a"));
  std::string winner;
  auto second = service_.PutOwner("k", "b", &winner);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(winner, "a");
  EXPECT_TRUE(service_.PutOwner("k", "a"));  // the owner again: idempotent
  EXPECT_EQ(OwnerOf("k"), "a");
  EXPECT_EQ(service_.key_count(), 1u);
}

TEST_F(MasterServiceTest, ConcurrentPutOwnerHasExactlyOneWinner) {
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back("w" + std::to_string(i));
    ASSERT_TRUE(service_.RegisterNode(Node(ids.back())));
  }
  std::atomic<int> wins{0};
  std::vector<std::string> seen(ids.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&, i] {
      std::string winner;
      if (service_.PutOwner("contended", ids[i], &winner)) {
        ++wins;
        seen[i] = ids[i];
      } else {
        seen[i] = winner;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
  std::string owner = OwnerOf("contended");
  for (const auto& s : seen) EXPECT_EQ(s, owner);
}

TEST_F(MasterServiceTest, GetLocationReturnsOwnerAddress) {
  ASSERT_TRUE(service_.PutOwner("k", "b"));
  auto loc = service_.GetLocation("k");
  ASSERT_TRUE(loc);
  EXPECT_EQ(loc->node_id, "b");
  EXPECT_EQ(loc->host, "127.0.0.1");
  EXPECT_EQ(loc->port, Node("b").port);
  EXPECT_EQ(service_.GetLocation("missing").error(), ErrorCode::kObjectNotFound);
}

TEST_F(MasterServiceTest, BatchGetLocationAnswersEachKeyInOrder) {
  ASSERT_TRUE(service_.PutOwner("k1", "a"));
  ASSERT_TRUE(service_.PutOwner("k3", "c"));
  auto results = service_.BatchGetLocation({"k3", "k2", "", "k1"});
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0]->node_id, "c");
  EXPECT_EQ(results[1].error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(results[2].error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(results[3]->node_id, "a");
  EXPECT_TRUE(service_.BatchGetLocation({}).empty());
}

TEST_F(MasterServiceTest, BatchPutOwnerAnswersEachKeyInOrder) {
  ASSERT_TRUE(service_.PutOwner("taken", "b"));
  ASSERT_TRUE(service_.PutOwner("mine", "a"));
  const std::string too_long(kMaxKeyBytes + 1, 'x');
  std::vector<std::string> winners;
  auto results = service_.BatchPutOwner(
      {"new1", "taken", "", "mine", "new1", too_long, std::string("a\0b", 3), "new2"}, "a",
      &winners);
  ASSERT_EQ(results.size(), 8u);
  ASSERT_EQ(winners.size(), 8u);
  EXPECT_TRUE(results[0]);
  EXPECT_EQ(results[1].error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(winners[1], "b");  // a conflict names the owner
  EXPECT_EQ(results[2].error(), ErrorCode::kInvalidKey);
  EXPECT_TRUE(results[3]);  // already a's: idempotent
  EXPECT_TRUE(results[4]);  // the same key twice in one batch
  EXPECT_EQ(results[5].error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(results[6].error(), ErrorCode::kInvalidKey);
  EXPECT_TRUE(results[7]);
  for (size_t i : {0u, 2u, 3u, 4u, 5u, 6u, 7u}) EXPECT_EQ(winners[i], "") << i;
  EXPECT_EQ(OwnerOf("new1"), "a");
  EXPECT_EQ(OwnerOf("new2"), "a");
  EXPECT_EQ(OwnerOf("taken"), "b");
  EXPECT_EQ(service_.key_count(), 4u);
  // Without `winners` the results are the same.
  auto again = service_.BatchPutOwner({"taken", "new3"}, "c");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_TRUE(again[1]);
  EXPECT_TRUE(service_.BatchPutOwner({}, "a").empty());
}

TEST_F(MasterServiceTest, BatchPutOwnerFromADeadOrUnknownNodeChangesNothing) {
  ASSERT_TRUE(service_.PutOwner("ka", "a"));
  KillNode("a");
  std::vector<std::string> winners;
  auto dead = service_.BatchPutOwner({"ka", "k1", ""}, "a", &winners);
  ASSERT_EQ(dead.size(), 3u);
  for (const auto& r : dead) EXPECT_EQ(r.error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(winners, std::vector<std::string>(3));
  auto unknown = service_.BatchPutOwner({"k1", "k2"}, "nobody");
  ASSERT_EQ(unknown.size(), 2u);
  for (const auto& r : unknown) EXPECT_EQ(r.error(), ErrorCode::kNodeNotFound);
  auto no_id = service_.BatchPutOwner({"k1", "k2"}, "");
  ASSERT_EQ(no_id.size(), 2u);
  for (const auto& r : no_id) EXPECT_EQ(r.error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(service_.key_count(), 0u);
  // Re-registered, the node claims again.
  ASSERT_TRUE(service_.RegisterNode(Node("a")));
  auto revived = service_.BatchPutOwner({"ka", "k1"}, "a");
  EXPECT_TRUE(revived[0] && revived[1]);
  EXPECT_EQ(OwnerOf("ka"), "a");
}

TEST_F(MasterServiceTest, BatchPutOwnerFromManyThreadsHasOneWinnerPerKey) {
  constexpr int kKeys = 3000;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back("k" + std::to_string(i));
  const std::vector<std::string> ids = {"a", "b", "c"};
  std::vector<std::vector<Result<void>>> results(ids.size());
  std::vector<std::vector<std::string>> winners(ids.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < ids.size(); ++t) {
    threads.emplace_back(
        [&, t] { results[t] = service_.BatchPutOwner(keys, ids[t], &winners[t]); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(service_.key_count(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    std::string owner = OwnerOf(keys[i]);
    int wins = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      if (results[t][i]) {
        ++wins;
        EXPECT_EQ(ids[t], owner);
      } else {
        EXPECT_EQ(results[t][i].error(), ErrorCode::kObjectAlreadyExists);
        EXPECT_EQ(winners[t][i], owner);
      }
    }
    ASSERT_EQ(wins, 1) << keys[i];
  }
}

TEST_F(MasterServiceTest, KeysOfAForgottenIncarnationAreFreeForOthers) {
  ASSERT_TRUE(service_.PutOwner("k1", "a"));
  ASSERT_TRUE(service_.PutOwner("k2", "a"));
  ASSERT_TRUE(service_.RegisterNode(Node("a")));  // a restarted: its old keys are gone
  EXPECT_TRUE(service_.PutOwner("k1", "b"));
  EXPECT_EQ(service_.UpdateOwner("k2", "a", "c").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(service_.RemoveOwner("k2", "a").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(OwnerOf("k1"), "b");
  EXPECT_EQ(service_.key_count(), 1u);
  EXPECT_EQ(service_.ListKeys("", "", 10), std::vector<std::string>{"k1"});
}

TEST_F(MasterServiceTest, UpdateOwnerSwapsOnlyFromExpectedOwner) {
  ASSERT_TRUE(service_.PutOwner("k", "a"));
  EXPECT_EQ(service_.UpdateOwner("k", "b", "c").error(), ErrorCode::kNotOwner);
  EXPECT_EQ(OwnerOf("k"), "a");
  EXPECT_TRUE(service_.UpdateOwner("k", "a", "b"));
  EXPECT_EQ(OwnerOf("k"), "b");
  // The same hand-over again (a retried call whose answer was lost): done.
  EXPECT_TRUE(service_.UpdateOwner("k", "a", "b"));
  EXPECT_EQ(OwnerOf("k"), "b");
  EXPECT_EQ(service_.UpdateOwner("k", "a", "c").error(), ErrorCode::kNotOwner);
  EXPECT_EQ(service_.UpdateOwner("gone", "a", "b").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(service_.UpdateOwner("k", "b", "nobody").error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(OwnerOf("k"), "b");
}

TEST_F(MasterServiceTest, BatchRemoveOwnerAnswersEachKeyAsRemoveOwnerWould) {
  ASSERT_TRUE(service_.PutOwner("mine1", "a"));
  ASSERT_TRUE(service_.PutOwner("mine2", "a"));
  ASSERT_TRUE(service_.PutOwner("theirs", "b"));
  auto results = service_.BatchRemoveOwner({"mine1", "theirs", "absent", "", "mine2"}, "a");
  ASSERT_EQ(results.size(), 5u);
  EXPECT_TRUE(results[0]);
  EXPECT_EQ(results[1].error(), ErrorCode::kNotOwner);
  EXPECT_EQ(results[2].error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(results[3].error(), ErrorCode::kInvalidKey);
  EXPECT_TRUE(results[4]);
  EXPECT_EQ(service_.GetLocation("mine1").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(service_.GetLocation("mine2").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(OwnerOf("theirs"), "b") << "another node's key stays";
  // Twice: already gone.
  EXPECT_EQ(service_.BatchRemoveOwner({"mine1"}, "a")[0].error(), ErrorCode::kObjectNotFound);
  EXPECT_TRUE(service_.BatchRemoveOwner({}, "a").empty());
  // No node id: refused whole; an unknown node removes nothing.
  for (const auto& r : service_.BatchRemoveOwner({"theirs"}, "")) {
    EXPECT_EQ(r.error(), ErrorCode::kInvalidParams);
  }
  EXPECT_EQ(service_.BatchRemoveOwner({"theirs"}, "nobody")[0].error(), ErrorCode::kNotOwner);
  EXPECT_EQ(OwnerOf("theirs"), "b");
}

TEST_F(MasterServiceTest, RemoveOwnerOnlyByOwner) {
  ASSERT_TRUE(service_.PutOwner("k", "a"));
  EXPECT_EQ(service_.RemoveOwner("k", "b").error(), ErrorCode::kNotOwner);
  EXPECT_EQ(OwnerOf("k"), "a");
  EXPECT_TRUE(service_.RemoveOwner("k", "a"));
  EXPECT_EQ(service_.GetLocation("k").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(service_.RemoveOwner("k", "a").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(service_.key_count(), 0u);
  // Removed keys are free to claim again.
  EXPECT_TRUE(service_.PutOwner("k", "b"));
}

TEST_F(MasterServiceTest, AnnounceKeysClaimsFreeKeysAndReportsConflicts) {
  ASSERT_TRUE(service_.PutOwner("taken", "b"));
  ASSERT_TRUE(service_.PutOwner("mine", "a"));
  auto rejected = service_.AnnounceKeys("a", {"free1", "taken", "mine", "free2"});
  ASSERT_TRUE(rejected);
  EXPECT_EQ(*rejected, std::vector<std::string>{"taken"});
  EXPECT_EQ(OwnerOf("free1"), "a");
  EXPECT_EQ(OwnerOf("free2"), "a");
  EXPECT_EQ(OwnerOf("taken"), "b");
  EXPECT_EQ(OwnerOf("mine"), "a");
}

TEST_F(MasterServiceTest, NodeDeathDropsExactlyItsKeys) {
  ASSERT_TRUE(service_.PutOwner("ka1", "a"));
  ASSERT_TRUE(service_.PutOwner("ka2", "a"));
  ASSERT_TRUE(service_.PutOwner("kb", "b"));
  ASSERT_TRUE(service_.PutOwner("kc", "c"));
  EXPECT_EQ(service_.ExpireDeadNodes(), 0u);  // nobody is late yet

  KillNode("a");
  EXPECT_EQ(service_.key_count(), 2u);
  EXPECT_EQ(service_.GetLocation("ka1").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(service_.GetLocation("ka2").error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(OwnerOf("kb"), "b");
  EXPECT_EQ(OwnerOf("kc"), "c");

  // The dead node stays listed, and must register again before anything else.
  auto nodes = service_.ListNodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].node_id, "a");
  EXPECT_FALSE(nodes[0].alive);
  EXPECT_EQ(service_.Heartbeat("a", {}).error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(service_.PutOwner("ka1", "a").error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(service_.AnnounceKeys("a", {"ka1"}).error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(service_.UpdateOwner("kb", "b", "a").error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(service_.ExpireDeadNodes(), 0u);  // dies only once
}

// A worker announcing a large key set in many batches sends no heartbeat
// meanwhile: each batch keeps it alive.
TEST_F(MasterServiceTest, AnnouncingKeepsANodeAlive) {
  for (int batch = 0; batch < 5; ++batch) {
    clock_.Advance(Millis(600));
    for (const char* other : {"b", "c"}) ASSERT_TRUE(service_.Heartbeat(other, {}));
    ASSERT_TRUE(service_.AnnounceKeys("a", {"batch" + std::to_string(batch)}));
  }
  EXPECT_EQ(service_.ExpireDeadNodes(), 0u);  // 3 s, past the 1 s TTL, alive
  EXPECT_EQ(OwnerOf("batch0"), "a");
  KillNode("a");  // silent past the TTL: dead as before
}

TEST_F(MasterServiceTest, ReRegisterRevivesDeadNode) {
  ASSERT_TRUE(service_.PutOwner("k", "a"));
  KillNode("a");
  ASSERT_TRUE(service_.RegisterNode(Node("a")));
  EXPECT_TRUE(service_.ListNodes()[0].alive);
  EXPECT_TRUE(service_.Heartbeat("a", {}));
  auto rejected = service_.AnnounceKeys("a", {"k"});
  ASSERT_TRUE(rejected);
  EXPECT_TRUE(rejected->empty());
  EXPECT_EQ(OwnerOf("k"), "a");
}

TEST_F(MasterServiceTest, RegisteringAgainForgetsTheNodesKeysUntilItAnnounces) {
  // A worker that restarts within the TTL may have lost its DRAM objects; the
  // master must not keep pointing at them.
  ASSERT_TRUE(service_.PutOwner("kept", "a"));
  ASSERT_TRUE(service_.PutOwner("lost", "a"));
  ASSERT_TRUE(service_.PutOwner("other", "b"));
  ASSERT_TRUE(service_.RegisterNode(Node("a")));
  EXPECT_EQ(OwnerOf("kept"), "<OBJECT_NOT_FOUND>");
  EXPECT_EQ(OwnerOf("other"), "b");
  auto rejected = service_.AnnounceKeys("a", {"kept"});
  ASSERT_TRUE(rejected);
  EXPECT_TRUE(rejected->empty());
  EXPECT_EQ(OwnerOf("kept"), "a");
  EXPECT_EQ(OwnerOf("lost"), "<OBJECT_NOT_FOUND>");
}

TEST_F(MasterServiceTest, HeartbeatKeepsNodeAliveAndUpdatesUsage) {
  clock_.Advance(Millis(800));
  ASSERT_TRUE(service_.Heartbeat("a", {TierUsage{"dram", "dram", kGiB, kGiB / 2, 7}}));
  clock_.Advance(Millis(800));
  // b and c were last seen 1600 ms ago, a only 800 ms ago.
  EXPECT_EQ(service_.ExpireDeadNodes(), 2u);
  auto nodes = service_.ListNodes();
  EXPECT_TRUE(nodes[0].alive);
  EXPECT_EQ(nodes[0].free_bytes(), kGiB / 2);
  EXPECT_GT(nodes[0].last_heartbeat_ms, 0);
  EXPECT_EQ(service_.Heartbeat("zzz", {}).error(), ErrorCode::kNodeNotFound);
}

TEST_F(MasterServiceTest, PickNodePrefersMostFreeSpace) {
  ASSERT_TRUE(service_.Heartbeat("a", {TierUsage{"dram", "dram", 10 * kGiB, 8 * kGiB, 0}}));
  ASSERT_TRUE(service_.Heartbeat("b", {TierUsage{"dram", "dram", 10 * kGiB, 1 * kGiB, 0},
                                       TierUsage{"ssd", "ssd", 10 * kGiB, 5 * kGiB, 0}}));
  ASSERT_TRUE(service_.Heartbeat("c", {TierUsage{"dram", "dram", 10 * kGiB, 4 * kGiB, 0}}));
  // Free: a 2, b 14, c 6 GiB.
  EXPECT_EQ(service_.PickNode(1, {})->node_id, "b");
  EXPECT_EQ(service_.PickNode(1, {"b"})->node_id, "c");
  EXPECT_EQ(service_.PickNode(1, {"b", "c"})->node_id, "a");
  EXPECT_EQ(service_.PickNode(3 * kGiB, {"b", "c"}).error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(service_.PickNode(6 * kGiB, {"b"})->node_id, "c");  // exactly fits
  EXPECT_EQ(service_.PickNode(15 * kGiB, {}).error(), ErrorCode::kNoAvailableHandle);
  KillNode("b");
  EXPECT_EQ(service_.PickNode(1, {})->node_id, "c");  // dead nodes are never picked
}

TEST_F(MasterServiceTest, PickNodeWithNoNodes) {
  MasterService empty;
  EXPECT_EQ(empty.PickNode(0, {}).error(), ErrorCode::kNoAvailableHandle);
}

TEST_F(MasterServiceTest, BadInputIsRejectedAndChangesNothing) {
  ASSERT_TRUE(service_.PutOwner("k", "a"));
  const std::string too_long(kMaxKeyBytes + 1, 'x');
  const std::string with_nul("a\0b", 3);
  for (const std::string& key : {std::string(), too_long, with_nul}) {
    EXPECT_EQ(service_.PutOwner(key, "a").error(), ErrorCode::kInvalidKey);
    EXPECT_EQ(service_.GetLocation(key).error(), ErrorCode::kInvalidKey);
    EXPECT_EQ(service_.UpdateOwner(key, "a", "b").error(), ErrorCode::kInvalidKey);
    EXPECT_EQ(service_.RemoveOwner(key, "a").error(), ErrorCode::kInvalidKey);
    EXPECT_EQ(service_.AnnounceKeys("a", {"ok", key}).error(), ErrorCode::kInvalidKey);
  }
  EXPECT_EQ(service_.PutOwner("x", "").error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(service_.UpdateOwner("k", "", "b").error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(service_.UpdateOwner("k", "a", "").error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(service_.RemoveOwner("k", "").error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(service_.AnnounceKeys("", {"y"}).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(service_.Heartbeat("", {}).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(service_.PutOwner("x", "unknown").error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(service_.AnnounceKeys("unknown", {"y"}).error(), ErrorCode::kNodeNotFound);

  NodeRecord bad = Node("d");
  bad.node_id = "";
  EXPECT_EQ(service_.RegisterNode(bad).error(), ErrorCode::kInvalidParams);
  bad = Node("d");
  bad.host = "";
  EXPECT_EQ(service_.RegisterNode(bad).error(), ErrorCode::kInvalidParams);
  bad = Node("d");
  bad.port = 70000;
  EXPECT_EQ(service_.RegisterNode(bad).error(), ErrorCode::kInvalidParams);

  EXPECT_EQ(service_.key_count(), 1u);
  EXPECT_EQ(OwnerOf("k"), "a");
  EXPECT_EQ(service_.ListNodes().size(), 3u);
}

TEST_F(MasterServiceTest, ExpiryConcurrentWithPutsKeepsLiveKeys) {
  constexpr int kWriters = 4;
  constexpr int kKeysPerWriter = 2000;
  std::atomic<bool> stop{false};
  // "a" dies mid-run while writers for b and c keep going.
  std::thread doomed([&] {
    for (int i = 0; !stop; ++i) (void)service_.PutOwner("a-" + std::to_string(i), "a");
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::string node = w % 2 ? "b" : "c";
      for (int i = 0; i < kKeysPerWriter; ++i) {
        std::string key = node + "-" + std::to_string(w) + "-" + std::to_string(i);
        ASSERT_TRUE(service_.PutOwner(key, node));
        if (i % 7 == 0) {
          ASSERT_TRUE(service_.GetLocation(key));
        }
      }
    });
  }
  std::thread reaper([&] {
    for (int i = 0; i < 200; ++i) service_.ExpireDeadNodes();
  });
  std::this_thread::sleep_for(Millis(5));
  // Only "a" passes the TTL: b and c heartbeat halfway, so the concurrent
  // reaper can never catch them stale.
  clock_.Advance(Millis(600));
  ASSERT_TRUE(service_.Heartbeat("b", {}));
  ASSERT_TRUE(service_.Heartbeat("c", {}));
  clock_.Advance(Millis(600));
  service_.ExpireDeadNodes();
  for (auto& t : writers) t.join();
  stop = true;
  doomed.join();
  reaper.join();

  EXPECT_FALSE(service_.ListNodes()[0].alive);
  // None of a's keys survive, none of b's and c's are lost.
  EXPECT_EQ(service_.key_count(), static_cast<size_t>(kWriters * kKeysPerWriter));
  for (int w = 0; w < kWriters; ++w) {
    std::string node = w % 2 ? "b" : "c";
    for (int i = 0; i < kKeysPerWriter; i += 97) {
      EXPECT_EQ(OwnerOf(node + "-" + std::to_string(w) + "-" + std::to_string(i)), node);
    }
  }
}

TEST_F(MasterServiceTest, ExpiryConcurrentWithBatchPutsLeavesNoKeyOfTheDeadNode) {
  std::atomic<bool> stop{false};
  std::atomic<int> batches_ok{0};
  // "a" claims in batches until it is dead; b keeps claiming meanwhile.
  std::thread doomed([&] {
    for (int i = 0; !stop; ++i) {
      std::vector<std::string> keys;
      for (int j = 0; j < 50; ++j)
        keys.push_back("a-" + std::to_string(i) + "-" + std::to_string(j));
      auto results = service_.BatchPutOwner(keys, "a");
      if (results[0]) ++batches_ok;
    }
  });
  std::thread live([&] {
    for (int i = 0; i < 100; ++i) {
      std::vector<std::string> keys;
      for (int j = 0; j < 50; ++j)
        keys.push_back("b-" + std::to_string(i) + "-" + std::to_string(j));
      for (const auto& r : service_.BatchPutOwner(keys, "b")) ASSERT_TRUE(r);
    }
  });
  while (batches_ok.load() < 5) std::this_thread::yield();
  clock_.Advance(Millis(1001));
  ASSERT_TRUE(service_.Heartbeat("b", {}));
  ASSERT_TRUE(service_.Heartbeat("c", {}));
  EXPECT_EQ(service_.ExpireDeadNodes(), 1u);
  live.join();
  stop = true;
  doomed.join();
  EXPECT_EQ(service_.key_count(), 5000u);  // exactly b's keys
  for (const auto& key : service_.ListKeys("a-", "", 10)) ADD_FAILURE() << "survived: " << key;
}

TEST_F(MasterServiceTest, ReRegistrationsDuringClaimsAndLookupsNeverNameAnotherNode) {
  // Each RegisterNode of "a" retires its incarnation, purges its keys and
  // frees its index for reuse: a lookup must never see a key of "a" as
  // another node's, nor lose a key of "b".
  std::atomic<bool> stop{false};
  std::thread reregister([&] {
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(service_.RegisterNode(Node("a")));
    stop = true;
  });
  std::thread claim_a([&] {
    for (int i = 0; !stop; ++i) {
      std::vector<std::string> keys;
      for (int j = 0; j < 20; ++j)
        keys.push_back("a-" + std::to_string(i % 50) + "-" + std::to_string(j));
      (void)service_.BatchPutOwner(keys, "a");
    }
  });
  std::thread claim_b([&] {
    for (int i = 0; i < 400; ++i) {
      std::vector<std::string> keys;
      for (int j = 0; j < 20; ++j)
        keys.push_back("b-" + std::to_string(i) + "-" + std::to_string(j));
      for (const auto& r : service_.BatchPutOwner(keys, "b")) ASSERT_TRUE(r);
    }
  });
  std::thread lookups([&] {
    while (!stop) {
      std::vector<std::string> keys;
      for (int j = 0; j < 20; ++j) {
        keys.push_back("a-" + std::to_string(j) + "-" + std::to_string(j));
        keys.push_back("b-" + std::to_string(j) + "-" + std::to_string(j));
      }
      auto results = service_.BatchGetLocation(keys);
      for (size_t k = 0; k < keys.size(); ++k) {
        if (results[k]) {
          ASSERT_EQ(results[k]->node_id, keys[k].substr(0, 1)) << keys[k];
        }
      }
    }
  });
  reregister.join();
  claim_a.join();
  claim_b.join();
  lookups.join();
  for (int i = 0; i < 400; i += 13) EXPECT_EQ(OwnerOf("b-" + std::to_string(i) + "-7"), "b");
  for (const auto& key : service_.ListKeys("", "", 100000)) {
    EXPECT_EQ(OwnerOf(key), key.substr(0, 1)) << key;
  }
}

// A master on a free RPC port (never a default one: a local cluster may hold
// 50051), without an admin server, that declares no node dead in a test and
// serves key calls at once (no rebuild window: no worker held keys before).
Result<std::unique_ptr<MasterServer>> StartRpcOnlyMaster() {
  MasterConfig config;
  config.port = 0;
  config.admin_port = -1;
  config.node_ttl_ms = 60000;
  config.rebuild_ms = 0;
  return MasterServer::Start(config);
}

// The real thing over loopback: MasterServer, Thrift framing, the handler.
TEST(MasterServerTest, ServesThriftClients) {
  MasterConfig config;
  config.port = 0;        // never a default port: a local cluster may hold
  config.admin_port = 0;  // 50051/50050 (scripts/local-cluster.sh)
  config.node_ttl_ms = 60000;
  config.rebuild_ms = 0;
  auto server = MasterServer::Start(config);
  ASSERT_TRUE(server);
  ASSERT_GT((*server)->port(), 0);
  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", (*server)->port());

  rpc::NodeInfo node;
  node.node_id = "w1";
  node.host = "127.0.0.1";
  node.port = 7001;
  rpc::TierUsage tier;
  tier.name = "dram";
  tier.kind = "dram";
  tier.capacity = 1000;
  tier.used = 100;
  node.tiers.push_back(tier);
  auto code = channel.Call([&](auto& c) { return c.RegisterNode(node); });
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, rpc::ErrorCode::OK);

  auto put = channel.Call([](auto& c) {
    rpc::PutOwnerResult r;
    c.PutOwner(r, "key", "w1");
    return r;
  });
  ASSERT_TRUE(put);
  EXPECT_EQ(put->code, rpc::ErrorCode::OK);
  EXPECT_EQ(put->owner, "w1");

  auto put_w2 = [&] {
    return channel.Call([](auto& c) {
      rpc::PutOwnerResult r;
      c.PutOwner(r, "key", "w2");
      return r;
    });
  };
  auto unknown = put_w2();
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->code, rpc::ErrorCode::NODE_NOT_FOUND);  // w2 is not registered yet
  // Too small for the PickNode below, so w1 still wins it.
  NodeRecord w2 = Node("w2", /*capacity=*/100);
  ASSERT_TRUE((*server)->service().RegisterNode(w2));
  auto conflict = put_w2();
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->code, rpc::ErrorCode::OBJECT_ALREADY_EXISTS);
  EXPECT_EQ(conflict->owner, "w1");

  auto batch = channel.Call([](auto& c) {
    std::vector<rpc::LocationResult> r;
    c.BatchGetLocation(r, {"key", "nope", ""});
    return r;
  });
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->size(), 3u);
  EXPECT_EQ((*batch)[0].code, rpc::ErrorCode::OK);
  EXPECT_EQ((*batch)[0].node_id, "w1");
  EXPECT_EQ((*batch)[0].port, 7001);
  EXPECT_EQ((*batch)[1].code, rpc::ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ((*batch)[2].code, rpc::ErrorCode::INVALID_KEY);

  auto pick = channel.Call([](auto& c) {
    rpc::PickNodeResult r;
    c.PickNode(r, 500, {});
    return r;
  });
  ASSERT_TRUE(pick);
  EXPECT_EQ(pick->code, rpc::ErrorCode::OK);
  EXPECT_EQ(pick->node.node_id, "w1");
  auto negative = channel.Call([](auto& c) {
    rpc::PickNodeResult r;
    c.PickNode(r, -1, {});
    return r;
  });
  ASSERT_TRUE(negative);
  EXPECT_EQ(negative->code, rpc::ErrorCode::INVALID_PARAMS);

  tier.used = -5;
  auto bad_heartbeat = channel.Call([&](auto& c) { return c.Heartbeat("w1", {tier}); });
  ASSERT_TRUE(bad_heartbeat);
  EXPECT_EQ(*bad_heartbeat, rpc::ErrorCode::INVALID_PARAMS);

  auto nodes = channel.Call([](auto& c) {
    std::vector<rpc::NodeInfo> r;
    c.ListNodes(r);
    return r;
  });
  ASSERT_TRUE(nodes);
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_TRUE((*nodes)[0].alive);
  EXPECT_EQ((*nodes)[0].tiers.at(0).used, 100);

  EXPECT_EQ((*server)->service().key_count(), 1u);
  (*server)->Stop();
  auto after = channel.Call([](auto& c) {
    std::vector<rpc::NodeInfo> r;
    c.ListNodes(r);
    return r;
  });
  EXPECT_FALSE(after);  // stopped means stopped
}

TEST(MasterServerTest, BatchPutOwnerOverThriftAnswersEachKeyWithItsOwner) {
  auto server = StartRpcOnlyMaster();
  ASSERT_TRUE(server);
  ASSERT_TRUE((*server)->service().RegisterNode(Node("a")));
  ASSERT_TRUE((*server)->service().RegisterNode(Node("b")));
  ASSERT_TRUE((*server)->service().PutOwner("taken", "b"));
  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", (*server)->port());
  auto batch_put = [&](const std::string& node) {
    return channel.Call([&](auto& c) {
      std::vector<rpc::PutOwnerResult> r;
      c.BatchPutOwner(r, {"k1", "taken", "", "k2"}, node);
      return r;
    });
  };
  auto results = batch_put("a");
  ASSERT_TRUE(results);
  ASSERT_EQ(results->size(), 4u);
  EXPECT_EQ((*results)[0].code, rpc::ErrorCode::OK);
  EXPECT_EQ((*results)[0].owner, "a");
  EXPECT_EQ((*results)[1].code, rpc::ErrorCode::OBJECT_ALREADY_EXISTS);
  EXPECT_EQ((*results)[1].owner, "b");
  EXPECT_EQ((*results)[2].code, rpc::ErrorCode::INVALID_KEY);
  EXPECT_EQ((*results)[3].code, rpc::ErrorCode::OK);
  EXPECT_EQ((*server)->service().GetLocation("k2")->node_id, "a");
  auto unknown = batch_put("nobody");
  ASSERT_TRUE(unknown);
  ASSERT_EQ(unknown->size(), 4u);
  for (const auto& r : *unknown) EXPECT_EQ(r.code, rpc::ErrorCode::NODE_NOT_FOUND);
}

TEST(MasterServerTest, ReaperExpiresSilentNodes) {
  MasterConfig config;
  config.port = 0;
  config.admin_port = 0;
  config.node_ttl_ms = 100;
  auto server = MasterServer::Start(config);
  ASSERT_TRUE(server);
  MasterService& service = (*server)->service();
  ASSERT_TRUE(service.RegisterNode(Node("a")));
  ASSERT_TRUE(service.PutOwner("k", "a"));
  auto deadline = SteadyClock::now() + std::chrono::seconds(5);
  while (service.key_count() != 0 && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(Millis(20));
  }
  EXPECT_EQ(service.key_count(), 0u);
  EXPECT_FALSE(service.ListNodes().at(0).alive);
}

// A worker evicting to another node asks for one with room, leaving out
// itself and the nodes that refused the object already (their heartbeats may
// still show room they no longer have).
TEST(MasterServerTest, AWorkerPicksNeitherItselfNorTheNodesItNames) {
  auto server = StartRpcOnlyMaster();
  ASSERT_TRUE(server);
  MasterService& service = (*server)->service();
  ASSERT_TRUE(service.RegisterNode(Node("a", 8 * kGiB)));
  ASSERT_TRUE(service.RegisterNode(Node("b", 4 * kGiB)));
  ASSERT_TRUE(service.RegisterNode(Node("c", 2 * kGiB)));
  MasterLink link(MasterTarget{.host = "127.0.0.1", .port = (*server)->port()});
  link.set_node_id("a");
  EXPECT_EQ(link.PickNode(1)->node_id, "b");  // the most room but a's own
  EXPECT_EQ(link.PickNode(1, {"b"})->node_id, "c");
  EXPECT_EQ(link.PickNode(1, {"b", "c"}).error(), ErrorCode::kNoAvailableHandle);
}

// An adopted copy the master never named this node for: its key was removed
// since it was sent if no node owns it while the sender lives. A master
// that does not know the asking node (it restarted) cannot tell.
TEST(MasterServerTest, AWorkerTellsAKeyRemovedSinceItsCopyWasSent) {
  auto server = StartRpcOnlyMaster();
  ASSERT_TRUE(server);
  MasterService& service = (*server)->service();
  ASSERT_TRUE(service.RegisterNode(Node("sender")));
  ASSERT_TRUE(service.RegisterNode(Node("target")));
  MasterLink link(MasterTarget{.host = "127.0.0.1", .port = (*server)->port()});
  link.set_node_id("target");
  EXPECT_EQ(link.RemovedSinceSent("k", "sender"), true);
  EXPECT_EQ(link.RemovedSinceSent("k", "never-registered"), false);
  ASSERT_TRUE(service.PutOwner("k", "sender"));
  EXPECT_EQ(link.RemovedSinceSent("k", "sender"), false);
  MasterLink stranger(MasterTarget{.host = "127.0.0.1", .port = (*server)->port()});
  stranger.set_node_id("stranger");
  EXPECT_EQ(stranger.RemovedSinceSent("gone", "sender").error(), ErrorCode::kNodeNotFound);
}

// A worker asking whether a key is unowned while the master knows it (to let
// go of the copy of an unsettled hand-over) gets no verdict from the moment
// the master forgot it until its registration's announcement has landed:
// meanwhile the master lists none of its keys, and "unowned" would be wrong.
TEST(MasterServerTest, AWorkerTellsNoKeyUnownedWhileItsRegistrationIsUnfinished) {
  MasterConfig config;
  config.port = 0;
  config.admin_port = -1;
  config.node_ttl_ms = 200;
  config.rebuild_ms = 0;
  auto server = MasterServer::Start(config);
  ASSERT_TRUE(server);
  MasterService& service = (*server)->service();
  MasterLink link(MasterTarget{.host = "127.0.0.1", .port = (*server)->port()});
  link.set_node_id("a");
  NodeRecord a = Node("a");
  ASSERT_TRUE(link.Register(a));
  ASSERT_TRUE(link.Announce({"held"}));
  EXPECT_EQ(link.UnownedWhileHere("gone"), true);
  EXPECT_EQ(link.UnownedWhileHere("held"), false);
  // The master declares a dead (no heartbeat within its TTL) and forgets
  // its keys; a's next heartbeat learns it.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  service.ExpireDeadNodes();
  EXPECT_EQ(link.Heartbeat({}).error(), ErrorCode::kNodeNotFound);
  EXPECT_EQ(link.UnownedWhileHere("held").error(), ErrorCode::kNodeNotFound);
  ASSERT_TRUE(link.Register(a));  // purged: "held" is not listed again yet
  EXPECT_EQ(link.UnownedWhileHere("held").error(), ErrorCode::kNodeNotFound);
  ASSERT_TRUE(link.Announce({"held"}));
  EXPECT_EQ(link.UnownedWhileHere("held"), false);
}

// --dead-node-forget-ms reaches the reaper: a node dead that long leaves the
// registry.
TEST(MasterServerTest, TheReaperForgetsANodeDeadForDeadNodeForgetMs) {
  MasterConfig config;
  config.port = 0;
  config.admin_port = -1;
  config.node_ttl_ms = 100;
  config.dead_node_forget_ms = 100;
  auto server = MasterServer::Start(config);
  ASSERT_TRUE(server);
  MasterService& service = (*server)->service();
  ASSERT_TRUE(service.RegisterNode(Node("a")));
  auto deadline = SteadyClock::now() + std::chrono::seconds(10);
  while (!service.ListNodes().empty() && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(Millis(20));
  }
  EXPECT_TRUE(service.ListNodes().empty());
}

// Under --rpc-engine epoll, RegisterNode runs on the pool: re-registering a
// node the master still lists purges its keys with a pass over the whole
// directory, which on a loop thread stalled every connection of that loop
// (42 ms at 2 M keys, seconds at 100 M). Every other call answers from
// memory on the loop.
TEST(MasterServerTest, OnlyRegisterNodeLeavesTheEpollLoop) {
  EXPECT_TRUE(MasterServer::MayBlock("RegisterNode"));
  for (const std::string& method : MasterHandler::OperationNames()) {
    if (method == "register_node") continue;
    EXPECT_FALSE(MasterServer::MayBlock(method)) << method;
  }
  for (const char* method : {"GetLocation", "BatchGetLocation", "PutOwner", "Heartbeat",
                             "AnnounceKeys", "ListNodes", "PickNode", "GetRole"}) {
    EXPECT_FALSE(MasterServer::MayBlock(method)) << method;
  }
}

TEST(MasterServerTest, StartRejectsBadConfigAndBusyPort) {
  MasterConfig bad;
  bad.port = 0;
  bad.admin_port = 0;
  bad.node_ttl_ms = 0;
  EXPECT_EQ(MasterServer::Start(bad).error(), ErrorCode::kInvalidParams);

  MasterConfig first;
  first.port = 0;
  first.admin_port = 0;
  auto server = MasterServer::Start(first);
  ASSERT_TRUE(server);
  // Only the RPC port clashes: left at its default, the admin port would be
  // 50050 here (the RPC port is not 0), which a local cluster may hold.
  MasterConfig clash;
  clash.port = (*server)->port();
  clash.admin_port = 0;
  EXPECT_EQ(MasterServer::Start(clash).error(), ErrorCode::kRpcFail);
}

// A master starts with an empty directory, and workers that held keys
// before it (re)started re-announce them only at their next heartbeat. So
// until its rebuild window passes it serves the node registry, by which the
// directory is rebuilt, but answers key calls and PickNode NOT_LEADER and
// names itself in GetRole, as a newly elected HA leader does: callers wait
// instead of hearing "not found", and /readyz says it is not ready.
TEST(MasterServerTest, AStartedMasterAnswersKeyCallsNotLeaderUntilItsRebuildWindowPasses) {
  MasterConfig config;
  config.port = 0;
  config.admin_port = 0;
  config.node_ttl_ms = 60000;
  config.rebuild_ms = 60000;  // longer than the test
  auto server = MasterServer::Start(config);
  ASSERT_TRUE(server);
  const int port = (*server)->port();
  RpcChannel<rpc::MasterServiceClient> channel("127.0.0.1", port);

  rpc::NodeInfo node;
  node.node_id = "w1";
  node.host = "127.0.0.1";
  node.port = 7001;
  auto registered = channel.Call([&](auto& c) { return c.RegisterNode(node); });
  ASSERT_TRUE(registered);
  EXPECT_EQ(*registered, rpc::ErrorCode::OK);
  auto announced = channel.Call([](auto& c) {
    rpc::AnnounceResult r;
    c.AnnounceKeys(r, "w1", {"held"});
    return r;
  });
  ASSERT_TRUE(announced);
  EXPECT_EQ(announced->code, rpc::ErrorCode::OK);
  EXPECT_EQ((*server)->service().key_count(), 1u);

  auto get = channel.Call([](auto& c) {
    rpc::LocationResult r;
    c.GetLocation(r, "absent");
    return r;
  });
  ASSERT_TRUE(get);
  EXPECT_EQ(get->code, rpc::ErrorCode::NOT_LEADER) << "a verdict about a key while rebuilding";
  auto put = channel.Call([](auto& c) {
    rpc::PutOwnerResult r;
    c.PutOwner(r, "new", "w1");
    return r;
  });
  ASSERT_TRUE(put);
  EXPECT_EQ(put->code, rpc::ErrorCode::NOT_LEADER);
  auto removed = channel.Call([](auto& c) { return c.RemoveOwner("held", "w1"); });
  ASSERT_TRUE(removed);
  EXPECT_EQ(*removed, rpc::ErrorCode::NOT_LEADER);
  auto picked = channel.Call([](auto& c) {
    rpc::PickNodeResult r;
    c.PickNode(r, 1, {});
    return r;
  });
  ASSERT_TRUE(picked);
  EXPECT_EQ(picked->code, rpc::ErrorCode::NOT_LEADER);

  // It names itself (the address callers reach it at), so they wait there.
  auto role = channel.Call([](auto& c) {
    rpc::MasterRole r;
    c.GetRole(r);
    return r;
  });
  ASSERT_TRUE(role);
  EXPECT_TRUE(role->is_leader);
  EXPECT_EQ(role->leader_address, "127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(role->self_address, role->leader_address);
  EXPECT_EQ(role->cluster_name, "");

  auto ready = testing::Http((*server)->admin_port(), "GET", "/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503) << ready->body;
  auto doc = nlohmann::json::parse(ready->body);
  EXPECT_EQ(doc["ready"], false);
  EXPECT_EQ(doc["ha_role"], "rebuilding");
  EXPECT_EQ(doc["leader"], nullptr);
  EXPECT_TRUE((*server)->service().GetLocation("held"));  // kept, only not answered yet
}

// What callers make of that: MasterEndpoint (workers, clients, the CLI)
// waits at the master it called, and gets the real answer once the window
// is over, not NOT_LEADER. So it does at a master bound to every address
// without --advertise-address, which names no address in GetRole but says
// it leads.
TEST(MasterServerTest, CallersWaitOutTheRebuildWindowOfAStartedMaster) {
  for (const char* host : {"127.0.0.1", "0.0.0.0"}) {
    SCOPED_TRACE(host);
    MasterConfig config;
    config.host = host;
    config.port = 0;
    config.admin_port = -1;
    config.node_ttl_ms = 60000;
    config.rebuild_ms = 1000;
    auto server = MasterServer::Start(config);
    ASSERT_TRUE(server);
    const auto started = SteadyClock::now();
    ASSERT_TRUE((*server)->service().RegisterNode(Node("a", 8 * kGiB)));
    MasterLink link(MasterTarget{.host = "127.0.0.1", .port = (*server)->port()});
    link.set_node_id("b");
    auto picked = link.PickNode(1);
    ASSERT_TRUE(picked) << ToString(picked.error());
    EXPECT_EQ(picked->node_id, "a");
    EXPECT_GE(SteadyClock::now() - started, Millis(1000)) << "answered inside the window";
  }
}

// ---- The admin routes of a master behind a RoleGate ----

// A directory whose admin routes read `gate`: one node "w1" owning "k".
struct GatedAdmin {
  explicit GatedAdmin(Millis rebuild_window) : gate("c", rebuild_window) {
    EXPECT_TRUE(service.RegisterNode(Node("w1")));
    EXPECT_TRUE(service.PutOwner("k", "w1"));
    RegisterMasterAdminRoutes(server, service, nullptr, {}, {}, &gate);
    EXPECT_TRUE(server.Start("127.0.0.1", 0));
  }
  std::optional<testing::HttpReply> Get(std::string_view target) {
    return testing::Http(server.port(), "GET", target);
  }

  MasterService service;
  RoleGate gate;
  AdminServer server;  // last: its routes read the members above
};

// A standby whose campaign etcd refuses (out of space) tells why in
// /readyz, next to "standby": no master can take over until it is fixed.
TEST(MasterGatedAdminTest, AStandbyThatCannotCampaignSaysWhyInReadyz) {
  GatedAdmin admin(Millis(0));
  admin.gate.BecomeStandby("");
  admin.gate.set_campaign_problem(
      "cannot grant a lease: etcd http://e:2379 answered HTTP 429: etcdserver: mvcc: database "
      "space exceeded");
  auto ready = admin.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find("cannot campaign for leadership: cannot grant a lease"),
            std::string::npos)
      << ready->body;
  EXPECT_NE(ready->body.find("database space exceeded"), std::string::npos) << ready->body;
  admin.gate.set_campaign_problem("");
  auto fixed = admin.Get("/readyz");
  ASSERT_TRUE(fixed);
  EXPECT_EQ(fixed->body.find("cannot campaign"), std::string::npos) << fixed->body;
}

// The admin /keys routes answer from the same directory as the Thrift key
// calls, and like them must not give a verdict while it is incomplete: a
// leader inside its rebuild window (here "k" is known, other keys may not
// have been re-announced yet), a standby (empty directory). They answer 503
// NOT_LEADER, and the usual answers once the master serves keys.
TEST(MasterGatedAdminTest, KeyRoutesAnswerNotLeaderUntilTheDirectoryIsWhole) {
  GatedAdmin admin(Millis(3600 * 1000));  // a rebuild window longer than the test
  admin.gate.set_self_address("127.0.0.1:7100");
  admin.gate.BecomeLeader(SteadyClock::now() + std::chrono::hours(2));
  for (const char* target : {"/keys/absent", "/keys/k", "/keys", "/keys?prefix=k"}) {
    auto reply = admin.Get(target);
    ASSERT_TRUE(reply) << target;
    EXPECT_EQ(reply->status, 503) << target << ": " << reply->body;
    auto doc = nlohmann::json::parse(reply->body, nullptr, false);
    EXPECT_EQ(doc["code"], "NOT_LEADER") << target << ": " << reply->body;
    EXPECT_NE(reply->body.find("rebuilding"), std::string::npos) << reply->body;
  }
  admin.gate.BecomeStandby("10.0.0.9:50051");
  auto standby = admin.Get("/keys/absent");
  ASSERT_TRUE(standby);
  EXPECT_EQ(standby->status, 503) << standby->body;
  EXPECT_NE(standby->body.find("the leader is 10.0.0.9:50051"), std::string::npos) << standby->body;

  // Serving keys: the directory's answers.
  GatedAdmin serving(Millis(0));
  serving.gate.LeadAlone();
  auto absent = serving.Get("/keys/absent");
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->status, 404) << absent->body;
  auto owned = serving.Get("/keys/k");
  ASSERT_TRUE(owned);
  EXPECT_EQ(owned->status, 200) << owned->body;
  auto listed = serving.Get("/keys");
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 200) << listed->body;
  EXPECT_NE(listed->body.find("\"k\""), std::string::npos) << listed->body;
}

// ---- What an operator sees over HTTP, from a real MasterServer ----

// A started master (RPC and admin on free ports, admin token kToken) and a
// Thrift channel to it.
class MasterAdminHttpTest : public ::testing::Test {
 protected:
  static constexpr const char* kToken = "secret-token";

  void Start(int64_t node_ttl_ms = 60000) {
    MasterConfig config;
    config.port = 0;  // never a default port
    config.admin_port = 0;
    config.node_ttl_ms = node_ttl_ms;
    config.admin_token = kToken;
    config.rebuild_ms = 0;
    auto server = MasterServer::Start(config);
    ASSERT_TRUE(server);
    server_ = std::move(*server);
    channel_ = std::make_unique<RpcChannel<rpc::MasterServiceClient>>("127.0.0.1", server_->port());
  }

  std::optional<testing::HttpReply> Http(std::string_view method, std::string_view target,
                                         std::string_view token = {}) {
    return testing::Http(server_->admin_port(), method, target, {}, token);
  }

  nlohmann::json GetJson(std::string_view target) {
    auto reply = Http("GET", target);
    EXPECT_TRUE(reply);
    if (!reply) return {};
    EXPECT_EQ(reply->status, 200) << reply->body;
    return nlohmann::json::parse(reply->body);
  }

  // Whether a node id appears in /nodes.
  bool Listed(const std::string& id) {
    const nlohmann::json doc = GetJson("/nodes");
    for (const auto& node : doc["nodes"]) {
      if (node["node_id"] == id) return true;
    }
    return false;
  }

  // Waits (bounded) until the reaper has declared `id` dead.
  bool WaitDead(const std::string& id) {
    auto deadline = SteadyClock::now() + std::chrono::seconds(5);
    while (SteadyClock::now() < deadline) {
      for (const auto& node : server_->service().ListNodes()) {
        if (node.node_id == id && !node.alive) return true;
      }
      std::this_thread::sleep_for(Millis(10));
    }
    return false;
  }

  std::unique_ptr<MasterServer> server_;
  std::unique_ptr<RpcChannel<rpc::MasterServiceClient>> channel_;
};

// Every key a client looks up and the master finds no owner for is a miss,
// whether it came alone (GetLocation) or in a batch (BatchGetLocation, which
// every BatchGet and every combined Get uses): 3 + 1 here, not 1.
TEST_F(MasterAdminHttpTest, GetMissesCountEveryAbsentKeyOfABatch) {
  Start();
  ASSERT_TRUE(server_->service().RegisterNode(Node("a")));
  ASSERT_TRUE(server_->service().PutOwner("present", "a"));
  auto batch = channel_->Call([](auto& c) {
    std::vector<rpc::LocationResult> r;
    c.BatchGetLocation(r, {"absent1", "present", "absent2", "", "absent3"});
    return r;
  });
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->size(), 5u);
  auto single = channel_->Call([](auto& c) {
    rpc::LocationResult r;
    c.GetLocation(r, "absent4");
    return r;
  });
  ASSERT_TRUE(single);
  EXPECT_EQ(single->code, rpc::ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(GetJson("/stats")["get_misses"], 4);
  EXPECT_EQ(testing::AdminMetric(server_->admin_port(), "mooncake_master_get_misses_total"), 4);
}

// A dead node can be forgotten at once by an operator (DELETE /nodes/{id},
// with the admin token); a live one cannot. /readyz is no longer degraded
// by it, and the node, if it comes back, simply registers as new.
TEST_F(MasterAdminHttpTest, AnOperatorForgetsADeadNode) {
  Start(/*node_ttl_ms=*/1000);
  MasterService& service = server_->service();
  ASSERT_TRUE(service.RegisterNode(Node("gone")));
  ASSERT_TRUE(service.PutOwner("k", "gone"));
  ASSERT_TRUE(WaitDead("gone"));
  // Just registered, so alive for the TTL: refused.
  ASSERT_TRUE(service.RegisterNode(Node("live")));
  auto alive = Http("DELETE", "/nodes/live", kToken);
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 409) << alive->body;
  EXPECT_TRUE(Listed("live"));
  EXPECT_EQ(GetJson("/readyz")["degraded"], true);

  auto anonymous = Http("DELETE", "/nodes/gone");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401) << anonymous->body;
  EXPECT_TRUE(Listed("gone"));
  auto unknown = Http("DELETE", "/nodes/nobody", kToken);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404) << unknown->body;

  auto forgotten = Http("DELETE", "/nodes/gone", kToken);
  ASSERT_TRUE(forgotten);
  EXPECT_EQ(forgotten->status, 200) << forgotten->body;
  EXPECT_FALSE(Listed("gone"));
  auto up = testing::AdminMetric(server_->admin_port(), "mooncake_master_node_up{node=\"gone\"}");
  EXPECT_TRUE(std::isnan(up)) << up;
  EXPECT_EQ(service.GetLocation("k").error(), ErrorCode::kObjectNotFound);
  // Once the other node has died and been forgotten too, nothing is degraded.
  ASSERT_TRUE(WaitDead("live"));
  auto second = Http("DELETE", "/nodes/live", kToken);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200) << second->body;
  nlohmann::json ready = GetJson("/readyz");
  EXPECT_EQ(ready["degraded"], false) << ready.dump();
  EXPECT_EQ(ready["nodes_dead"], 0);

  // Back again: a new node, which announces its keys as usual.
  ASSERT_TRUE(service.RegisterNode(Node("gone")));
  EXPECT_TRUE(Listed("gone"));
  ASSERT_TRUE(service.AnnounceKeys("gone", {"k"}));
  EXPECT_EQ(service.GetLocation("k")->node_id, "gone");
}

// RFC 7230 3.3.3: a request with neither Content-Length nor
// Transfer-Encoding has an empty body. Such a POST (curl -X POST) gets the
// route's own answer (404, 405, 401), not 411; a DELETE without a body is
// answered at once, not after the read deadline.
TEST_F(MasterAdminHttpTest, ABodylessRequestIsRoutedNotRefused) {
  Start();
  const auto port = server_->admin_port();
  auto bodyless = [&](std::string_view method, std::string_view path) {
    testing::RawConnection conn(port, std::chrono::seconds(2));
    EXPECT_TRUE(conn.connected());
    EXPECT_TRUE(conn.Send(std::string(method) + " " + std::string(path) +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    std::string reply;
    conn.ReadUntilClosed(std::chrono::seconds(2), &reply);
    return reply.substr(0, reply.find('\r'));
  };
  EXPECT_EQ(bodyless("POST", "/keys"), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(bodyless("POST", "/nope"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(bodyless("PUT", "/nodes/x"), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(bodyless("DELETE", "/nodes/x"), "HTTP/1.1 401 Unauthorized");
  // Chunked bodies are still refused before they are read.
  testing::RawConnection chunked(port, std::chrono::seconds(2));
  ASSERT_TRUE(
      chunked.Send("POST /keys HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
  std::string reply;
  chunked.ReadUntilClosed(std::chrono::seconds(2), &reply);
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 411")) << reply.substr(0, 40);
}

// Accepts connections on a loopback port and never answers: a frozen worker.
class FrozenPeer {
 public:
  FrozenPeer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~FrozenPeer() {
    for (int fd : accepted_) ::close(fd);
    ::close(fd_);
  }
  int port() const { return port_; }
  // Waits up to `timeout` for one connection and keeps it open, unanswered.
  bool Accept(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
    int fd = ::accept(fd_, nullptr, nullptr);
    if (fd < 0) return false;
    accepted_.push_back(fd);
    return true;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> accepted_;
};

// While one /cluster/stats waits on a frozen worker, another viewer gets an
// answer at once (the node marked not answered yet) instead of queueing
// behind it on one of the admin server's few threads.
TEST_F(MasterAdminHttpTest, ClusterStatsDoesNotQueueBehindASlowCollection) {
  Start();
  FrozenPeer frozen;
  NodeRecord node = Node("frozen");
  node.port = frozen.port();
  ASSERT_TRUE(server_->service().RegisterNode(node));
  std::optional<testing::HttpReply> first;
  std::thread viewer([&] { first = Http("GET", "/cluster/stats"); });
  // The collection is under way once it has connected to the frozen worker.
  ASSERT_TRUE(frozen.Accept(std::chrono::seconds(5)));
  auto start = SteadyClock::now();
  auto second = Http("GET", "/cluster/stats");
  auto waited = SteadyClock::now() - start;
  viewer.join();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200);
  EXPECT_LT(waited, Millis(500)) << "the second viewer queued behind the first collection";
  nlohmann::json doc = nlohmann::json::parse(second->body);
  ASSERT_EQ(doc["nodes"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["nodes"][0]["ok"], false);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
}

// /cluster/stats names a node by the same address /nodes does, brackets
// around an IPv6 literal included, so the status page can join the two.
TEST_F(MasterAdminHttpTest, ClusterStatsAndNodesAgreeOnAnIpv6Address) {
  Start();
  NodeRecord node = Node("v6");
  node.host = "::1";
  node.port = 1;  // nothing listens there: the Stats call fails fast
  ASSERT_TRUE(server_->service().RegisterNode(node));
  nlohmann::json nodes = GetJson("/nodes");
  nlohmann::json cluster = GetJson("/cluster/stats");
  ASSERT_EQ(nodes["nodes"].size(), 1u);
  ASSERT_EQ(cluster["nodes"].size(), 1u);
  EXPECT_EQ(nodes["nodes"][0]["address"], "[::1]:1");
  EXPECT_EQ(cluster["nodes"][0]["address"], "[::1]:1");
}

// Tier sizes come from workers, up to INT64_MAX each over Thrift: their sum
// saturates instead of wrapping, so the node with the most room still wins.
TEST_F(MasterServiceTest, FreeBytesSaturatesInsteadOfWrapping) {
  constexpr uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
  NodeRecord huge = Node("h");
  huge.tiers = {TierUsage{"a", "dram", kMax, 0, 0}, TierUsage{"b", "ssd", kMax, 0, 0},
                TierUsage{"c", "ssd", 3, 0, 0}};
  EXPECT_EQ(huge.free_bytes(), UINT64_MAX);
  ASSERT_TRUE(service_.RegisterNode(huge));
  for (uint64_t size : {uint64_t{1000}, UINT64_MAX}) {
    auto pick = service_.PickNode(size, {});
    ASSERT_TRUE(pick) << size;
    EXPECT_EQ(pick->node_id, "h") << size;
  }
}

// A node dead for longer than MasterOptions::dead_node_forget (1 h by
// default) leaves the registry: /nodes, ListNodes, /readyz and node_up stop
// naming it. Until then it stays listed as dead.
TEST_F(MasterServiceTest, ADeadNodeIsForgottenAfterTheGracePeriod) {
  ASSERT_TRUE(service_.PutOwner("ka", "a"));
  KillNode("a");
  auto listed = [&](const std::string& id) {
    auto nodes = service_.ListNodes();
    return std::ranges::any_of(nodes, [&](const NodeRecord& n) { return n.node_id == id; });
  };
  auto keep_others_alive = [&] {
    for (const char* id : {"b", "c"}) ASSERT_TRUE(service_.Heartbeat(id, {}));
  };
  clock_.Advance(std::chrono::minutes(59));
  keep_others_alive();
  service_.ExpireDeadNodes();
  EXPECT_TRUE(listed("a"));
  clock_.Advance(std::chrono::minutes(2));
  keep_others_alive();
  service_.ExpireDeadNodes();
  EXPECT_FALSE(listed("a"));
  EXPECT_TRUE(listed("b"));
  EXPECT_EQ(service_.Heartbeat("a", {}).error(), ErrorCode::kNodeNotFound);
  // It comes back as a new node.
  ASSERT_TRUE(service_.RegisterNode(Node("a")));
  EXPECT_TRUE(listed("a"));
  EXPECT_EQ(OwnerOf("ka"), "<OBJECT_NOT_FOUND>");
  ASSERT_TRUE(service_.PutOwner("ka", "a"));
  EXPECT_EQ(OwnerOf("ka"), "a");
}

}  // namespace
}  // namespace mooncake
