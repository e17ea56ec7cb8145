#pragma once

// Wire forms of the RDMA structs: transport/ is Thrift-free, so the worker
// (RdmaConnect handler, peer transfers) and the client (RDMA reads) translate
// through these, and validate what a peer sent before using it.

#include <string>

#include "common/status.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/rpc_channel.h"
#include "transport/rdma_link.h"

namespace mooncake {

rpc::RdmaEndpoint ToRpcEndpoint(const RdmaEndpointInfo& info);
// kInvalidParams for a malformed endpoint: gid neither empty nor 16 bytes,
// lid, qp_num, psn or mtu out of range.
Result<RdmaEndpointInfo> FromRpcEndpoint(const rpc::RdmaEndpoint& endpoint);
rpc::RdmaRegion ToRpcRegion(const RdmaExport& region);
// A successful RdmaConnect answer as plain structs; kInvalidParams when
// malformed (bad endpoint, empty tier name, empty region).
Result<RdmaPeerInfo> FromRpcConnectResult(const rpc::RdmaConnectResult& result);

// Asks the worker behind `channel` to accept an RDMA connection from
// `initiator_node` (its RdmaConnect): an RdmaConnector's body. On refusal or
// a malformed answer returns the error with `*why` set.
Result<RdmaPeerInfo> CallRdmaConnect(RpcChannel<rpc::WorkerServiceClient>& channel,
                                     const std::string& initiator_node,
                                     const RdmaEndpointInfo& local, std::string* why);

}  // namespace mooncake
