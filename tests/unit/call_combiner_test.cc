#include "common/call_combiner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mooncake {
namespace {

using namespace std::chrono_literals;
using Combiner = CallCombiner<std::string, std::string>;

// A server stand-in: answers each request with "<request>!", records every
// call's requests, can hold its first call on the wire until the test lets
// it go, leaves requests ending in "?" unsettled, and throws on "throw".
class FakeServer {
 public:
  std::vector<std::optional<std::string>> Send(std::span<const std::string* const> requests) {
    std::vector<std::string> call;
    for (const std::string* request : requests) call.push_back(*request);
    {
      std::lock_guard lock(mu_);
      calls_.push_back(call);
    }
    if (hold_first_ && !released_.exchange(true)) release_.get_future().wait();
    std::vector<std::optional<std::string>> replies;
    for (const std::string& request : call) {
      if (request == "throw") throw std::runtime_error("send failed");
      if (request.ends_with("?")) {
        replies.emplace_back(std::nullopt);
      } else {
        replies.emplace_back(request + "!");
      }
    }
    return replies;
  }

  std::vector<std::vector<std::string>> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

  bool hold_first_ = false;
  std::promise<void> release_;

 private:
  std::atomic<bool> released_{false};
  std::mutex mu_;
  std::vector<std::vector<std::string>> calls_;
};

Combiner::SendFn SendTo(FakeServer& server) {
  return [&server](std::span<const std::string* const> requests) { return server.Send(requests); };
}

// Waits (bounded) until `n` callers queue behind the call on the wire.
bool WaitWaiting(const Combiner& combiner, size_t n) {
  for (int i = 0; i < 500; ++i) {
    if (combiner.waiting() == n) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

std::future<std::optional<std::string>> CallInBackground(Combiner& combiner, std::string request) {
  return std::async(std::launch::async,
                    [&combiner, request = std::move(request)] { return combiner.Call(request); });
}

// Starts a call of "first" that the server holds on the wire, and waits
// (bounded) until the server has it, so that later calls queue.
std::future<std::optional<std::string>> StartHeldCall(FakeServer& server, Combiner& combiner) {
  auto first = CallInBackground(combiner, "first");
  for (int i = 0; i < 500 && server.calls().empty(); ++i) std::this_thread::sleep_for(10ms);
  return first;
}

using Replies = std::vector<std::future<std::optional<std::string>>>;

// Issues `requests` one by one behind the held call, each queued before
// the next is issued, so their order in the queue is theirs.
Replies QueueInOrder(Combiner& combiner, const std::vector<std::string>& requests) {
  Replies replies;
  for (const auto& request : requests) {
    replies.push_back(CallInBackground(combiner, request));
    EXPECT_TRUE(WaitWaiting(combiner, replies.size())) << request;
  }
  return replies;
}

// "k0", "k1", ...
std::vector<std::string> Numbered(int n) {
  std::vector<std::string> requests;
  for (int i = 0; i < n; ++i) requests.push_back("k" + std::to_string(i));
  return requests;
}

// Each caller got the reply to its own request, not its neighbour's.
void ExpectOwnReplies(Replies& replies, const std::vector<std::string>& requests) {
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(replies[i].get(), requests[i] + "!");
}

TEST(CallCombinerTest, ALoneCallIsSentAtOnceAlone) {
  FakeServer server;
  Combiner combiner(SendTo(server), {.max_units = 64});
  EXPECT_EQ(combiner.Call("a"), "a!");
  EXPECT_EQ(combiner.Call("b"), "b!");
  auto calls = server.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::vector<std::string>{"a"});
  EXPECT_EQ(calls[1], std::vector<std::string>{"b"});
  EXPECT_EQ(combiner.shared_calls(), 0u);
  EXPECT_EQ(combiner.waiting(), 0u);
}

TEST(CallCombinerTest, CallsArrivingDuringACallShareTheNextOne) {
  FakeServer server;
  server.hold_first_ = true;
  Combiner combiner(SendTo(server), {.max_units = 64});
  auto first = StartHeldCall(server, combiner);
  const auto requests = Numbered(8);
  Replies more = QueueInOrder(combiner, requests);
  ASSERT_EQ(server.calls().size(), 1u);
  server.release_.set_value();

  EXPECT_EQ(first.get(), "first!");
  ExpectOwnReplies(more, requests);
  auto calls = server.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].size(), 8u);
  EXPECT_EQ(combiner.shared_calls(), 1u);
  EXPECT_EQ(combiner.shared_requests(), 8u);
  EXPECT_EQ(combiner.waiting(), 0u);
}

