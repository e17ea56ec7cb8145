// Client::GetAsync and Client::PutAsync against a real master and worker.
// Many gets in flight answer exactly what Get answers, on a pipelined
// connection when the owner is known and the ordinary way otherwise; a
// worker that restarts breaks the connection without losing a get. Puts in
// flight together leave as one batch and answer what Put answers. A Client
// being destroyed completes the calls it still has out.

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

// Collects GetAsync (T = ObjectValue) or PutAsync (T = void) results by the
// index the test gave each call.
template <typename T>
class IndexedResults {
 public:
  std::function<void(Result<T>)> For(size_t index) {
    return [this, index](Result<T> result) {
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
  Result<T> At(size_t index) {
    std::lock_guard lock(mu_);
    auto it = results_.find(index);
    return it == results_.end() ? Err(ErrorCode::kInternalError) : it->second;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  size_t completions_ = 0;
  std::map<size_t, Result<T>> results_;
};
using AsyncResults = IndexedResults<ObjectValue>;
using PutResults = IndexedResults<void>;

std::string KeyOf(size_t i) { return "async-" + std::to_string(i); }
// Distinct sizes and bytes, so a reply handed to the wrong get shows.
std::string ValueOf(size_t i) { return PatternBytes(i, 100 + i * 37); }

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
  // The connection to the address w1 left is let go: one to the new one
  // remains, not one for every address a node ever had.
  EXPECT_EQ(client->transport_counters().async_connections, 1u);
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
  // The cache is filled in the background after a read.
  ASSERT_TRUE(Eventually([&] { return client->hot_cache_counters().entries == 1; }));
  client->GetAsync(KeyOf(0), results.For(1));
  ASSERT_EQ(results.Await(2), 2u);
  EXPECT_TRUE(Holds(results.At(0), ValueOf(0)));
  EXPECT_TRUE(Holds(results.At(1), ValueOf(0)));
  // Both the ordinary way, and the second served from the cache.
  EXPECT_EQ(client->transport_counters().async_gets_slow, 2u);
  EXPECT_EQ(client->transport_counters().async_gets_pipelined, 0u);
  EXPECT_EQ(client->hot_cache_counters().hits, 1u);
}

using AsyncPutTest = AsyncGetTest;

TEST_F(AsyncPutTest, PutsArrivingWhileABatchIsOutLeaveTogetherAsTheNext) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  // The worker is held still, so the first batch stays on the wire while
  // the others arrive; it runs again however the test ends.
  ASSERT_TRUE(cluster_.Signal("w1", SIGSTOP));
  struct ContinueOnExit {
    TestCluster& cluster;
    ~ContinueOnExit() { cluster.Signal("w1", SIGCONT); }
  } continue_on_exit{cluster_};

  constexpr size_t kPuts = 100;
  PutResults results;
  client->PutAsync(KeyOf(0), ValueOf(0), results.For(0));
  ASSERT_TRUE(Eventually([&] { return client->transport_counters().async_put_batches == 1; }));
  for (size_t i = 1; i < kPuts; ++i) client->PutAsync(KeyOf(i), ValueOf(i), results.For(i));
  EXPECT_EQ(results.Await(1, 100ms), 0u) << "a put completed while its worker was stopped";
  ASSERT_TRUE(cluster_.Signal("w1", SIGCONT));

  ASSERT_EQ(results.Await(kPuts), kPuts);
  for (size_t i = 0; i < kPuts; ++i) EXPECT_TRUE(IsOk(results.At(i))) << KeyOf(i);
  // The first put alone, then the 99 that queued behind it, in one batch.
  TransportCounters counters = client->transport_counters();
  EXPECT_EQ(counters.async_put_batches, 2u);
  EXPECT_EQ(counters.async_puts, kPuts);
  auto reader = cluster_.NewClient();
  ASSERT_TRUE(reader);
  for (size_t i = 0; i < kPuts; ++i) EXPECT_TRUE(ReadsBack(*reader, KeyOf(i), ValueOf(i)));
}

TEST_F(AsyncPutTest, APutAnswersWhatPutAnswersAndKeepsItsOptions) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  ASSERT_TRUE(IsOk(client->Put("taken", "first")));

  PutResults results;
  client->PutAsync("taken", "second", results.For(0));
  client->PutAsync("", "no key", results.For(1));
  client->PutAsync("on-ssd", PatternBytes(3, 10000), results.For(2), {.preferred_tier = "ssd"});
  client->PutAsync("pinned", "value", results.For(3), {.hard_pin = true});
  const std::string large = PatternBytes(4, kRpcChunkBytes + 1000);
  client->PutAsync("large", large, results.For(4));
  ASSERT_EQ(results.Await(5), 5u);

  EXPECT_TRUE(FailsWith(results.At(0), ErrorCode::kObjectAlreadyExists));
  EXPECT_EQ(client->Get("taken")->data, "first") << "a put never overwrites";
  EXPECT_TRUE(FailsWith(results.At(1), ErrorCode::kInvalidKey));
  ASSERT_TRUE(IsOk(results.At(2)));
  EXPECT_EQ(client->Inspect("on-ssd")->tier, "ssd");
  ASSERT_TRUE(IsOk(results.At(3)));
  EXPECT_TRUE(client->Inspect("pinned")->hard_pinned);
  ASSERT_TRUE(IsOk(results.At(4)));
  EXPECT_TRUE(ReadsBack(*client, "large", large));
}

// A worker that restarted on another port: a lone Put refreshes the node's
// address and tries again, and so must PutAsync ("answers what Put would")
// and BatchPut, whose puts travel as a batch.
TEST_F(AsyncPutTest, PutsAfterTheWorkerRestartedOnAnotherPortSucceedAsPutDoes) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  PutKeys(*client, 1);  // the client now knows w1's address
  cluster_.KillWorker("w1", SIGKILL);
  ASSERT_TRUE(cluster_.RestartWorker("w1"));

  PutResults results;
  client->PutAsync("after-restart", "value", results.For(0));
  ASSERT_EQ(results.Await(1), 1u);
  EXPECT_TRUE(IsOk(results.At(0))) << ToString(results.At(0).error());
  auto batch = client->BatchPut({{"batch-after-restart", "value"}});
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_TRUE(IsOk(batch[0])) << ToString(batch[0].error());
  EXPECT_TRUE(ReadsBack(*client, "after-restart", "value"));
  EXPECT_TRUE(ReadsBack(*client, "batch-after-restart", "value"));
}

TEST_F(AsyncPutTest, DestroyingTheClientCompletesEveryPutInFlight) {
  auto client = cluster_.NewClient();
  ASSERT_TRUE(client);
  constexpr size_t kPuts = 200;
  PutResults results;
  for (size_t i = 0; i < kPuts; ++i) client->PutAsync(KeyOf(i), ValueOf(i), results.For(i));
  client.reset();
  ASSERT_EQ(results.Await(kPuts, 0ms), kPuts);
  auto reader = cluster_.NewClient();
  ASSERT_TRUE(reader);
  for (size_t i = 0; i < kPuts; ++i) {
    EXPECT_TRUE(IsOk(results.At(i))) << KeyOf(i);
    EXPECT_TRUE(ReadsBack(*reader, KeyOf(i), ValueOf(i)));
  }
}

}  // namespace
}  // namespace mooncake::testing
