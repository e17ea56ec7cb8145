#include "thrift/value_calls.h"

#include <thrift/protocol/TProtocol.h>

namespace mooncake {

using apache::thrift::protocol::T_CALL;
using apache::thrift::protocol::T_STRING;
using apache::thrift::protocol::T_STRUCT;

void SendValueCall(rpc::WorkerServiceClient& client, bool upsert, const std::string& key,
                   std::string_view value, const rpc::ReplicateConfig& config) {
  // Mirrors WorkerServiceClient::send_Put and WorkerService_Put_pargs::write
  // (Upsert has the same fields: 1 key, 2 value, 3 config).
  auto protocol = client.getOutputProtocol();
  protocol->writeMessageBegin(upsert ? "Upsert" : "Put", T_CALL, /*seqid=*/0);
  protocol->writeStructBegin(upsert ? "WorkerService_Upsert_pargs" : "WorkerService_Put_pargs");
  protocol->writeFieldBegin("key", T_STRING, 1);
  protocol->writeString(key);
  protocol->writeFieldEnd();
  protocol->writeFieldBegin("value", T_STRING, 2);
  // The binary protocol's writeBinary: the length, then the bytes.
  protocol->writeI32(static_cast<int32_t>(value.size()));
  protocol->getTransport()->write(reinterpret_cast<const uint8_t*>(value.data()),
                                  static_cast<uint32_t>(value.size()));
  protocol->writeFieldEnd();
  protocol->writeFieldBegin("config", T_STRUCT, 3);
  config.write(protocol.get());
  protocol->writeFieldEnd();
  protocol->writeFieldStop();
  protocol->writeStructEnd();
  protocol->writeMessageEnd();
  protocol->getTransport()->writeEnd();
  protocol->getTransport()->flush();
}

}  // namespace mooncake
