#include "worker/peer_transfer.h"

#include <csignal>

#include "common/log.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake {

struct ThriftPeerTransfer::WorkerChannel {
  WorkerChannel(const std::string& host, int port)
      : address(host + ":" + std::to_string(port)), rpc(host, port) {}
  std::string address;
  RpcChannel<rpc::WorkerServiceClient> rpc;
};

Result<CrashPoint> ParseCrashPoint(std::string_view text) {
  if (text.empty() || text == "none") return CrashPoint::kNone;
  if (text == "after_adopt") return CrashPoint::kAfterAdopt;
  if (text == "after_hand_over") return CrashPoint::kAfterHandOver;
  return Err(ErrorCode::kInvalidParams);
}

ThriftPeerTransfer::ThriftPeerTransfer(MasterLink& master, CrashPoint crash_point)
    : master_(master), crash_point_(crash_point) {}

ThriftPeerTransfer::~ThriftPeerTransfer() = default;

std::shared_ptr<ThriftPeerTransfer::WorkerChannel> ThriftPeerTransfer::Channel(
    const NodeRecord& node) {
  std::string address = node.host + ":" + std::to_string(node.port);
  std::lock_guard lock(mu_);
  auto& channel = channels_[node.node_id];
  if (!channel || channel->address != address) {
    channel = std::make_shared<WorkerChannel>(node.host, node.port);
  }
  return channel;
}

void ThriftPeerTransfer::MaybeCrash(CrashPoint point) const {
  if (crash_point_ != point) return;
  MC_LOG_WARN("test crash point reached; killing this worker");
  std::raise(SIGKILL);
}

Result<std::string> ThriftPeerTransfer::Transfer(const std::string& key, uint64_t size,
                                                 uint64_t version, const ObjectOptions& options,
                                                 const ObjectReader& read,
                                                 const std::string& target, bool dram_only) {
  auto node = target.empty() ? master_.PickNode(size) : master_.FindNode(target);
  if (!node) return Err(node.error());
  auto channel = Channel(*node);
  if (auto sent = SendTo(*channel, key, size, version, options, read, dram_only); !sent) {
    return Err(sent.error());
  }
  MaybeCrash(CrashPoint::kAfterAdopt);
  // The target holds a complete copy; the master decides who owns it.
  if (auto swapped = master_.HandOver(key, node->node_id); !swapped) {
    MC_LOG_WARN("hand-over refused key={} to={} error={}; target drops its copy", key,
                node->node_id, ToString(swapped.error()));
    channel->rpc.Call([&](rpc::WorkerServiceClient& c) { return c.AdoptAbort(key); });
    return Err(swapped.error());
  }
  MaybeCrash(CrashPoint::kAfterHandOver);
  return node->node_id;
}

Result<void> ThriftPeerTransfer::SendTo(WorkerChannel& channel, const std::string& key,
                                        uint64_t size, uint64_t version,
                                        const ObjectOptions& options, const ObjectReader& read,
                                        bool dram_only) {
  rpc::ReplicateConfig config;
  config.with_hard_pin = options.hard_pin;
  config.with_soft_pin = options.soft_pin;
  config.soft_pin_ttl_ms = options.soft_pin_ttl.count();
  if (dram_only) config.preferred_tier = "dram";
  rpc::PutStartResult started;
  auto call = channel.rpc.Call([&](rpc::WorkerServiceClient& c) {
    c.AdoptStart(started, key, static_cast<int64_t>(size), config, static_cast<int64_t>(version));
  });
  if (!call) return Err(call.error());
  if (auto ok = ToResult(started.code); !ok) return ok;

  std::string buffer;
  for (uint64_t offset = 0; offset < size; offset += kRpcChunkBytes) {
    buffer.resize(std::min(kRpcChunkBytes, size - offset));
    auto out = std::as_writable_bytes(std::span(buffer.data(), buffer.size()));
    Result<void> step = read(offset, out);
    if (step) {
      auto sent = channel.rpc.Call([&](rpc::WorkerServiceClient& c) {
        return c.PutChunk(started.handle, static_cast<int64_t>(offset), buffer);
      });
      step = sent ? ToResult(*sent) : Err(sent.error());
    }
    if (!step) {
      channel.rpc.Call([&](rpc::WorkerServiceClient& c) { return c.PutRevoke(started.handle); });
      return Err(ErrorCode::kTransferFail);
    }
  }
  auto ended = channel.rpc.Call(
      [&](rpc::WorkerServiceClient& c) { return c.AdoptEnd(started.handle, false); });
  if (!ended) return Err(ended.error());
  return ToResult(*ended);
}

}  // namespace mooncake
