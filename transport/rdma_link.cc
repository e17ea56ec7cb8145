#include "transport/rdma_link.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace mooncake {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMinBounceBytes = 4096;

void SetWhy(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

Result<void> CheckOptions(const RdmaLinkOptions& o, std::string* why) {
  std::string problem;
  if (o.port < 1 || o.port > 255) {
    problem = fmt::format("rdma port {} out of range [1, 255]", o.port);
  } else if (o.gid_index < -1) {
    problem = fmt::format("rdma gid index {} invalid (-1 picks one, else >= 0)", o.gid_index);
  } else if (o.max_passive_qps == 0 || o.max_active_qps == 0) {
    problem = "rdma queue pair limits must be positive";
  } else if (o.bounce_buffers == 0 || o.bounce_bytes < kMinBounceBytes) {
    problem =
        fmt::format("rdma needs at least one bounce buffer of at least {} bytes", kMinBounceBytes);
  } else if (o.transfer_timeout.count() <= 0 || o.retry_refused_after.count() < 0) {
    problem = "rdma timeouts must be positive";
  }
  if (problem.empty()) return {};
  SetWhy(why, std::move(problem));
  return Err(ErrorCode::kInvalidParams);
}

// Keeps at most `limit` entries, dropping the lowest `sequence` first; the
// dropped values are moved into `retired` so they die outside the lock.
template <typename Map, typename Retired>
void TrimOldest(Map& map, size_t limit, Retired& retired) {
  while (map.size() > limit) {
    auto oldest = std::min_element(map.begin(), map.end(), [](const auto& a, const auto& b) {
      return a.second->sequence < b.second->sequence;
    });
    MC_LOG_INFO("rdma dropping least recently used queue pair node={} limit={}", oldest->first,
                limit);
    retired.push_back(std::move(oldest->second));
    map.erase(oldest);
  }
}

}  // namespace

Result<RdmaMode> ParseRdmaMode(std::string_view text) {
  if (text == "off") return RdmaMode::kOff;
  if (text == "auto") return RdmaMode::kAuto;
  if (text == "on") return RdmaMode::kOn;
  return Err(ErrorCode::kInvalidParams);
}

std::string_view ToString(RdmaMode mode) {
  switch (mode) {
    case RdmaMode::kOff:
      return "off";
    case RdmaMode::kAuto:
      return "auto";
    case RdmaMode::kOn:
      return "on";
  }
  return "unknown";
}

struct RdmaLink::Exported {
  std::string tier;
  RdmaMemoryRegion region;
};

struct RdmaLink::PassivePeer {
  std::unique_ptr<RdmaQueuePair> qp;
  uint64_t sequence = 0;  // when it connected
};

struct RdmaLink::ActivePeer {
  std::unique_ptr<RdmaQueuePair> qp;
  std::vector<RdmaExport> regions;  // fixed once connected
  uint64_t sequence = 0;            // last use; guarded by the link's mu_
};

// A bounce buffer checked out of the pool; returned on destruction.
class RdmaLink::BounceLease {
 public:
  BounceLease(RdmaLink& link, size_t index) : link_(link), index_(index) {}
  ~BounceLease() {
    {
      std::lock_guard lock(link_.pool_mu_);
      link_.free_bounce_.push_back(index_);
    }
    link_.pool_cv_.notify_one();
  }
  BounceLease(const BounceLease&) = delete;
  BounceLease& operator=(const BounceLease&) = delete;

  const RdmaMemoryRegion& region() const { return link_.bounce_regions_[index_]; }
  std::span<std::byte> bytes(uint64_t n) const { return {link_.bounce_memory_[index_].get(), n}; }

 private:
  RdmaLink& link_;
  const size_t index_;
};

RdmaLink::RdmaLink(RdmaLinkOptions options, std::unique_ptr<RdmaContext> context,
                   std::string reason)
    : options_(std::move(options)), context_(std::move(context)), reason_(std::move(reason)) {}

RdmaLink::~RdmaLink() = default;

// ---- Opening ----