TEST(CallCombinerTest, ABatchCarriesAtMostMaxBatchRequests) {
  FakeServer server;
  server.hold_first_ = true;
  Combiner combiner(SendTo(server), {.max_units = 3});
  auto first = StartHeldCall(server, combiner);
  const auto requests = Numbered(7);
  Replies more = QueueInOrder(combiner, requests);
  server.release_.set_value();
  EXPECT_EQ(first.get(), "first!");
  ExpectOwnReplies(more, requests);
  auto calls = server.calls();
  size_t carried = 0;
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_LE(calls[i].size(), 3u);
    carried += calls[i].size();
  }
  EXPECT_EQ(carried, 7u);
  EXPECT_EQ(calls.size(), 4u);  // 1 + ceil(7 / 3): every later call is full but the last
}

// A request may weigh more than one unit (a batch of claims weighs its
// keys) and some bytes: a call takes queued requests in order while both
// limits hold, and the first always goes, however heavy.
TEST(CallCombinerTest, ACallCarriesWhatItsUnitAndByteLimitsAllow) {
  FakeServer server;
  server.hold_first_ = true;
  Combiner combiner(SendTo(server), {.max_units = 5, .max_bytes = 8},
                    [](const std::string& request) {
                      return CallWeight{.units = request.size(), .bytes = request.size() * 2};
                    });
  auto first = StartHeldCall(server, combiner);
  const std::vector<std::string> requests = {"aa", "bbb", "c", "dd", "eeeeeee"};
  Replies more = QueueInOrder(combiner, requests);
  EXPECT_EQ(combiner.waiting_units(), 15u);
  server.release_.set_value();
  EXPECT_EQ(first.get(), "first!");
  ExpectOwnReplies(more, requests);
  auto calls = server.calls();
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[1], (std::vector<std::string>{"aa"}));        // with "bbb": 10 bytes
  EXPECT_EQ(calls[2], (std::vector<std::string>{"bbb", "c"}));  // 4 units, 8 bytes
  EXPECT_EQ(calls[3], (std::vector<std::string>{"dd"}));        // with the next: 9 units
  EXPECT_EQ(calls[4], (std::vector<std::string>{"eeeeeee"}));   // over both, alone
  EXPECT_EQ(combiner.calls(), 5u);
  EXPECT_EQ(combiner.units_sent(), 5u + 15u);
  EXPECT_EQ(combiner.waiting_units(), 0u);
}

// Calls of different keys (workers, put options) have combiners of their
// own: one held on the wire does not hold up another key's calls.
TEST(CallCombinerTest, CallsOfDifferentKeysNeverWaitForEachOther) {
  FakeServer slow;
  slow.hold_first_ = true;
  FakeServer fast;
  CallCombinerMap<std::string, std::string, std::string> combiners;
  auto combiner_of = [&](const std::string& key) {
    return combiners.For(key, [&] {
      return std::make_unique<Combiner>(SendTo(key == "slow" ? slow : fast),
                                        CallLimits{.max_units = 64});
    });
  };
  std::shared_ptr<Combiner> held = combiner_of("slow");
  auto first = StartHeldCall(slow, *held);
  auto queued = CallInBackground(*combiner_of("slow"), "behind");
  ASSERT_TRUE(WaitWaiting(*held, 1));
  EXPECT_EQ(combiners.waiting(), 1u);

  // The other key's calls go out and return while "slow" is held.
  EXPECT_EQ(combiner_of("fast")->Call("a"), "a!");
  EXPECT_EQ(combiner_of("fast")->Call("b"), "b!");
  EXPECT_EQ(combiner_of("slow"), held) << "one combiner per key, made once";

  slow.release_.set_value();
  EXPECT_EQ(first.get(), "first!");
  EXPECT_EQ(queued.get(), "behind!");
  EXPECT_EQ(fast.calls().size(), 2u);
  EXPECT_EQ(combiners.waiting(), 0u);
}

