#pragma once

// Private to client/: Client::Impl, the state behind mooncake::Client. It is
// defined here, not in client.cc, because Client's methods are split by
// concern (as RocksDB splits DBImpl) and every part needs it:
//
//   client.cc            Create; Exist, Remove, Inspect; ListNodes, Stats, counters
//   client_reads.cc      Get and GetStream, with the hot cache in front;
//                        GetAsync, through async_reads.h
//   client_writes.cc     Put, Upsert and their streams; which node takes a write;
//                        PutAsync, through async_puts.h
//   client_plans.cc      OpenForWrite, Commit, Revoke (plans) and GetLocation
//   client_batch.cc      the Batch* calls: slicing and fan-out per owner
//
// Shared helpers: client_retry.h (following an object to its owner),
// client_chunked_io.h (values larger than one RPC), client_router.h (owners
// and channels). Only client.h is public.

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "client/async_puts.h"
#include "client/async_reads.h"
#include "client/client.h"
#include "client/client_batch.h"
#include "client/client_router.h"
#include "client/hot_cache.h"
#include "client/rdma_reads.h"
#include "common/call_combiner.h"
#include "common/spare_cpu.h"

namespace mooncake {

// Get or Put calls of concurrent threads one shared call carries at most:
// bounds how long a caller waits behind the others' work.
inline constexpr size_t kMaxCombinedCalls = 64;

// ClientConfig::combined_calls_in_flight, with 0 resolved for this machine:
// one per four CPUs it may use (a cgroup CPU quota counts, not just the
// CPUs it may run on).
inline size_t CombinedCallsInFlight(const ClientConfig& config) {
  if (config.combined_calls_in_flight > 0) {
    return std::min(config.combined_calls_in_flight, kMaxCombinedCallsInFlight);
  }
  return std::max(1, UsableCpus() / 4);
}

// Thread-safety: the members are set at construction and never replaced;
// each is safe to use from any thread (see its header).
struct Client::Impl {
  Impl(ClientConfig config, std::unique_ptr<RdmaReads> rdma_reads,
       std::shared_ptr<const RpcTlsContext> tls)
      : rdma(std::move(rdma_reads)),
        router(
            std::move(config),
            [reads = rdma.get()](const std::string& node_id) { reads->Forget(node_id); },
            std::move(tls)),
        hot_cache(router.config().local_hot_cache_bytes) {}
  // Declared before the router, whose callback uses it.
  std::unique_ptr<RdmaReads> rdma;
  ClientRouter router;
  HotCache hot_cache;
  // Blocking work of GetAsync and PutAsync: at most four threads.
  HelperThreads helpers{4};
  // The per-node calls of a batch beyond the one its caller makes
  // (RunParallel): kept between batches, since starting a thread per node
  // and call cost more than a small batch's round trip.
  HelperThreads batch_helpers{kMaxBatchParallelism - 1};
  // Set by Client's constructor (they call back into the Client) and
  // closed first by its destructor, while everything they use is whole.
  std::unique_ptr<AsyncReads> async_reads;
  std::unique_ptr<AsyncPuts> async_puts;
  // Get and Put of threads that call at once (common/call_combiner.h): one
  // combiner per node for gets, per set of options for puts.
  using GetCombiner = CallCombiner<CombinedGet, Result<ObjectValue>>;
  using PutCombiner = CallCombiner<CombinedPut, Result<void>>;
  CallCombinerMap<std::string, CombinedGet, Result<ObjectValue>> get_combiners;
  CallCombinerMap<PutOptions, CombinedPut, Result<void>> put_combiners;
  // CallLimits::max_in_flight of both kinds of combiner
  // (ClientConfig::combined_calls_in_flight, resolved).
  const size_t combined_calls_in_flight = CombinedCallsInFlight(router.config());
  // A running average of the sizes Get returned (client_reads.cc).
  std::atomic<uint64_t> typical_get_bytes{0};
};

}  // namespace mooncake
