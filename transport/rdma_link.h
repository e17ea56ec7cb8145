#pragma once

// RdmaLink: one process's RDMA side (a worker's, or a client's), over
// transport/rdma_transport.h. Free of Thrift: WorkerHandler::RdmaConnect,
// ThriftPeerTransfer and the client's RDMA reads translate.
//
//   context      one RdmaContext, opened at start (--rdma auto|on|off)
//   exports      the tier arenas registered for remote READ/WRITE (DRAM
//                always; VRAM where GPUDirect registration succeeds), handed
//                to every initiator with its queue pair
//   passive QPs  one per initiator node, created by Accept (the peer's
//                RdmaConnect); the initiator drives them, this side only
//                keeps them alive. A reconnect of the same node replaces its
//                queue pair; past max_passive_qps the least recently
//                connected is dropped (its initiator reconnects on failure)
//   active QPs   one per peer node this side writes to or reads from,
//                connected on first use through a caller-supplied
//                RdmaConnector (the peer's RdmaConnect over Thrift), dropped
//                when a transfer fails
//   bounce       registered staging buffers for sources outside a
//                registered region (SSD objects, VRAM without GPUDirect) and
//                for every RDMA READ (the reader's destination is not
//                registered)
//
// With no usable device the link is disabled (enabled() false, reason() says
// why): every call answers kTierNotFound and callers use TCP.
//
// Ownership: the link owns its context, regions, queue pairs and bounce
// buffers. Exported memory belongs to the tiers and must outlive the link
// (destroy the link before the tiers). RdmaReader and RdmaSink callbacks are
// borrowed for the duration of one call.
//
// Thread-safety: every public method may be called from any thread. mu_
// guards the export list, the passive and active maps and the refusal cache;
// a queue pair serialises its own transfers; pool_mu_ guards the free bounce
// buffers. No RDMA transfer, connector call or sink call runs under mu_.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/rdma_transport.h"