Result<std::unique_ptr<RdmaLink>> RdmaLink::Open(const RdmaLinkOptions& options, std::string* why) {
  if (auto valid = CheckOptions(options, why); !valid) return Err(valid.error());
  if (options.mode == RdmaMode::kOff) {
    MC_LOG_INFO("rdma off (--rdma off): {} use TCP", options.role);
    return std::unique_ptr<RdmaLink>(new RdmaLink(options, nullptr, "RDMA is off (--rdma off)"));
  }
  std::string open_why;
  auto context = RdmaContext::Open(options.device, options.port, options.gid_index, &open_why);
  if (!context) return Unavailable(options, context.error(), open_why, why);
  std::string described = fmt::format(
      "RDMA device {} port {} ({}, gid_index {})", (*context)->device_name(), (*context)->port(),
      (*context)->is_roce() ? "RoCE" : "InfiniBand", (*context)->gid_index());
  std::unique_ptr<RdmaLink> link(new RdmaLink(options, std::move(*context), described));
  if (auto ok = link->AllocateBounceBuffers(&open_why); !ok) {
    return Unavailable(options, ok.error(), open_why, why);
  }
  MC_LOG_INFO("rdma enabled mode={} {} bounce_buffers={} bounce_bytes={}", ToString(options.mode),
              described, options.bounce_buffers, options.bounce_bytes);
  return link;
}

Result<std::unique_ptr<RdmaLink>> RdmaLink::Unavailable(const RdmaLinkOptions& options,
                                                        ErrorCode code, const std::string& reason,
                                                        std::string* why) {
  SetWhy(why, reason);
  if (options.mode == RdmaMode::kOn) return Err(code);  // the caller reports it
  const std::string probe = RdmaContext::ProbeReason();
  if (probe.starts_with("no RDMA device")) {
    MC_LOG_INFO("rdma disabled (--rdma auto): {} use TCP reason=\"{}\"", options.role, reason);
  } else {
    MC_LOG_WARN("rdma disabled (--rdma auto): {} use TCP reason=\"{}\" probe=\"{}\"", options.role,
                reason, probe);
  }
  return std::unique_ptr<RdmaLink>(new RdmaLink(options, nullptr, reason));
}

Result<void> RdmaLink::AllocateBounceBuffers(std::string* why) {
  for (size_t i = 0; i < options_.bounce_buffers; ++i) {
    bounce_memory_.push_back(std::make_unique_for_overwrite<std::byte[]>(options_.bounce_bytes));
    auto region = context_->Register(bounce_memory_.back().get(), options_.bounce_bytes);
    if (!region) {
      SetWhy(why,
             fmt::format("cannot register a {}-byte bounce buffer on {}: {}", options_.bounce_bytes,
                         context_->device_name(), ToString(region.error())));
      return Err(region.error());
    }
    bounce_regions_.push_back(std::move(*region));
    free_bounce_.push_back(i);
  }
  return {};
}

// ---- Exports ----

Result<void> RdmaLink::ExportTier(const std::string& tier, void* base, uint64_t length,
                                  bool device_memory) {
  if (!enabled()) return Err(ErrorCode::kTierNotFound);
  auto exported_as = [this](const std::string& name) {
    return std::any_of(exported_.begin(), exported_.end(),
                       [&name](const auto& e) { return e->tier == name; });
  };
  if (tier.empty() || base == nullptr || length == 0) return Err(ErrorCode::kInvalidParams);
  {
    std::lock_guard lock(mu_);
    if (exported_as(tier)) return Err(ErrorCode::kInvalidParams);
  }
  auto region = context_->Register(base, length, device_memory);
  if (!region) {
    MC_LOG_WARN("rdma tier not exported tier={} length={} device_memory={} error={}", tier, length,
                device_memory, ToString(region.error()));
    return Err(region.error());
  }
  std::lock_guard lock(mu_);
  if (exported_as(tier)) return Err(ErrorCode::kInvalidParams);  // a racing export won
  exported_.push_back(std::make_unique<Exported>(Exported{tier, std::move(*region)}));
  MC_LOG_INFO("rdma exported tier={} addr={} length={} device_memory={}", tier, base, length,
              device_memory);
  return {};
}

std::vector<RdmaExport> RdmaLink::exports() const {
  std::lock_guard lock(mu_);
  std::vector<RdmaExport> out;
  for (const auto& e : exported_) out.push_back({e->tier, e->region.remote()});
  return out;
}

const RdmaMemoryRegion* RdmaLink::LocalRegionFor(const void* addr, uint64_t size) const {
  if (addr == nullptr) return nullptr;
  const auto where = reinterpret_cast<uintptr_t>(addr);
  std::lock_guard lock(mu_);
  for (const auto& e : exported_) {
    const auto base = reinterpret_cast<uintptr_t>(e->region.addr());
    if (where >= base && RdmaRangeFits(e->region.length(), where - base, size)) return &e->region;
  }
  return nullptr;
}

// ---- Passive side ----

