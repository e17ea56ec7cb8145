// Client lifecycle over real processes: Upsert (create, in place, resize),
// BatchUpsert, Exist with prefetch, and the client hot cache's staleness
// bound when another client upserts.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/async_reads.h"
#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
using Clock = std::chrono::steady_clock;

std::string Describe(const Result<ObjectInspection>& info) {
  if (!info) return std::string("inspect failed: ") + std::string(ToString(info.error()));
  return "node=" + info->node_id + " tier=" + info->tier +
         " offset=" + std::to_string(info->offset) + " size=" + std::to_string(info->size) +
         " version=" + std::to_string(info->version) + " state=" + info->state;
}

class ClientLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 8 * kMiB, .ssd = 128 * kMiB}));
    ASSERT_TRUE(cluster_.StartWorker("w2", {.dram = 8 * kMiB, .ssd = 128 * kMiB}));
    client_ = cluster_.NewClient();
    ASSERT_TRUE(client_);
  }

  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(30);
  }

  PutOptions On(const std::string& node) {
    PutOptions options;
    options.preferred_node = node;
    return options;
  }

  TestCluster cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientLifecycleTest, UpsertOfAnAbsentKeyCreatesIt) {
  ASSERT_TRUE(IsOk(client_->Upsert("fresh", "created")));
  auto got = client_->Get("fresh");
  ASSERT_TRUE(IsOk(got));
  EXPECT_EQ(got->data, "created");
}

TEST_F(ClientLifecycleTest, UpsertOfTheSameSizeIsInPlaceWithAHigherVersion) {
  ASSERT_TRUE(IsOk(client_->Put("same", PatternBytes(1, 64 * kKiB), On("w1"))));
  auto before = client_->Inspect("same");
  ASSERT_TRUE(IsOk(before));
  ASSERT_TRUE(IsOk(client_->Upsert("same", PatternBytes(2, 64 * kKiB))));
  auto after = client_->Inspect("same");
  ASSERT_TRUE(IsOk(after));
  EXPECT_EQ(after->node_id, before->node_id) << Describe(after);
  EXPECT_EQ(after->tier, before->tier) << Describe(before) << " -> " << Describe(after);
  EXPECT_EQ(after->offset, before->offset) << Describe(before) << " -> " << Describe(after);
  EXPECT_GT(after->version, before->version) << Describe(before) << " -> " << Describe(after);
  auto got = client_->Get("same");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == PatternBytes(2, 64 * kKiB));
}

TEST_F(ClientLifecycleTest, UpsertOfANewSizeReallocatesInATierThatFits) {
  ASSERT_TRUE(IsOk(client_->Put("grow", PatternBytes(3, 1 * kMiB), On("w1"))));
  auto before = client_->Inspect("grow");
  ASSERT_TRUE(IsOk(before));
  EXPECT_EQ(before->tier, "dram") << Describe(before);
  // 12 MiB cannot fit the 8 MiB DRAM tier: the new copy lands on SSD, on the
  // same owner, through the chunked upsert path.
  ASSERT_TRUE(IsOk(client_->Upsert("grow", PatternBytes(4, 12 * kMiB))));
  auto after = client_->Inspect("grow");
  ASSERT_TRUE(IsOk(after));
  EXPECT_EQ(after->node_id, "w1") << Describe(after);
  EXPECT_EQ(after->tier, "ssd") << Describe(after);
  EXPECT_EQ(after->size, static_cast<int64_t>(12 * kMiB)) << Describe(after);
  auto got = client_->Get("grow");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == PatternBytes(4, 12 * kMiB));
}

