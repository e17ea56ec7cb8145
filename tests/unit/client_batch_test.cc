// How a batch call is cut into requests and run (client/client_batch.h), and
// the router's slicing it builds on (SliceIndices), without a cluster: which
// positions a request carries, in which order, within which bounds, and that
// every task of a fan-out runs exactly once.

#include "client/client_batch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "client/async_puts.h"

namespace mooncake {
namespace {

using Items = std::vector<std::pair<std::string, std::string>>;

std::vector<size_t> Iota(size_t n, size_t from = 0) {
  std::vector<size_t> out(n);
  std::iota(out.begin(), out.end(), from);
  return out;
}

std::vector<std::string> NumberedKeys(size_t n) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back("key-" + std::to_string(i));
  return keys;
}

OwnerGroup Group(const std::string& node_id, std::vector<size_t> indices) {
  return OwnerGroup{Owner{node_id, nullptr}, std::move(indices)};
}

// ---- RunParallel ----

TEST(ClientBatchTest, RunParallelRunsEveryTaskExactlyOnce) {
  HelperThreads helpers(kMaxBatchParallelism - 1);
  constexpr size_t kTasks = 200;
  std::vector<std::atomic<int>> runs(kTasks);
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < kTasks; ++i) tasks.emplace_back([&runs, i] { runs[i]++; });
  RunParallel(helpers, tasks);
  for (size_t i = 0; i < kTasks; ++i) EXPECT_EQ(runs[i].load(), 1) << "task " << i;
}

