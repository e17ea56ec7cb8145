// The client's key -> owner cache: reads of known keys go straight to the
// owner, and a stale entry never yields a wrong answer.

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

using namespace std::chrono_literals;

class LocationCacheTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(30);
  }

  // Given a master (short node TTL) and workers w1, w2.
  void GivenTwoNodes() {
    ASSERT_TRUE(cluster_.StartMaster({"--node-ttl-ms", "1000"}));
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 << 20, .ssd = 0}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 16 << 20, .ssd = 0}));
  }

  TestCluster cluster_;
};

TEST_F(LocationCacheTest, KnownKeysStayReadableWhileTheMasterIsDown) {
  GivenTwoNodes();
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Put("known", "value", {.preferred_node = "w1"})));
  ASSERT_TRUE(IsOk(client->Get("known")));

  // When the master dies, a read of a key the client has seen needs only
  // the owner.
  cluster_.KillMaster(SIGKILL);
  auto value = client->Get("known");
  ASSERT_TRUE(IsOk(value));
  EXPECT_EQ(value->data, "value");
  // A key the client has never seen still needs the master.
  EXPECT_FALSE(client->Get("unknown").has_value());
}

TEST_F(LocationCacheTest, AKeyRePutElsewhereIsFollowedThroughTheMaster) {
  GivenTwoNodes();
  auto reader = cluster_.NewClient();
  auto writer = cluster_.NewClient();
  ASSERT_TRUE(reader && writer);
  ASSERT_TRUE(IsOk(writer->Put("k", "old", {.preferred_node = "w1"})));
  ASSERT_EQ(reader->Get("k")->data, "old");  // the reader now remembers w1

  // When another client removes it and puts it again on w2.
  ASSERT_TRUE(IsOk(writer->Remove("k", /*force=*/true)));
  ASSERT_TRUE(IsOk(writer->Put("k", "new!", {.preferred_node = "w2"})));

  // Expect the reader to get the new value, and Exist/Inspect to agree.
  auto value = reader->Get("k");
  ASSERT_TRUE(IsOk(value));
  EXPECT_EQ(value->data, "new!");
  EXPECT_EQ(reader->Inspect("k")->node_id, "w2");
  EXPECT_TRUE(*reader->Exist("k"));

  // And a removed key reads as absent, not as the remembered owner's.
  ASSERT_TRUE(IsOk(writer->Remove("k", true)));
  EXPECT_TRUE(FailsWith(reader->Get("k"), ErrorCode::kObjectNotFound));
  EXPECT_FALSE(*reader->Exist("k"));
}

TEST_F(LocationCacheTest, AnUnreachableRememberedOwnerSendsTheReadToTheMaster) {
  GivenTwoNodes();
  auto reader = cluster_.NewClient();
  auto writer = cluster_.NewClient();
  ASSERT_TRUE(reader && writer);
  ASSERT_TRUE(IsOk(writer->Put("moved", "first", {.preferred_node = "w1"})));
  ASSERT_EQ(reader->Get("moved")->data, "first");

  // When w1 dies and, once the master dropped its keys, the key is put on w2.
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(Eventually([&] { return !writer->Exist("moved").value_or(true); }, 10s));
  ASSERT_TRUE(IsOk(writer->Put("moved", "second", {.preferred_node = "w2"})));

  // Expect the reader to find it on w2.
  auto value = reader->Get("moved");
  ASSERT_TRUE(IsOk(value));
  EXPECT_EQ(value->data, "second");
}

TEST_F(LocationCacheTest, AnOwnerThatRestartedAtANewAddressIsReadThereAtOnce) {
  ASSERT_TRUE(cluster_.StartMaster());
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 << 20, .ssd = 64 << 20}));
  auto reader = cluster_.NewClient();
  ASSERT_TRUE(reader);
  // Hard-pinned on SSD, so the object outlives the worker's process.
  ASSERT_TRUE(IsOk(reader->Put("kept", "value", {.hard_pin = true, .preferred_tier = "ssd"})));
  ASSERT_EQ(reader->Get("kept")->data, "value");
  const int old_port = cluster_.worker_port("w1");

  // When w1 restarts on another port and announces its objects again.
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(cluster_.RestartWorker("w1"));
  ASSERT_NE(cluster_.worker_port("w1"), old_port);
  auto probe = cluster_.NewClient();
  ASSERT_TRUE(probe);
  ASSERT_TRUE(Eventually([&] { return probe->Inspect("kept").has_value(); }));

  // Expect the reader's first get to succeed: the master names the same
  // node, but at its new address, which is where the object is.
  auto value = reader->Get("kept");
  ASSERT_TRUE(IsOk(value));
  EXPECT_EQ(value->data, "value");
}

