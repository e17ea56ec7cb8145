#include "worker/claim_batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mooncake {
namespace {

using namespace std::chrono_literals;

// A master stand-in that records each call's keys, can hold the first call
// on the wire until the test lets it go, and refuses keys that end in "x".
class FakeMaster {
 public:
  std::vector<Result<void>> Send(const std::vector<std::string>& keys) {
    {
      std::lock_guard lock(mu_);
      calls_.push_back(keys);
    }
    if (hold_first_ && !released_.exchange(true)) release_.get_future().wait();
    if (fail_) return std::vector<Result<void>>(keys.size(), Err(ErrorCode::kRpcFail));
    std::vector<Result<void>> out;
    for (const auto& key : keys) {
      if (key.ends_with("x")) {
        out.push_back(Err(ErrorCode::kObjectAlreadyExists));
      } else {
        out.push_back({});
      }
    }
    return out;
  }

  std::vector<std::vector<std::string>> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

  bool hold_first_ = false;
  bool fail_ = false;
  std::promise<void> release_;

 private:
  std::atomic<bool> released_{false};
  std::mutex mu_;
  std::vector<std::vector<std::string>> calls_;
};

ClaimBatcher::SendFn SendTo(FakeMaster& master) {
  return [&master](const std::vector<std::string>& keys) { return master.Send(keys); };
}

// Waits (bounded) until `n` claims queue behind the call in flight.
bool WaitQueued(const ClaimBatcher& batcher, size_t n) {
  for (int i = 0; i < 500; ++i) {
    if (batcher.queued() == n) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Starts a claim of "first" that the master holds on the wire (hold_first_),
// and waits (bounded) until the master has it, so that later claims queue.
std::future<Result<void>> StartHeldClaim(FakeMaster& master, ClaimBatcher& batcher) {
  auto first = std::async(std::launch::async, [&batcher] { return batcher.Claim("first"); });
  for (int i = 0; i < 500 && master.calls().empty(); ++i) std::this_thread::sleep_for(10ms);
  return first;
}

TEST(ClaimBatcherTest, LoneClaimIsSentAtOnceAlone) {
  FakeMaster master;
  ClaimBatcher batcher(SendTo(master));
  EXPECT_TRUE(batcher.Claim("a").has_value());
  EXPECT_EQ(batcher.Claim("bx").error(), ErrorCode::kObjectAlreadyExists);
  auto calls = master.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::vector<std::string>{"a"});
  EXPECT_EQ(calls[1], std::vector<std::string>{"bx"});
}

TEST(ClaimBatcherTest, ClaimsArrivingDuringACallShareTheNextOne) {
  FakeMaster master;
  master.hold_first_ = true;
  ClaimBatcher batcher(SendTo(master));
  // The first call is on the wire (held); eight more claims queue behind it.
  auto first = StartHeldClaim(master, batcher);
  ASSERT_EQ(master.calls().size(), 1u);
  std::vector<std::future<Result<void>>> more;
  for (int i = 0; i < 8; ++i) {
    std::string key = "k" + std::to_string(i) + (i % 2 ? "x" : "");
    more.push_back(std::async(std::launch::async, [&batcher, key] { return batcher.Claim(key); }));
  }
  ASSERT_TRUE(WaitQueued(batcher, 8));
  master.release_.set_value();

  EXPECT_TRUE(first.get().has_value());
  for (int i = 0; i < 8; ++i) {
    auto result = more[i].get();
    // Each claimer gets its own key's answer, not its neighbour's.
    if (i % 2) {
      EXPECT_EQ(result.error(), ErrorCode::kObjectAlreadyExists) << i;
    } else {
      EXPECT_TRUE(result.has_value()) << i;
    }
  }
  auto calls = master.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].size(), 8u);
  EXPECT_EQ(batcher.calls(), 2u);
  EXPECT_EQ(batcher.claims(), 9u);
}

