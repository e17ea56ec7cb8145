#pragma once

// ClaimBatcher: group commit of a worker's ownership claims. Every put ends
// with a claim at the master (PutOwner); under concurrency, the claims that
// arrive while one is on the wire are sent together in the next call
// (BatchPutOwner), so a put costs the master a fraction of an RPC and the
// worker a fraction of a round trip. A lone claim is sent at once, alone:
// batching never waits for company.
//
// The protocol is CallCombiner's (common/call_combiner.h): the first
// claimer finding no call in flight becomes the leader and sends every
// queued claim (up to a call's limits); claims arriving meanwhile queue,
// and when the call returns the leader hands the queue to one of them,
// which leads the next call. No claim waits behind more than one call it
// did not join.
//
// A batch write claims its keys together (ClaimMany): they travel as one
// claimer, in the same call as other claimers' keys where they fit, so
// concurrent batches share master calls as single puts do.
//
// A put answered without a thread waiting for it (ClaimAsync) queues its
// claim for the batcher's two sender threads. One call of them is out at a
// time, carrying every claim that queued while the previous one was; when it
// returns, the other sender sends the next call while this one runs the
// continuations (each sends its put's reply), so replies never hold up the
// next call. A lone claim from a thread that may wait, with no call out, is
// sent by that thread at once, as a lone blocking claim is. These claims
// never share a call with the blocking ones: either kind is group-committed
// with its own.
//
// Thread-safety: Claim(), ClaimMany() and ClaimAsync() are safe from any
// number of threads.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/call_combiner.h"
#include "common/status.h"

namespace mooncake {

struct ClaimBatcherOptions {
  // The most keys, and key bytes, one call carries (the RPC limits of
  // thrift/rpc_limits.h are the hard ceiling; these stay well inside).
  size_t max_keys = 1024;
  uint64_t max_key_bytes = 1 << 20;
};

// The end of the run of `keys` that starts at `begin` and holds at most
// `max_keys` keys and `max_bytes` key bytes (always at least one key): how
// one master call's key list is cut from a longer one.
size_t KeyBatchEnd(std::span<const std::string> keys, size_t begin, size_t max_keys,
                   uint64_t max_bytes);

class ClaimBatcher {
 public:
  // Sends claims for `keys`; returns one result per key, in order. A
  // transport failure is reported as that error for every key.
  using SendFn = std::function<std::vector<Result<void>>(const std::vector<std::string>& keys)>;

  // What runs with an asynchronous claim's answer, on a sender thread.
  using ClaimDone = std::function<void(Result<void>)>;

  explicit ClaimBatcher(SendFn send, ClaimBatcherOptions options = {});
  // Sends the asynchronous claims still queued, runs their continuations,
  // then stops the sender threads.
  ~ClaimBatcher();
  ClaimBatcher(const ClaimBatcher&) = delete;
  ClaimBatcher& operator=(const ClaimBatcher&) = delete;

  // Claims `key` for this node; returns when the master has answered.
  Result<void> Claim(const std::string& key);
  // Claims `keys` in one call, shared with other claimers where the limits
  // allow; one result per key, in order. Keys beyond one call's limits
  // (options) go in calls of their own, one after another.
  std::vector<Result<void>> ClaimMany(std::span<const std::string> keys);
  // Claims `key` without waiting: `done` runs once with the master's answer
  // on a sender thread (started on the first call). It should not wait for
  // long: it holds up one of the two senders. A caller that `may_lead` (its
  // thread may wait) and finds no asynchronous call out sends this claim
  // itself and runs `done` before returning, as a lone Claim is sent at
  // once: handing a lone claim to a sender would add a thread's wake-up to
  // the put's time.
  void ClaimAsync(std::string key, ClaimDone done, bool may_lead = false);

  // Calls sent, keys claimed, and keys waiting for the next call (the
  // blocking claims'; the asynchronous ones are counted below).
  uint64_t calls() const { return combiner_.calls(); }
  uint64_t claims() const { return combiner_.units_sent(); }
  size_t queued() const { return combiner_.waiting_units(); }
  // The asynchronous claims' calls, and those claims not yet sent.
  uint64_t async_calls() const;
  size_t async_queued() const;

 private:
  // One claimer's keys, within one call's limits.
  using Claimer = std::span<const std::string>;

  // Claims `keys`, which fit one call's limits.
  std::vector<Result<void>> ClaimWithinLimits(std::span<const std::string> keys);
  // The combiner's call: the claimers' keys in one master call, and each
  // claimer's results.
  std::vector<std::optional<std::vector<Result<void>>>> SendClaimers(
      std::span<const Claimer* const> claimers);

  struct AsyncClaim {
    std::string key;
    ClaimDone done;
  };
  static constexpr int kAsyncSenders = 2;

  // A sender thread: sends what queued (one call out at a time), answers
  // it, until stopped.
  void SendAsyncClaims();
  // Sends `batch` as one call (async_sending_ set by the caller), clears
  // async_sending_ and wakes a sender if claims queued meanwhile, then runs
  // the continuations.
  void SendAsyncBatch(std::vector<AsyncClaim> batch);
  // async_mu_ held: the claims of the next call, within its limits.
  std::vector<AsyncClaim> TakeAsyncBatchLocked();

  const SendFn send_;
  const ClaimBatcherOptions options_;
  CallCombiner<Claimer, std::vector<Result<void>>> combiner_;

  mutable std::mutex async_mu_;
  std::condition_variable async_cv_;
  std::deque<AsyncClaim> async_queue_;  // guarded by async_mu_
  uint64_t async_calls_ = 0;            // guarded by async_mu_
  bool async_sending_ = false;          // guarded by async_mu_: a call is out
  bool stopping_ = false;               // guarded by async_mu_
  std::vector<std::thread> senders_;    // started under async_mu_
};

}  // namespace mooncake
