// Key slots and the static slot table (common/key_slots.h): slots must match
// Redis Cluster's exactly, so operators can reason with redis-cli's
// CLUSTER KEYSLOT, and a bad table must be refused with a reason.

#include "common/key_slots.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mooncake {
namespace {

TEST(KeySlotTest, MatchesRedisClusterSlots) {
  // Values from Redis Cluster (CLUSTER KEYSLOT) and its documentation.
  EXPECT_EQ(KeySlot("foo"), 12182u);
  EXPECT_EQ(KeySlot("bar"), 5061u);
  EXPECT_EQ(KeySlot("somekey"), 11058u);
  EXPECT_EQ(KeySlot("foo{hash_tag}"), 2515u);
  EXPECT_EQ(KeySlot("123456789"), 0x31C3u);  // the CRC16-XMODEM check value
  EXPECT_EQ(Crc16Xmodem("123456789"), 0x31C3);
}

TEST(KeySlotTest, HashTagsShareASlot) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{hash_tag}"), KeySlot("hash_tag"));
  // Only the first tag counts: "{a}{b}" hashes "a".
  EXPECT_EQ(KeySlot("{a}{b}"), KeySlot("a"));
  // The tag ends at the first '}' after the first '{': "{{a}}" hashes "{a".
  EXPECT_EQ(KeySlot("{{a}}"), KeySlot("{a"));
}

TEST(KeySlotTest, EmptyOrUnclosedTagsHashTheWholeKey) {
  EXPECT_EQ(KeySlot("{}x"), Crc16Xmodem("{}x") % kKeySlots);
  EXPECT_NE(KeySlot("{}x"), KeySlot("x"));
  EXPECT_EQ(KeySlot("x{"), Crc16Xmodem("x{") % kKeySlots);
  EXPECT_EQ(KeySlot("{"), 4092u);
  EXPECT_EQ(KeySlot("{}"), 15257u);
  // "a{}b{c}": the first '{' is followed at once by '}', so no tag at all.
  EXPECT_EQ(KeySlot("a{}b{c}"), 7353u);
  EXPECT_EQ(KeySlot(""), 0u);
}

TEST(KeySlotTest, EverySlotIsBelowTheSlotCount) {
  for (int i = 0; i < 10000; ++i) {
    EXPECT_LT(KeySlot("kv/" + std::to_string(i)), kKeySlots);
  }
}

TEST(SlotTableTest, EvenSplitsIntoContiguousRanges) {
  auto two = SlotTable::Even(2, {"127.0.0.1:1001", "127.0.0.1:1002"});
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->shard_count(), 2u);
  EXPECT_EQ(two->Format(), "0-8191=127.0.0.1:1001,8192-16383=127.0.0.1:1002");
  EXPECT_EQ(two->ShardOfSlot(8191), 0u);
  EXPECT_EQ(two->ShardOfSlot(8192), 1u);
  EXPECT_EQ(two->ShardOf("foo"), 1u);  // slot 12182
  EXPECT_EQ(two->ShardOf("bar"), 0u);  // slot 5061

  auto three = SlotTable::Even(3);
  ASSERT_TRUE(three.has_value());
  ASSERT_EQ(three->ranges().size(), 3u);
  // 16384 = 5462 + 5461 + 5461: the remainder goes to the first shards.
  EXPECT_EQ(three->ranges()[0].last, 5461u);
  EXPECT_EQ(three->ranges()[1].first, 5462u);
  EXPECT_EQ(three->ranges()[2].last, kKeySlots - 1);
  EXPECT_EQ(three->address(0), "");

  auto one = SlotTable::Even(1);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->ShardOf("anything"), 0u);
  EXPECT_TRUE(SlotTable::Even(kKeySlots).has_value());
}

