#pragma once

// Private to client/: how a batch call is cut into requests and run. A batch
// answers one result per input position, in input order; to get there it
// locates every key with one master round trip, groups the positions by
// owner, cuts each group into requests that stay far below Thrift's ~16 MB
// frame limit, and runs the requests in parallel. Each request writes only
// the results of its own positions, so no result is shared between threads.
//
// The pieces that need no cluster are here so tests can check them alone;
// the Client::Batch* methods are in client_batch.cc.
//
// Thread-safety: stateless functions; RunParallel runs tasks concurrently,
// and the tasks must not share mutable state.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client_router.h"
#include "client/helper_threads.h"
#include "client/rdma_reads.h"
#include "common/status.h"
#include "thrift/value_calls.h"

namespace mooncake {

// Per worker batch request: bounded so requests stay far below Thrift's
// ~16 MB frame limit.
inline constexpr size_t kMaxBatchKeyBytes = 4ull << 20;
inline constexpr size_t kMaxBatchCount = 1024;
inline constexpr size_t kMaxBatchPutBytes = kRpcChunkBytes;
// Parallel requests one batch call issues at most.
inline constexpr size_t kMaxBatchParallelism = 16;

// Runs every task once, on the calling thread and up to
// kMaxBatchParallelism - 1 of `helpers`' threads, and returns when all have
// finished. One task runs inline: a batch that hits one node gains nothing
// from a thread. The caller takes tasks too, so the call finishes even when
// every helper is busy (or is itself inside RunParallel).
void RunParallel(HelperThreads& helpers, std::vector<std::function<void()>>& tasks);

// Input positions whose keys are valid; the others get INVALID_KEY.
template <typename R>
std::vector<size_t> ValidIndices(const std::vector<std::string>& keys, std::vector<R>& results) {
  std::vector<size_t> valid;
  valid.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (ValidateKey(keys[i])) {
      valid.push_back(i);
    } else {
      results[i] = Err(ErrorCode::kInvalidKey);
    }
  }
  return valid;
}

// The requests of a batch read or remove: each owner's positions cut into
// runs of at most kMaxBatchKeyBytes of keys and kMaxBatchCount keys, owners
// in map order, positions in input order.
std::vector<OwnerGroup> SliceGroups(const std::map<std::string, OwnerGroup>& groups,
                                    const std::vector<std::string>& keys);

// keys[i] for each i of `slice`, in slice order.
std::vector<std::string> KeysAt(const std::vector<std::string>& keys,
                                const std::vector<size_t>& slice);

// Splits positions into BatchPut requests of bounded payload (kMaxBatchCount
// items, kMaxBatchPutBytes of keys and values, but never an empty request);
// values too big for one request are appended to `large` for the two-phase
// path.
std::vector<std::vector<size_t>> PlanPutRequests(std::span<const ValueView> items,
                                                 const std::vector<size_t>& positions,
                                                 std::vector<size_t>& large);

// One get of a key whose owner the client remembers (Client::Get).
struct CombinedGet {
  std::string_view key;
  const Owner* owner;
};

// For the gets of threads that called at once (Client::Get), all of keys
// remembered as one node's: one read alone, or one BatchGet for several
// (to the first get's channel of that node). A result for each key whose
// reply held its whole value (or, for one key, whatever its read
// answered); nullopt for the rest, which the caller reads alone.
std::vector<std::optional<Result<ObjectValue>>> GetTogether(
    ClientRouter& router, RdmaReads* rdma, std::span<const CombinedGet* const> gets);

// Input positions that can be written; the others get their error now
// (INVALID_KEY, or INVALID_PARAMS for an empty value).
std::vector<size_t> WritablePositions(std::span<const ValueView> items,
                                      std::vector<Result<void>>& results);

// The value bytes of items[positions].
uint64_t TotalBytes(std::span<const ValueView> items, const std::vector<size_t>& positions);

// Views of the caller's items, in order.
std::vector<ValueView> ViewsOf(const std::vector<std::pair<std::string, std::string>>& items);

}  // namespace mooncake
