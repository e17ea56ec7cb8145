// A sharded master directory (docs/sharding.md), with real processes: two
// mooncake-master processes, each owning half of the key slots, and two
// workers given both shards (--master-shards). Given that cluster, when a
// client and mooncake-cli put, get, check and remove keys, expect every key
// to be served, and its directory entry to live on the master of its slot
// only, so that both masters hold keys and their counts add up.

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/key_slots.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"
#include "thrift/master_shard_list.h"

namespace mooncake::testing {
namespace {

constexpr int kKeys = 200;

std::string KeyOf(int i) { return "shard-key-" + std::to_string(i); }
std::string ValueOf(int i) { return PatternBytes(static_cast<uint64_t>(i), 100 + i * 37); }

// The `keys` count a master's /stats reports; -1 when it cannot be read.
int64_t MasterKeys(int admin_port) {
  auto reply = Http(admin_port, "GET", "/stats");
  if (!reply || reply->status != 200) return -1;
  auto body = nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("keys")) return -1;
  return body["keys"].get<int64_t>();
}

class ShardingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Each TestCluster brings its own master: shard 0 is first_'s, shard 1
    // second_'s. The workers (started by first_) register with both.
    ASSERT_TRUE(first_.StartMaster());
    ASSERT_TRUE(second_.StartMaster());
    table_ = "0-8191=" + first_.master_address() + ",8192-16383=" + second_.master_address();
    for (const char* node : {"w1", "w2"}) {
      ASSERT_TRUE(first_.StartWorker(node, {.extra_args = {"--master-shards", table_}}))
          << first_.AllLogTails();
    }
    ClientConfig config = first_.ClientConfigFor();
    config.master_shards = table_;
    client_ = first_.NewClient(config);
    ASSERT_NE(client_, nullptr);
  }

  // Runs mooncake-cli against the sharded directory (no --master).
  CliResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {"--master-shards", table_});
    return first_.RunCli(args, {}, /*with_master=*/false);
  }

  static std::string Show(const CliResult& r) {
    return "exit=" + std::to_string(r.exit_code) + " out=" + r.out + " err=" + r.err;
  }

  // The shard that owns `key` according to the table both sides use.
  uint32_t ShardOf(const std::string& key) const { return ParseMasterShards(table_)->ShardOf(key); }

  TestCluster first_;
  TestCluster second_;
  std::string table_;
  std::unique_ptr<Client> client_;
};

TEST_F(ShardingTest, KeysSpreadOverBothShardsAndEveryOperationWorks) {
  // When 200 keys are put through the sharded client
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(IsOk(client_->Put(KeyOf(i), ValueOf(i)))) << KeyOf(i) << first_.AllLogTails();
  }
  // Expect both masters to hold some of them, and together all of them.
  int64_t first_keys = MasterKeys(first_.master_admin_port());
  int64_t second_keys = MasterKeys(second_.master_admin_port());
  EXPECT_GT(first_keys, 0);
  EXPECT_GT(second_keys, 0);
  EXPECT_EQ(first_keys + second_keys, kKeys);
  int expected_first = 0;
  for (int i = 0; i < kKeys; ++i) expected_first += ShardOf(KeyOf(i)) == 0;
  EXPECT_EQ(first_keys, expected_first);

  // Expect each key's entry on its own shard only: a client of shard 0's
  // master alone finds exactly the keys of shard 0's slots.
  auto shard0_only = first_.NewClient();
  ASSERT_NE(shard0_only, nullptr);
  for (int i = 0; i < 20; ++i) {
    auto exists = shard0_only->Exist(KeyOf(i));
    ASSERT_TRUE(IsOk(exists)) << KeyOf(i);
    EXPECT_EQ(*exists, ShardOf(KeyOf(i)) == 0) << KeyOf(i);
  }

  // Expect every key back byte-exact and present; then removed and gone.
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(ReadsBack(*client_, KeyOf(i), ValueOf(i))) << KeyOf(i);
    auto exists = client_->Exist(KeyOf(i));
    ASSERT_TRUE(IsOk(exists)) << KeyOf(i);
    EXPECT_TRUE(*exists) << KeyOf(i);
  }
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(IsOk(client_->Remove(KeyOf(i), /*force=*/true))) << KeyOf(i);
    auto exists = client_->Exist(KeyOf(i));
    ASSERT_TRUE(IsOk(exists)) << KeyOf(i);
    EXPECT_FALSE(*exists) << KeyOf(i);
  }
  EXPECT_TRUE(Eventually([&] {
    return MasterKeys(first_.master_admin_port()) == 0 &&
           MasterKeys(second_.master_admin_port()) == 0;
  }));
}

