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
// Thread-safety: as WorkerServiceProcessor (one call per protocol at a time).

#include <memory>
#include <string>

#include "mooncake_rpc/WorkerService.h"
#include "worker/backend_types.h"

namespace mooncake {

class BoundedBinaryProtocol;
class WorkerHandler;

class WorkerProcessor : public rpc::WorkerServiceProcessor {
 public:
  explicit WorkerProcessor(std::shared_ptr<WorkerHandler> handler);

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
