#pragma once

// Private to client/: Client::GetAsync, reads that no thread waits for.
//
// A get whose owner the client remembers travels on a pipelined connection
// to that owner (thrift/rpc_pipeline.h), one per worker, and completes on
// the connection's reader thread: many gets share a connection and a read.
// When the reply is the whole object, that is all. Every other case goes to
// the client's helper threads and finishes through the same code as
// Client::Get, so GetAsync answers what Get would:
//   - the owner is not remembered (one master round trip);
//   - the reply says the object moved, is being written, or is larger than
//     one reply (the rest is read in chunks, or by RDMA);
//   - the connection broke (the slow path also opens a new one);
//   - TLS, or the hot cache on: every get (see Client::GetAsync).
//
// Thread-safety: Get() is safe from any thread, also from a completion.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/client_router.h"
#include "client/helper_threads.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/rpc_pipeline.h"

namespace mooncake {

class RdmaReads;

class AsyncReads {
 public:
  using Done = std::function<void(Result<ObjectValue>)>;
  // A whole read the ordinary way (Client::Get).
  using ReadInFull = std::function<Result<ObjectValue>(const std::string& key)>;

  // `pipelined` false sends every get to the slow path, which runs on
  // `helpers`. `router`, `rdma` (may be null) and `helpers` must outlive
  // this, and `helpers` be stopped after it is destroyed.
  AsyncReads(ClientRouter& router, RdmaReads* rdma, HelperThreads& helpers, ReadInFull read_in_full,
             bool pipelined);
  ~AsyncReads();
  // Completes every get in flight, or hands it to the helper threads; a
  // Get() after this completes at once with kRpcFail. The Client closes
  // this, then stops the helpers, then destroys this.
  void Close();
  AsyncReads(const AsyncReads&) = delete;
  AsyncReads& operator=(const AsyncReads&) = delete;

  void Get(std::string key, Done done);

  // Adds the async_gets_* counters.
  void AddCounters(TransportCounters& counters) const;

  // Tests only. Called by a get that holds a pipeline, before it sends on
  // it (often on a reader thread), so a test can hold a get there while the
  // client closes. The test owns the function: it stores its address here
  // and clears it once no client is left that could call it, so the
  // function outlives every call; the pointer itself is atomic.
  using HoldingPipelineHook = std::function<void(AsyncReads&)>;
  static inline std::atomic<const HoldingPipelineHook*> test_hook_holding_pipeline{nullptr};
  // Whether Close() is waiting for gets in progress.
  bool close_waits_for_gets() const { return close_waits_.load(); }

 private:
  using Pipeline = RpcPipeline<rpc::WorkerServiceClient>;

  struct PendingGet {
    std::string key;
    Owner owner;
    Done done;
  };
  // The connection to one worker address, and the gets waiting while it
  // opens. Keyed by the router's channel to that address, which the router
  // replaces exactly when a node's address changes; holding the channel
  // keeps its address from being reused as another key. A link whose
  // channel the router replaced is dropped once no get holds the channel.
  struct Link {
    std::shared_ptr<WorkerChannel> channel;
    std::shared_ptr<Pipeline> pipeline;  // null until opened
    bool opening = false;
    std::vector<PendingGet> waiting;
  };

  // Sends `get` on the pipeline to its owner, or queues it until one opens
  // (starting that on the slow path when nobody has).
  void SendOrWait(PendingGet get);
  void Send(Pipeline& pipeline, PendingGet get);
  // The link to `owner`'s address. mu_ held. Creating one drops the links
  // nobody can reach any more into `unreachable`, to be let go unlocked.
  Link& LinkTo(const Owner& owner, std::vector<Link>& unreachable);
  void DropUnreachableLinksLocked(std::vector<Link>& unreachable);
  // Slow path: connects to `owner`'s address and sends the gets that
  // waited; they go the ordinary way when the connection cannot be made.
  void Open(const Owner& owner);
  // Shares `pipeline`, to be destroyed on a helper thread, or, when its
  // last copy goes on a reader thread (its own or another pipeline's), kept
  // in dropped_ until a helper thread, Open or Close destroys it on a thread
  // that is no pipeline's reader.
  std::shared_ptr<Pipeline> Shared(std::unique_ptr<Pipeline> pipeline);
  // Destroys the pipelines in dropped_; on any pipeline's reader thread it
  // does nothing (a destructor joins a reader thread: two reader threads
  // destroying each other's pipelines would deadlock).
  void DestroyDropped();
  // On the reader thread: the reply, or why none came.
  void Finish(PendingGet get, Result<rpc::GetResult> reply);
  void ReadSlowly(std::string key, Done done);

  ClientRouter& router_;
  RdmaReads* const rdma_;
  HelperThreads& helpers_;
  const ReadInFull read_in_full_;
  const bool pipelined_;
  const RpcOptions pipeline_options_;

  mutable std::mutex mu_;
  // A worker's channel -> its connection. Guarded by mu_.
  std::map<const WorkerChannel*, Link> links_;
  // Set under mu_ (so Open adds nothing after it), read without.
  std::atomic<bool> closing_{false};
  // Get() calls past their closing_ check; Close() waits for them (on
  // gets_done_), since they use this and may hold a pipeline. Guarded by mu_.
  int gets_in_progress_ = 0;
  std::condition_variable gets_done_;
  std::atomic<bool> close_waits_{false};
  // Pipelines whose last copy went on a reader thread, which must not join
  // one. Guarded by mu_.
  std::vector<Pipeline*> dropped_;
  std::atomic<uint64_t> slow_gets_{0};
  std::atomic<uint64_t> pipelined_gets_{0};
};

}  // namespace mooncake
