#pragma once

// PeerTransfer over Thrift: sends an object to another worker, then asks the
// master to swap the owner: docs/design.md, "Inter-node eviction", steps 1-3;
// the backend does step 4 (free the copy).
//
// Transport per object: AdoptStart reserves space on the target and says
// where (tier, offset). When this worker's RdmaLink is enabled, the target
// accepted RdmaConnect and exports that tier, the bytes go by RDMA WRITE into
// the target's arena and AdoptEnd(handle, written_directly=true) publishes
// them. Otherwise, or when any RDMA step fails, the whole object goes by
// PutChunk on the same handle and AdoptEnd(handle, false) (PutChunk counts
// bytes, so a partial RDMA write is simply overwritten).
//
// Once the master names the target, the target is told so (AdoptConfirm,
// so that it takes writes of the key at once) from a thread of this
// transfer's own, not on the hand-over's path: the eviction that moved the
// object, often a put's, does not wait a round trip more for it, nor a
// timeout for a target that went away.
//
// Thread-safety: Transfer may run from several threads; worker channels and
// the last transport used per peer are cached under mu_; channels, the
// RdmaLink and the counters are themselves thread-safe.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "thrift/rpc_limits.h"
#include "transport/rdma_link.h"
#include "worker/master_link.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {

namespace rpc {
class RdmaEndpoint;
class RdmaRegion;
class RdmaConnectResult;
}  // namespace rpc

// Steps at which a test may break a move of the sending worker, to check
// that a move interrupted anywhere never loses the key's data: the worker
// dies (kill -9) after the adopt or after the hand-over, or the master's
// answer to the hand-over is lost after the swap was applied, as on a
// timeout (kHandOverAnswerLost: the worker lives on).
enum class CrashPoint { kNone, kAfterAdopt, kAfterHandOver, kHandOverAnswerLost };

Result<CrashPoint> ParseCrashPoint(std::string_view text);

// Objects sent to other nodes, by transport. A move whose hand-over the
// master refused afterwards still counts: the bytes were sent.
struct PeerTransferStats {
  uint64_t rdma_objects = 0;  // written by RDMA WRITE, published with AdoptEnd(true)
  uint64_t rdma_bytes = 0;
  uint64_t tcp_objects = 0;  // sent with PutChunk (no RDMA path, or a fallback)
  uint64_t tcp_bytes = 0;
  // Of tcp_objects: an RDMA write was tried and failed (or the target refused
  // the direct commit), then the object went over TCP.
  uint64_t rdma_fallbacks = 0;
};

// How many nodes an eviction offers an object to before it gives up for now.
inline constexpr int kMaxAdoptTargets = 3;

// Why a send of an object to one node failed. `at_source`: this node could
// not read the object, which no other node would change. Otherwise the
// target refused it (no room, a write of the key there already) or could
// not be reached or did not answer in time, and another node may take it.
struct SendFailure {
  ErrorCode error = ErrorCode::kTransferFail;
  bool at_source = false;
};
using SendResult = std::expected<void, SendFailure>;

// Finds a node that takes the object: `pick(refused)` asks the master for
// the node with the most room, leaving out (where it can) the nodes in
// `refused`; `send(node)` adopts the object there. A picked node may still
// fail the send: it may be full (the usage the master ranks by is up to a
// heartbeat old and other nodes may be filling it too), or alive to the
// master yet unreachable from here. As the master keeps naming the emptiest
// node, such a node is left out and another is picked, up to
// kMaxAdoptTargets nodes in all; only a failure at the source ends the
// search early. Returns the node that took it; kNoAvailableHandle only when
// the master has no node with room and no node failed the send (the object
// may then leave the cluster); kTransferFail when the nodes picked failed
// it, including when the master then has no other to offer (the object
// stays where it is); a failure at the source, or of `pick`, unchanged.
//
// A node that failed part-way may hold a copy all the same (its AdoptEnd
// committed but the answer was lost): that copy is adopted, not owned, and
// the node drops it once its claim finds the key owned elsewhere or by the
// sender (Mover::ConfirmAdopted).
Result<NodeRecord> SendToNodeWithRoom(
    const std::function<Result<NodeRecord>(const std::vector<std::string>& refused)>& pick,
    const std::function<SendResult(const NodeRecord& node)>& send);

// Transfer answers kNotOwner or kObjectNotFound only for the master's own
// refusal of the hand-over (another node owns the key, or none does); the
// same codes from a target are reported as kTransferFail.
class ThriftPeerTransfer : public PeerTransfer {
 public:
  // `rdma` (may be null: TCP only) must outlive this.
  // `tls` (may be null: plain TCP) is this process's client TLS context;
  // calls to peers poll for replies up to `rpc_poll_us`.
  ThriftPeerTransfer(MasterLink& master, CrashPoint crash_point = CrashPoint::kNone,
                     RdmaLink* rdma = nullptr, std::shared_ptr<const RpcTlsContext> tls = nullptr,
                     int rpc_poll_us = kDefaultRpcPollUs);
  ~ThriftPeerTransfer() override;

