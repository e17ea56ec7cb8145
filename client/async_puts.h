#pragma once

// Private to client/: Client::PutAsync, puts that no thread waits for.
//
// Puts with the same options queue together. While one batch of them is on
// the wire, the puts that arrive wait; when it is answered they leave as
// the next batch (group commit). A batch is one Client::BatchPut: one
// target for all its keys, one request per node, one claim at the master
// for all of them, and the single-key path for what a batch cannot settle
// (a full node the client chose, a value over one request). So PutAsync
// answers what Put would, and many puts in flight cost a few calls.
//
// Bounds: puts accepted and not yet completed are at most
// kMaxAsyncPutsPending, holding at most kMaxAsyncPutBytesPending bytes of
// keys and values (one put alone may exceed the bytes, else a large value
// could never be put). A put past either completes at once, on the caller's
// thread, with kObjectReplicaBusy: waiting instead would block a caller that
// was promised an immediate return, and a completion that puts again could
// wait for the very helper threads it holds. A queue goes once it is empty
// and nothing of it is on the wire, so callers whose options all differ (a
// TTL per request) do not leave one queue per set ever seen.
//
// Thread-safety: Put() is safe from any thread, also from a completion.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/helper_threads.h"

namespace mooncake {

// How much AsyncPuts lets wait; Client uses the defaults, tests smaller
// ones. (Outside the class: a nested one could not be a default argument.)
struct AsyncPutLimits {
  size_t max_puts = kMaxAsyncPutsPending;
  uint64_t max_bytes = kMaxAsyncPutBytesPending;
};

class AsyncPuts {
 public:
  using Done = std::function<void(Result<void>)>;
  // Writes a batch the ordinary way (Client::BatchPut).
  using WriteBatch = std::function<std::vector<Result<void>>(
      const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options)>;

  using Limits = AsyncPutLimits;

  // Batches run on `helpers`, which must outlive this and be stopped after
  // Close().
  AsyncPuts(HelperThreads& helpers, WriteBatch write_batch, Limits limits = {})
      : helpers_(helpers), write_batch_(std::move(write_batch)), limits_(limits) {}
  ~AsyncPuts() { Close(); }
  AsyncPuts(const AsyncPuts&) = delete;
  AsyncPuts& operator=(const AsyncPuts&) = delete;

  void Put(std::string key, std::string value, const PutOptions& options, Done done);
  // A Put() after this completes at once with kRpcFail; the puts queued
  // still leave, on the helper threads (or the thread that stops them).
  void Close() { closing_.store(true); }

  // Batches sent, and the puts they carried.
  uint64_t batches() const { return batches_.load(std::memory_order_relaxed); }
  uint64_t puts() const { return puts_.load(std::memory_order_relaxed); }
  // Queues that exist now (one per set of options with puts pending). For tests.
  size_t queues() const;

 private:
  struct Queue {
    std::vector<std::pair<std::string, std::string>> items;
    std::vector<Done> dones;
    bool sending = false;  // a batch of this queue is on the wire
  };
  // std::map: a queue stays where it is while others come and go, and a
  // lookup is O(log n) whatever the options' variety.
  using Queues = std::map<PutOptions, Queue>;

  // Takes room for a put of `bytes`; false when it would pass a bound. mu_ held.
  bool ReserveLocked(uint64_t bytes);
  // On a helper thread: sends what the queue holds as one batch, completes
  // its puts, and goes again while more arrived meanwhile; drops the queue
  // once it is empty.
  void SendBatch(Queues::iterator queue);
  // write_batch_, with an exception turned into no results (each put fails).
  std::vector<Result<void>> WriteGuarded(
      const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options);
  // Gives back the room `items` took.
  void Release(const std::vector<std::pair<std::string, std::string>>& items);

  HelperThreads& helpers_;
  const WriteBatch write_batch_;
  const Limits limits_;
  std::atomic<bool> closing_{false};
  mutable std::mutex mu_;
  Queues queues_;               // guarded by mu_
  size_t pending_puts_ = 0;     // guarded by mu_: accepted, not yet completed
  uint64_t pending_bytes_ = 0;  // guarded by mu_: their keys' and values' bytes
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> puts_{0};
};

}  // namespace mooncake
