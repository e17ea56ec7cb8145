#pragma once

// WorkerServer wires one node together: its tiers, the TieredCacheBackend,
// the Thrift service, and the link to the master (registration, heartbeats,
// ownership claims, re-announcing keys after a master restart).
//
// Thread-safety: Start/Stop from the owning thread. Internally a heartbeat
// thread and a maintenance thread run until Stop.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "worker/worker_config.h"

namespace mooncake {

class AdminServer;
class MasterLink;
class RdmaLink;
class RequestMetrics;
class ThriftPeerTransfer;
class WorkerHandler;
class RpcServer;
class TieredCacheBackend;
struct WorkerReadiness;  // worker/admin_routes.h

class WorkerServer {
 public:
  // Opens the tiers (recovering SSD objects), starts serving, and starts
  // registering with the master in the background. Fails if a tier cannot be
  // opened or the port cannot be bound. When the SSD tier cannot be opened
  // (a damaged or locked RocksDB directory), `ssd_error` (may be null) gets
  // the path and RocksDB's reason, so main can say so and exit with its own
  // code.
  static Result<std::unique_ptr<WorkerServer>> Start(WorkerConfig config,
                                                     std::string* ssd_error = nullptr);
  ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  int port() const;
  // The REST admin server's bound port; -1 when disabled.
  int admin_port() const;
  const std::string& node_id() const { return config_.node_id; }
  TieredCacheBackend& backend() { return *backend_; }
  // The RDMA side (possibly disabled, never null once started).
  RdmaLink& rdma() { return *rdma_; }
  // Inter-node transfer counters; null with --inter-node-eviction false.
  const ThriftPeerTransfer* peer_transfer() const { return peers_.get(); }
  // Blocks until the first registration (with key announcement) succeeded,
  // or `timeout` passed; returns whether it did.
  bool WaitRegistered(Millis timeout);
  // For /readyz: registered yet, and the age of the last successful
  // registration or heartbeat against the staleness bound (3 heartbeat
  // intervals, at least 1 s). Any thread.
  WorkerReadiness readiness();
  void Stop();

 private:
  explicit WorkerServer(WorkerConfig config);
  void HeartbeatLoop();
  void MaintenanceLoop();
  // Registers the node and announces every key; drops keys others own.
  // register_mu_ held.
  Result<void> RegisterAndAnnounce();
  // Registers again because a call sent when master_->registrations() was
  // `seen` found the master did not know this node; one registration at a
  // time. Nothing to do when another one completed since and no shard needs
  // one: registering again would purge the keys claimed under it.
  Result<void> RegisterAgain(uint64_t seen);
  // RegisterAgain unless another thread is registering (nullopt): the
  // heartbeat thread's, which must not wait.
  std::optional<Result<void>> TryRegisterAgain(uint64_t seen);
  // What both do holding register_mu_: RegisterAndAnnounce, unless a
  // registration since `seen` answered the refusal and no shard forgot this
  // node meanwhile.
  Result<void> RegisterUnlessAnsweredLocked(uint64_t seen);
  // Releases those of the `announced` keys this node no longer holds, and
  // claims again those put here anew meanwhile.
  Result<void> ReleaseKeysRemovedSince(const std::vector<std::string>& announced);
  std::vector<std::string> NotHeld(const std::vector<std::string>& keys) const;
  // Starts the REST admin server on `port` (0: free port; -1: none).
  Result<void> StartAdmin(int port);

  WorkerConfig config_;
  std::unique_ptr<MasterLink> master_;
  std::unique_ptr<ThriftPeerTransfer> peers_;
  std::unique_ptr<TieredCacheBackend> backend_;
  // Registers the tiers' arenas: declared after backend_ (which owns the
  // tiers) so it is destroyed, deregistering them, before the tiers go.
  std::unique_ptr<RdmaLink> rdma_;
  std::unique_ptr<RequestMetrics> requests_;
  std::shared_ptr<WorkerHandler> handler_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<AdminServer> admin_;
  std::thread heartbeat_thread_;
  std::thread maintenance_thread_;

  // Serialises registrations (the heartbeat thread's and those of claims
  // the master refused). Taken before mu_, never inside it. A registration
  // that failed, in Register or in Announce, leaves its shards needing one
  // (MasterLink::NeedsRegistration), so the next heartbeat registers again.
  std::mutex register_mu_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;    // guarded by mu_
  bool registered_ = false;  // guarded by mu_
  // The last successful register or heartbeat; guarded by mu_.
  std::optional<SteadyClock::time_point> last_master_ok_;
};

}  // namespace mooncake