TEST(ClaimBatcherTest, BatchesRespectTheKeyLimit) {
  FakeMaster master;
  master.hold_first_ = true;
  ClaimBatcher batcher(SendTo(master), {.max_keys = 3, .max_key_bytes = 1 << 20});
  auto first = StartHeldClaim(master, batcher);
  std::vector<std::future<Result<void>>> more;
  for (int i = 0; i < 7; ++i) {
    more.push_back(std::async(std::launch::async,
                              [&batcher, i] { return batcher.Claim("k" + std::to_string(i)); }));
  }
  ASSERT_TRUE(WaitQueued(batcher, 7));
  master.release_.set_value();
  EXPECT_TRUE(first.get().has_value());
  for (auto& f : more) EXPECT_TRUE(f.get().has_value());
  auto calls = master.calls();
  size_t carried = 0;
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_LE(calls[i].size(), 3u);
    carried += calls[i].size();
  }
  EXPECT_EQ(carried, 7u);
  EXPECT_GE(calls.size(), 4u);  // 1 + ceil(7 / 3)
}

// Batched writes claim their keys together: batches that queue behind a call
// in flight share the next call with single claims, and each gets the
// answers of its own keys, in order.
TEST(ClaimBatcherTest, BatchesQueuedDuringACallShareTheNextOneWhole) {
  FakeMaster master;
  master.hold_first_ = true;
  ClaimBatcher batcher(SendTo(master));
  auto first = StartHeldClaim(master, batcher);
  ASSERT_EQ(master.calls().size(), 1u);
  const std::vector<std::string> batch_a = {"a0", "a1x", "a2"};
  const std::vector<std::string> batch_b = {"b0x", "b1"};
  auto a = std::async(std::launch::async, [&] { return batcher.ClaimMany(batch_a); });
  ASSERT_TRUE(WaitQueued(batcher, 3));
  auto single = std::async(std::launch::async, [&] { return batcher.Claim("s"); });
  ASSERT_TRUE(WaitQueued(batcher, 4));
  auto b = std::async(std::launch::async, [&] { return batcher.ClaimMany(batch_b); });
  ASSERT_TRUE(WaitQueued(batcher, 6));
  master.release_.set_value();

  EXPECT_TRUE(first.get().has_value());
  auto got_a = a.get();
  auto got_b = b.get();
  ASSERT_EQ(got_a.size(), 3u);
  ASSERT_EQ(got_b.size(), 2u);
  EXPECT_TRUE(got_a[0].has_value());
  EXPECT_EQ(got_a[1].error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_TRUE(got_a[2].has_value());
  EXPECT_EQ(got_b[0].error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_TRUE(got_b[1].has_value());
  EXPECT_TRUE(single.get().has_value());
  auto calls = master.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], (std::vector<std::string>{"a0", "a1x", "a2", "s", "b0x", "b1"}));
  EXPECT_EQ(batcher.claims(), 7u);
  EXPECT_EQ(batcher.queued(), 0u);
}

