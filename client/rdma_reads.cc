#include "client/rdma_reads.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <span>
#include <utility>

#include "client/client_router.h"
#include "common/log.h"
#include "thrift/rdma_wire.h"
#include "transport/rdma_link.h"

namespace mooncake {
namespace {

using Clock = std::chrono::steady_clock;

// The owner's RdmaConnect, as the link's connector calls it (synchronously,
// while `owner` is alive).
RdmaConnector ConnectorFor(const Owner& owner, const std::string& initiator) {
  return [&owner, &initiator](const RdmaEndpointInfo& local, std::string* why) {
    return CallRdmaConnect(*owner.channel, initiator, local, why);
  };
}

// Workers keep one passive queue pair per initiator name and replace it when
// the same name connects again, so the name must be this Client's alone: not
// the co-located worker's node id (its own moves use that name), and not
// shared with another Client in this or another process.
std::string InitiatorName(const ClientConfig& config) {
  std::string where = config.local_node;
  if (where.empty()) {
    char host[256] = {};
    where = gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0' ? host : "unknown-host";
  }
  std::random_device random;
  return fmt::format("client-{}-{}-{:08x}", where, getpid(), random());
}

}  // namespace

struct RdmaReads::Placement {
  std::string tier;
  uint64_t offset = 0;
  uint64_t size = 0;
  int64_t version = 0;
  Clock::time_point held_until;  // measured from before the request was sent
};

RdmaReads::RdmaReads(std::unique_ptr<RdmaLink> link, std::string node_id, std::string reason,
                     uint64_t min_bytes)
    : link_(std::move(link)),
      node_id_(std::move(node_id)),
      reason_(std::move(reason)),
      min_bytes_(min_bytes) {}

RdmaReads::~RdmaReads() = default;

Result<std::unique_ptr<RdmaReads>> RdmaReads::Open(const ClientConfig& config) {
  auto mode = ParseRdmaMode(config.rdma);
  if (!mode) {
    MC_LOG_ERROR("invalid client config rdma=\"{}\" (expected off, auto or on)", config.rdma);
    return Err(ErrorCode::kInvalidParams);
  }
  std::string node_id = InitiatorName(config);
  if (*mode == RdmaMode::kOff) {
    return std::unique_ptr<RdmaReads>(new RdmaReads(
        nullptr, std::move(node_id), "RDMA is off (client rdma=off)", config.rdma_min_bytes));
  }
  RdmaLinkOptions options;
  options.mode = *mode;
  options.device = config.rdma_device;
  options.role = "client large reads";
  std::string why;
  auto link = RdmaLink::Open(options, &why);
  if (!link) {
    MC_LOG_ERROR("client rdma=on but RDMA is unusable error={} reason=\"{}\"",
                 ToString(link.error()), why);
    return Err(link.error());
  }
  std::string reason = (*link)->reason();
  if ((*link)->enabled()) {
    MC_LOG_INFO("client rdma reads enabled initiator={} min_bytes={} {}", node_id,
                config.rdma_min_bytes, reason);
  }
  return std::unique_ptr<RdmaReads>(new RdmaReads(std::move(*link), std::move(node_id),
                                                  std::move(reason), config.rdma_min_bytes));
}

bool RdmaReads::Wants(uint64_t total) const {
  return link_ != nullptr && link_->enabled() && total >= min_bytes_;
}

Result<RdmaReadOutcome> RdmaReads::Read(const Owner& owner, const std::string& key, int64_t version,
                                        uint64_t from, uint64_t total, const Write& write) {
  if (!Wants(total) || from >= total) return RdmaReadOutcome{};
  const RdmaConnector connect = ConnectorFor(owner, node_id_);
  std::string why;
  // A refusal is remembered by the link: learn it before asking for the
  // placement, so a cluster without RDMA costs no extra round trip.
  if (auto ok = link_->Connect(owner.node_id, connect, &why); !ok) {
    return Fallback(owner, key, why, {}, false);
  }
  auto placement = Place(owner, key, version, total, &why);
  if (!placement) return Fallback(owner, key, why, {}, false);

  uint64_t delivered = 0;
  Result<void> written;  // the caller's own failure ends the whole read
  RdmaSink sink = [&](uint64_t, std::span<const std::byte> bytes) -> Result<void> {
    written = write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (!written) return written;
    delivered += bytes.size();
    return {};
  };
  auto read = link_->ReadObject(owner.node_id, connect, placement->tier, placement->offset + from,
                                total - from, sink, &why);
  if (!written) return Err(written.error());
  if (delivered == 0) {
    return Fallback(owner, key, why, {}, !read && read.error() == ErrorCode::kTransferFail);
  }
  std::string doubt;
  if (!Vouch(owner, key, *placement, &doubt)) {
    return Fallback(owner, key, read ? doubt : why + "; " + doubt, {.verified = 0, .discard = true},
                    !read);
  }
  bytes_.fetch_add(delivered, std::memory_order_relaxed);
  if (!read) return Fallback(owner, key, why, {.verified = delivered}, true);
  gets_.fetch_add(1, std::memory_order_relaxed);
  return RdmaReadOutcome{.verified = delivered};
}

Result<RdmaReads::Placement> RdmaReads::Place(const Owner& owner, const std::string& key,
                                              int64_t version, uint64_t total, std::string* why) {
  const auto asked = Clock::now();
  rpc::Placement answer;
  auto call =
      owner.channel->Call([&](rpc::WorkerServiceClient& c) { c.GetPlacement(answer, key); });
  if (!call || answer.code != rpc::ErrorCode::OK) {
    ErrorCode code = call ? FromRpc(answer.code) : call.error();
    *why = fmt::format("GetPlacement failed: {}", ToString(code));
    return Err(code);
  }
  if (answer.version != version || answer.size < 0 || static_cast<uint64_t>(answer.size) != total) {
    *why = fmt::format("the object changed since its first chunk (version {} -> {})", version,
                       answer.version);
    return Err(ErrorCode::kObjectReplicaBusy);
  }
  // Only a held placement stays put while it is read; SSD objects are not.
  if (answer.memory.kind == rpc::MemoryHandleKind::NONE || answer.hold_ms <= 0 ||
      answer.offset < 0) {
    *why = fmt::format("tier {} does not hold its placement for remote readers", answer.tier);
    return Err(ErrorCode::kTierNotFound);
  }
  return Placement{.tier = answer.tier,
                   .offset = static_cast<uint64_t>(answer.offset),
                   .size = total,
                   .version = answer.version,
                   .held_until = asked + std::chrono::milliseconds(answer.hold_ms)};
}

bool RdmaReads::Vouch(const Owner& owner, const std::string& key, const Placement& before,
                      std::string* why) {
  rpc::Placement answer;
  auto call =
      owner.channel->Call([&](rpc::WorkerServiceClient& c) { c.GetPlacement(answer, key); });
  // The hold is checked after the answer: the bytes were read before it.
  if (Clock::now() >= before.held_until) {
    *why = "the placement's hold ran out during the read";
    return false;
  }
  if (!call || answer.code != rpc::ErrorCode::OK) {
    *why = fmt::format("GetPlacement after the read failed: {}",
                       ToString(call ? FromRpc(answer.code) : call.error()));
    return false;
  }
  if (answer.version != before.version || answer.tier != before.tier ||
      answer.offset != static_cast<int64_t>(before.offset) ||
      answer.size != static_cast<int64_t>(before.size)) {
    *why = fmt::format("the object changed during the read (version {} -> {})", before.version,
                       answer.version);
    return false;
  }
  return true;
}

RdmaReadOutcome RdmaReads::Fallback(const Owner& owner, const std::string& key,
                                    const std::string& why, RdmaReadOutcome outcome, bool warn) {
  fallbacks_.fetch_add(1, std::memory_order_relaxed);
  if (warn) {
    MC_LOG_WARN("rdma read failed, using tcp key={} node={} verified={} discard={} reason=\"{}\"",
                key, owner.node_id, outcome.verified, outcome.discard, why);
  } else {
    MC_LOG_DEBUG("rdma read not possible, using tcp key={} node={} discard={} reason=\"{}\"", key,
                 owner.node_id, outcome.discard, why);
  }
  return outcome;
}

void RdmaReads::Forget(const std::string& node_id) {
  if (link_ != nullptr && link_->enabled()) link_->Forget(node_id);
}

TransportCounters RdmaReads::counters() const {
  return TransportCounters{.rdma_gets = gets_.load(std::memory_order_relaxed),
                           .rdma_bytes = bytes_.load(std::memory_order_relaxed),
                           .rdma_fallbacks = fallbacks_.load(std::memory_order_relaxed),
                           .rdma_enabled = link_ != nullptr && link_->enabled(),
                           .rdma_reason = reason_};
}

}  // namespace mooncake