TEST(SlotTableTest, EvenRefusesBadShardCounts) {
  EXPECT_EQ(SlotTable::Even(0).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(SlotTable::Even(kKeySlots + 1).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(SlotTable::Even(2, {"127.0.0.1:1"}).error(), ErrorCode::kInvalidParams);
}

TEST(SlotTableTest, EvenSpreadsManyKeysOverEveryShard) {
  auto four = SlotTable::Even(4);
  ASSERT_TRUE(four.has_value());
  std::vector<int> per_shard(4);
  for (int i = 0; i < 40000; ++i) ++per_shard[four->ShardOf("kv/w" + std::to_string(i))];
  for (int count : per_shard) {
    EXPECT_GT(count, 8000) << "each shard holds roughly a quarter";
    EXPECT_LT(count, 12000);
  }
}

TEST(SlotTableTest, ParsesAStaticListAndFormatsItBack) {
  std::string why;
  auto table = SlotTable::Parse("8192-16383=10.0.0.2:7000, 0-8191=10.0.0.1:7000", &why);
  ASSERT_TRUE(table.has_value()) << why;
  EXPECT_EQ(table->shard_count(), 2u);
  EXPECT_EQ(table->address(table->ShardOfSlot(0)), "10.0.0.1:7000");
  EXPECT_EQ(table->address(table->ShardOfSlot(16383)), "10.0.0.2:7000");
  EXPECT_EQ(table->Format(), "0-8191=10.0.0.1:7000,8192-16383=10.0.0.2:7000");
  auto again = SlotTable::Parse(table->Format());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->Format(), table->Format());
}

TEST(SlotTableTest, OneShardMayOwnSeveralRanges) {
  std::string why;
  auto table = SlotTable::Parse("0-99=h1:1,100=h2:2,101-16383=h1:1", &why);
  ASSERT_TRUE(table.has_value()) << why;
  EXPECT_EQ(table->shard_count(), 2u);
  EXPECT_EQ(table->ShardOfSlot(99), table->ShardOfSlot(101));
  EXPECT_NE(table->ShardOfSlot(100), table->ShardOfSlot(99));
  EXPECT_EQ(table->Format(), "0-99=h1:1,100-100=h2:2,101-16383=h1:1");
}

TEST(SlotTableTest, AdjacentRangesOfOneShardMerge) {
  auto table = SlotTable::Parse("0-10=h:1,11-16383=h:1");
  ASSERT_TRUE(table.has_value());
  EXPECT_EQ(table->Format(), "0-16383=h:1");
}

// Parse's error and the reason it gives, for one bad table.
struct BadTable {
  std::string text;
  std::string reason_part;
};

TEST(SlotTableTest, RefusesBadTablesWithAReason) {
  const std::vector<BadTable> cases = {
      {"", "is not RANGE=HOST:PORT"},
      {"0-16383", "is not RANGE=HOST:PORT"},
      {"0-8191=h:1,8000-16383=h:2", "assigned twice (overlap)"},
      {"0-8191=h:1,8193-16383=h:2", "8192-8192 have no shard (gap)"},
      {"0-8191=h:1", "8192-16383 have no shard (gap)"},
      {"1-16383=h:1", "0-0 have no shard (gap)"},
      {"0-16384=h:1", "FIRST <= LAST < 16384"},
      {"9-3=h:1", "FIRST <= LAST"},
      {"a-b=h:1", "is not FIRST-LAST or SLOT"},
      {"-5=h:1", "is not FIRST-LAST or SLOT"},
      {"0-16383=nohost", "is not HOST:PORT"},
      {"0-16383=:50", "is not HOST:PORT"},
      {"0-16383=h:0", "is not HOST:PORT"},
      {"0-16383=h:70000", "is not HOST:PORT"},
      {"0-16383=h:12x", "is not HOST:PORT"},
      {"0-8191=h:1,,8192-16383=h:2", "is not RANGE=HOST:PORT"},
  };
  for (const BadTable& bad : cases) {
    std::string why;
    auto table = SlotTable::Parse(bad.text, &why);
    ASSERT_FALSE(table.has_value()) << bad.text;
    EXPECT_EQ(table.error(), ErrorCode::kInvalidParams) << bad.text;
    EXPECT_NE(why.find(bad.reason_part), std::string::npos)
        << bad.text << " gave '" << why << "', expected '" << bad.reason_part << "'";
  }
  EXPECT_FALSE(SlotTable::Parse("0-8191=h:1").has_value()) << "why may be null";
}

}  // namespace
}  // namespace mooncake