TEST(ClientBatchTest, RunParallelRunsASingleTaskOnTheCallingThread) {
  HelperThreads helpers(kMaxBatchParallelism - 1);
  std::thread::id ran_on;
  std::vector<std::function<void()>> tasks{[&] { ran_on = std::this_thread::get_id(); }};
  RunParallel(helpers, tasks);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(ClientBatchTest, RunParallelWithNoTasksReturns) {
  HelperThreads helpers(kMaxBatchParallelism - 1);
  std::vector<std::function<void()>> tasks;
  RunParallel(helpers, tasks);
}

TEST(ClientBatchTest, RunParallelUsesAtMostTheParallelismBound) {
  HelperThreads helpers(kMaxBatchParallelism - 1);
  constexpr size_t kTasks = 64;
  std::atomic<int> running{0};
  std::atomic<int> peak{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < kTasks; ++i) {
    tasks.emplace_back([&] {
      int now = ++running;
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      {
        std::lock_guard lock(mu);
        threads.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      --running;
    });
  }
  RunParallel(helpers, tasks);
  EXPECT_LE(peak.load(), static_cast<int>(kMaxBatchParallelism));
  EXPECT_LE(threads.size(), kMaxBatchParallelism);
  EXPECT_GT(peak.load(), 1);  // more than one task at a time
}

// A batch reuses the helpers' threads: no thread is started per call.
// Linux hands out thread ids in increasing order, so threads started per
// call would show up as new ids.
TEST(ClientBatchTest, RunParallelReusesItsThreadsAcrossCalls) {
  HelperThreads helpers(kMaxBatchParallelism - 1);
  std::mutex mu;
  std::set<pid_t> thread_ids;
  for (int call = 0; call < 10; ++call) {
    std::vector<std::function<void()>> tasks;
    for (int i = 0; i < 32; ++i) {
      tasks.emplace_back([&] {
        {
          std::lock_guard lock(mu);
          thread_ids.insert(gettid());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    }
    RunParallel(helpers, tasks);
  }
  EXPECT_GT(thread_ids.size(), 1u);
  EXPECT_LE(thread_ids.size(), kMaxBatchParallelism);
}

// The caller takes tasks too: a batch finishes while every helper is busy
// with other work, and a task may run a batch of its own.
TEST(ClientBatchTest, RunParallelFinishesWhileEveryHelperIsBusy) {
  HelperThreads helpers(1);
  std::mutex mu;
  std::condition_variable changed;
  bool release = false;
  helpers.Run([&] {
    std::unique_lock lock(mu);
    changed.wait(lock, [&] { return release; });
  });
  std::atomic<int> ran{0};
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.emplace_back([&] {
      std::vector<std::function<void()>> inner{[&] { ran++; }, [&] { ran++; }};
      RunParallel(helpers, inner);
    });
  }
  RunParallel(helpers, tasks);
  EXPECT_EQ(ran.load(), 8);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  changed.notify_all();
}

// A task's exception reaches the caller after every task has run, as it
// would had the tasks run on the caller's thread: a batch never reports
// positions it did not settle.
TEST(ClientBatchTest, RunParallelRethrowsATasksExceptionAfterAllRan) {
  HelperThreads helpers(kMaxBatchParallelism - 1);
  std::atomic<int> ran{0};
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 8; ++i) {
    tasks.emplace_back([&, i] {
      ran++;
      if (i == 3) throw std::runtime_error("task 3");
    });
  }
  EXPECT_THROW(RunParallel(helpers, tasks), std::runtime_error);
  EXPECT_EQ(ran.load(), 8);
}

// A process at its thread limit: the helpers' first `allowed` threads
// start, the rest fail as std::thread does then.
HelperThreads::StartThread StartAtMost(int allowed) {
  auto started = std::make_shared<std::atomic<int>>(0);
  return [started, allowed](std::function<void()> body) {
    if (started->fetch_add(1) >= allowed) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    }
    return std::thread(std::move(body));
  };
}

TEST(ClientBatchTest, HelperThreadsRunATaskOnTheCallerWhenNoThreadStarts) {
  HelperThreads helpers(4, StartAtMost(0));
  std::thread::id ran_on;
  EXPECT_NO_THROW(helpers.Run([&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

// A fan-out whose helpers cannot all start still runs every task once, and
// returns only when they have run: its tasks live on the caller's stack.
TEST(ClientBatchTest, RunParallelRunsEveryTaskWhenHelperThreadsCannotStart) {
  for (int allowed : {0, 1}) {
    HelperThreads helpers(kMaxBatchParallelism - 1, StartAtMost(allowed));
    constexpr size_t kTasks = 64;
    std::vector<std::atomic<int>> runs(kTasks);
    std::vector<std::function<void()>> tasks;
    for (size_t i = 0; i < kTasks; ++i) tasks.emplace_back([&runs, i] { runs[i]++; });
    EXPECT_NO_THROW(RunParallel(helpers, tasks)) << allowed << " threads";
    for (size_t i = 0; i < kTasks; ++i) {
      EXPECT_EQ(runs[i].load(), 1) << "task " << i << ", " << allowed << " threads";
    }
    helpers.Stop();  // before `tasks` goes, should a helper still hold one
  }
}

// A batch writer that throws (no memory, a bug) fails its puts: each done
// hears of it, and the process goes on.
TEST(ClientBatchTest, AsyncPutsReportAThrowingBatchToEachPut) {
  HelperThreads helpers(2);
  AsyncPuts puts(helpers, [](const Items&, const PutOptions&) -> std::vector<Result<void>> {
    throw std::bad_alloc();
  });
  constexpr int kPuts = 3;
  std::vector<std::promise<Result<void>>> results(kPuts);
  for (int i = 0; i < kPuts; ++i) {
    puts.Put("key-" + std::to_string(i), "value", {},
             [&results, i](Result<void> result) { results[i].set_value(result); });
  }
  for (int i = 0; i < kPuts; ++i) {
    Result<void> result = results[i].get_future().get();
    ASSERT_FALSE(result) << "put " << i;
    EXPECT_EQ(result.error(), ErrorCode::kInternalError) << "put " << i;
  }
  puts.Close();
  helpers.Stop();
}

// Callers that give each put its own options (a per-request pin TTL) leave
// no queue behind once their puts completed: queues used to be kept for
// every set of options ever seen, and each put scanned them all.
TEST(ClientBatchTest, AsyncPutsKeepNoQueueForOptionsWhosePutsCompleted) {
  HelperThreads helpers(4);
  AsyncPuts puts(helpers, [](const Items& items, const PutOptions&) {
    return std::vector<Result<void>>(items.size());
  });
  constexpr int kPuts = 2000;
  std::atomic<int> ok{0};
  for (int i = 0; i < kPuts; ++i) {
    PutOptions options;
    options.soft_pin = true;
    options.soft_pin_ttl_ms = 1000 + i;
    puts.Put("key-" + std::to_string(i), "value", options, [&ok](Result<void> result) {
      if (result) ok++;
    });
  }
  helpers.Stop();  // every batch sent, every queue emptied
  EXPECT_EQ(ok.load(), kPuts);
  EXPECT_EQ(puts.queues(), 0u);
}

// AsyncPuts whose writer waits until Open(): a cluster that cannot keep up
// (a slow or unreachable node), so puts stay pending.
struct GatedAsyncPuts {
  explicit GatedAsyncPuts(AsyncPuts::Limits limits)
      : puts(
            helpers,
            [gate = gate](const Items& items, const PutOptions&) {
              gate.wait();
              return std::vector<Result<void>>(items.size());
            },
            limits) {}
  ~GatedAsyncPuts() {
    Open();
    helpers.Stop();
  }
  void Open() {
    if (!opened) opener.set_value();
    opened = true;
  }
  // Puts `size` bytes under `key`; the future holds what `done` received.
  std::future<Result<void>> Put(const std::string& key, size_t size) {
    auto answer = std::make_shared<std::promise<Result<void>>>();
    puts.Put(key, std::string(size, 'v'), {},
             [answer](Result<void> result) { answer->set_value(result); });
    return answer->get_future();
  }
  static bool AnsweredNow(std::future<Result<void>>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

  std::promise<void> opener;
  std::shared_future<void> gate = opener.get_future().share();
  bool opened = false;
  HelperThreads helpers{2};
  AsyncPuts puts;
};

// Puts no longer pile up without bound behind a writer that cannot keep up:
// past the count waiting, a put fails at once, before PutAsync returns, with
// kObjectReplicaBusy; once the earlier puts completed there is room again.
TEST(ClientBatchTest, AsyncPutsPastTheCountBoundFailAtOnceWithReplicaBusy) {
  GatedAsyncPuts gated({.max_puts = 3, .max_bytes = 1 << 20});
  std::vector<std::future<Result<void>>> held;
  for (int i = 0; i < 3; ++i) held.push_back(gated.Put("held-" + std::to_string(i), 10));
  for (auto& f : held) ASSERT_FALSE(GatedAsyncPuts::AnsweredNow(f));
  auto over = gated.Put("over", 10);
  ASSERT_TRUE(GatedAsyncPuts::AnsweredNow(over));
  Result<void> refused = over.get();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), ErrorCode::kObjectReplicaBusy);

  gated.Open();
  for (auto& f : held) EXPECT_TRUE(f.get());
  EXPECT_TRUE(gated.Put("after", 10).get()) << "no room once the held puts completed";
}

// The same past the bytes waiting; a put alone is taken whatever its size,
// else a value over the bound could never be put.
TEST(ClientBatchTest, AsyncPutsPastTheByteBoundFailAtOnceButALonePutOfAnySizeGoes) {
  GatedAsyncPuts gated({.max_puts = 100, .max_bytes = 1000});
  auto big = gated.Put("big", 5000);
  ASSERT_FALSE(GatedAsyncPuts::AnsweredNow(big));
  auto over = gated.Put("over", 10);
  ASSERT_TRUE(GatedAsyncPuts::AnsweredNow(over));
  Result<void> refused = over.get();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), ErrorCode::kObjectReplicaBusy);

  gated.Open();
  EXPECT_TRUE(big.get());
}

// Each task fills only its own positions, so results come back in input
// order whatever order the tasks ran in.
TEST(ClientBatchTest, FanOutResultsLandInInputOrder) {
  HelperThreads helpers(kMaxBatchParallelism - 1);
  std::vector<std::string> keys = NumberedKeys(3000);
  std::map<std::string, OwnerGroup> groups;
  groups.emplace("b", Group("b", {}));
  groups.emplace("a", Group("a", {}));
  for (size_t i = 0; i < keys.size(); ++i) groups.at(i % 3 == 0 ? "a" : "b").indices.push_back(i);
  std::vector<std::string> results(keys.size());
  std::vector<std::function<void()>> tasks;
  for (auto& request : SliceGroups(groups, keys)) {
    tasks.emplace_back([&, request = std::move(request)] {
      auto sent = KeysAt(keys, request.indices);
      for (size_t j = 0; j < request.indices.size(); ++j) {
        results[request.indices[j]] = request.owner.node_id + ":" + sent[j];
      }
    });
  }
  RunParallel(helpers, tasks);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(results[i], std::string(i % 3 == 0 ? "a" : "b") + ":" + keys[i]);
  }
}

// ---- Positions and slices ----

TEST(ClientBatchTest, ValidIndicesFailsOnlyInvalidKeys) {
  std::vector<std::string> keys{"a",
                                "",
                                "b",
                                std::string(kMaxKeyBytes + 1, 'k'),
                                std::string("c\0d", 3),
                                std::string(kMaxKeyBytes, 'k')};
  std::vector<Result<void>> results(keys.size());
  EXPECT_EQ(ValidIndices(keys, results), (std::vector<size_t>{0, 2, 5}));
  for (size_t i : {1, 3, 4}) {
    ASSERT_FALSE(results[i]) << i;
    EXPECT_EQ(results[i].error(), ErrorCode::kInvalidKey);
  }
  for (size_t i : {0, 2, 5}) EXPECT_TRUE(results[i]) << i;
}

TEST(ClientBatchTest, SliceIndicesHonoursCountAndByteBounds) {
  std::vector<std::string> keys{"aaaa", "bb", "cccc", "d", "eeeeeeee", "f"};
  // At most 6 bytes and 2 keys a slice; a key larger than the budget still
  // gets a slice of its own.
  auto slices = SliceIndices(Iota(keys.size()), keys, /*max_bytes=*/6, /*max_count=*/2);
  EXPECT_EQ(slices, (std::vector<std::vector<size_t>>{{0, 1}, {2, 3}, {4}, {5}}));
  EXPECT_TRUE(SliceIndices({}, keys, 6, 2).empty());
}

TEST(ClientBatchTest, SliceGroupsCutsEachOwnerByCountInOwnerOrder) {
  std::vector<std::string> keys = NumberedKeys(2600);
  std::map<std::string, OwnerGroup> groups;
  groups.emplace("w2", Group("w2", Iota(2500)));
  groups.emplace("w1", Group("w1", Iota(100, 2500)));
  auto requests = SliceGroups(groups, keys);
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].owner.node_id, "w1");
  EXPECT_EQ(requests[0].indices, Iota(100, 2500));
  std::vector<size_t> sizes;
  std::vector<size_t> w2;
  for (size_t r = 1; r < requests.size(); ++r) {
    EXPECT_EQ(requests[r].owner.node_id, "w2");
    sizes.push_back(requests[r].indices.size());
    w2.insert(w2.end(), requests[r].indices.begin(), requests[r].indices.end());
  }
  EXPECT_EQ(sizes,
            (std::vector<size_t>{kMaxBatchCount, kMaxBatchCount, 2500 - 2 * kMaxBatchCount}));
  EXPECT_EQ(w2, Iota(2500));  // every position once, in input order
}

