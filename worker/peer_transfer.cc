#include "worker/peer_transfer.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <system_error>

#include "common/log.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/rdma_wire.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake {
namespace {

// AdoptConfirm is a short call the target answers at once; a target that
// does not is given up on quickly, so that neither the confirms queued
// behind it nor this worker's shutdown wait out the data calls' timeout.
RpcOptions ConfirmOptions(RpcOptions options) {
  options.connect_timeout_ms = std::min(options.connect_timeout_ms, 1000);
  options.io_timeout_ms = std::min(options.io_timeout_ms, 2000);
  options.max_idle = 1;
  return options;
}

}  // namespace

struct ThriftPeerTransfer::WorkerChannel {
  WorkerChannel(const std::string& host, int port, RpcOptions options)
      : address(host + ":" + std::to_string(port)),
        rpc(host, port, options),
        confirm(host, port, ConfirmOptions(options)) {}
  std::string address;
  RpcChannel<rpc::WorkerServiceClient> rpc;
  RpcChannel<rpc::WorkerServiceClient> confirm;  // AdoptConfirm only
};

// Where AdoptStart placed the object on the target.
struct ThriftPeerTransfer::Adoption {
  int64_t handle = 0;
  std::string tier;          // empty: not directly writable
  int64_t tier_offset = -1;  // -1: not directly writable
};

Result<CrashPoint> ParseCrashPoint(std::string_view text) {
  if (text.empty() || text == "none") return CrashPoint::kNone;
  if (text == "after_adopt") return CrashPoint::kAfterAdopt;
  if (text == "after_hand_over") return CrashPoint::kAfterHandOver;
  if (text == "hand_over_answer_lost") return CrashPoint::kHandOverAnswerLost;
  return Err(ErrorCode::kInvalidParams);
}

namespace {

// kNotOwner and kObjectNotFound from Transfer are the master's refusal of
// the hand-over (on kNotOwner the sender erases its copy: Mover::TransferOut),
// and kRpcTimeout a hand-over whose outcome is unknown; the same codes from a
// target or a pick only mean the transfer failed.
ErrorCode NotAHandOverRefusal(ErrorCode error) {
  return error == ErrorCode::kNotOwner || error == ErrorCode::kObjectNotFound ||
                 error == ErrorCode::kRpcTimeout
             ? ErrorCode::kTransferFail
             : error;
}

}  // namespace

Result<NodeRecord> SendToNodeWithRoom(
    const std::function<Result<NodeRecord>(const std::vector<std::string>& refused)>& pick,
    const std::function<SendResult(const NodeRecord& node)>& send) {
  std::vector<std::string> refused;
  while (refused.size() < static_cast<size_t>(kMaxAdoptTargets)) {
    auto node = pick(refused);
    if (!node) {
      // No node has room by the master's figures: the object may leave the
      // cluster (kNoAvailableHandle) only if no node refused it. Once one
      // did, the master's "none" means "none but those": a refusal by every
      // candidate is not "no node has room", and the object stays here.
      if (!refused.empty() && node.error() == ErrorCode::kNoAvailableHandle) break;
      return Err(node.error());
    }
    // The master has no other node to offer.
    if (std::ranges::find(refused, node->node_id) != refused.end()) break;
    auto sent = send(*node);
    if (sent) return node;
    if (sent.error().at_source) return Err(sent.error().error);
    // The master, which ranks by free space, would name a node that nobody
    // can reach again and again: stopping here would stop every eviction.
    if (sent.error().error == ErrorCode::kNoAvailableHandle) {
      MC_LOG_INFO("adopt refused for lack of room node={}; picking another", node->node_id);
    } else {
      MC_LOG_WARN("adopt failed node={} error={}; picking another", node->node_id,
                  ToString(sent.error().error));
    }
    refused.push_back(node->node_id);
  }
  return Err(ErrorCode::kTransferFail);
}

// ---- ThriftPeerTransfer ----