TEST_F(ClientLifecycleTest, BatchUpsertReplacesOwnedKeysAndCreatesAbsentOnes) {
  ASSERT_TRUE(IsOk(client_->Put("b1", "one", On("w1"))));
  ASSERT_TRUE(IsOk(client_->Put("b2", "two", On("w2"))));
  std::vector<std::pair<std::string, std::string>> items = {
      {"b1", "ONE"}, {"b2", "TWO-longer"}, {"b3", "three"}, {"", "bad key"}};
  auto results = client_->BatchUpsert(items);
  ASSERT_EQ(results.size(), items.size());
  EXPECT_TRUE(IsOk(results[0]));
  EXPECT_TRUE(IsOk(results[1]));
  EXPECT_TRUE(IsOk(results[2]));
  EXPECT_TRUE(FailsWith(results[3], ErrorCode::kInvalidKey));
  for (size_t i = 0; i < 3; ++i) {
    auto got = client_->Get(items[i].first);
    ASSERT_TRUE(IsOk(got)) << items[i].first;
    EXPECT_EQ(got->data, items[i].second);
  }
  // Owned keys stay with their owner.
  EXPECT_EQ(client_->Inspect("b1")->node_id, "w1");
  EXPECT_EQ(client_->Inspect("b2")->node_id, "w2");
}

TEST_F(ClientLifecycleTest, ExistWithPrefetchReturnsAtOnceAndPromotesAnSsdObject) {
  // Given an object demoted to SSD by filling w1's 8 MiB DRAM behind it.
  ASSERT_TRUE(IsOk(client_->Put("cold", PatternBytes(5, 1 * kMiB), On("w1"))));
  int filler = 0;
  ASSERT_TRUE(Eventually(
      [&] {
        client_->Put("filler-" + std::to_string(filler++), PatternBytes(6, 1 * kMiB), On("w1"));
        auto info = client_->Inspect("cold");
        return info && info->tier == "ssd";
      },
      20s, 10ms))
      << Describe(client_->Inspect("cold"));
  auto stats_before = client_->Stats("w1");
  ASSERT_TRUE(IsOk(stats_before));

  // When a client probes it with prefetch.
  auto start = Clock::now();
  auto exists = client_->Exist("cold", /*prefetch=*/true);
  auto took = Clock::now() - start;
  ASSERT_TRUE(IsOk(exists));
  EXPECT_TRUE(*exists);
  EXPECT_LT(took, 500ms) << "exist with prefetch must not wait for the promotion";

  // Expect it in DRAM soon, and the worker to count the prefetch.
  EXPECT_TRUE(Eventually(
      [&] {
        auto info = client_->Inspect("cold");
        return info && info->tier == "dram";
      },
      10s))
      << Describe(client_->Inspect("cold"));
  // The mover counts the prefetch just after the move has made the object
  // visible in DRAM, so the count may trail what Inspect shows.
  Result<WorkerCounters> stats = Err(ErrorCode::kInternalError);
  EXPECT_TRUE(Eventually(
      [&] {
        stats = client_->Stats("w1");
        return stats && stats->prefetch_succeeded >= stats_before->prefetch_succeeded + 1;
      },
      10s));
  ASSERT_TRUE(IsOk(stats));
  EXPECT_GE(stats->prefetch_succeeded, stats_before->prefetch_succeeded + 1);
  EXPECT_GE(stats->prefetch_started, 1);
  auto got = client_->Get("cold");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == PatternBytes(5, 1 * kMiB));
}