  Result<std::string> Transfer(const std::string& key, uint64_t size, uint64_t version,
                               const ObjectOptions& options, const ObjectSource& source,
                               const std::string& target, bool dram_only) override;

  PeerTransferStats stats() const;

  // How long a node a send could not reach (a connection refused, a call
  // timed out) is left out of the first pick of later moves: each would
  // wait out the same failure again. Tests lengthen it.
  void set_unreachable_memory(Millis window) {
    std::lock_guard lock(mu_);
    unreachable_memory_ = window;
  }

 private:
  struct WorkerChannel;
  struct Adoption;
  enum class Sent { kRdma, kTcp, kTcpAfterRdmaFailed };
  enum class RdmaOutcome {
    kSent,         // written and committed on the target
    kUnavailable,  // no RDMA path for this object: nothing was written
    kFailed,       // a write failed part-way, or the target refused the direct commit
  };

  std::shared_ptr<WorkerChannel> Channel(const NodeRecord& node);
  SendResult SendTo(WorkerChannel& channel, const std::string& node_id, const std::string& key,
                    uint64_t size, uint64_t version, const ObjectOptions& options,
                    const ObjectSource& source, bool dram_only);
  Result<Adoption> StartAdopt(WorkerChannel& channel, const std::string& key, uint64_t size,
                              uint64_t version, const ObjectOptions& options, bool dram_only);
  // RDMA WRITE + AdoptEnd(true); kUnavailable and kFailed fall back to TCP.
  // An error means the target's commit itself failed: the transfer ends.
  Result<RdmaOutcome> SendByRdma(WorkerChannel& channel, const std::string& node_id,
                                 const Adoption& adoption, uint64_t size,
                                 const ObjectSource& source, std::string* why);
  // PutChunk of the whole object + AdoptEnd(false); revokes on failure.
  SendResult SendByTcp(WorkerChannel& channel, const Adoption& adoption, uint64_t size,
                       const ObjectSource& source);
  void Count(const std::string& node_id, Sent sent, uint64_t size, const std::string& why);
  // Whether a hand-over of `key` to `target` whose call went unanswered (a
  // timeout, a broken connection) was applied: the master names `target`.
  // Any other answer says nothing for good, as the call may still be
  // applied after it.
  bool HandOverLanded(const std::string& key, const std::string& target);
  // The master's pick for `size` bytes, leaving out `refused` and, while
  // another node is left to offer, the nodes recently unreachable.
  Result<NodeRecord> Pick(uint64_t size, const std::vector<std::string>& refused);
  // Remembers `node_id` as unreachable after a send that could not reach it,
  // forgets it after one that did.
  void NoteSend(const std::string& node_id, const SendResult& sent);
  void MaybeCrash(CrashPoint point) const;
  // Queues an AdoptConfirm of `key` for `channel`'s node. Best effort: past
  // kMaxPendingConfirms, or at shutdown, the node confirms its copy after
  // its own delay (--adopt-confirm-delay-ms) instead.
  void ConfirmLater(std::shared_ptr<WorkerChannel> channel, const std::string& key);
  void SendConfirms();  // the confirm thread

  MasterLink& master_;
  const CrashPoint crash_point_;
  RdmaLink* const rdma_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<WorkerChannel>> channels_;  // guarded by mu_
  const std::shared_ptr<const RpcTlsContext> tls_;
  const int rpc_poll_us_;
  std::map<std::string, bool> last_used_rdma_;  // guarded by mu_
  // Node id -> when a send last failed to reach it; at most
  // kMaxUnreachable, the oldest forgotten first.
  static constexpr size_t kMaxUnreachable = 64;
  std::map<std::string, SteadyClock::time_point> unreachable_;  // guarded by mu_
  Millis unreachable_memory_{5000};                             // guarded by mu_
  std::atomic<uint64_t> rdma_objects_{0}, rdma_bytes_{0}, tcp_objects_{0}, tcp_bytes_{0};
  std::atomic<uint64_t> rdma_fallbacks_{0};

  struct PendingConfirm {
    std::shared_ptr<WorkerChannel> channel;
    std::string key;
  };
  static constexpr size_t kMaxPendingConfirms = 4096;
  std::mutex confirm_mu_;
  std::condition_variable confirm_cv_;
  std::deque<PendingConfirm> confirms_;  // guarded by confirm_mu_
  bool stopping_ = false;                // guarded by confirm_mu_
  std::thread confirm_thread_;           // started by the first ConfirmLater, under confirm_mu_
};

}  // namespace mooncake