namespace mooncake {

enum class RdmaMode {
  kOff,   // never use RDMA
  kAuto,  // use it when a device is usable, else log why and use TCP
  kOn,    // a device is required: the worker does not start without one
};

// "off", "auto", "on"; kInvalidParams otherwise.
Result<RdmaMode> ParseRdmaMode(std::string_view text);
std::string_view ToString(RdmaMode mode);

struct RdmaLinkOptions {
  RdmaMode mode = RdmaMode::kAuto;
  std::string device;  // "" picks the first device
  int port = 1;        // 1-based
  int gid_index = -1;  // -1: first RoCE v2 IPv4-mapped GID, else 0
  // Passive queue pairs kept for initiators (one per initiator node).
  size_t max_passive_qps = 64;
  // Active queue pairs kept towards peers (one per peer node).
  size_t max_active_qps = 64;
  // Registered staging buffers; a transfer holds one for its duration.
  size_t bounce_buffers = 2;
  uint64_t bounce_bytes = 4ull << 20;
  // A peer that refused RdmaConnect (or could not be reached) is asked again
  // only after this; meanwhile transfers to it use TCP at once.
  std::chrono::milliseconds retry_refused_after{30'000};
  // Bound on one object's RDMA WRITE (well below the receiver's
  // put_start_discard_timeout, so its allocation is still ours) or READ.
  std::chrono::milliseconds transfer_timeout{10'000};
  // What uses the link, for its log lines ("... inter-node moves use TCP").
  std::string role = "inter-node moves";
};

// A registered tier arena, as a peer addresses it.
struct RdmaExport {
  std::string tier;  // the tier's name ("dram", "vram")
  RdmaRemoteRegion region;
};

// One side of a connection: its queue pair and the arenas it exports.
struct RdmaPeerInfo {
  RdmaEndpointInfo endpoint;
  std::vector<RdmaExport> regions;
};

// Asks a peer to accept a connection from `local` (its RdmaConnect). On
// refusal returns the error (kTierNotFound: the peer has no RDMA) and sets
// `*why` to the peer's reason.
using RdmaConnector =
    std::function<Result<RdmaPeerInfo>(const RdmaEndpointInfo& local, std::string* why)>;

// Reads bytes [offset, offset + out.size()) of the object being sent; the
// same signature as the backend's ObjectReader.
using RdmaReader = std::function<Result<void>(uint64_t offset, std::span<std::byte> out)>;

// Takes bytes [offset, offset + bytes.size()) of an object being read, in
// order; `bytes` is valid only during the call. An error stops the read.
using RdmaSink = std::function<Result<void>(uint64_t offset, std::span<const std::byte> bytes)>;

// What is being sent: `addr`, when set and inside a region this link
// registered, is written from directly; otherwise `read` fills a bounce
// buffer chunk by chunk.
struct RdmaSource {
  const void* addr = nullptr;
  RdmaReader read;
};

struct RdmaLinkStats {
  bool enabled = false;
  uint64_t exported_regions = 0;
  uint64_t accepts = 0;      // passive connections set up for initiators
  uint64_t passive_qps = 0;  // currently kept
  uint64_t connects = 0;     // active connections made to peers
  uint64_t connect_failures = 0;
  uint64_t active_qps = 0;       // currently kept
  uint64_t objects_written = 0;  // whole objects RDMA-written to peers
  uint64_t bytes_written = 0;
  uint64_t direct_writes = 0;  // of objects_written, without a bounce copy
  uint64_t write_failures = 0;
  uint64_t objects_read = 0;  // whole ranges RDMA-read from peers
  uint64_t bytes_read = 0;
  uint64_t read_failures = 0;
};

class RdmaLink {
 public:
  // kOff: a disabled link. kAuto: opens the device, or logs why not (with
  // the probe) and returns a disabled link. kOn: fails when the device cannot
  // be opened (kTierNotFound when there is none) with `*why` set, unlogged.
  // kInvalidParams for options out of range, whatever the mode.
  static Result<std::unique_ptr<RdmaLink>> Open(const RdmaLinkOptions& options,
                                                std::string* why = nullptr);
  ~RdmaLink();
  RdmaLink(const RdmaLink&) = delete;
  RdmaLink& operator=(const RdmaLink&) = delete;

  bool enabled() const { return context_ != nullptr; }
  // Why the link is disabled; when enabled, which device and port it uses.
  const std::string& reason() const { return reason_; }
  RdmaMode mode() const { return options_.mode; }

  // Registers a tier's arena for remote access and lists it in every Accept
  // answer. device_memory marks VRAM (GPUDirect); when registering it fails
  // the result is kTransferFail and the tier is not exported (senders use TCP
  // for it). kTierNotFound when disabled; kInvalidParams for an empty name,
  // a null or empty range, or a name already exported.
  Result<void> ExportTier(const std::string& tier, void* base, uint64_t length, bool device_memory);
  std::vector<RdmaExport> exports() const;

  // Passive side: a queue pair connected to `initiator` for
  // `initiator_node`, replacing any earlier one of that node, and the
  // exported regions. kTierNotFound (with reason()) when disabled;
  // kInvalidParams for an empty node or a malformed endpoint.
  Result<RdmaPeerInfo> Accept(const std::string& initiator_node, const RdmaEndpointInfo& initiator,
                              std::string* why = nullptr);

  // Active side: RDMA WRITEs `size` bytes of `source` into `peer_node`'s
  // exported `tier` at `tier_offset`, connecting through `connect` first
  // when no queue pair to that peer is kept. Errors, with `*why`:
  //   kTierNotFound   RDMA cannot be used for this (disabled here, the peer
  //                   refused recently, or it does not export `tier`):
  //                   nothing was written
  //   kInvalidParams  the range does not fit the peer's region, or the
  //                   source is neither registered nor readable: nothing
  //                   was written
  //   kTransferFail   a transfer or the source failed: the target range may
  //                   hold part of the bytes; a broken queue pair is dropped
  //                   (the next call reconnects)
  Result<void> WriteObject(const std::string& peer_node, const RdmaConnector& connect,
                           const std::string& tier, uint64_t tier_offset, uint64_t size,
                           const RdmaSource& source, std::string* why = nullptr);

  // Active side: RDMA READs `size` bytes of `peer_node`'s exported `tier` at
  // `tier_offset`, chunk by chunk through a bounce buffer, handing each chunk
  // to `sink` in order (offsets relative to the start of the range).
  // Connects as WriteObject does. Errors, with `*why`:
  //   kTierNotFound   RDMA cannot be used for this (as for WriteObject):
  //                   nothing was read, the sink was not called
  //   kInvalidParams  the range does not fit the peer's region: nothing was
  //                   read, the sink was not called
  //   kTransferFail   a transfer failed, timed out (transfer_timeout for the
  //                   whole range) or the sink refused a chunk: the sink may
  //                   have taken a prefix of the range; a broken queue pair is
  //                   dropped (the next call reconnects)
  // The bytes are whatever the peer's memory held while they were read: a
  // caller that needs one version of an object checks, after reading, that
  // the peer kept it in place meanwhile.
  Result<void> ReadObject(const std::string& peer_node, const RdmaConnector& connect,
                          const std::string& tier, uint64_t tier_offset, uint64_t size,
                          const RdmaSink& sink, std::string* why = nullptr);

  // Keeps a queue pair to `peer_node`, connecting through `connect` when none
  // is kept: a caller learns that RDMA to the peer is unusable (kTierNotFound,
  // with `*why`; a refusal is remembered as for transfers) before spending a
  // round trip on a transfer's set-up.
  Result<void> Connect(const std::string& peer_node, const RdmaConnector& connect,
                       std::string* why = nullptr);

  // Drops the active queue pair and any refusal remembered for `peer_node`
  // (its address changed, it restarted).
  void Forget(const std::string& peer_node);

  RdmaLinkStats stats() const;

 private:
  struct ActivePeer;
  struct PassivePeer;
  struct Exported;
  struct Refusal {
    std::chrono::steady_clock::time_point until;
    std::string why;
  };
  class BounceLease;

  RdmaLink(RdmaLinkOptions options, std::unique_ptr<RdmaContext> context, std::string reason);
  // kOn: fails with `code` (not logged: the caller reports it with `why`);
  // kAuto: a disabled link, logged with the reason.
  static Result<std::unique_ptr<RdmaLink>> Unavailable(const RdmaLinkOptions& options,
                                                       ErrorCode code, const std::string& reason,
                                                       std::string* why);
  Result<void> AllocateBounceBuffers(std::string* why);
  // Keeps `qp` as `initiator_node`'s passive queue pair, replacing an older
  // one and dropping the least recently connected past the limit.
  void KeepPassive(const std::string& initiator_node, std::unique_ptr<RdmaQueuePair> qp);
  // The kept queue pair to `peer_node`, connecting when there is none.
  Result<std::shared_ptr<ActivePeer>> PeerFor(const std::string& peer_node,
                                              const RdmaConnector& connect, std::string* why);
  // The kept peer, null when none is kept, kTierNotFound while it is refused.
  Result<std::shared_ptr<ActivePeer>> CachedPeer(const std::string& peer_node, std::string* why);
  Result<std::shared_ptr<ActivePeer>> ConnectPeer(const std::string& peer_node,
                                                  const RdmaConnector& connect, std::string* why);
  Result<std::shared_ptr<ActivePeer>> Refuse(const std::string& peer_node, std::string reason,
                                             std::string* why);
  void DropPeer(const std::string& peer_node, const ActivePeer* peer);
  // The registered region holding [addr, addr + size), if any.
  const RdmaMemoryRegion* LocalRegionFor(const void* addr, uint64_t size) const;
  Result<void> Send(ActivePeer& peer, const RdmaRemoteRegion& remote, uint64_t remote_offset,
                    uint64_t size, const RdmaSource& source, bool* direct, std::string* why);
  Result<void> WriteBounced(ActivePeer& peer, const RdmaRemoteRegion& remote,
                            uint64_t remote_offset, uint64_t size, const RdmaReader& read,
                            std::string* why);
  // The kept peer's export of `tier`, connecting first when needed, with the
  // range [tier_offset, tier_offset + size) checked against it.
  Result<RdmaRemoteRegion> RemoteRange(const std::string& peer_node, const RdmaConnector& connect,
                                       const std::string& tier, uint64_t tier_offset, uint64_t size,
                                       std::shared_ptr<ActivePeer>* peer, std::string* why);
  Result<void> ReadBounced(ActivePeer& peer, const RdmaRemoteRegion& remote, uint64_t remote_offset,
                           uint64_t size, const RdmaSink& sink, std::string* why);
  // Blocks until a bounce buffer is free.
  BounceLease AcquireBounce();

  const RdmaLinkOptions options_;
  // Declared first: destroyed last, after every region and queue pair.
  const std::unique_ptr<RdmaContext> context_;
  const std::string reason_;

  // Staging memory, then its registrations (deregistered first). Fixed after
  // Open; which ones are free is guarded by pool_mu_.
  std::vector<std::unique_ptr<std::byte[]>> bounce_memory_;
  std::vector<RdmaMemoryRegion> bounce_regions_;
  mutable std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<size_t> free_bounce_;  // guarded by pool_mu_

  mutable std::mutex mu_;
  // Exported arenas; an entry is never removed while the link lives, so a
  // pointer to its region stays valid without the lock.
  std::vector<std::unique_ptr<Exported>> exported_;              // guarded by mu_
  std::map<std::string, std::unique_ptr<PassivePeer>> passive_;  // guarded by mu_
  std::map<std::string, std::shared_ptr<ActivePeer>> active_;    // guarded by mu_
  std::map<std::string, Refusal> refused_;                       // guarded by mu_
  uint64_t next_sequence_ = 1;                                   // guarded by mu_
  // Serialises connecting to peers (rare), so two first transfers to one
  // peer do not both connect and have the second replace the first's
  // passive queue pair on the peer. Never taken under mu_.
  std::mutex connect_mu_;

  std::atomic<uint64_t> accepts_{0}, connects_{0}, connect_failures_{0};
  std::atomic<uint64_t> objects_written_{0}, bytes_written_{0}, direct_writes_{0};
  std::atomic<uint64_t> write_failures_{0};
  std::atomic<uint64_t> objects_read_{0}, bytes_read_{0}, read_failures_{0};
};

}  // namespace mooncake