// A BatchGet groups keys by the owners the cache remembers. When that node
// is down, a key the cache sent there by mistake (removed and put again on
// another node) is read where the master says, as a single Get would; a key
// that does live on the dead node fails.
TEST_F(LocationCacheTest, ABatchGetToADeadNodeReadsTheKeysThatLiveElsewhere) {
  ASSERT_TRUE(cluster_.StartMaster());  // default node TTL: the dead node stays listed
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 16 << 20, .ssd = 0}));
  ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 16 << 20, .ssd = 0}));
  auto reader = cluster_.NewClient();
  auto writer = cluster_.NewClient();
  ASSERT_TRUE(reader && writer);
  for (const char* key : {"stays", "moves-a", "moves-b"}) {
    ASSERT_TRUE(IsOk(writer->Put(key, "on w1", {.preferred_node = "w1"}))) << key;
  }
  for (const auto& got : reader->BatchGet({"stays", "moves-a", "moves-b"})) {
    ASSERT_TRUE(IsOk(got));  // the reader now remembers w1 for all three
  }
  for (const char* key : {"moves-a", "moves-b"}) {
    ASSERT_TRUE(IsOk(writer->Remove(key, /*force=*/true))) << key;
    ASSERT_TRUE(IsOk(writer->Put(key, "on w2", {.preferred_node = "w2"}))) << key;
  }
  cluster_.KillWorker("w1", SIGKILL);

  auto got = reader->BatchGet({"stays", "moves-a", "moves-b"});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_FALSE(got[0].has_value()) << "read from a dead node";
  for (size_t i : {1u, 2u}) {
    ASSERT_TRUE(IsOk(got[i])) << i << ": " << ToString(got[i].error());
    EXPECT_EQ(got[i]->data, "on w2");
  }
}

TEST_F(LocationCacheTest, UpsertGoesToTheCurrentOwnerEvenWhenTheCacheIsStale) {
  GivenTwoNodes();
  auto reader = cluster_.NewClient();
  auto writer = cluster_.NewClient();
  ASSERT_TRUE(reader && writer);
  ASSERT_TRUE(IsOk(writer->Put("u", "aaaa", {.preferred_node = "w1"})));
  ASSERT_TRUE(IsOk(reader->Get("u")));
  ASSERT_TRUE(IsOk(writer->Remove("u", true)));
  ASSERT_TRUE(IsOk(writer->Put("u", "bbbb", {.preferred_node = "w2"})));

  // The reader's cache still says w1; its upsert must replace w2's object.
  ASSERT_TRUE(IsOk(reader->Upsert("u", "cccc")));
  EXPECT_EQ(writer->Get("u")->data, "cccc");
  EXPECT_EQ(writer->Inspect("u")->node_id, "w2");
}

TEST_F(LocationCacheTest, PutsAvoidAWorkerThatDiedButIsStillRegistered) {
  ASSERT_TRUE(cluster_.StartMaster());  // default node TTL: the dead node stays listed
  ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 64 << 20, .ssd = 0}));
  ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 16 << 20, .ssd = 0}));
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  // w1 has the most free space, so the master keeps picking it.
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(IsOk(client->Put("fresh", "value")));
  EXPECT_EQ(client->Inspect("fresh")->node_id, "w2");
  // Naming the dead node explicitly still fails, with the transport error.
  EXPECT_TRUE(
      FailsWith(client->Put("pinned-to-w1", "v", {.preferred_node = "w1"}), ErrorCode::kRpcFail));
}

}  // namespace
}  // namespace mooncake::testing