Result<RdmaPeerInfo> RdmaLink::Accept(const std::string& initiator_node,
                                      const RdmaEndpointInfo& initiator, std::string* why) {
  if (!enabled()) {
    SetWhy(why, reason_);
    return Err(ErrorCode::kTierNotFound);
  }
  if (initiator_node.empty()) {
    SetWhy(why, "the initiator names no node");
    return Err(ErrorCode::kInvalidParams);
  }
  auto qp = RdmaQueuePair::Create(*context_);
  if (!qp) {
    SetWhy(why, fmt::format("cannot create a queue pair on {}", context_->device_name()));
    return Err(qp.error());
  }
  if (auto ok = (*qp)->Connect(initiator); !ok) {
    SetWhy(why, fmt::format("cannot connect to the initiator's queue pair qp_num={}: {}",
                            initiator.qp_num, ToString(ok.error())));
    return Err(ok.error());
  }
  RdmaPeerInfo info{.endpoint = (*qp)->local(), .regions = exports()};
  KeepPassive(initiator_node, std::move(*qp));
  accepts_.fetch_add(1, std::memory_order_relaxed);
  MC_LOG_INFO("rdma accepted initiator={} qp={} initiator_qp={} regions={}", initiator_node,
              info.endpoint.qp_num, initiator.qp_num, info.regions.size());
  return info;
}

void RdmaLink::KeepPassive(const std::string& initiator_node, std::unique_ptr<RdmaQueuePair> qp) {
  std::vector<std::unique_ptr<PassivePeer>> retired;  // destroyed after the lock
  std::lock_guard lock(mu_);
  auto& slot = passive_[initiator_node];
  if (slot) retired.push_back(std::move(slot));  // a reconnect replaces the old one
  slot = std::make_unique<PassivePeer>(PassivePeer{std::move(qp), next_sequence_++});
  TrimOldest(passive_, options_.max_passive_qps, retired);
}

// ---- Active side ----

Result<void> RdmaLink::WriteObject(const std::string& peer_node, const RdmaConnector& connect,
                                   const std::string& tier, uint64_t tier_offset, uint64_t size,
                                   const RdmaSource& source, std::string* why) {
  std::shared_ptr<ActivePeer> peer;
  auto remote = RemoteRange(peer_node, connect, tier, tier_offset, size, &peer, why);
  if (!remote) return Err(remote.error());
  bool direct = false;
  auto sent = Send(*peer, *remote, tier_offset, size, source, &direct, why);
  if (!sent) {
    write_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!peer->qp->connected()) DropPeer(peer_node, peer.get());
    return sent;
  }
  objects_written_.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(size, std::memory_order_relaxed);
  if (direct) direct_writes_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

Result<void> RdmaLink::ReadObject(const std::string& peer_node, const RdmaConnector& connect,
                                  const std::string& tier, uint64_t tier_offset, uint64_t size,
                                  const RdmaSink& sink, std::string* why) {
  std::shared_ptr<ActivePeer> peer;
  auto remote = RemoteRange(peer_node, connect, tier, tier_offset, size, &peer, why);
  if (!remote) return Err(remote.error());
  auto read = ReadBounced(*peer, *remote, tier_offset, size, sink, why);
  if (!read) {
    read_failures_.fetch_add(1, std::memory_order_relaxed);
    if (!peer->qp->connected()) DropPeer(peer_node, peer.get());
    return read;
  }
  objects_read_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(size, std::memory_order_relaxed);
  return {};
}

Result<void> RdmaLink::Connect(const std::string& peer_node, const RdmaConnector& connect,
                               std::string* why) {
  if (!enabled()) {
    SetWhy(why, reason_);
    return Err(ErrorCode::kTierNotFound);
  }
  auto peer = PeerFor(peer_node, connect, why);
  if (!peer) return Err(peer.error());
  return {};
}

Result<RdmaRemoteRegion> RdmaLink::RemoteRange(const std::string& peer_node,
                                               const RdmaConnector& connect,
                                               const std::string& tier, uint64_t tier_offset,
                                               uint64_t size, std::shared_ptr<ActivePeer>* peer,
                                               std::string* why) {
  if (!enabled()) {
    SetWhy(why, reason_);
    return Err(ErrorCode::kTierNotFound);
  }
  auto kept = PeerFor(peer_node, connect, why);
  if (!kept) return Err(kept.error());
  const auto& regions = (*kept)->regions;
  auto target = std::find_if(regions.begin(), regions.end(),
                             [&tier](const RdmaExport& e) { return e.tier == tier; });
  if (target == regions.end()) {
    SetWhy(why, fmt::format("peer {} exports no RDMA region for tier {}", peer_node, tier));
    return Err(ErrorCode::kTierNotFound);
  }
  if (!RdmaRangeFits(target->region.length, tier_offset, size)) {
    SetWhy(why, fmt::format("offset {} + size {} past peer {}'s {} region of {} bytes", tier_offset,
                            size, peer_node, tier, target->region.length));
    return Err(ErrorCode::kInvalidParams);
  }
  *peer = std::move(*kept);
  return target->region;
}