// Keys come from callers (a put's pin TTL, a node that left), so the map
// is bounded: a full map drops the combiners nobody holds to make room,
// keeps their counts, and never drops one a caller is using; when every
// combiner is in use, a new key gets none (its caller sends alone).
TEST(CallCombinerTest, TheMapStaysWithinItsBoundAndNeverDropsACombinerInUse) {
  FakeServer server;
  CallCombinerMap<int, std::string, std::string> combiners(/*max_combiners=*/4);
  auto combiner_of = [&](int key) {
    return combiners.For(key, [&] {
      return std::make_unique<Combiner>(SendTo(server), CallLimits{.max_units = 64});
    });
  };
  for (int key = 0; key < 1000; ++key) {
    auto combiner = combiner_of(key);
    ASSERT_NE(combiner, nullptr) << key;
    EXPECT_EQ(combiner->Call("k" + std::to_string(key)), "k" + std::to_string(key) + "!");
    EXPECT_LE(combiners.size(), 4u);
  }

  std::vector<std::shared_ptr<Combiner>> in_use;
  for (int key = 2000; key < 2004; ++key) in_use.push_back(combiner_of(key));
  EXPECT_EQ(combiner_of(3000), nullptr) << "every combiner is in use";
  for (int key = 2000; key < 2004; ++key) {
    EXPECT_EQ(combiner_of(key), in_use[key - 2000]) << "a combiner in use stays";
  }
  in_use.pop_back();
  EXPECT_NE(combiner_of(3000), nullptr) << "the one let go made room";
  EXPECT_EQ(combiner_of(2000), in_use[0]);
  EXPECT_EQ(combiners.size(), 4u);
}

// Counts survive a combiner's drop: the client's transport counters are
// monotonic.
TEST(CallCombinerTest, SharedCountsIncludeDroppedCombiners) {
  FakeServer server;
  server.hold_first_ = true;
  CallCombinerMap<int, std::string, std::string> combiners(/*max_combiners=*/1);
  auto make = [&] {
    return std::make_unique<Combiner>(SendTo(server), CallLimits{.max_units = 64});
  };
  {
    auto combiner = combiners.For(1, make);
    auto first = StartHeldCall(server, *combiner);
    Replies more = QueueInOrder(*combiner, {"a", "b"});
    server.release_.set_value();
    EXPECT_EQ(first.get(), "first!");
    for (auto& reply : more) reply.get();
  }
  EXPECT_EQ(combiners.shared_calls(), 1u);
  EXPECT_EQ(combiners.shared_requests(), 2u);
  ASSERT_NE(combiners.For(2, make), nullptr);  // drops key 1's combiner
  EXPECT_EQ(combiners.size(), 1u);
  EXPECT_EQ(combiners.shared_calls(), 1u);
  EXPECT_EQ(combiners.shared_requests(), 2u);
}

// A request the batch did not settle, and every request of a batch whose
// send threw, come back empty for their callers to do alone; the combiner
// goes on working.
TEST(CallCombinerTest, UnsettledRequestsAndAThrowingSendReturnNothing) {
  FakeServer server;
  server.hold_first_ = true;
  Combiner combiner(SendTo(server), {.max_units = 64});
  auto first = StartHeldCall(server, combiner);
  Replies more = QueueInOrder(combiner, {"s", "u?"});
  auto& settled = more[0];
  auto& unsettled = more[1];
  server.release_.set_value();
  EXPECT_EQ(first.get(), "first!");
  EXPECT_EQ(settled.get(), "s!");
  EXPECT_EQ(unsettled.get(), std::nullopt);

  EXPECT_EQ(combiner.Call("throw"), std::nullopt);
  EXPECT_EQ(combiner.Call("after"), "after!");
  EXPECT_EQ(combiner.waiting(), 0u);
}

