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
// Thread-safety: Claim() is safe from any number of threads.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
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

  explicit ClaimBatcher(SendFn send, ClaimBatcherOptions options = {});
  ClaimBatcher(const ClaimBatcher&) = delete;
  ClaimBatcher& operator=(const ClaimBatcher&) = delete;

  // Claims `key` for this node; returns when the master has answered.
  Result<void> Claim(const std::string& key);
  // Claims `keys` in one call, shared with other claimers where the limits
  // allow; one result per key, in order. Keys beyond one call's limits
  // (options) go in calls of their own, one after another.
  std::vector<Result<void>> ClaimMany(std::span<const std::string> keys);

  // Calls sent, keys claimed, and keys waiting for the next call.
  uint64_t calls() const { return combiner_.calls(); }
  uint64_t claims() const { return combiner_.units_sent(); }
  size_t queued() const { return combiner_.waiting_units(); }

 private:
  // One claimer's keys, within one call's limits.
  using Claimer = std::span<const std::string>;

  // Claims `keys`, which fit one call's limits.
  std::vector<Result<void>> ClaimWithinLimits(std::span<const std::string> keys);
  // The combiner's call: the claimers' keys in one master call, and each
  // claimer's results.
  std::vector<std::optional<std::vector<Result<void>>>> SendClaimers(
      std::span<const Claimer* const> claimers);

  const SendFn send_;
  const ClaimBatcherOptions options_;
  CallCombiner<Claimer, std::vector<Result<void>>> combiner_;
};

}  // namespace mooncake