// A batch is never split across calls to fit beside other claimers; one
// larger than a call's limits goes in calls of its own, in order.
TEST(ClaimBatcherTest, BatchesTravelWholeAndLargeOnesAreSliced) {
  FakeMaster master;
  master.hold_first_ = true;
  ClaimBatcher batcher(SendTo(master), {.max_keys = 4, .max_key_bytes = 1 << 20});
  auto first = StartHeldClaim(master, batcher);
  const std::vector<std::string> three = {"t0", "t1", "t2"};
  const std::vector<std::string> two = {"w0", "w1x"};
  auto a = std::async(std::launch::async, [&] { return batcher.ClaimMany(three); });
  ASSERT_TRUE(WaitQueued(batcher, 3));
  auto b = std::async(std::launch::async, [&] { return batcher.ClaimMany(two); });
  ASSERT_TRUE(WaitQueued(batcher, 5));
  master.release_.set_value();
  EXPECT_TRUE(first.get().has_value());
  EXPECT_EQ(a.get().size(), 3u);
  auto got_b = b.get();
  ASSERT_EQ(got_b.size(), 2u);
  EXPECT_EQ(got_b[1].error(), ErrorCode::kObjectAlreadyExists);
  auto calls = master.calls();
  ASSERT_EQ(calls.size(), 3u);  // 3 + 2 keys exceed 4: two calls, each whole
  EXPECT_EQ(calls[1], three);
  EXPECT_EQ(calls[2], two);

  std::vector<std::string> ten;
  for (int i = 0; i < 10; ++i) ten.push_back("n" + std::to_string(i) + (i == 7 ? "x" : ""));
  auto got = batcher.ClaimMany(ten);
  ASSERT_EQ(got.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(got[i].has_value(), i != 7) << i;
  calls = master.calls();
  ASSERT_EQ(calls.size(), 6u);  // 4 + 4 + 2
  EXPECT_EQ(calls[3].size(), 4u);
  EXPECT_EQ(calls[5], (std::vector<std::string>{"n8", "n9"}));
}

TEST(ClaimBatcherTest, TransportFailureReachesEveryClaimer) {
  FakeMaster master;
  master.fail_ = true;
  ClaimBatcher batcher(SendTo(master));
  EXPECT_EQ(batcher.Claim("a").error(), ErrorCode::kRpcFail);
}

TEST(ClaimBatcherTest, WrongAnswerCountIsAnInternalErrorNotAMixUp) {
  ClaimBatcher batcher([](const std::vector<std::string>&) { return std::vector<Result<void>>{}; });
  EXPECT_EQ(batcher.Claim("a").error(), ErrorCode::kInternalError);
}

TEST(ClaimBatcherTest, ManyThreadsEachGetTheirOwnAnswer) {
  FakeMaster master;
  ClaimBatcher batcher(SendTo(master));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        bool refuse = (i + t) % 3 == 0;
        std::string key = "t" + std::to_string(t) + "-" + std::to_string(i) + (refuse ? "x" : "");
        auto result = batcher.Claim(key);
        if (result.has_value() == refuse) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(batcher.claims(), 1600u);
  EXPECT_EQ(batcher.queued(), 0u);
}

// ---- Asynchronous claims (ClaimAsync) ----

// Answers of asynchronous claims, by key, gathered from the sender thread.
class AsyncAnswers {
 public:
  ClaimBatcher::ClaimDone For(const std::string& key) {
    return [this, key](Result<void> result) {
      std::lock_guard lock(mu_);
      answers_.emplace_back(key, std::move(result));
      cv_.notify_all();
    };
  }
  // Waits (bounded) until `n` answers came; returns them in arrival order.
  std::vector<std::pair<std::string, Result<void>>> WaitFor(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return answers_.size() >= n; });
    return answers_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, Result<void>>> answers_;
};

TEST(ClaimBatcherTest, AsyncClaimsQueuedDuringACallShareTheNextOneAndEachGetsItsAnswer) {
  FakeMaster master;
  master.hold_first_ = true;
  ClaimBatcher batcher(SendTo(master));
  AsyncAnswers answers;
  batcher.ClaimAsync("first", answers.For("first"));
  for (int i = 0; i < 500 && master.calls().empty(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(master.calls().size(), 1u);  // on the wire, held
  // Queued from this thread, which does not wait for any of them.
  for (int i = 0; i < 6; ++i) {
    std::string key = "k" + std::to_string(i) + (i % 3 == 1 ? "x" : "");
    batcher.ClaimAsync(key, answers.For(key));
  }
  EXPECT_EQ(batcher.async_queued(), 6u);
  EXPECT_TRUE(answers.WaitFor(0).empty());
  master.release_.set_value();

  auto got = answers.WaitFor(7);
  ASSERT_EQ(got.size(), 7u);
  // The two calls' continuations run on two senders: "first"'s may come
  // after the second call's.
  EXPECT_EQ(std::count_if(got.begin(), got.end(), [](const auto& a) { return a.first == "first"; }),
            1);
  for (const auto& [key, result] : got) {
    EXPECT_EQ(result.has_value(), !key.ends_with("x")) << key;
    if (!result) {
      EXPECT_EQ(result.error(), ErrorCode::kObjectAlreadyExists) << key;
    }
  }
  auto calls = master.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], (std::vector<std::string>{"k0", "k1x", "k2", "k3", "k4x", "k5"}));
  EXPECT_EQ(batcher.async_calls(), 2u);
  EXPECT_EQ(batcher.async_queued(), 0u);
}

TEST(ClaimBatcherTest, AsyncClaimsRespectTheKeyLimit) {
  FakeMaster master;
  master.hold_first_ = true;
  ClaimBatcher batcher(SendTo(master), {.max_keys = 2, .max_key_bytes = 1 << 20});
  AsyncAnswers answers;
  batcher.ClaimAsync("first", answers.For("first"));
  for (int i = 0; i < 500 && master.calls().empty(); ++i) std::this_thread::sleep_for(10ms);
  for (int i = 0; i < 5; ++i) batcher.ClaimAsync("k" + std::to_string(i), answers.For("k"));
  master.release_.set_value();
  ASSERT_EQ(answers.WaitFor(6).size(), 6u);
  auto calls = master.calls();
  ASSERT_EQ(calls.size(), 4u);  // 1 + ceil(5 / 2)
  for (const auto& call : calls) EXPECT_LE(call.size(), 2u);
}