// A get issued from a get's completion (on the connection's reader thread)
// may be on its way when the client is destroyed. ~Client waits for it: it
// completes before ~Client returns, and the connection it holds is not
// destroyed on its own reader thread (which would std::terminate).
TEST_F(ClientLifecycleTest, DestroyingTheClientWaitsForAGetIssuedFromACompletion) {
  ASSERT_TRUE(IsOk(client_->Put("k", "value", On("w1"))));  // remembered: pipelined
  std::mutex mu;
  std::condition_variable hook_reached;
  bool in_hook = false;  // guarded by mu
  std::atomic<bool> destroyed{false};
  std::atomic<bool> inner_done{false};
  Result<ObjectValue> inner = Err(ErrorCode::kInternalError);
  // Given the inner get held with the connection in hand until ~Client is
  // under way: until Close waits for it, or (were it not to) has returned.
  const AsyncReads::HoldingPipelineHook hook = [&](AsyncReads& reads) {
    {
      std::lock_guard lock(mu);
      in_hook = true;
    }
    hook_reached.notify_all();
    while (!reads.close_waits_for_gets() && !destroyed.load()) std::this_thread::yield();
  };
  // However the test ends: the hook lets go, the client (and with it every
  // reader thread that could call the hook or a completion) is gone, then
  // the hook is cleared, all before the state they use goes.
  struct OnExit {
    std::function<void()> run;
    ~OnExit() { run(); }
  } release{[&] {
    destroyed = true;
    client_.reset();
    AsyncReads::test_hook_holding_pipeline.store(nullptr, std::memory_order_release);
  }};
  AsyncReads::test_hook_holding_pipeline.store(&hook, std::memory_order_release);
  Client* client = client_.get();
  client->GetAsync("k", [&, client](Result<ObjectValue> outer) {
    EXPECT_TRUE(IsOk(outer));
    client->GetAsync("k", [&](Result<ObjectValue> result) {
      inner = std::move(result);
      inner_done = true;
    });
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(hook_reached.wait_for(lock, 30s, [&] { return in_hook; }))
        << "the inner get did not reach the pipeline within 30 s";
  }

  // When the client is destroyed meanwhile.
  client_.reset();
  const bool completed_before_destroyed = inner_done.load();
  destroyed = true;

  // Expect the inner get completed (the value, or kRpcFail for a get the
  // closing client no longer sends) before ~Client returned.
  EXPECT_TRUE(completed_before_destroyed);
  if (completed_before_destroyed && !inner) {
    EXPECT_EQ(inner.error(), ErrorCode::kRpcFail);
  }
}

class HotCacheStalenessTest : public ClientLifecycleTest {
 protected:
  std::unique_ptr<Client> CachingClient() {
    ClientConfig config;
    config.master_host = "127.0.0.1";
    config.master_port = cluster_.master_port();
    config.local_hot_cache_bytes = 16 * kMiB;
    config.hot_cache_validate_min_bytes = 64 * kKiB;
    config.hot_cache_max_staleness_ms = kStalenessMs;
    auto client = Client::Create(config);
    EXPECT_TRUE(IsOk(client));
    return client ? std::move(*client) : nullptr;
  }

  // Reads until the hot cache holds the key (it fills asynchronously).
  bool Cached(Client& client, const std::string& key) {
    return Eventually([&] {
      client.Get(key);
      return client.hot_cache_counters().hits > 0;
    });
  }

  static constexpr int64_t kStalenessMs = 1000;
};

TEST_F(HotCacheStalenessTest, ValidatedSizesAreNeverServedStale) {
  auto a = CachingClient();
  ASSERT_TRUE(a);
  const std::string old_value = PatternBytes(7, 64 * kKiB);
  const std::string new_value = PatternBytes(8, 64 * kKiB);
  ASSERT_TRUE(IsOk(client_->Put("big", old_value)));
  ASSERT_TRUE(Cached(*a, "big"));
  // When another client upserts it.
  ASSERT_TRUE(IsOk(client_->Upsert("big", new_value)));
  // Expect A's very next read to see the new value.
  auto got = a->Get("big");
  ASSERT_TRUE(IsOk(got));
  EXPECT_TRUE(got->data == new_value) << "hot cache served a stale 64 KiB object";
  EXPECT_GE(a->hot_cache_counters().stale, 1u);
}

TEST_F(HotCacheStalenessTest, SmallObjectsAreStaleAtMostTheBound) {
  auto a = CachingClient();
  ASSERT_TRUE(a);
  ASSERT_TRUE(IsOk(client_->Put("small", "old value")));
  ASSERT_TRUE(Cached(*a, "small"));
  auto upserted_at = Clock::now();
  ASSERT_TRUE(IsOk(client_->Upsert("small", "new value")));
  // Old values may appear only within the bound (plus scheduling slack);
  // after it, only the new one.
  auto limit = upserted_at + std::chrono::milliseconds(kStalenessMs) + 300ms;
  bool saw_new = false;
  while (Clock::now() < limit + 500ms) {
    auto read_at = Clock::now();
    auto got = a->Get("small");
    ASSERT_TRUE(IsOk(got));
    if (got->data == "new value") {
      saw_new = true;
    } else {
      ASSERT_EQ(got->data, "old value");
      EXPECT_LT(read_at, limit) << "stale small object served past hot_cache_max_staleness_ms";
      EXPECT_FALSE(saw_new) << "an old value after the new one";
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(saw_new);
}

TEST_F(HotCacheStalenessTest, OwnWritesInvalidateAtOnce) {
  auto a = CachingClient();
  ASSERT_TRUE(a);
  ASSERT_TRUE(IsOk(a->Put("mine", "v1")));
  ASSERT_TRUE(Cached(*a, "mine"));
  ASSERT_TRUE(IsOk(a->Upsert("mine", "v2")));
  auto got = a->Get("mine");
  ASSERT_TRUE(IsOk(got));
  EXPECT_EQ(got->data, "v2");
  ASSERT_TRUE(IsOk(a->Remove("mine", /*force=*/true)));
  EXPECT_TRUE(FailsWith(a->Get("mine"), ErrorCode::kObjectNotFound));
}

// Another client removes a key this one has cached; this one then puts it
// anew. However it puts, its next read sees its own value, not the copy it
// cached (which is young enough to be served without asking).
TEST_F(HotCacheStalenessTest, OwnPutsOfARemovedKeyInvalidateAtOnce) {
  auto a = CachingClient();
  ASSERT_TRUE(a);
  for (const std::string how : {"Put", "BatchPut", "PutAsync"}) {
    SCOPED_TRACE(how);
    const std::string key = "again-" + how;
    ASSERT_TRUE(IsOk(client_->Put(key, "old value")));
    ASSERT_TRUE(Cached(*a, key));
    ASSERT_TRUE(IsOk(client_->Remove(key, /*force=*/true)));
    if (how == "Put") {
      ASSERT_TRUE(IsOk(a->Put(key, "new value")));
    } else if (how == "BatchPut") {
      auto results = a->BatchPut({{key, "new value"}});
      ASSERT_EQ(results.size(), 1u);
      ASSERT_TRUE(IsOk(results[0]));
    } else {
      std::promise<Result<void>> put;
      a->PutAsync(key, "new value", [&](Result<void> r) { put.set_value(std::move(r)); });
      auto answered = put.get_future();
      ASSERT_EQ(answered.wait_for(10s), std::future_status::ready);
      ASSERT_TRUE(IsOk(answered.get()));
    }
    auto got = a->Get(key);
    ASSERT_TRUE(IsOk(got));
    EXPECT_EQ(got->data, "new value") << "the hot cache served the removed object's copy";
  }
}

// A revoked upsert plan leaves the key absent, even when an old value existed
// (design.md, "Plan-based writes"). The client that revoked it must not serve
// the old value from its hot cache afterwards, though the copy is young.
TEST_F(HotCacheStalenessTest, OwnRevokedUpsertPlanInvalidatesAtOnce) {
  auto a = CachingClient();
  ASSERT_TRUE(a);
  const std::string old_value = "old value";
  ASSERT_TRUE(IsOk(a->Put("planned", old_value)));
  ASSERT_TRUE(Cached(*a, "planned"));
  auto plan = a->OpenForWrite("planned", old_value.size(), {}, /*upsert=*/true);
  ASSERT_TRUE(IsOk(plan));
  ASSERT_TRUE(IsOk(a->Revoke(*plan)));
  auto exists = a->Exist("planned");
  ASSERT_TRUE(IsOk(exists));
  ASSERT_FALSE(*exists);
  auto got = a->Get("planned");
  EXPECT_TRUE(FailsWith(got, ErrorCode::kObjectNotFound))
      << "the hot cache served the revoked key's old value: " << (got ? got->data : "");
}

}  // namespace
}  // namespace mooncake::testing
