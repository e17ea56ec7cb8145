#pragma once

// A running master: MasterService, its Thrift server, the REST admin server
// (unless config.admin_port is -1) and the reaper thread that declares
// silent nodes dead. mooncake-master's main and in-process tests both start
// one this way.
//
// Thread-safety: port(), admin_port() and service() from any thread; Stop() from the owning
// thread (the destructor calls it). Stop is idempotent. The reaper's stop flag
// is guarded by mu_.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "master/master_config.h"
#include "master/master_service.h"

namespace mooncake {

class AdminServer;
class LeaderElection;
class RequestMetrics;
class RoleGate;
class RpcServer;

class MasterServer {
 public:
  // Validates `config`, binds config.host:config.port (0 picks a free port)
  // and the admin server's config.admin_host:config.admin_port, and starts
  // serving. An admin_token_file not yet loaded is read here. kInvalidParams
  // for a bad config, kRpcFail if a port cannot be bound. Returns once both
  // sockets listen.
  //
  // Key calls and PickNode answer NOT_LEADER for config.rebuild_ms after
  // the start, while the workers re-announce their keys (callers wait and
  // retry). With config.etcd set the master joins the HA group
  // config.cluster_name (docs/ha.md): it answers as a standby until it wins
  // the election, and rebuilds after each win.
  // `on_lost_leadership` (may be empty) runs, on the election's thread, if
  // this master led and lost its lease; it then answers as a standby for
  // good, and mooncake-master exits so that it restarts with empty state.
  static Result<std::unique_ptr<MasterServer>> Start(const MasterConfig& config,
                                                     std::function<void()> on_lost_leadership = {});

  ~MasterServer();
  MasterServer(const MasterServer&) = delete;
  MasterServer& operator=(const MasterServer&) = delete;

  // The bound port.
  int port() const { return port_; }
  // The admin server's bound port; -1 when it is disabled.
  int admin_port() const { return admin_port_; }
  MasterService& service() { return *service_; }

  // RpcServerOptions::may_block for the master's calls: true (run on the
  // epoll engine's pool) for RegisterNode, whose re-registration of a node
  // the master still lists purges its keys with a pass over the whole
  // directory; every other call answers from memory on a loop thread.
  static bool MayBlock(std::string_view method);

  // Stops the admin server, the reaper and the RPC server (closing client
  // connections) and joins their threads.
  void Stop();

 private:
  explicit MasterServer(MasterOptions options);
  Result<void> StartAdmin(const MasterConfig& config);
  // Joins the HA group: campaigns in etcd, flipping gate_.
  Result<void> StartElection(const MasterConfig& config, std::function<void()> on_lost);
  void ReaperLoop(Millis period);

  // Declared first so it is destroyed last: the RPC handler refers to it.
  std::unique_ptr<MasterService> service_;
  // Counts and times Thrift requests; read by the admin /metrics route.
  std::unique_ptr<RequestMetrics> requests_;
  // What this master is now (the RPC handler reads it, so it is declared
  // before rpc_ and outlives it): without etcd the leader of its own group,
  // rebuilding for config.rebuild_ms after the start; with etcd set by the
  // campaign (HA only, stopped first).
  std::unique_ptr<RoleGate> gate_;
  std::unique_ptr<LeaderElection> election_;
  std::unique_ptr<RpcServer> rpc_;
  int port_ = 0;
  // Its routes read service_; stopped first.
  std::unique_ptr<AdminServer> admin_;
  int admin_port_ = -1;

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread reaper_;
};

}  // namespace mooncake
