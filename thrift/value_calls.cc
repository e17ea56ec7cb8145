#include "thrift/value_calls.h"

#include <thrift/protocol/TProtocol.h>

#include "thrift/rpc_transport.h"

namespace mooncake {

using apache::thrift::protocol::T_CALL;
using apache::thrift::protocol::T_I32;
using apache::thrift::protocol::T_I64;
using apache::thrift::protocol::T_LIST;
using apache::thrift::protocol::T_REPLY;
using apache::thrift::protocol::T_STOP;
using apache::thrift::protocol::T_STRING;
using apache::thrift::protocol::T_STRUCT;
using apache::thrift::protocol::TInputRecursionTracker;
using apache::thrift::protocol::TProtocol;
using apache::thrift::protocol::TType;

namespace {

// The binary protocol's writeBinary: the length, then the bytes.
void WriteBytes(TProtocol& protocol, const void* data, size_t size) {
  protocol.writeI32(static_cast<int32_t>(size));
  protocol.getTransport()->write(static_cast<const uint8_t*>(data), static_cast<uint32_t>(size));
}

// Fields 1 key, 3 config, 2 value and the stop: the body of Put_pargs and
// Upsert_pargs, and of each PutItem of a batch. The value goes last, so
// that a worker knows where it will store it before its bytes come.
void WriteValueFields(TProtocol& protocol, std::string_view key, std::string_view value,
                      const rpc::ReplicateConfig& config) {
  protocol.writeFieldBegin("key", T_STRING, 1);
  WriteBytes(protocol, key.data(), key.size());
  protocol.writeFieldEnd();
  protocol.writeFieldBegin("config", T_STRUCT, 3);
  config.write(&protocol);
  protocol.writeFieldEnd();
  protocol.writeFieldBegin("value", T_STRING, 2);
  WriteBytes(protocol, value.data(), value.size());
  protocol.writeFieldEnd();
  protocol.writeFieldStop();
}

// Ends the call's arguments and message and sends the frame.
void FinishCall(TProtocol& protocol) {
  protocol.writeStructEnd();
  protocol.writeMessageEnd();
  protocol.getTransport()->writeEnd();
  protocol.getTransport()->flush();
}

}  // namespace

void SendValueCall(rpc::WorkerServiceClient& client, bool upsert, const std::string& key,
                   std::string_view value, const rpc::ReplicateConfig& config) {
  // Mirrors WorkerServiceClient::send_Put and WorkerService_Put_pargs::write
  // (Upsert has the same fields: 1 key, 2 value, 3 config).
  auto protocol = client.getOutputProtocol();
  protocol->writeMessageBegin(upsert ? "Upsert" : "Put", T_CALL, /*seqid=*/0);
  protocol->writeStructBegin(upsert ? "WorkerService_Upsert_pargs" : "WorkerService_Put_pargs");
  WriteValueFields(*protocol, key, value, config);
  FinishCall(*protocol);
}

void SendBatchValueCall(rpc::WorkerServiceClient& client, bool upsert,
                        std::span<const ValueView> items, const rpc::ReplicateConfig& config) {
  // Mirrors WorkerServiceClient::send_BatchPut, WorkerService_BatchPut_pargs
  // and PutItem::write (BatchUpsert has the same field: 1 items).
  auto protocol = client.getOutputProtocol();
  protocol->writeMessageBegin(upsert ? "BatchUpsert" : "BatchPut", T_CALL, /*seqid=*/0);
  protocol->writeStructBegin(upsert ? "WorkerService_BatchUpsert_pargs"
                                    : "WorkerService_BatchPut_pargs");
  protocol->writeFieldBegin("items", T_LIST, 1);
  protocol->writeListBegin(T_STRUCT, static_cast<uint32_t>(items.size()));
  for (const ValueView& item : items) {
    protocol->writeStructBegin("PutItem");
    WriteValueFields(*protocol, item.key, item.value, config);
    protocol->writeStructEnd();
  }
  protocol->writeListEnd();
  protocol->writeFieldEnd();
  protocol->writeFieldStop();
  FinishCall(*protocol);
}

void ReadValueCall(BoundedBinaryProtocol& in, ValueItem& item, const ValuePlacer& place) {
  // Mirrors WorkerService_Put_args::read and PutItem::read (fields 1 key,
  // 2 value, 3 config): unknown fields and fields of another type are
  // skipped.
  TInputRecursionTracker tracker(in);
  std::string name;
  TType type;
  int16_t id = 0;
  bool have_key = false;
  bool have_config = false;
  item.value = {};
  in.readStructBegin(name);
  for (;;) {
    in.readFieldBegin(name, type, id);
    if (type == T_STOP) break;
    if (id == 1 && type == T_STRING) {
      in.readString(item.key);
      have_key = true;
    } else if (id == 2 && type == T_STRING) {
      if (place && have_key && have_config) {
        in.readBinaryPlaced(item.value, item.storage,
                            [&](uint32_t size) { return place(item, size); });
      } else {
        in.readBinaryView(item.value, item.storage);
      }
    } else if (id == 3 && type == T_STRUCT) {
      item.config.read(&in);
      have_config = true;
    } else {
      in.skip(type);
    }
    in.readFieldEnd();
  }
  in.readStructEnd();
}

void ReadBatchValueCall(BoundedBinaryProtocol& in, std::vector<ValueItem>& items) {
  // Mirrors WorkerService_BatchPut_args::read (field 1, list<PutItem>),
  // which reads each element as a PutItem whatever type the list declares.
  TInputRecursionTracker tracker(in);
  std::string name;
  TType type;
  int16_t id = 0;
  in.readStructBegin(name);
  for (;;) {
    in.readFieldBegin(name, type, id);
    if (type == T_STOP) break;
    if (id == 1 && type == T_LIST) {
      TType element = T_STOP;
      uint32_t size = 0;
      in.readListBegin(element, size);
      // Sized once (readListBegin bounded `size`): items never move after
      // their value views were taken.
      items.clear();
      items.resize(size);
      for (ValueItem& item : items) ReadValueCall(in, item);
      in.readListEnd();
    } else {
      in.skip(type);
    }
    in.readFieldEnd();
  }
  in.readStructEnd();
}

namespace {

// GetResult::write with `data` as the data field.
void WriteGetResult(TProtocol& out, const rpc::GetResult& head, std::span<const std::byte> data) {
  out.writeStructBegin("GetResult");
  out.writeFieldBegin("code", T_I32, 1);
  out.writeI32(static_cast<int32_t>(head.code));
  out.writeFieldEnd();
  out.writeFieldBegin("data", T_STRING, 2);
  WriteBytes(out, data.data(), data.size());
  out.writeFieldEnd();
  out.writeFieldBegin("total_size", T_I64, 3);
  out.writeI64(head.total_size);
  out.writeFieldEnd();
  out.writeFieldBegin("version", T_I64, 4);
  out.writeI64(head.version);
  out.writeFieldEnd();
  out.writeFieldBegin("owner_hint", T_STRING, 5);
  out.writeString(head.owner_hint);
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
}

void EndReply(TProtocol& out) {
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
  out.writeMessageEnd();
  out.getTransport()->writeEnd();
  out.getTransport()->flush();
}

}  // namespace

void WriteGetReply(TProtocol& out, int32_t seqid, const rpc::GetResult& head,
                   std::span<const std::byte> data) {
  // Mirrors WorkerServiceProcessor::process_Get's reply and
  // WorkerService_Get_result::write.
  out.writeMessageBegin("Get", T_REPLY, seqid);
  out.writeStructBegin("WorkerService_Get_result");
  out.writeFieldBegin("success", T_STRUCT, 0);
  WriteGetResult(out, head, data);
  EndReply(out);
}

void WriteBatchGetReply(TProtocol& out, int32_t seqid, std::span<const rpc::GetResult> heads,
                        std::span<const std::span<const std::byte>> data) {
  // Mirrors process_BatchGet's reply and WorkerService_BatchGet_result::write.
  out.writeMessageBegin("BatchGet", T_REPLY, seqid);
  out.writeStructBegin("WorkerService_BatchGet_result");
  out.writeFieldBegin("success", T_LIST, 0);
  out.writeListBegin(T_STRUCT, static_cast<uint32_t>(heads.size()));
  for (size_t i = 0; i < heads.size(); ++i) WriteGetResult(out, heads[i], data[i]);
  out.writeListEnd();
  EndReply(out);
}

}  // namespace mooncake
