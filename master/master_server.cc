#include "master/master_server.h"

#include <algorithm>
#include <utility>

#include "common/etcd_client.h"
#include "common/log.h"
#include "common/metrics.h"
#include "http/admin_server.h"
#include "master/admin_routes.h"
#include "master/leader_election.h"
#include "master/leader_gated_handler.h"
#include "master/master_handler.h"
#include "mooncake_rpc/MasterService.h"
#include "thrift/rpc_server.h"

namespace mooncake {
namespace {

// Checking several times per TTL bounds how late a death is noticed to a
// quarter of the TTL; the floor keeps a tiny TTL from spinning the thread.
Millis ReaperPeriod(Millis ttl) { return std::max(Millis(100), ttl / 4); }

// The address a master without etcd names in GetRole, as the leader of its
// own group: --advertise-address, else --host and the port; a wildcard
// --host names none, as it is no address a caller could use. Callers wait
// out the rebuild window at any master whose GetRole says it leads, at the
// address they reached it by (thrift/master_endpoint.cc), so this is for
// operators and tools that ask who leads.
std::string StandaloneAddress(const MasterConfig& config, int port) {
  if (!config.advertise_address.empty()) return config.advertise_address;
  if (config.host == "0.0.0.0" || config.host == "::" || config.host == "[::]") return "";
  // An IPv6 literal in brackets, as callers write it (SplitMasterAddress).
  const bool v6 = config.host.find(':') != std::string::npos;
  return (v6 ? "[" + config.host + "]" : config.host) + ":" + std::to_string(port);
}

}  // namespace

MasterServer::MasterServer(MasterOptions options)
    : service_(std::make_unique<MasterService>(std::move(options))) {}

Result<std::unique_ptr<MasterServer>> MasterServer::Start(
    const MasterConfig& given, std::function<void()> on_lost_leadership) {
  std::string why;
  MasterConfig config = given;
  if (auto loaded = LoadAdminToken(config, &why); !loaded) {
    MC_LOG_ERROR("master config rejected reason=\"{}\"", why);
    return Err(loaded.error());
  }
  if (auto valid = ValidateMasterConfig(config, &why); !valid) {
    MC_LOG_ERROR("master config rejected reason=\"{}\"", why);
    return Err(valid.error());
  }
  MasterOptions options;
  options.node_ttl = Millis(config.node_ttl_ms);
  options.forget_dead_after = Millis(config.dead_node_forget_ms);
  std::unique_ptr<MasterServer> server(new MasterServer(options));

  server->requests_ = std::make_unique<RequestMetrics>(MasterHandler::OperationNames());
  std::shared_ptr<rpc::MasterServiceIf> handler =
      std::make_shared<MasterHandler>(*server->service_, *server->requests_);
  // Every master starts with an empty directory and rebuilds it from the
  // workers' re-announcements, so every master has the gate: with etcd it
  // answers as a standby until elected, without it leads alone at once,
  // both answering key calls NOT_LEADER for the rebuild window.
  const bool ha = !config.etcd.empty();
  server->gate_ =
      std::make_unique<RoleGate>(ha ? config.cluster_name : "", Millis(config.rebuild_ms));
  handler = std::make_shared<LeaderGatedHandler>(std::move(handler), *server->gate_);
  if (!ha) {
    // Known before binding unless the port is picked: a caller told
    // NOT_LEADER waits only when GetRole names the address it called.
    if (config.port != 0) server->gate_->set_self_address(StandaloneAddress(config, config.port));
    server->gate_->LeadAlone();
  }
  auto processor = std::make_shared<rpc::MasterServiceProcessor>(handler);
  // Every master call but RegisterNode answers from memory: the epoll
  // engine's loop threads answer them, and its pool RegisterNode (MayBlock).
  auto rpc = RpcServer::Start(processor, {.host = config.host,
                                          .port = config.port,
                                          .limits = config.rpc_limits,
                                          .tls = config.tls,
                                          .may_block = &MasterServer::MayBlock});
  if (!rpc) {
    MC_LOG_ERROR("master cannot listen host={} port={}", config.host, config.port);
    return Err(rpc.error());
  }
  server->rpc_ = std::move(*rpc);
  server->port_ = server->rpc_->port();
  if (!ha) server->gate_->set_self_address(StandaloneAddress(config, server->port_));
  // The destructor stops the RPC server if the admin server cannot start.
  if (auto admin = server->StartAdmin(config); !admin) return Err(admin.error());
  if (ha) {
    auto started = server->StartElection(config, std::move(on_lost_leadership));
    if (!started) return Err(started.error());
  } else if (config.rebuild_ms > 0) {
    MC_LOG_INFO(
        "master rebuilding its directory from the workers; key calls answer NOT_LEADER "
        "(callers wait) rebuild_ms={} address={}",
        config.rebuild_ms, server->gate_->Snapshot().self_address);
  }
  server->reaper_ = std::thread(
      [s = server.get(), period = ReaperPeriod(options.node_ttl)] { s->ReaperLoop(period); });
  return server;
}

bool MasterServer::MayBlock(std::string_view method) {
  // A re-registration scans every directory shard (MasterService::RegisterNode
  // purges the node's old keys): O(all keys), seconds at 100 M keys, which
  // on a loop thread would stall every connection of that loop.
  return method == "RegisterNode";
}

Result<void> MasterServer::StartElection(const MasterConfig& config,
                                         std::function<void()> on_lost) {
  ElectionOptions options;
  auto endpoints = ParseEtcdEndpoints(config.etcd);
  if (!endpoints) return Err(endpoints.error());
  options.etcd_endpoints = std::move(*endpoints);
  options.cluster_name = config.cluster_name;
  options.self_address = config.advertise_address.empty()
                             ? config.host + ":" + std::to_string(port_)
                             : config.advertise_address;
  options.lease_ttl_s = config.etcd_lease_ttl_s;
  auto election = LeaderElection::Start(std::move(options), *gate_, std::move(on_lost));
  if (!election) {
    MC_LOG_ERROR("master cannot join its HA group etcd={} cluster={}", config.etcd,
                 config.cluster_name);
    return Err(election.error());
  }
  election_ = std::move(*election);
  MC_LOG_INFO("master standing by for leadership etcd={} cluster={} address={}", config.etcd,
              config.cluster_name, gate_->Snapshot().self_address);
  return {};
}

Result<void> MasterServer::StartAdmin(const MasterConfig& config) {
  int port = EffectiveAdminPort(config);
  if (port < 0) return {};
  AdminServerOptions options;
  options.token = config.admin_token;
  admin_ = std::make_unique<AdminServer>(std::move(options));
  RegisterMasterAdminRoutes(
      *admin_, *service_, requests_.get(), [rpc = rpc_.get()] { return rpc->stats(); }, config.tls,
      gate_.get());
  if (auto started = admin_->Start(config.admin_host, port); !started) {
    MC_LOG_ERROR("master admin server cannot listen host={} port={}", config.admin_host, port);
    return Err(started.error());
  }
  admin_port_ = admin_->port();
  return {};
}

MasterServer::~MasterServer() { Stop(); }

void MasterServer::Stop() {
  // Resign first: a standby takes over while this master shuts down.
  if (election_) election_->Stop();
  if (admin_) {
    admin_->Stop();
    admin_.reset();
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  if (rpc_) {
    rpc_->Stop();
    rpc_.reset();
  }
}

void MasterServer::ReaperLoop(Millis period) {
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
    // Unlocked while expiring: Stop() must not wait behind a purge.
    lock.unlock();
    service_->ExpireDeadNodes();
    lock.lock();
  }
}

}  // namespace mooncake