TEST_F(ShardingTest, BatchCallsSpanShardsInInputOrder) {
  // Given a batch whose keys fall on both shards
  std::vector<std::pair<std::string, std::string>> items;
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i) {
    items.emplace_back("batch-" + KeyOf(i), ValueOf(i));
    keys.push_back(items.back().first);
  }
  std::vector<uint32_t> shards;
  for (const auto& key : keys) shards.push_back(ShardOf(key));
  ASSERT_NE(std::ranges::count(shards, 0u), 0);
  ASSERT_NE(std::ranges::count(shards, 1u), 0);

  // When they are put in one batch, expect every one stored
  auto put = client_->BatchPut(items);
  ASSERT_EQ(put.size(), items.size());
  for (size_t i = 0; i < put.size(); ++i) ASSERT_TRUE(IsOk(put[i])) << keys[i];

  // and a batch get, with a missing key in the middle, to answer in input
  // order: each value at its key's position, the missing one not found.
  std::vector<std::string> wanted = keys;
  wanted.insert(wanted.begin() + 10, "batch-missing");
  // A fresh client has no remembered owners: every key is located at its
  // shard's master in one BatchGetLocation per shard.
  ClientConfig config = first_.ClientConfigFor();
  config.master_shards = table_;
  auto fresh = first_.NewClient(config);
  ASSERT_NE(fresh, nullptr);
  auto got = fresh->BatchGet(wanted);
  ASSERT_EQ(got.size(), wanted.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (i == 10) {
      EXPECT_TRUE(FailsWith(got[i], ErrorCode::kObjectNotFound));
      continue;
    }
    size_t item = i < 10 ? i : i - 1;
    ASSERT_TRUE(IsOk(got[i])) << wanted[i];
    EXPECT_EQ(got[i]->data, items[item].second) << wanted[i];
  }
  auto exist = fresh->BatchExist(wanted);
  ASSERT_EQ(exist.size(), wanted.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    ASSERT_TRUE(IsOk(exist[i])) << wanted[i];
    EXPECT_EQ(*exist[i], i != 10) << wanted[i];
  }
  auto removed = fresh->BatchRemove(keys, /*force=*/true);
  for (size_t i = 0; i < removed.size(); ++i) EXPECT_TRUE(IsOk(removed[i])) << keys[i];
  EXPECT_EQ(MasterKeys(first_.master_admin_port()) + MasterKeys(second_.master_admin_port()), 0);
}

TEST_F(ShardingTest, ARestartedShardGetsItsKeysBackFromTheWorkers) {
  // Given keys on both shards
  constexpr int kCount = 40;
  int of_second = 0;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(IsOk(client_->Put(KeyOf(i), ValueOf(i)))) << KeyOf(i);
    of_second += ShardOf(KeyOf(i)) == 1;
  }
  ASSERT_GT(of_second, 0);
  const int64_t first_registrations =
      MasterRequestCount(first_.master_admin_port(), "register_node");
  ASSERT_EQ(first_registrations, 2);  // w1 and w2, once each
  // When shard 1's master crashes and comes back empty on the same port
  second_.KillMaster(SIGKILL);
  ASSERT_TRUE(second_.RestartMaster());
  // Expect the workers, told NODE_NOT_FOUND by that shard, to register again
  // and announce their keys of its slots to it, and shard 0 to keep its own.
  EXPECT_TRUE(Eventually([&] { return MasterKeys(second_.master_admin_port()) == of_second; }, 20s))
      << MasterKeys(second_.master_admin_port()) << " of " << of_second << "\n"
      << first_.AllLogTails();
  EXPECT_EQ(MasterKeys(first_.master_admin_port()), kCount - of_second);
  // Shard 0 never forgot the workers: registering with it again would have
  // purged their keys there until the announcement landed.
  EXPECT_EQ(MasterRequestCount(first_.master_admin_port(), "register_node"), first_registrations);
  ClientConfig config = first_.ClientConfigFor();
  config.master_shards = table_;
  auto fresh = first_.NewClient(config);
  ASSERT_NE(fresh, nullptr);
  for (int i = 0; i < kCount; ++i) EXPECT_TRUE(ReadsBack(*fresh, KeyOf(i), ValueOf(i))) << KeyOf(i);
}

TEST_F(ShardingTest, CliRoutesEachKeyToItsShard) {
  // Given keys of both shards, when each goes through mooncake-cli
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 6 && i < 100; ++i) {
    std::string key = "cli-" + KeyOf(i);
    size_t of_shard = std::ranges::count_if(
        keys, [&](const std::string& k) { return ShardOf(k) == ShardOf(key); });
    if (of_shard < 3) keys.push_back(key);
  }
  ASSERT_EQ(keys.size(), 6u);
  for (const auto& key : keys) {
    auto put = Cli({"put", key, "value of " + key});
    ASSERT_EQ(put.exit_code, 0) << key << " " << Show(put);
  }
  // Expect three keys on each master
  EXPECT_EQ(MasterKeys(first_.master_admin_port()), 3);
  EXPECT_EQ(MasterKeys(second_.master_admin_port()), 3);
  for (const auto& key : keys) {
    auto get = Cli({"get", key});
    EXPECT_EQ(get.exit_code, 0) << key << " " << Show(get);
    EXPECT_TRUE(get.out == "value of " + key || get.out == "value of " + key + "\n") << Show(get);
    auto exist = Cli({"exist", key});
    EXPECT_EQ(exist.exit_code, 0) << Show(exist);
    auto remove = Cli({"remove", key, "--force"});
    EXPECT_EQ(remove.exit_code, 0) << Show(remove);
    auto gone = Cli({"exist", key});
    EXPECT_EQ(gone.exit_code, 1) << Show(gone);
  }
  // and the node listing to show both workers, which every shard knows.
  auto nodes = Cli({"--json", "nodes"});
  ASSERT_EQ(nodes.exit_code, 0) << Show(nodes);
  EXPECT_NE(nodes.out.find("w1"), std::string::npos) << Show(nodes);
  EXPECT_NE(nodes.out.find("w2"), std::string::npos) << Show(nodes);
  // A shard list that leaves slots unowned is a usage error.
  auto bad_table = first_.RunCli({"--master-shards", "0-100=127.0.0.1:1", "get", "k"}, {}, false);
  EXPECT_EQ(bad_table.exit_code, 2) << Show(bad_table);
}

}  // namespace
}  // namespace mooncake::testing
