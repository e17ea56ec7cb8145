#pragma once

// Put and Upsert requests sent from a view of the caller's value, without
// copying it into a std::string first (the generated WorkerServiceClient
// takes const std::string&). With BoundedFramedTransport's borrowed writes a
// value of 4 KiB or more then goes from the caller's memory to the socket
// with no copy in this process. For a 4 MiB value that is a 4 MiB malloc,
// memcpy and free less per call; with many client threads those
// mmap/munmap pairs also serialised on the process's address-space lock.
//
// The wire bytes are exactly the generated send_Put/send_Upsert's (and
// send_BatchPut/send_BatchUpsert's; strict binary protocol); the reply is
// read with the generated recv_ functions.
//
// The worker reads a Put or Upsert the other way round (ReadValueCall): the
// value stays where it arrived, in the request's frame, until it is written
// into the tier; or, for a value larger than what came with the frame's
// header, it goes from the socket straight into the tier (ValuePlacer). For
// that the key and options travel before the value: fields 1, 3, then 2
// (any Thrift reader accepts fields in any order). The worker answers Get and BatchGet the same way
// (WriteGetReply, WriteBatchGetReply): the object's bytes go from where they lie in its tier to the
// socket, not through GetResult::data.
//
// Thread-safety: as the client or protocol passed in (one thread at a time).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake_rpc/WorkerService.h"

namespace mooncake {

// Sends Put (or Upsert) of `value` under `key`; read the answer with
// client.recv_Put() (client.recv_Upsert()). Throws what the generated
// send_Put throws.
void SendValueCall(rpc::WorkerServiceClient& client, bool upsert, const std::string& key,
                   std::string_view value, const rpc::ReplicateConfig& config);

// One value of a batched write as the client sends it: views of the
// caller's key and value.
struct ValueView {
  std::string_view key;
  std::string_view value;
};

// Sends BatchPut (or BatchUpsert) of `items`, each with `config`, the same
// way: the values go from the caller's memory, not through PutItem copies.
// Read the answer with client.recv_BatchPut() (recv_BatchUpsert()).
void SendBatchValueCall(rpc::WorkerServiceClient& client, bool upsert,
                        std::span<const ValueView> items, const rpc::ReplicateConfig& config);

class BoundedBinaryProtocol;

// One value of a Put, Upsert or batched write as a worker receives it.
struct ValueItem {
  std::string key;
  // Views the request's frame, or `storage` where the frame is not held
  // whole (see BoundedBinaryProtocol::readBinaryView): valid while both
  // are, so an item is not moved once read.
  std::string_view value;
  rpc::ReplicateConfig config;
  std::string storage;
};

// Where the value of a call may go instead of the request's frame: given
// the item with its key and config read and the value's size, memory for
// exactly that many bytes, or an empty span to leave the value in the frame.
using ValuePlacer = std::function<std::span<std::byte>(const ValueItem& item, uint32_t size)>;

// Reads the arguments of a Put or Upsert call (after readMessageBegin,
// before readMessageEnd), as WorkerService_Put_args::read does (the same
// fields as a PutItem), with the value left where it is, or where `place`
// puts it (BoundedBinaryProtocol::readBinaryPlaced) when the key and config
// came before it. Throws what the generated reader throws.
void ReadValueCall(BoundedBinaryProtocol& in, ValueItem& item, const ValuePlacer& place = {});
// The same for a BatchPut or BatchUpsert call, as
// WorkerService_BatchPut_args::read: one item per PutItem, in order.
void ReadBatchValueCall(BoundedBinaryProtocol& in, std::vector<ValueItem>& items);

// Writes and flushes the reply to Get call `seqid`: `head` with `data` as
// its data field (head.data is not sent). The bytes are exactly those of the
// generated processor's reply for a GetResult holding `data`. Throws what
// the protocol's transport throws.
void WriteGetReply(apache::thrift::protocol::TProtocol& out, int32_t seqid,
                   const rpc::GetResult& head, std::span<const std::byte> data);
// The same for a BatchGet reply: heads[i] with data[i], in order.
void WriteBatchGetReply(apache::thrift::protocol::TProtocol& out, int32_t seqid,
                        std::span<const rpc::GetResult> heads,
                        std::span<const std::span<const std::byte>> data);

}  // namespace mooncake
