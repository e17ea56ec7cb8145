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
// Thread-safety: Put() is safe from any thread, also from a completion.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/helper_threads.h"

namespace mooncake {

class AsyncPuts {
 public:
  using Done = std::function<void(Result<void>)>;
  // Writes a batch the ordinary way (Client::BatchPut).
  using WriteBatch = std::function<std::vector<Result<void>>(
      const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options)>;

  // Batches run on `helpers`, which must outlive this and be stopped after
  // Close().
  AsyncPuts(HelperThreads& helpers, WriteBatch write_batch)
      : helpers_(helpers), write_batch_(std::move(write_batch)) {}
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

 private:
  struct Queue {
    const PutOptions options;  // set when made, so read without the lock
    std::vector<std::pair<std::string, std::string>> items;
    std::vector<Done> dones;
    bool sending = false;  // a batch of this queue is on the wire
  };

  // The queue of puts with `options`, made on first use. mu_ held.
  Queue& QueueFor(const PutOptions& options);
  // On a helper thread: sends what `queue` holds as one batch, completes
  // its puts, and goes again while more arrived meanwhile.
  void SendBatch(Queue& queue);

  HelperThreads& helpers_;
  const WriteBatch write_batch_;
  std::atomic<bool> closing_{false};
  std::mutex mu_;
  // One queue per set of options, never removed: a deque, so a queue stays
  // where it is while others are added. Guarded by mu_.
  std::deque<Queue> queues_;
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> puts_{0};
};

}  // namespace mooncake
