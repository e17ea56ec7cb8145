#include "thrift/rdma_wire.h"

#include <cstring>

#include "thrift/rpc_codes.h"

namespace mooncake {
namespace {

constexpr int32_t kMax24Bit = 0xffffff;  // QP numbers and PSNs are 24-bit
constexpr int32_t kMaxLid = 0xffff;

}  // namespace

rpc::RdmaEndpoint ToRpcEndpoint(const RdmaEndpointInfo& info) {
  rpc::RdmaEndpoint out;
  out.lid = info.lid;
  out.gid.assign(reinterpret_cast<const char*>(info.gid.data()), info.gid.size());
  out.qp_num = static_cast<int32_t>(info.qp_num);
  out.psn = static_cast<int32_t>(info.psn);
  out.mtu = info.mtu;
  return out;
}

Result<RdmaEndpointInfo> FromRpcEndpoint(const rpc::RdmaEndpoint& endpoint) {
  const auto& e = endpoint;
  RdmaEndpointInfo info;
  if ((!e.gid.empty() && e.gid.size() != info.gid.size()) || e.lid < 0 || e.lid > kMaxLid ||
      e.qp_num <= 0 || e.qp_num > kMax24Bit || e.psn < 0 || e.psn > kMax24Bit || e.mtu < 1 ||
      e.mtu > 5) {
    return Err(ErrorCode::kInvalidParams);
  }
  info.lid = static_cast<uint16_t>(e.lid);
  std::memcpy(info.gid.data(), e.gid.data(), e.gid.size());
  info.qp_num = static_cast<uint32_t>(e.qp_num);
  info.psn = static_cast<uint32_t>(e.psn);
  info.mtu = e.mtu;
  return info;
}

rpc::RdmaRegion ToRpcRegion(const RdmaExport& region) {
  rpc::RdmaRegion out;
  out.tier = region.tier;
  out.addr = static_cast<int64_t>(region.region.addr);
  out.length = static_cast<int64_t>(region.region.length);
  out.rkey = static_cast<int32_t>(region.region.rkey);
  return out;
}

Result<RdmaPeerInfo> FromRpcConnectResult(const rpc::RdmaConnectResult& result) {
  auto endpoint = FromRpcEndpoint(result.endpoint);
  if (!endpoint) return Err(endpoint.error());
  RdmaPeerInfo info{.endpoint = *endpoint, .regions = {}};
  for (const rpc::RdmaRegion& r : result.regions) {
    if (r.tier.empty() || r.addr == 0 || r.length <= 0) return Err(ErrorCode::kInvalidParams);
    info.regions.push_back({.tier = r.tier,
                            .region = {.addr = static_cast<uint64_t>(r.addr),
                                       .length = static_cast<uint64_t>(r.length),
                                       .rkey = static_cast<uint32_t>(r.rkey)}});
  }
  return info;
}

Result<RdmaPeerInfo> CallRdmaConnect(RpcChannel<rpc::WorkerServiceClient>& channel,
                                     const std::string& initiator_node,
                                     const RdmaEndpointInfo& local, std::string* why) {
  rpc::RdmaConnectResult answer;
  auto call = channel.Call([&](rpc::WorkerServiceClient& c) {
    c.RdmaConnect(answer, initiator_node, ToRpcEndpoint(local));
  });
  if (!call) {
    *why = "RdmaConnect call failed: " + std::string(ToString(call.error()));
    return Err(call.error());
  }
  if (answer.code != rpc::ErrorCode::OK) {
    *why = answer.reason;
    return Err(FromRpc(answer.code));
  }
  auto info = FromRpcConnectResult(answer);
  if (!info) *why = "malformed RdmaConnect answer";
  return info;
}

}  // namespace mooncake