Result<void> RdmaLink::Send(ActivePeer& peer, const RdmaRemoteRegion& remote,
                            uint64_t remote_offset, uint64_t size, const RdmaSource& source,
                            bool* direct, std::string* why) {
  if (const RdmaMemoryRegion* local = LocalRegionFor(source.addr, size)) {
    *direct = true;
    const uint64_t local_offset =
        static_cast<const std::byte*>(source.addr) - static_cast<const std::byte*>(local->addr());
    auto written = peer.qp->Write(*local, local_offset, remote, remote_offset, size,
                                  options_.transfer_timeout);
    if (written) return {};
    SetWhy(why, fmt::format("rdma write of {} bytes failed: {}", size, ToString(written.error())));
    return Err(ErrorCode::kTransferFail);
  }
  if (!source.read) {
    SetWhy(why, "the source is neither registered nor readable");
    return Err(ErrorCode::kInvalidParams);
  }
  return WriteBounced(peer, remote, remote_offset, size, source.read, why);
}

Result<void> RdmaLink::WriteBounced(ActivePeer& peer, const RdmaRemoteRegion& remote,
                                    uint64_t remote_offset, uint64_t size, const RdmaReader& read,
                                    std::string* why) {
  const auto deadline = Clock::now() + options_.transfer_timeout;
  BounceLease bounce = AcquireBounce();
  const uint64_t chunk = bounce.region().length();
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(chunk, size - done);
    if (auto ok = read(done, bounce.bytes(n)); !ok) {
      SetWhy(why,
             fmt::format("reading the source at offset {} failed: {}", done, ToString(ok.error())));
      return Err(ErrorCode::kTransferFail);
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      SetWhy(why, fmt::format("rdma write timed out after {} of {} bytes", done, size));
      return Err(ErrorCode::kTransferFail);
    }
    if (auto ok = peer.qp->Write(bounce.region(), 0, remote, remote_offset + done, n, left); !ok) {
      SetWhy(why, fmt::format("rdma write at offset {} failed: {}", done, ToString(ok.error())));
      return Err(ErrorCode::kTransferFail);
    }
    done += n;
  }
  return {};
}

Result<void> RdmaLink::ReadBounced(ActivePeer& peer, const RdmaRemoteRegion& remote,
                                   uint64_t remote_offset, uint64_t size, const RdmaSink& sink,
                                   std::string* why) {
  const auto deadline = Clock::now() + options_.transfer_timeout;
  BounceLease bounce = AcquireBounce();
  const uint64_t chunk = bounce.region().length();
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(chunk, size - done);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      SetWhy(why, fmt::format("rdma read timed out after {} of {} bytes", done, size));
      return Err(ErrorCode::kTransferFail);
    }
    if (auto ok = peer.qp->Read(bounce.region(), 0, remote, remote_offset + done, n, left); !ok) {
      SetWhy(why, fmt::format("rdma read at offset {} failed: {}", done, ToString(ok.error())));
      return Err(ErrorCode::kTransferFail);
    }
    if (auto ok = sink(done, bounce.bytes(n)); !ok) {
      SetWhy(why, fmt::format("the sink refused {} bytes at offset {}: {}", n, done,
                              ToString(ok.error())));
      return Err(ErrorCode::kTransferFail);
    }
    done += n;
  }
  return {};
}

RdmaLink::BounceLease RdmaLink::AcquireBounce() {
  std::unique_lock lock(pool_mu_);
  pool_cv_.wait(lock, [this] { return !free_bounce_.empty(); });
  const size_t index = free_bounce_.back();
  free_bounce_.pop_back();
  return BounceLease(*this, index);
}

Result<std::shared_ptr<RdmaLink::ActivePeer>> RdmaLink::PeerFor(const std::string& peer_node,
                                                                const RdmaConnector& connect,
                                                                std::string* why) {
  auto cached = CachedPeer(peer_node, why);
  if (!cached || *cached) return cached;
  std::lock_guard connecting(connect_mu_);
  cached = CachedPeer(peer_node, why);  // another thread may have connected meanwhile
  if (!cached || *cached) return cached;
  return ConnectPeer(peer_node, connect, why);
}

