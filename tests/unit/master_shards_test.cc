// MasterShards (thrift/master_shards.h): the shard list's two forms, and
// how a batch of keys is split per shard and stays in input order. No master
// is contacted: endpoints connect lazily.

#include "thrift/master_shards.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/key_slots.h"

namespace mooncake {
namespace {

TEST(ParseMasterShardsTest, ReadsASlotTable) {
  auto table = ParseMasterShards("0-8191=127.0.0.1:7001,8192-16383=127.0.0.1:7002");
  ASSERT_TRUE(table.has_value());
  EXPECT_EQ(table->shard_count(), 2u);
  EXPECT_EQ(table->address(0), "127.0.0.1:7001");
  EXPECT_EQ(table->ShardOfSlot(8191), 0u);
  EXPECT_EQ(table->ShardOfSlot(8192), 1u);
}

TEST(ParseMasterShardsTest, AnAddressListSplitsSlotsEvenlyInOrder) {
  auto table = ParseMasterShards("127.0.0.1:7001, 127.0.0.1:7002,127.0.0.1:7003");
  ASSERT_TRUE(table.has_value());
  ASSERT_EQ(table->shard_count(), 3u);
  EXPECT_EQ(table->address(2), "127.0.0.1:7003");
  auto even = SlotTable::Even(3);
  for (uint32_t slot : {0u, 5461u, 5462u, 10922u, 10923u, 16383u}) {
    EXPECT_EQ(table->ShardOfSlot(slot), even->ShardOfSlot(slot)) << slot;
  }
}

TEST(ParseMasterShardsTest, RefusesBadLists) {
  std::string why;
  EXPECT_FALSE(ParseMasterShards("", &why).has_value());
  EXPECT_FALSE(ParseMasterShards("127.0.0.1", &why).has_value());
  EXPECT_FALSE(ParseMasterShards("127.0.0.1:7001,127.0.0.1:7001", &why).has_value());
  EXPECT_NE(why.find("twice"), std::string::npos) << why;
  // A gap: slots 8192.. have no master.
  EXPECT_FALSE(ParseMasterShards("0-8191=127.0.0.1:7001", &why).has_value());
  EXPECT_FALSE(why.empty());
}

TEST(MasterShardsTest, UnshardedIsOneGroupAsGiven) {
  MasterShards shards(MasterTarget{.host = "127.0.0.1", .port = 1}, RpcOptions{});
  EXPECT_FALSE(shards.sharded());
  EXPECT_EQ(shards.size(), 1u);
  std::vector<std::string> keys = {"a", "b", "c"};
  auto groups = shards.ForKeys(keys, {2, 0});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].shard, 0u);
  EXPECT_EQ(groups[0].indices, (std::vector<size_t>{2, 0}));
  EXPECT_EQ(&shards.ForKey("anything"), &shards.Any());
}

TEST(MasterShardsTest, GroupsKeysByTheirSlotsShardInInputOrder) {
  auto table = ParseMasterShards("127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003");
  ASSERT_TRUE(table.has_value());
  const SlotTable copy = *table;
  MasterShards shards(std::move(*table), RpcOptions{});
  ASSERT_EQ(shards.size(), 3u);
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back("key-" + std::to_string(i));
  // Hash tags keep related keys on one shard.
  keys.push_back("{user1}.a");
  keys.push_back("{user1}.b");

  auto groups = shards.ForKeys(keys);
  ASSERT_EQ(groups.size(), 3u);  // 300 keys reach every shard
  size_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(groups[g].shard, g);
    EXPECT_TRUE(std::ranges::is_sorted(groups[g].indices));
    for (size_t i : groups[g].indices) {
      EXPECT_EQ(copy.ShardOf(keys[i]), groups[g].shard) << keys[i];
      EXPECT_EQ(&shards.ForKey(keys[i]), &shards.Shard(groups[g].shard)) << keys[i];
    }
    total += groups[g].indices.size();
  }
  EXPECT_EQ(total, keys.size());
  EXPECT_EQ(shards.ShardOf("{user1}.a"), shards.ShardOf("{user1}.b"));
  EXPECT_EQ(shards.Shard(1).target().port, 7002);
  EXPECT_EQ(&shards.Any(), &shards.Shard(0));

  // Only the shards that hold some of the given indices appear.
  std::vector<size_t> one = {groups[1].indices.front()};
  auto single = shards.ForKeys(keys, one);
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0].shard, 1u);
  EXPECT_EQ(single[0].indices, one);
}

}  // namespace
}  // namespace mooncake
