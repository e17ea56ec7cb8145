#include "worker/worker_processor.h"

#include <thrift/TApplicationException.h>

#include <exception>

#include "thrift/value_calls.h"
#include "worker/worker_handler.h"

namespace mooncake {

using apache::thrift::TApplicationException;
using apache::thrift::protocol::T_EXCEPTION;
using apache::thrift::protocol::TProtocol;

WorkerProcessor::WorkerProcessor(std::shared_ptr<WorkerHandler> handler)
    : rpc::WorkerServiceProcessor(handler), handler_(std::move(handler)) {}

bool WorkerProcessor::dispatchCall(TProtocol* in, TProtocol* out, const std::string& name,
                                   int32_t seqid, void* call_context) {
  if (name == "Get") {
    ProcessGet(in, out, seqid);
    return true;
  }
  return rpc::WorkerServiceProcessor::dispatchCall(in, out, name, seqid, call_context);
}

void WorkerProcessor::ProcessGet(TProtocol* in, TProtocol* out, int32_t seqid) {
  // As the generated process_Get reads its call (this server sets no
  // event handler, so there are no hooks to run).
  rpc::WorkerService_Get_args args;
  args.read(in);
  in->readMessageEnd();
  in->getTransport()->readEnd();
  bool replying = false;
  try {
    handler_->GetInPlace(args.key, args.offset, args.length,
                         [&](const rpc::GetResult& head, std::span<const std::byte> data) {
                           replying = true;
                           WriteGetReply(*out, seqid, head, data);
                         });
  } catch (const std::exception& e) {
    // Once the reply has begun the stream is in an unknown state: let the
    // server close the connection. Before it, answer as the generated
    // processor does when a handler throws.
    if (replying) throw;
    TApplicationException failure(e.what());
    out->writeMessageBegin("Get", T_EXCEPTION, seqid);
    failure.write(out);
    out->writeMessageEnd();
    out->getTransport()->writeEnd();
    out->getTransport()->flush();
  }
}

}  // namespace mooncake