Result<std::shared_ptr<RdmaLink::ActivePeer>> RdmaLink::CachedPeer(const std::string& peer_node,
                                                                   std::string* why) {
  std::lock_guard lock(mu_);
  if (auto it = active_.find(peer_node); it != active_.end()) {
    it->second->sequence = next_sequence_++;
    return it->second;
  }
  if (auto it = refused_.find(peer_node); it != refused_.end()) {
    if (Clock::now() < it->second.until) {
      SetWhy(why, it->second.why);
      return Err(ErrorCode::kTierNotFound);
    }
    refused_.erase(it);
  }
  return std::shared_ptr<ActivePeer>();
}

Result<std::shared_ptr<RdmaLink::ActivePeer>> RdmaLink::ConnectPeer(const std::string& peer_node,
                                                                    const RdmaConnector& connect,
                                                                    std::string* why) {
  auto qp = RdmaQueuePair::Create(*context_);
  if (!qp) {
    return Refuse(peer_node, fmt::format("cannot create a queue pair: {}", ToString(qp.error())),
                  why);
  }
  std::string peer_why;
  auto answer = connect ? connect((*qp)->local(), &peer_why) : Err(ErrorCode::kInvalidParams);
  if (!answer) {
    return Refuse(peer_node,
                  fmt::format("peer {} refused RDMA ({}): {}", peer_node, ToString(answer.error()),
                              peer_why.empty() ? "no reason" : peer_why),
                  why);
  }
  if (auto ok = (*qp)->Connect(answer->endpoint); !ok) {
    return Refuse(peer_node,
                  fmt::format("cannot connect to peer {}'s queue pair qp_num={}: {}", peer_node,
                              answer->endpoint.qp_num, ToString(ok.error())),
                  why);
  }
  auto peer = std::make_shared<ActivePeer>();
  peer->qp = std::move(*qp);
  peer->regions = std::move(answer->regions);
  MC_LOG_INFO("rdma connected peer={} qp={} peer_qp={} regions={}", peer_node,
              peer->qp->local().qp_num, answer->endpoint.qp_num, peer->regions.size());
  std::vector<std::shared_ptr<ActivePeer>> retired;  // destroyed after the lock
  std::lock_guard lock(mu_);
  peer->sequence = next_sequence_++;
  active_[peer_node] = peer;
  TrimOldest(active_, options_.max_active_qps, retired);
  connects_.fetch_add(1, std::memory_order_relaxed);
  return peer;
}

Result<std::shared_ptr<RdmaLink::ActivePeer>> RdmaLink::Refuse(const std::string& peer_node,
                                                               std::string reason,
                                                               std::string* why) {
  connect_failures_.fetch_add(1, std::memory_order_relaxed);
  MC_LOG_DEBUG("rdma connect failed peer={} retry_in_ms={} reason=\"{}\"", peer_node,
               options_.retry_refused_after.count(), reason);
  SetWhy(why, reason);
  std::lock_guard lock(mu_);
  refused_[peer_node] = Refusal{Clock::now() + options_.retry_refused_after, std::move(reason)};
  return Err(ErrorCode::kTierNotFound);
}

void RdmaLink::DropPeer(const std::string& peer_node, const ActivePeer* peer) {
  std::shared_ptr<ActivePeer> retired;  // destroyed after the lock
  std::lock_guard lock(mu_);
  auto it = active_.find(peer_node);
  if (it == active_.end() || it->second.get() != peer) return;
  MC_LOG_WARN("rdma dropping broken queue pair peer={}", peer_node);
  retired = std::move(it->second);
  active_.erase(it);
}

void RdmaLink::Forget(const std::string& peer_node) {
  std::shared_ptr<ActivePeer> retired;  // destroyed after the lock
  std::lock_guard lock(mu_);
  if (auto it = active_.find(peer_node); it != active_.end()) {
    retired = std::move(it->second);
    active_.erase(it);
  }
  refused_.erase(peer_node);
}

RdmaLinkStats RdmaLink::stats() const {
  RdmaLinkStats s;
  s.enabled = enabled();
  s.accepts = accepts_.load(std::memory_order_relaxed);
  s.connects = connects_.load(std::memory_order_relaxed);
  s.connect_failures = connect_failures_.load(std::memory_order_relaxed);
  s.objects_written = objects_written_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  s.direct_writes = direct_writes_.load(std::memory_order_relaxed);
  s.write_failures = write_failures_.load(std::memory_order_relaxed);
  s.objects_read = objects_read_.load(std::memory_order_relaxed);
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.read_failures = read_failures_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.exported_regions = exported_.size();
  s.passive_qps = passive_.size();
  s.active_qps = active_.size();
  return s;
}

}  // namespace mooncake
