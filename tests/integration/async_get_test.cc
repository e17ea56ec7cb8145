// Client::GetAsync against a real master and worker: many gets in flight
// answer exactly what Get answers, on a pipelined connection when the owner
// is known and the ordinary way otherwise; a worker that restarts breaks
// the connection without losing a get; and a Client being destroyed
// completes the gets it still has out.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"

namespace mooncake::testing {
namespace {

using namespace std::chrono_literals;

// Collects GetAsync results by the index the test gave each get.
class AsyncResults {
 public:
  Client::GetDone For(size_t index) {
    return [this, index](Result<ObjectValue> result) {
      std::lock_guard lock(mu_);
      ++completions_;
      results_.insert_or_assign(index, std::move(result));
      changed_.notify_all();
    };
  }
  // Waits at most `timeout` for `count` completions; returns how many came.
  size_t Await(size_t count, std::chrono::milliseconds timeout = 20s) {
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, timeout, [&] { return completions_ >= count; });
    return completions_;
  }
  Result<ObjectValue> At(size_t index) {
    std::lock_guard lock(mu_);
    auto it = results_.find(index);
    return it == results_.end() ? Err(ErrorCode::kInternalError) : it->second;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  size_t completions_ = 0;
  std::map<size_t, Result<ObjectValue>> results_;
};

std::string KeyOf(size_t i) { return "async-" + std::to_string(i); }
// Distinct sizes and bytes, so a reply handed to the wrong get shows.
std::string ValueOf(size_t i) { return PatternBytes(i, 100 + i * 37); }

::testing::AssertionResult Holds(const Result<ObjectValue>& got, const std::string& expected) {
  if (!got) return ::testing::AssertionFailure() << "failed with " << ToString(got.error());
  if (got->data != expected) {
    return ::testing::AssertionFailure()
           << got->data.size() << " bytes, expected " << expected.size() << " other bytes";
  }
  return ::testing::AssertionSuccess();
}

class AsyncGetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 64 << 20, .ssd = 128 << 20}));
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(30);
  }

  // Puts keys [0, count) through `client`, which then remembers w1 as their owner.
  void PutKeys(Client& client, size_t count, const PutOptions& options = {}) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_TRUE(IsOk(client.Put(KeyOf(i), ValueOf(i), options))) << KeyOf(i);
    }
  }

  TestCluster cluster_;
};

TEST_F(AsyncGetTest, ManyGetsInFlightAnswerWhatGetAnswersOnOnePipelinedConnection) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  constexpr size_t kKeys = 300;
  PutKeys(*client, kKeys);

  // All issued before any completes, plus a key nobody put and a bad key.
  AsyncResults results;
  for (size_t i = 0; i < kKeys; ++i) client->GetAsync(KeyOf(i), results.For(i));
  client->GetAsync("never-put", results.For(kKeys));
  client->GetAsync("", results.For(kKeys + 1));
  ASSERT_EQ(results.Await(kKeys + 2), kKeys + 2);

  for (size_t i = 0; i < kKeys; ++i) EXPECT_TRUE(Holds(results.At(i), ValueOf(i))) << KeyOf(i);
  EXPECT_TRUE(FailsWith(results.At(kKeys), ErrorCode::kObjectNotFound));
  EXPECT_TRUE(FailsWith(results.At(kKeys + 1), ErrorCode::kInvalidKey));
  // The owners were known from the puts: every stored key came whole in one
  // pipelined reply; the unknown key went the ordinary way (to the master).
  TransportCounters counters = client->transport_counters();
  EXPECT_EQ(counters.async_gets_pipelined, kKeys);
  EXPECT_EQ(counters.async_gets_slow, 1u);
}

TEST_F(AsyncGetTest, AKeyThisClientNeverSawIsLocatedAtTheMasterThenPipelined) {
  auto writer = cluster_.NewClient();
  auto reader = cluster_.NewClient();
  ASSERT_TRUE(writer && reader);
  PutKeys(*writer, 1);

  AsyncResults results;
  reader->GetAsync(KeyOf(0), results.For(0));
  ASSERT_EQ(results.Await(1), 1u);
  EXPECT_TRUE(Holds(results.At(0), ValueOf(0)));
  EXPECT_EQ(reader->transport_counters().async_gets_slow, 1u);

  // Now the reader knows the owner.
  reader->GetAsync(KeyOf(0), results.For(1));
  ASSERT_EQ(results.Await(2), 2u);
  EXPECT_TRUE(Holds(results.At(1), ValueOf(0)));
  EXPECT_EQ(reader->transport_counters().async_gets_pipelined, 1u);
}

TEST_F(AsyncGetTest, ObjectsLargerThanOneReplyAndOnSsdArriveWhole) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  const std::string large = PatternBytes(7, kRpcChunkBytes + (3 << 20) + 11);
  ASSERT_TRUE(IsOk(client->Put("large", large)));
  const std::string on_ssd = PatternBytes(8, 300 * 1024);
  ASSERT_TRUE(IsOk(client->Put("on-ssd", on_ssd, {.preferred_tier = "ssd"})));

  AsyncResults results;
  client->GetAsync("large", results.For(0));
  client->GetAsync("on-ssd", results.For(1));
  ASSERT_EQ(results.Await(2), 2u);
  EXPECT_TRUE(Holds(results.At(0), large));
  EXPECT_TRUE(Holds(results.At(1), on_ssd));
  // The large one's first reply came pipelined; its rest, the ordinary way.
  TransportCounters counters = client->transport_counters();
  EXPECT_EQ(counters.async_gets_slow, 1u);
  EXPECT_EQ(counters.async_gets_pipelined, 1u);
}

