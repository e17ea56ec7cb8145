#pragma once

// WorkerProcessor: the worker's Thrift processor. It is the generated
// WorkerServiceProcessor except where values pass through it:
// * Put, Upsert, BatchPut and BatchUpsert write each value into its tier
//   from the request's frame (ReadValueCall, ReadBatchValueCall), not from
//   a copy in the generated arguments;
// * Get and BatchGet reply with the objects' bytes from where they lie
//   (WorkerHandler::GetInPlace and BatchGetInPlace, WriteGetReply and
//   WriteBatchGetReply), not from copies in GetResult::data.
// For a 4 MiB value that is a 4 MiB allocation and memcpy less per call,
// for a batch one per key. The bytes on the wire are the same.
//
// On the epoll engine's loop threads (thrift/rpc_call_site.h), Get and
// BatchGet answer only from host memory: a key on another tier (SSD, VRAM)
// hands the call to the pool before anything is read.
//
// A Put on the epoll engine holds no thread while its claim is at the
// master: the value goes into host memory, the claim is queued (the
// worker's claims travel together, worker/claim_batcher.h), and the reply
// is sent when the master answers (RpcDeferReply). Before, each put held a
// pool thread through the claim, and on a 2-core machine the hand-offs and
// wake-ups cost more CPU than the put itself. A put that might wait here
// (no room in host memory without eviction, a hard pin, a value above
// kLoopPutBytes on a loop thread) goes to the pool, and one that still
// might wait there is answered the blocking way.
//
// Thread-safety: as WorkerServiceProcessor (one call per protocol at a time).

#include <memory>
#include <string>
#include <string_view>

#include "mooncake_rpc/WorkerService.h"
#include "worker/backend_types.h"

namespace mooncake {

class BoundedBinaryProtocol;
class WorkerHandler;
struct ValueItem;

class WorkerProcessor : public rpc::WorkerServiceProcessor {
 public:
  explicit WorkerProcessor(std::shared_ptr<WorkerHandler> handler);

  // The calls whose handlers may wait (for the master, a disk, a peer), for
  // RpcServerOptions::may_block: all but the reads, the lookups and Put
  // (which hand themselves to the pool when they would wait).
  static bool MayBlock(std::string_view method);

  // The largest value a loop thread copies in: a larger one would hold up
  // the loop's other connections for the copy (about 20 µs for this size).
  static constexpr size_t kLoopPutBytes = 256 << 10;

 protected:
  bool dispatchCall(apache::thrift::protocol::TProtocol* in,
                    apache::thrift::protocol::TProtocol* out, const std::string& name,
                    int32_t seqid, void* call_context) override;

 private:
  void ProcessGet(apache::thrift::protocol::TProtocol* in, apache::thrift::protocol::TProtocol* out,
                  int32_t seqid);
  // Put, Upsert, BatchPut or BatchUpsert (`name`), replied to with
  // WriteResult, the generated result of that call.
  template <typename WriteResult>
  void ProcessWrite(BoundedBinaryProtocol& in, apache::thrift::protocol::TProtocol* out,
                    const char* name, int32_t seqid, WriteMode mode);
  // Answers a Put once its claim returns, without waiting for it here
  // (RpcDeferReply, WorkerHandler::TryPutAsync). False, with nothing done,
  // where the reply cannot be deferred or the put might wait here.
  bool AnswerPutLater(const ValueItem& item, int32_t seqid);
  void ProcessBatchGet(apache::thrift::protocol::TProtocol* in,
                       apache::thrift::protocol::TProtocol* out, int32_t seqid);

  std::shared_ptr<WorkerHandler> handler_;
};

}  // namespace mooncake