ThriftPeerTransfer::ThriftPeerTransfer(MasterLink& master, CrashPoint crash_point, RdmaLink* rdma,
                                       std::shared_ptr<const RpcTlsContext> tls, int rpc_poll_us)
    : master_(master),
      crash_point_(crash_point),
      rdma_(rdma),
      tls_(std::move(tls)),
      rpc_poll_us_(rpc_poll_us) {}

ThriftPeerTransfer::~ThriftPeerTransfer() {
  {
    std::lock_guard lock(confirm_mu_);
    stopping_ = true;
  }
  confirm_cv_.notify_all();
  if (confirm_thread_.joinable()) confirm_thread_.join();
}

void ThriftPeerTransfer::ConfirmLater(std::shared_ptr<WorkerChannel> channel,
                                      const std::string& key) {
  {
    std::lock_guard lock(confirm_mu_);
    if (stopping_) return;
    if (confirms_.size() >= kMaxPendingConfirms) {
      MC_LOG_DEBUG("adopt confirm queue full; the target confirms later key={}", key);
      return;
    }
    if (!confirm_thread_.joinable()) {
      try {
        confirm_thread_ = std::thread([this] { SendConfirms(); });
      } catch (const std::system_error& e) {
        MC_LOG_WARN("cannot start the adopt confirm thread error=\"{}\"; the target confirms later",
                    e.what());
        return;
      }
    }
    confirms_.push_back({.channel = std::move(channel), .key = key});
  }
  confirm_cv_.notify_one();
}

void ThriftPeerTransfer::SendConfirms() {
  std::unique_lock lock(confirm_mu_);
  for (;;) {
    confirm_cv_.wait(lock, [this] { return stopping_ || !confirms_.empty(); });
    // What is left at shutdown is confirmed by each target after its delay.
    if (stopping_) return;
    PendingConfirm next = std::move(confirms_.front());
    confirms_.pop_front();
    lock.unlock();
    auto confirmed = next.channel->confirm.Call(
        [&](rpc::WorkerServiceClient& c) { return c.AdoptConfirm(next.key); });
    lock.lock();
    if (!confirmed) {
      // The others queued for that target would wait out the same failure,
      // holding up those to other targets: they go too (each target
      // confirms after its own delay instead).
      const size_t before = confirms_.size();
      std::erase_if(confirms_, [&](const PendingConfirm& p) { return p.channel == next.channel; });
      MC_LOG_DEBUG("adopt confirm not delivered key={} target={} error={} dropped_after={}",
                   next.key, next.channel->address, ToString(confirmed.error()),
                   before - confirms_.size());
    }
  }
}