TEST(ClaimBatcherTest, AsyncClaimsGetTheTransportFailureAndAWrongCountIsAnInternalError) {
  FakeMaster master;
  master.fail_ = true;
  ClaimBatcher failing(SendTo(master));
  AsyncAnswers answers;
  failing.ClaimAsync("a", answers.For("a"));
  auto got = answers.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second.error(), ErrorCode::kRpcFail);

  ClaimBatcher short_answers(
      [](const std::vector<std::string>&) { return std::vector<Result<void>>{}; });
  short_answers.ClaimAsync("b", answers.For("b"));
  got = answers.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].second.error(), ErrorCode::kInternalError);
}

// Destroying the batcher sends what is queued and answers every claim: each
// stands for a put whose caller waits for its reply.
TEST(ClaimBatcherTest, DestroyingTheBatcherAnswersEveryQueuedAsyncClaim) {
  FakeMaster master;
  master.hold_first_ = true;
  AsyncAnswers answers;
  std::thread releaser;
  {
    ClaimBatcher batcher(SendTo(master));
    batcher.ClaimAsync("first", answers.For("first"));
    for (int i = 0; i < 500 && master.calls().empty(); ++i) std::this_thread::sleep_for(10ms);
    for (int i = 0; i < 3; ++i) batcher.ClaimAsync("q" + std::to_string(i), answers.For("q"));
    releaser = std::thread([&master] {
      std::this_thread::sleep_for(50ms);
      master.release_.set_value();
    });
  }  // waits for the held call, then sends the three queued claims
  releaser.join();
  auto got = answers.WaitFor(4);
  ASSERT_EQ(got.size(), 4u);
  for (const auto& [key, result] : got) EXPECT_TRUE(result.has_value()) << key;
  EXPECT_EQ(master.calls().size(), 2u);
}

// A continuation that throws costs only its own claim's answer.
TEST(ClaimBatcherTest, AThrowingAsyncContinuationDoesNotStopTheOthers) {
  FakeMaster master;
  ClaimBatcher batcher(SendTo(master));
  AsyncAnswers answers;
  batcher.ClaimAsync("a", [](Result<void>) { throw std::runtime_error("continuation failed"); });
  batcher.ClaimAsync("b", answers.For("b"));
  auto got = answers.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].second.has_value());
}

// A lone claim from a thread that may wait is sent by it, with no hand-off to
// a sender (a thread's wake-up on the put's path); with a call out it queues.
TEST(ClaimBatcherTest, ALoneAsyncClaimFromAThreadThatMayWaitIsSentByItAtOnce) {
  FakeMaster master;
  master.hold_first_ = true;
  ClaimBatcher batcher(SendTo(master));
  std::atomic<bool> first_ran{false};
  std::thread::id first_ran_on;
  std::thread leader([&] {
    batcher.ClaimAsync(
        "first",
        [&](Result<void> r) {
          first_ran_on = std::this_thread::get_id();
          first_ran = r.has_value();
        },
        /*may_lead=*/true);
    // Answered before ClaimAsync returned, on this thread.
    EXPECT_TRUE(first_ran.load());
    EXPECT_EQ(first_ran_on, std::this_thread::get_id());
  });
  for (int i = 0; i < 500 && master.calls().empty(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(master.calls().size(), 1u);  // the leader's call, held on the wire
  EXPECT_EQ(batcher.async_queued(), 0u);

  // A call is out: this one queues even though its thread may wait.
  AsyncAnswers answers;
  batcher.ClaimAsync("second", answers.For("second"), /*may_lead=*/true);
  EXPECT_EQ(batcher.async_queued(), 1u);
  master.release_.set_value();
  leader.join();
  auto got = answers.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].second.has_value());
  auto calls = master.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::vector<std::string>{"first"});
  EXPECT_EQ(calls[1], std::vector<std::string>{"second"});
  EXPECT_EQ(batcher.async_calls(), 2u);
}

}  // namespace
}  // namespace mooncake