TEST(ClientBatchTest, KeysAtFollowsTheSliceOrder) {
  std::vector<std::string> keys{"k0", "k1", "k2", "k3"};
  EXPECT_EQ(KeysAt(keys, {3, 0, 2}), (std::vector<std::string>{"k3", "k0", "k2"}));
  EXPECT_TRUE(KeysAt(keys, {}).empty());
}

// ---- Batch writes ----

TEST(ClientBatchTest, WritablePositionsRejectsBadKeysAndEmptyValues) {
  Items items{{"a", "1"}, {"", "2"}, {"c", ""}, {"d", "4"}};
  std::vector<Result<void>> results(items.size());
  EXPECT_EQ(WritablePositions(ViewsOf(items), results), (std::vector<size_t>{0, 3}));
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(results[1].error(), ErrorCode::kInvalidKey);
  ASSERT_FALSE(results[2]);
  EXPECT_EQ(results[2].error(), ErrorCode::kInvalidParams);
}

TEST(ClientBatchTest, TotalBytesCountsValuesOfThePositions) {
  Items items{{"a", "12"}, {"bb", "345"}, {"c", "6789"}};
  EXPECT_EQ(TotalBytes(ViewsOf(items), {0, 2}), 6u);
  EXPECT_EQ(TotalBytes(ViewsOf(items), {}), 0u);
}