std::shared_ptr<ThriftPeerTransfer::WorkerChannel> ThriftPeerTransfer::Channel(
    const NodeRecord& node) {
  std::string address = node.host + ":" + std::to_string(node.port);
  std::lock_guard lock(mu_);
  auto& channel = channels_[node.node_id];
  if (!channel || channel->address != address) {
    // A node that moved (or restarted elsewhere) needs a new RDMA connection too.
    if (channel && rdma_ != nullptr) rdma_->Forget(node.node_id);
    channel = std::make_shared<WorkerChannel>(node.host, node.port,
                                              RpcOptions{.poll_us = rpc_poll_us_, .tls = tls_});
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
                                                 const ObjectSource& source,
                                                 const std::string& target, bool dram_only) {
  std::shared_ptr<WorkerChannel> channel;
  auto send = [&](const NodeRecord& to) {
    channel = Channel(to);
    SendResult sent = SendTo(*channel, to.node_id, key, size, version, options, source, dram_only);
    NoteSend(to.node_id, sent);
    return sent;
  };
  Result<NodeRecord> node = Err(ErrorCode::kInternalError);
  if (target.empty()) {
    // The master picks by usage its heartbeats last reported: a node that
    // refused for lack of room is left out of the next pick.
    node = SendToNodeWithRoom(
        [&](const std::vector<std::string>& refused) { return Pick(size, refused); }, send);
  } else {
    node = master_.FindNode(target);
    if (node) {
      if (auto sent = send(*node); !sent) return Err(NotAHandOverRefusal(sent.error().error));
    }
  }
  if (!node) return Err(NotAHandOverRefusal(node.error()));
  MaybeCrash(CrashPoint::kAfterAdopt);
  // The target holds a complete copy; the master decides who owns it.
  auto swapped = master_.HandOver(key, node->node_id);
  if (swapped && crash_point_ == CrashPoint::kHandOverAnswerLost) {
    MC_LOG_WARN("test fault: the hand-over's answer is lost key={}", key);
    swapped = Err(ErrorCode::kRpcTimeout);
  }
  if (!swapped && swapped.error() != ErrorCode::kRpcTimeout &&
      swapped.error() != ErrorCode::kRpcFail) {
    // The master's own refusal (not the owner, the key gone): final.
    MC_LOG_WARN("hand-over refused key={} to={} error={}; target drops its copy", key,
                node->node_id, ToString(swapped.error()));
    channel->rpc.Call([&](rpc::WorkerServiceClient& c) { return c.AdoptAbort(key); });
    return Err(swapped.error());
  }
  if (!swapped) {
    if (!HandOverLanded(key, node->node_id)) {
      // The call may still be applied after any answer to "who owns it":
      // an AdoptAbort now could leave the key with no copy anywhere. The
      // target claims its adopted copy if the swap lands and drops it
      // otherwise (Mover::ConfirmAdoptedObjects); this node keeps its copy
      // and asks again later (kRpcTimeout: Mover::SettleHandOvers).
      MC_LOG_WARN("hand-over unsettled key={} to={} error={}; the target confirms its copy later",
                  key, node->node_id, ToString(swapped.error()));
      return Err(ErrorCode::kRpcTimeout);
    }
    MC_LOG_INFO("hand-over applied despite its error key={} to={} error={}", key, node->node_id,
                ToString(swapped.error()));
  }
  MaybeCrash(CrashPoint::kAfterHandOver);
  // Best effort: unconfirmed, the target would refuse upserts and removes of
  // the key (OBJECT_REPLICA_BUSY) until its own check, --adopt-confirm-delay-ms
  // later; a target of an older release answers that it has no such method.
  ConfirmLater(std::move(channel), key);
  return node->node_id;
}

bool ThriftPeerTransfer::HandOverLanded(const std::string& key, const std::string& target) {
  auto owner = master_.OwnerOf(key);
  return owner && *owner == target;
}

Result<NodeRecord> ThriftPeerTransfer::Pick(uint64_t size,
                                            const std::vector<std::string>& refused) {
  std::vector<std::string> exclude = refused;
  {
    std::lock_guard lock(mu_);
    const auto forget_before = SteadyClock::now() - unreachable_memory_;
    std::erase_if(unreachable_, [&](const auto& entry) { return entry.second < forget_before; });
    for (const auto& [node_id, when] : unreachable_) {
      if (std::ranges::find(exclude, node_id) == exclude.end()) exclude.push_back(node_id);
    }
  }
  auto node = master_.PickNode(size, exclude);
  // Only the nodes that failed this object rule a node out: one that was
  // unreachable a moment ago is still better than dropping the object.
  if (!node && node.error() == ErrorCode::kNoAvailableHandle && exclude.size() > refused.size()) {
    return master_.PickNode(size, refused);
  }
  return node;
}

void ThriftPeerTransfer::NoteSend(const std::string& node_id, const SendResult& sent) {
  const bool unreachable =
      !sent && !sent.error().at_source &&
      (sent.error().error == ErrorCode::kRpcFail || sent.error().error == ErrorCode::kRpcTimeout);
  std::lock_guard lock(mu_);
  if (!unreachable) {
    if (sent) unreachable_.erase(node_id);
    return;
  }
  unreachable_.insert_or_assign(node_id, SteadyClock::now());
  while (unreachable_.size() > kMaxUnreachable) {
    auto oldest = std::ranges::min_element(
        unreachable_, [](const auto& a, const auto& b) { return a.second < b.second; });
    unreachable_.erase(oldest);
  }
}

SendResult ThriftPeerTransfer::SendTo(WorkerChannel& channel, const std::string& node_id,
                                      const std::string& key, uint64_t size, uint64_t version,
                                      const ObjectOptions& options, const ObjectSource& source,
                                      bool dram_only) {
  // Every failure but a read of the source is the target's.
  auto at_target = [](ErrorCode error) { return std::unexpected(SendFailure{.error = error}); };
  auto adoption = StartAdopt(channel, key, size, version, options, dram_only);
  if (!adoption) return at_target(adoption.error());
  std::string why;
  RdmaOutcome outcome = RdmaOutcome::kUnavailable;
  if (rdma_ != nullptr && rdma_->enabled()) {
    auto rdma = SendByRdma(channel, node_id, *adoption, size, source, &why);
    if (!rdma) return at_target(rdma.error());
    outcome = *rdma;
  } else {
    why = rdma_ != nullptr ? rdma_->reason() : "no RDMA transport";
  }
  if (outcome == RdmaOutcome::kSent) {
    Count(node_id, Sent::kRdma, size, why);
    return {};
  }
  if (auto sent = SendByTcp(channel, *adoption, size, source); !sent) return sent;
  Count(node_id, outcome == RdmaOutcome::kFailed ? Sent::kTcpAfterRdmaFailed : Sent::kTcp, size,
        why);
  return {};
}

Result<ThriftPeerTransfer::Adoption> ThriftPeerTransfer::StartAdopt(WorkerChannel& channel,
                                                                    const std::string& key,
                                                                    uint64_t size, uint64_t version,
                                                                    const ObjectOptions& options,
                                                                    bool dram_only) {
  rpc::ReplicateConfig config;
  config.with_hard_pin = options.hard_pin;
  config.with_soft_pin = options.soft_pin;
  config.soft_pin_ttl_ms = options.soft_pin_ttl.count();
  if (dram_only) config.preferred_tier = "dram";
  rpc::PutStartResult started;
  auto call = channel.rpc.Call([&](rpc::WorkerServiceClient& c) {
    c.AdoptStart(started, key, static_cast<int64_t>(size), config, static_cast<int64_t>(version),
                 master_.node_id());
  });
  if (!call) return Err(call.error());
  if (auto ok = ToResult(started.code); !ok) return Err(ok.error());
  return Adoption{
      .handle = started.handle, .tier = started.tier, .tier_offset = started.tier_offset};
}

Result<ThriftPeerTransfer::RdmaOutcome> ThriftPeerTransfer::SendByRdma(
    WorkerChannel& channel, const std::string& node_id, const Adoption& adoption, uint64_t size,
    const ObjectSource& source, std::string* why) {
  if (adoption.tier.empty() || adoption.tier_offset < 0) {
    *why = "the target reported no directly writable allocation";
    return RdmaOutcome::kUnavailable;
  }
  RdmaConnector connect = [this, &channel](const RdmaEndpointInfo& local, std::string* peer_why) {
    return CallRdmaConnect(channel.rpc, master_.node_id(), local, peer_why);
  };
  auto written = rdma_->WriteObject(
      node_id, connect, adoption.tier, static_cast<uint64_t>(adoption.tier_offset), size,
      RdmaSource{.addr = source.host_address, .read = source.read}, why);
  if (!written) {
    return written.error() == ErrorCode::kTierNotFound ? RdmaOutcome::kUnavailable
                                                       : RdmaOutcome::kFailed;
  }
  auto ended = channel.rpc.Call(
      [&](rpc::WorkerServiceClient& c) { return c.AdoptEnd(adoption.handle, true); });
  if (!ended) return Err(ended.error());
  if (*ended == rpc::ErrorCode::INVALID_PARAMS) {
    // The target does not accept direct writes (no RDMA there any more):
    // its pending write is untouched, so the bytes can still come by TCP.
    *why = "the target refused the direct commit (INVALID_PARAMS)";
    return RdmaOutcome::kFailed;
  }
  if (auto ok = ToResult(*ended); !ok) return Err(ok.error());
  return RdmaOutcome::kSent;
}

SendResult ThriftPeerTransfer::SendByTcp(WorkerChannel& channel, const Adoption& adoption,
                                         uint64_t size, const ObjectSource& source) {
  std::string buffer;
  for (uint64_t offset = 0; offset < size; offset += kRpcChunkBytes) {
    buffer.resize(std::min(kRpcChunkBytes, size - offset));
    auto out = std::as_writable_bytes(std::span(buffer.data(), buffer.size()));
    std::optional<SendFailure> failed;
    if (auto read = source.read(offset, out); !read) {
      // Reported as before (kTransferFail): a tier's own code, such as
      // kNoAvailableHandle, would read as the master's "no node has room".
      MC_LOG_WARN("cannot read an object to send error={}", ToString(read.error()));
      failed = SendFailure{.error = ErrorCode::kTransferFail, .at_source = true};
    } else {
      auto sent = channel.rpc.Call([&](rpc::WorkerServiceClient& c) {
        return c.PutChunk(adoption.handle, static_cast<int64_t>(offset), buffer);
      });
      Result<void> taken = sent ? ToResult(*sent) : Err(sent.error());
      if (!taken) failed = SendFailure{.error = taken.error()};
    }
    if (failed) {
      channel.rpc.Call([&](rpc::WorkerServiceClient& c) { return c.PutRevoke(adoption.handle); });
      return std::unexpected(*failed);
    }
  }
  auto ended = channel.rpc.Call(
      [&](rpc::WorkerServiceClient& c) { return c.AdoptEnd(adoption.handle, false); });
  if (!ended) return std::unexpected(SendFailure{.error = ended.error()});
  if (auto ok = ToResult(*ended); !ok) return std::unexpected(SendFailure{.error = ok.error()});
  return {};
}

void ThriftPeerTransfer::Count(const std::string& node_id, Sent sent, uint64_t size,
                               const std::string& why) {
  const bool rdma = sent == Sent::kRdma;
  (rdma ? rdma_objects_ : tcp_objects_).fetch_add(1, std::memory_order_relaxed);
  (rdma ? rdma_bytes_ : tcp_bytes_).fetch_add(size, std::memory_order_relaxed);
  if (sent == Sent::kTcpAfterRdmaFailed) {
    rdma_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    MC_LOG_WARN("rdma transfer failed; object sent over tcp node={} size={} reason=\"{}\"", node_id,
                size, why);
  }
  // One line per peer whenever the transport to it changes.
  std::lock_guard lock(mu_);
  auto [it, first] = last_used_rdma_.try_emplace(node_id, rdma);
  if (!first && it->second == rdma) return;
  it->second = rdma;
  if (rdma) {
    MC_LOG_INFO("peer transfer transport node={} transport=rdma", node_id);
  } else {
    MC_LOG_INFO("peer transfer transport node={} transport=tcp reason=\"{}\"", node_id, why);
  }
}

PeerTransferStats ThriftPeerTransfer::stats() const {
  return PeerTransferStats{.rdma_objects = rdma_objects_.load(std::memory_order_relaxed),
                           .rdma_bytes = rdma_bytes_.load(std::memory_order_relaxed),
                           .tcp_objects = tcp_objects_.load(std::memory_order_relaxed),
                           .tcp_bytes = tcp_bytes_.load(std::memory_order_relaxed),
                           .rdma_fallbacks = rdma_fallbacks_.load(std::memory_order_relaxed)};
}

}  // namespace mooncake
