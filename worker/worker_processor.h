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
// Thread-safety: as WorkerServiceProcessor (one call per protocol at a time).

#include <memory>
#include <string>
#include <string_view>

#include "mooncake_rpc/WorkerService.h"
#include "worker/backend_types.h"

namespace mooncake {

class BoundedBinaryProtocol;
class WorkerHandler;

class WorkerProcessor : public rpc::WorkerServiceProcessor {
 public:
  explicit WorkerProcessor(std::shared_ptr<WorkerHandler> handler);

  // The calls whose handlers may wait (for the master, a disk, a peer), for
  // RpcServerOptions::may_block: all but the reads and lookups.
  static bool MayBlock(std::string_view method);

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
  void ProcessBatchGet(apache::thrift::protocol::TProtocol* in,
                       apache::thrift::protocol::TProtocol* out, int32_t seqid);

  std::shared_ptr<WorkerHandler> handler_;
};

}  // namespace mooncake