// Many threads calling at once, bounded in count, with one call out at a
// time and with several: every caller gets its own reply, every request is
// sent exactly once (calls returning at once never hand their slot to the
// same caller), and no call carries more than max_units requests.
TEST(CallCombinerTest, ManyThreadsEachGetTheirOwnReply) {
  for (size_t in_flight : {1, 3}) {
    SCOPED_TRACE("max_in_flight " + std::to_string(in_flight));
    FakeServer server;
    Combiner combiner(SendTo(server), {.max_units = 5, .max_in_flight = in_flight});
    constexpr int kThreads = 12;
    constexpr int kCallsEach = 200;
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kCallsEach; ++i) {
          std::string request = std::to_string(t) + "-" + std::to_string(i);
          if (combiner.Call(request) != request + "!") ++wrong;
        }
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(wrong.load(), 0);
    std::set<std::string> sent;
    size_t carried = 0;
    for (const auto& call : server.calls()) {
      EXPECT_LE(call.size(), 5u);
      carried += call.size();
      sent.insert(call.begin(), call.end());
    }
    EXPECT_EQ(carried, static_cast<size_t>(kThreads * kCallsEach));
    EXPECT_EQ(sent.size(), carried);
    EXPECT_EQ(combiner.waiting(), 0u);
    EXPECT_EQ(combiner.waiting_units(), 0u);
  }
}

// A server that holds every call on the wire until Open(), and counts the
// calls out at once.
class GatedServer {
 public:
  std::vector<std::optional<std::string>> Send(std::span<const std::string* const> requests) {
    std::unique_lock lock(mu_);
    std::vector<std::string> call;
    for (const std::string* request : requests) call.push_back(*request);
    calls_.push_back(call);
    max_out_ = std::max(max_out_, ++out_);
    changed_.notify_all();
    changed_.wait_for(lock, 30s, [&] { return open_; });
    --out_;
    std::vector<std::optional<std::string>> replies;
    for (const std::string& request : call) replies.emplace_back(request + "!");
    return replies;
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  // Waits (bounded) until `n` calls are out at once.
  bool AwaitOut(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, 5s, [&] { return out_ >= n; });
  }
  int out() {
    std::lock_guard lock(mu_);
    return out_;
  }
  int max_out() {
    std::lock_guard lock(mu_);
    return max_out_;
  }
  std::vector<std::vector<std::string>> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool open_ = false;
  int out_ = 0;
  int max_out_ = 0;
  std::vector<std::vector<std::string>> calls_;
};

// With max_in_flight 2, a second caller leads a call of its own while the
// first is out; only then do callers queue, and they share what follows.
TEST(CallCombinerTest, UpToMaxInFlightCallsAreOutAtOnceAndLaterCallersQueue) {
  GatedServer server;
  Combiner combiner(
      [&server](std::span<const std::string* const> requests) { return server.Send(requests); },
      {.max_units = 64, .max_in_flight = 2});
  auto a = CallInBackground(combiner, "a");
  ASSERT_TRUE(server.AwaitOut(1));
  auto b = CallInBackground(combiner, "b");
  ASSERT_TRUE(server.AwaitOut(2));  // one call at a time would hold "b" back
  const auto requests = Numbered(4);
  Replies more = QueueInOrder(combiner, requests);
  EXPECT_EQ(server.out(), 2);
  server.Open();
  EXPECT_EQ(a.get(), "a!");
  EXPECT_EQ(b.get(), "b!");
  ExpectOwnReplies(more, requests);
  EXPECT_EQ(server.max_out(), 2);
  // Every request went exactly once.
  std::multiset<std::string> sent;
  for (const auto& call : server.calls()) sent.insert(call.begin(), call.end());
  std::multiset<std::string> expected = {"a", "b"};
  expected.insert(requests.begin(), requests.end());
  EXPECT_EQ(sent, expected);
  EXPECT_EQ(combiner.waiting(), 0u);
  EXPECT_EQ(combiner.waiting_units(), 0u);
}

}  // namespace
}  // namespace mooncake