TEST_F(AsyncGetTest, AWorkerThatRestartedIsReachedAgainAndNoGetIsLost) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  // Hard-pinned on SSD, so the objects outlive the worker's process.
  constexpr size_t kKeys = 20;
  PutKeys(*client, kKeys, {.hard_pin = true, .preferred_tier = "ssd"});
  AsyncResults before;
  for (size_t i = 0; i < kKeys; ++i) client->GetAsync(KeyOf(i), before.For(i));
  ASSERT_EQ(before.Await(kKeys), kKeys);
  ASSERT_GT(client->transport_counters().async_gets_pipelined, 0u);

  // When w1 dies under the open connection and comes back.
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(cluster_.RestartWorker("w1"));
  // Once it has announced its objects again (seen by another client, so
  // this one's connections stay as the kill left them).
  auto probe = cluster_.NewClient();
  ASSERT_TRUE(probe);
  ASSERT_TRUE(Eventually([&] { return probe->Inspect(KeyOf(kKeys - 1)).has_value(); }));

  // Expect every get to complete with its value: the broken connection is
  // noticed, the gets go the ordinary way, and a new connection follows.
  AsyncResults after;
  for (size_t i = 0; i < kKeys; ++i) client->GetAsync(KeyOf(i), after.For(i));
  ASSERT_EQ(after.Await(kKeys), kKeys);
  for (size_t i = 0; i < kKeys; ++i) EXPECT_TRUE(Holds(after.At(i), ValueOf(i))) << KeyOf(i);

  // And later gets travel pipelined again.
  const uint64_t pipelined = client->transport_counters().async_gets_pipelined;
  ASSERT_TRUE(Eventually([&] {
    AsyncResults again;
    client->GetAsync(KeyOf(0), again.For(0));
    return again.Await(1) == 1 && Holds(again.At(0), ValueOf(0)) &&
           client->transport_counters().async_gets_pipelined > pipelined;
  }));
}

TEST_F(AsyncGetTest, CompletionsMayIssueTheNextGet) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  constexpr size_t kKeys = 50;
  constexpr size_t kGets = 400;
  PutKeys(*client, kKeys);

  // Four chains, each issuing its next get from the previous one's completion.
  AsyncResults results;
  std::atomic<size_t> issued{0};
  std::function<void()> next = [&] {
    size_t n = issued++;
    if (n >= kGets) return;
    auto record = results.For(n);
    client->GetAsync(KeyOf(n % kKeys), [record, &next](Result<ObjectValue> got) {
      record(std::move(got));
      next();
    });
  };
  for (int chain = 0; chain < 4; ++chain) next();
  ASSERT_EQ(results.Await(kGets), kGets);
  for (size_t n = 0; n < kGets; ++n) EXPECT_TRUE(Holds(results.At(n), ValueOf(n % kKeys))) << n;
  // The last completions may still be in `next`: the client finishes them
  // before `next` goes away.
  client.reset();
}

TEST_F(AsyncGetTest, DestroyingTheClientCompletesEveryGetInFlight) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  constexpr size_t kKeys = 200;
  PutKeys(*client, kKeys);
  AsyncResults results;
  for (size_t i = 0; i < kKeys; ++i) client->GetAsync(KeyOf(i), results.For(i));
  client.reset();
  // Every completion has run by the time the destructor returned.
  ASSERT_EQ(results.Await(kKeys, 0ms), kKeys);
  for (size_t i = 0; i < kKeys; ++i) EXPECT_TRUE(Holds(results.At(i), ValueOf(i))) << KeyOf(i);
}

TEST_F(AsyncGetTest, WithTheHotCacheOnGetsGoThroughIt) {
  ClientConfig config = cluster_.ClientConfigFor();
  config.local_hot_cache_bytes = 4 << 20;
  auto client = cluster_.NewClient(config);
  ASSERT_TRUE(client);
  PutKeys(*client, 1);

  AsyncResults results;
  client->GetAsync(KeyOf(0), results.For(0));
  ASSERT_EQ(results.Await(1), 1u);
  client->GetAsync(KeyOf(0), results.For(1));
  ASSERT_EQ(results.Await(2), 2u);
  EXPECT_TRUE(Holds(results.At(0), ValueOf(0)));
  EXPECT_TRUE(Holds(results.At(1), ValueOf(0)));
  // Both the ordinary way, and the second served from the cache.
  EXPECT_EQ(client->transport_counters().async_gets_slow, 2u);
  EXPECT_EQ(client->transport_counters().async_gets_pipelined, 0u);
  EXPECT_GE(client->hot_cache_counters().hits, 1u);
}

}  // namespace
}  // namespace mooncake::testing