TEST(ClientBatchTest, PlanPutRequestsBoundsTheItemCount) {
  Items items;
  for (size_t i = 0; i < kMaxBatchCount + 1; ++i) items.emplace_back("k" + std::to_string(i), "v");
  std::vector<size_t> large;
  auto requests = PlanPutRequests(ViewsOf(items), Iota(items.size()), large);
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0], Iota(kMaxBatchCount));
  EXPECT_EQ(requests[1], (std::vector<size_t>{kMaxBatchCount}));
  EXPECT_TRUE(large.empty());
}

TEST(ClientBatchTest, PlanPutRequestsBoundsThePayload) {
  // 1.5 MiB values: two fit under kMaxBatchPutBytes, a third does not.
  const std::string value((3u << 20) / 2, 'v');
  Items items;
  for (int i = 0; i < 5; ++i) items.emplace_back("k" + std::to_string(i), value);
  std::vector<size_t> large;
  auto requests = PlanPutRequests(ViewsOf(items), Iota(items.size()), large);
  EXPECT_EQ(requests, (std::vector<std::vector<size_t>>{{0, 1}, {2, 3}, {4}}));
  EXPECT_TRUE(large.empty());
}

TEST(ClientBatchTest, PlanPutRequestsSendsOversizedValuesTheTwoPhaseWay) {
  Items items{{"small", "s"},
              {"exact", std::string(kRpcChunkBytes, 'e')},  // one RPC still carries it
              {"big", std::string(kRpcChunkBytes + 1, 'b')},
              {"tail", "t"}};
  std::vector<size_t> large;
  auto requests = PlanPutRequests(ViewsOf(items), {0, 1, 2, 3}, large);
  // A value at the limit gets a request of its own rather than an empty one.
  EXPECT_EQ(requests, (std::vector<std::vector<size_t>>{{0}, {1}, {3}}));
  EXPECT_EQ(large, (std::vector<size_t>{2}));
}

TEST(ClientBatchTest, PlanPutRequestsKeepsOnlyTheGivenPositions) {
  Items items{{"a", "1"}, {"b", "2"}, {"c", "3"}};
  std::vector<size_t> large;
  EXPECT_EQ(PlanPutRequests(ViewsOf(items), {2, 0}, large),
            (std::vector<std::vector<size_t>>{{2, 0}}));
  EXPECT_TRUE(PlanPutRequests(ViewsOf(items), {}, large).empty());
}

}  // namespace
}  // namespace mooncake
