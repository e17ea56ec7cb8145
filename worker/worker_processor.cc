#include "worker/worker_processor.h"

#include <thrift/TApplicationException.h>

#include <exception>

#include "thrift/rpc_transport.h"
#include "thrift/value_calls.h"
#include "worker/worker_handler.h"

namespace mooncake {

using apache::thrift::TApplicationException;
using apache::thrift::protocol::T_EXCEPTION;
using apache::thrift::protocol::T_REPLY;
using apache::thrift::protocol::TProtocol;

WorkerProcessor::WorkerProcessor(std::shared_ptr<WorkerHandler> handler)
    : rpc::WorkerServiceProcessor(handler), handler_(std::move(handler)) {}

bool WorkerProcessor::dispatchCall(TProtocol* in, TProtocol* out, const std::string& name,
                                   int32_t seqid, void* call_context) {
  if (name == "Get") {
    ProcessGet(in, out, seqid);
    return true;
  }
  if (name == "BatchGet") {
    ProcessBatchGet(in, out, seqid);
    return true;
  }
  // Writes need the frame views of our protocol (every server of ours
  // decodes with it); any other goes the generated way.
  if (auto* bounded = dynamic_cast<BoundedBinaryProtocol*>(in)) {
    using rpc::WorkerService_BatchPut_result, rpc::WorkerService_BatchUpsert_result;
    if (name == "Put") {
      ProcessWrite<rpc::WorkerService_Put_result>(*bounded, out, seqid, WriteMode::kCreate);
      return true;
    }
    if (name == "Upsert") {
      ProcessWrite<rpc::WorkerService_Upsert_result>(*bounded, out, seqid, WriteMode::kUpsert);
      return true;
    }
    if (name == "BatchPut") {
      ProcessBatchWrite<WorkerService_BatchPut_result>(*bounded, out, seqid, WriteMode::kCreate);
      return true;
    }
    if (name == "BatchUpsert") {
      ProcessBatchWrite<WorkerService_BatchUpsert_result>(*bounded, out, seqid, WriteMode::kUpsert);
      return true;
    }
  }
  return rpc::WorkerServiceProcessor::dispatchCall(in, out, name, seqid, call_context);
}

namespace {

// Runs `answer`, which replies through `out` once. A handler failure before
// the reply began is answered as the generated processor answers one; once
// the reply has begun the stream is in an unknown state, so the failure
// passes to the server, which closes the connection.
template <typename Answer>
void ReplyOrFail(TProtocol* out, const char* name, int32_t seqid, bool& replying, Answer&& answer) {
  try {
    answer();
  } catch (const std::exception& e) {
    if (replying) throw;
    TApplicationException failure(e.what());
    out->writeMessageBegin(name, T_EXCEPTION, seqid);
    failure.write(out);
    out->writeMessageEnd();
    out->getTransport()->writeEnd();
    out->getTransport()->flush();
  }
}

}  // namespace

template <typename WriteResult>
void WorkerProcessor::ProcessWrite(BoundedBinaryProtocol& in, TProtocol* out, int32_t seqid,
                                   WriteMode mode) {
  // As the generated process_Put/process_Upsert, with the value left in
  // the request's frame (valid until the next frame is read, after this).
  ValueItem item;
  ReadValueCall(in, item);
  in.readMessageEnd();
  in.getTransport()->readEnd();
  const char* name = mode == WriteMode::kUpsert ? "Upsert" : "Put";
  bool replying = false;
  ReplyOrFail(out, name, seqid, replying, [&] {
    WriteResult result;
    result.success = handler_->WriteValue(mode, item.key, item.value, item.config);
    result.__isset.success = true;
    replying = true;
    out->writeMessageBegin(name, T_REPLY, seqid);
    result.write(out);
    out->writeMessageEnd();
    out->getTransport()->writeEnd();
    out->getTransport()->flush();
  });
}

template <typename BatchWriteResult>
void WorkerProcessor::ProcessBatchWrite(BoundedBinaryProtocol& in, TProtocol* out, int32_t seqid,
                                        WriteMode mode) {
  // As the generated process_BatchPut/process_BatchUpsert, with each value
  // left in the request's frame.
  std::vector<ValueItem> items;
  ReadBatchValueCall(in, items);
  in.readMessageEnd();
  in.getTransport()->readEnd();
  const char* name = mode == WriteMode::kUpsert ? "BatchUpsert" : "BatchPut";
  bool replying = false;
  ReplyOrFail(out, name, seqid, replying, [&] {
    BatchWriteResult result;
    handler_->WriteValues(mode, items, result.success);
    result.__isset.success = true;
    replying = true;
    out->writeMessageBegin(name, T_REPLY, seqid);
    result.write(out);
    out->writeMessageEnd();
    out->getTransport()->writeEnd();
    out->getTransport()->flush();
  });
}

// Both read their call as the generated process_Get/process_BatchGet do
// (this server sets no event handler, so there are no hooks to run).

void WorkerProcessor::ProcessGet(TProtocol* in, TProtocol* out, int32_t seqid) {
  rpc::WorkerService_Get_args args;
  args.read(in);
  in->readMessageEnd();
  in->getTransport()->readEnd();
  bool replying = false;
  ReplyOrFail(out, "Get", seqid, replying, [&] {
    handler_->GetInPlace(args.key, args.offset, args.length,
                         [&](const rpc::GetResult& head, std::span<const std::byte> data) {
                           replying = true;
                           WriteGetReply(*out, seqid, head, data);
                         });
  });
}

void WorkerProcessor::ProcessBatchGet(TProtocol* in, TProtocol* out, int32_t seqid) {
  rpc::WorkerService_BatchGet_args args;
  args.read(in);
  in->readMessageEnd();
  in->getTransport()->readEnd();
  bool replying = false;
  ReplyOrFail(out, "BatchGet", seqid, replying, [&] {
    handler_->BatchGetInPlace(args.keys, [&](std::span<const rpc::GetResult> heads,
                                             std::span<const std::span<const std::byte>> data) {
      replying = true;
      WriteBatchGetReply(*out, seqid, heads, data);
    });
  });
}

}  // namespace mooncake
