#include "worker/worker_processor.h"

#include <thrift/TApplicationException.h>

#include <algorithm>
#include <array>
#include <exception>

#include "thrift/rpc_call_site.h"
#include "thrift/rpc_transport.h"
#include "thrift/value_calls.h"
#include "worker/worker_handler.h"

namespace mooncake {

using apache::thrift::TApplicationException;
using apache::thrift::protocol::T_EXCEPTION;
using apache::thrift::protocol::T_REPLY;
using apache::thrift::protocol::TMessageType;
using apache::thrift::protocol::TProtocol;

WorkerProcessor::WorkerProcessor(std::shared_ptr<WorkerHandler> handler)
    : rpc::WorkerServiceProcessor(handler), handler_(std::move(handler)) {}

bool WorkerProcessor::MayBlock(std::string_view method) {
  // Each takes the backend's lock and nothing else (Exist's prefetch is
  // queued for the maintenance thread); Get and BatchGet check their tier,
  // and Put defers its reply to its claim's answer, or hands itself over.
  static constexpr std::array<std::string_view, 8> kAnsweredInMemory = {
      "Get", "BatchGet", "Exist", "BatchExist", "Inspect", "Stats", "GetPlacement", "Put"};
  return std::find(kAnsweredInMemory.begin(), kAnsweredInMemory.end(), method) ==
         kAnsweredInMemory.end();
}

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
  auto* bounded = dynamic_cast<BoundedBinaryProtocol*>(in);
  if (bounded == nullptr) {
    return rpc::WorkerServiceProcessor::dispatchCall(in, out, name, seqid, call_context);
  }
  if (name == "Put") {
    ProcessWrite<rpc::WorkerService_Put_result>(*bounded, out, "Put", seqid, WriteMode::kCreate);
  } else if (name == "Upsert") {
    ProcessWrite<rpc::WorkerService_Upsert_result>(*bounded, out, "Upsert", seqid,
                                                   WriteMode::kUpsert);
  } else if (name == "BatchPut") {
    ProcessWrite<rpc::WorkerService_BatchPut_result>(*bounded, out, "BatchPut", seqid,
                                                     WriteMode::kCreate);
  } else if (name == "BatchUpsert") {
    ProcessWrite<rpc::WorkerService_BatchUpsert_result>(*bounded, out, "BatchUpsert", seqid,
                                                        WriteMode::kUpsert);
  } else {
    return rpc::WorkerServiceProcessor::dispatchCall(in, out, name, seqid, call_context);
  }
  return true;
}

namespace {

// Writes one message, `body` its struct, and flushes it.
template <typename Body>
void SendMessage(TProtocol* out, const char* name, TMessageType type, int32_t seqid,
                 const Body& body) {
  out->writeMessageBegin(name, type, seqid);
  body.write(out);
  out->writeMessageEnd();
  out->getTransport()->writeEnd();
  out->getTransport()->flush();
}

// Runs `answer`, which replies through `out` once and sets `replying` as it
// begins. A handler failure before the reply began is answered as the
// generated processor answers one; once the reply has begun the stream is in
// an unknown state, so the failure passes to the server, which closes the
// connection.
template <typename Answer>
void ReplyOrFail(TProtocol* out, const char* name, int32_t seqid, bool& replying, Answer&& answer) {
  try {
    answer();
  } catch (const std::exception& e) {
    if (replying) throw;
    SendMessage(out, name, T_EXCEPTION, seqid, TApplicationException(e.what()));
  }
}

}  // namespace

template <typename WriteResult>
void WorkerProcessor::ProcessWrite(BoundedBinaryProtocol& in, TProtocol* out, const char* name,
                                   int32_t seqid, WriteMode mode) {
  // As the generated process_Put/Upsert/BatchPut/BatchUpsert, with each
  // value left in the request's frame (valid until the next frame is read,
  // after this). A batch's result is a list of codes, a single write's one.
  constexpr bool kBatch = requires(WriteResult r) { r.success.size(); };
  std::vector<ValueItem> items;  // a batch's
  ValueItem item;                // a single write's
  // A Put's value larger than what came with the frame's header goes from
  // the socket straight into the object's space; revoked if it never all
  // comes (the read throws). An Upsert keeps the old object until the whole
  // new value is here.
  std::unique_ptr<WorkerHandler::PlacedPut> placed;
  ValuePlacer place;
  if (mode == WriteMode::kCreate) {
    place = [&](const ValueItem& read, uint32_t size) -> std::span<std::byte> {
      if (placed) return {};  // a second value field: decoded as usual
      placed = handler_->StartPlacedPut(read.key, size, read.config);
      return placed ? placed->bytes() : std::span<std::byte>{};
    };
  }
  if constexpr (kBatch) {
    ReadBatchValueCall(in, items);
  } else {
    ReadValueCall(in, item, place);
  }
  in.readMessageEnd();
  in.getTransport()->readEnd();
  if constexpr (!kBatch) {
    if (mode == WriteMode::kCreate && !placed) {
      const bool on_loop = !RpcCallMayBlock();
      if ((!on_loop || item.value.size() <= kLoopPutBytes) && AnswerPutLater(item, seqid)) return;
      if (on_loop) {
        RpcHandCallToPool();
        return;
      }
    }
  }
  if (placed && !placed->Describes(item)) {
    // Written as read, below, and from a copy where the value lies in the
    // space that goes back now.
    if (item.value.data() == reinterpret_cast<const char*>(placed->bytes().data())) {
      item.storage.assign(item.value);
      item.value = item.storage;
    }
    placed.reset();
  }
  bool replying = false;
  ReplyOrFail(out, name, seqid, replying, [&] {
    WriteResult result;
    if constexpr (kBatch) {
      handler_->WriteValues(mode, items, result.success);
    } else if (placed) {
      result.success = placed->Finish();
    } else {
      result.success = handler_->WriteValue(mode, item.key, item.value, item.config);
    }
    result.__isset.success = true;
    replying = true;
    SendMessage(out, name, T_REPLY, seqid, result);
  });
}

bool WorkerProcessor::AnswerPutLater(const ValueItem& item, int32_t seqid) {
  std::shared_ptr<RpcDeferredReply> reply = RpcDeferReply();
  if (!reply) return false;
  bool started = handler_->TryPutAsync(
      item.key, item.value, item.config, [reply, seqid](rpc::ErrorCode::type code) {
        rpc::WorkerService_Put_result result;
        result.success = code;
        result.__isset.success = true;
        SendMessage(&reply->protocol(), "Put", T_REPLY, seqid, result);
        reply->Send();
      });
  if (!started) reply->Cancel();
  return started;
}

// Both read their call as the generated process_Get/process_BatchGet do
// (this server sets no event handler, so there are no hooks to run).

void WorkerProcessor::ProcessGet(TProtocol* in, TProtocol* out, int32_t seqid) {
  rpc::WorkerService_Get_args args;
  args.read(in);
  in->readMessageEnd();
  in->getTransport()->readEnd();
  if (!RpcCallMayBlock() && !handler_->ReadableFromHostMemory({&args.key, 1})) {
    RpcHandCallToPool();
    return;
  }
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
  if (!RpcCallMayBlock() && !handler_->ReadableFromHostMemory(args.keys)) {
    RpcHandCallToPool();
    return;
  }
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
