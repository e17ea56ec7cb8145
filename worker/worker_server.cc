#include "worker/worker_server.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "common/etcd_client.h"
#include "common/log.h"
#include "common/metrics.h"
#include "http/admin_server.h"
#include "http/admin_settings.h"
#include "http/ready_file.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/master_shards.h"
#include "thrift/rpc_server.h"
#include "thrift/rpc_transport.h"
#include "tiers/dram_tier.h"
#include "tiers/gpu_tier.h"
#include "tiers/ssd_tier.h"
#include "transport/rdma_link.h"
#include "worker/admin_routes.h"
#include "worker/master_link.h"
#include "worker/peer_transfer.h"
#include "worker/tiered_cache_backend.h"
#include "worker/worker_handler.h"
#include "worker/worker_processor.h"

namespace mooncake {
namespace {

// How a failed register or heartbeat is told: only a call with no answer
// is "unreachable"; an answer that refuses (say INVALID_PARAMS for a
// registration) is the master's word. Out of line: inlined, g++ 12 warns
// that the Result's error "may be used uninitialized".
[[gnu::noinline]] const char* MasterFailure(const Result<void>& outcome) {
  if (outcome) return "answered";
  const ErrorCode error = outcome.error();
  return error == ErrorCode::kRpcFail || error == ErrorCode::kRpcTimeout
             ? "unreachable"
             : "refused this node's call";
}

constexpr Millis kRegisterRetry{500};
// /readyz: a worker whose last successful heartbeat is older than this many
// heartbeat intervals (and at least kMinHeartbeatStale) is not ready.
constexpr int kHeartbeatStaleIntervals = 3;
constexpr Millis kMinHeartbeatStale{1000};

BackendOptions ToBackendOptions(const WorkerConfig& c) {
  BackendOptions options;
  options.high_watermark = c.high_watermark;
  options.low_watermark = c.low_watermark;
  options.promote_on_get = c.promote_on_get;
  options.allow_evict_soft_pinned = c.allow_evict_soft_pinned;
  options.kv_lease_ttl = Millis(c.kv_lease_ttl_ms);
  options.adopt_confirm_delay = Millis(c.adopt_confirm_delay_ms);
  options.soft_pin_ttl = Millis(c.soft_pin_ttl_ms);
  options.hard_pin_write_through = c.hard_pin_write_through;
  options.put_start_discard_timeout = Millis(c.put_start_discard_timeout_ms);
  return options;
}

Result<std::vector<std::unique_ptr<CacheTier>>> OpenTiers(const WorkerConfig& c,
                                                          std::string* ssd_error) {
  std::vector<std::unique_ptr<CacheTier>> tiers;
  // Fastest first: VRAM, DRAM, SSD.
  if (c.vram_capacity > 0) {
    std::string why;
    auto vram = GpuTier::Create("vram", c.vram_capacity, c.gpu_device, &why);
    if (vram) {
      tiers.push_back(std::move(*vram));
    } else if (vram.error() == ErrorCode::kTierNotFound) {
      // No HIP in this build, no driver or no GPU: run with DRAM + SSD.
      MC_LOG_WARN("vram tier disabled capacity={} device={}: {}", c.vram_capacity, c.gpu_device,
                  why);
    } else {
      MC_LOG_ERROR("cannot create vram tier capacity={} device={} error={}: {}", c.vram_capacity,
                   c.gpu_device, ToString(vram.error()), why);
      return Err(vram.error());
    }
  }
  auto* vram = tiers.empty() ? nullptr : dynamic_cast<GpuTier*>(tiers.front().get());
  const bool pin = c.dram_pin_for_vram && vram != nullptr;
  if (c.dram_pin_for_vram && vram == nullptr) {
    MC_LOG_WARN("--dram-pin-for-vram ignored: the worker runs without a vram tier");
  }
  auto dram = DramTier::Create("dram", c.dram_capacity, {.prefault = c.dram_prefault || pin});
  if (!dram) {
    MC_LOG_ERROR("cannot create dram tier capacity={} error={}", c.dram_capacity,
                 ToString(dram.error()));
    return Err(dram.error());
  }
  // The arena outlives the VRAM tier, which unregisters it: the tiers are
  // destroyed in order, fastest first.
  if (pin) {
    std::string why;
    std::span arena((*dram)->arena_base(), (*dram)->arena_size());
    if (auto pinned = vram->RegisterHostRange(arena, &why); !pinned) {
      MC_LOG_ERROR("cannot pin the dram arena (--dram-pin-for-vram) capacity={}: {}",
                   c.dram_capacity, why);
      return Err(pinned.error());
    }
  }
  tiers.push_back(std::move(*dram));
  if (c.ssd_capacity > 0) {
    std::string why;
    auto ssd = SsdTier::Open("ssd", c.ssd_path, c.ssd_capacity, &why);
    if (!ssd) {
      MC_LOG_ERROR("cannot open ssd tier path={} error={} reason=\"{}\"", c.ssd_path,
                   ToString(ssd.error()), why);
      if (ssd_error) *ssd_error = why.empty() ? "path=" + c.ssd_path : why;
      return Err(ssd.error());
    }
    tiers.push_back(std::move(*ssd));
  }
  return tiers;
}

// Registers the DRAM arena (and the VRAM arena where GPUDirect works) so
// peers may RDMA-write adopted objects into them. Under --rdma on a DRAM
// arena that cannot be registered stops the worker.
Result<void> ExportArenas(RdmaLink& link, const std::vector<std::unique_ptr<CacheTier>>& tiers) {
  for (const auto& tier : tiers) {
    const std::string name(tier->name());
    if (auto* dram = dynamic_cast<DramTier*>(tier.get())) {
      auto exported = link.ExportTier(name, dram->arena_base(), dram->arena_size(), false);
      if (!exported && link.mode() == RdmaMode::kOn) {
        MC_LOG_ERROR("cannot register the dram arena for rdma tier={} error={}", name,
                     ToString(exported.error()));
        return exported;
      }
    } else if (auto* gpu = dynamic_cast<GpuTier*>(tier.get())) {
      // Without GPUDirect the VRAM tier is simply not exported (logged).
      link.ExportTier(name, gpu->device_base(), gpu->arena_size(), /*device_memory=*/true);
    }
  }
  return {};
}

// Opens the RDMA side after the tiers exist. Only --rdma on without a usable
// device fails; auto and off give a disabled link.
Result<std::unique_ptr<RdmaLink>> OpenRdma(const WorkerConfig& c,
                                           const std::vector<std::unique_ptr<CacheTier>>& tiers) {
  RdmaLinkOptions options;
  options.mode = ParseRdmaMode(c.rdma).value_or(RdmaMode::kAuto);
  options.device = c.rdma_device;
  options.port = c.rdma_port;
  options.gid_index = c.rdma_gid_index;
  std::string why;
  auto link = RdmaLink::Open(options, &why);
  if (!link) {
    MC_LOG_ERROR("cannot start: --rdma {} but RDMA is unusable error={} reason=\"{}\"", c.rdma,
                 ToString(link.error()), why);
    return Err(link.error());
  }
  if ((*link)->enabled()) {
    if (auto exported = ExportArenas(**link, tiers); !exported) return Err(exported.error());
  }
  return link;
}

// The master: --master, or the HA leader found and followed through etcd.
// A heartbeat waits through a failover (the lease TTL plus a poll) rather
// than fail and start over; RegisterAndAnnounce follows at once.
MasterTarget ToMasterTarget(const WorkerConfig& c) {
  MasterTarget target{.host = c.master_host(), .port = c.master_port()};
  if (!c.etcd.empty()) {
    target.etcd_endpoints = ParseEtcdEndpoints(c.etcd).value_or(std::vector<std::string>{});
    target.cluster_name = c.cluster_name;
    target.leader_wait_ms = 10000;
  }
  return target;
}

std::vector<TierUsage> ToUsages(const BackendStats& stats) {
  std::vector<TierUsage> usages;
  for (const TierSnapshot& tier : stats.tiers) {
    usages.push_back({.name = tier.name,
                      .kind = std::string(ToString(tier.kind)),
                      .capacity = tier.capacity,
                      .used = tier.used,
                      .objects = tier.objects});
  }
  return usages;
}

}  // namespace

WorkerServer::WorkerServer(WorkerConfig config) : config_(std::move(config)) {}

Result<std::unique_ptr<WorkerServer>> WorkerServer::Start(WorkerConfig config,
                                                          std::string* ssd_error) {
  if (config.advertise_host.empty()) config.advertise_host = config.host;
  std::unique_ptr<WorkerServer> server(new WorkerServer(config));
  auto tiers = OpenTiers(config, ssd_error);
  if (!tiers) return Err(tiers.error());
  auto rdma = OpenRdma(config, *tiers);  // declared after tiers: destroyed first
  if (!rdma) return Err(rdma.error());

  // One client TLS context for every call this worker makes (master, peers).
  std::string why;
  auto tls = RpcTlsContext::Create(config.tls, /*server=*/false, &why);
  if (!tls) {
    MC_LOG_ERROR("cannot start: TLS files unusable reason=\"{}\"", why);
    return Err(tls.error());
  }
  std::optional<SlotTable> shards;  // nullopt: one master (--master or --etcd)
  if (!config.master_shards.empty()) {
    auto table = ParseMasterShards(config.master_shards, &why);
    if (!table) {
      MC_LOG_ERROR("cannot start: --master-shards unusable reason=\"{}\"", why);
      return Err(table.error());
    }
    shards = std::move(*table);
  }
  server->master_ = std::make_unique<MasterLink>(ToMasterTarget(config), std::move(shards), *tls,
                                                 config.rpc_limits.poll_us);
  server->backend_ = std::make_unique<TieredCacheBackend>(std::move(*tiers), server->master_.get(),
                                                          ToBackendOptions(config));
  server->rdma_ = std::move(*rdma);
  server->backend_->Recover();
  if (config.inter_node_eviction) {
    server->peers_ = std::make_unique<ThriftPeerTransfer>(
        *server->master_, ParseCrashPoint(config.test_crash_at).value_or(CrashPoint::kNone),
        server->rdma_.get(), *tls, config.rpc_limits.poll_us);
    server->backend_->set_peer_transfer(server->peers_.get());
  }

  // The node id may depend on the bound port, and the handler reports it, so
  // bind first with a handler that reads the id through the server.
  server->requests_ = std::make_unique<RequestMetrics>(WorkerHandler::OperationNames());
  auto handler =
      std::make_shared<WorkerHandler>(*server->backend_, config.node_id, *server->requests_);
  handler->set_rdma_link(server->rdma_.get());
  // A quarter of DRAM, at least 64 MiB but never over half of it: 64 puts
  // of 4 MiB at once on the benches' 2 GiB worker, while values declared and
  // never sent can hold no more than that.
  handler->set_placed_bytes_limit(std::min(
      config.dram_capacity / 2, std::max<uint64_t>(64ull << 20, config.dram_capacity / 4)));
  server->handler_ = handler;
  // Set before the port serves: a put arriving at once reads it.
  WorkerServer* self = server.get();
  server->master_->set_on_unknown_node([self](uint64_t seen) { self->RegisterAgain(seen); });
  auto rpc = RpcServer::Start(std::make_shared<WorkerProcessor>(handler),
                              {.host = config.host,
                               .port = config.port,
                               .limits = config.rpc_limits,
                               .tls = config.tls,
                               .may_block = &WorkerProcessor::MayBlock});
  if (!rpc) return Err(rpc.error());
  server->rpc_ = std::move(*rpc);
  if (server->config_.node_id.empty()) {
    server->config_.node_id =
        server->config_.advertise_host + ":" + std::to_string(server->rpc_->port());
    handler->set_node_id(server->config_.node_id);
  }
  server->config_.port = server->rpc_->port();
  server->master_->set_node_id(server->config_.node_id);
  int admin_port = EffectiveAdminPort(config.port, config.admin_port, kDefaultWorkerAdminPort);
  if (auto admin = server->StartAdmin(admin_port); !admin) return Err(admin.error());

  server->heartbeat_thread_ = std::thread([self] { self->HeartbeatLoop(); });
  server->maintenance_thread_ = std::thread([self] { self->MaintenanceLoop(); });
  MC_LOG_INFO("worker serving node={} host={} port={} master={}", server->config_.node_id,
              config.host, server->rpc_->port(), config.master_description());
  return server;
}

WorkerServer::~WorkerServer() { Stop(); }

int WorkerServer::port() const { return rpc_ ? rpc_->port() : 0; }

int WorkerServer::admin_port() const { return admin_ ? admin_->port() : -1; }

Result<void> WorkerServer::StartAdmin(int port) {
  if (port < 0) return {};
  AdminServerOptions options;
  options.token = config_.admin_token;
  admin_ = std::make_unique<AdminServer>(std::move(options));
  // /config shows the effective settings; it reports whether a token is set,
  // never the token.
  RegisterWorkerAdminRoutes(
      *admin_, *backend_, config_, *requests_,
      [this] {
        TransportSnapshot t;
        t.rdma_enabled = rdma_ && rdma_->enabled();
        if (rdma_ && !t.rdma_enabled) t.rdma_reason = rdma_->reason();
        if (peers_) {
          PeerTransferStats p = peers_->stats();
          t.rdma_objects = p.rdma_objects;
          t.rdma_bytes = p.rdma_bytes;
          t.tcp_objects = p.tcp_objects;
          t.tcp_bytes = p.tcp_bytes;
          t.rdma_fallbacks = p.rdma_fallbacks;
        }
        return t;
      },
      [this] { return rpc_->stats(); }, [this] { return readiness(); });
  if (auto started = admin_->Start(config_.admin_host, port); !started) {
    MC_LOG_ERROR("worker admin server cannot listen host={} port={}", config_.admin_host, port);
    return started;
  }
  MC_LOG_INFO("worker admin listening host={} port={}", config_.admin_host, admin_->port());
  return {};
}

void WorkerServer::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  const int ports[] = {port(), admin_port()};
  // A heartbeat may be waiting for a new master leader (--etcd).
  if (master_) master_->StopFollowing();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (maintenance_thread_.joinable()) maintenance_thread_.join();
  if (admin_) admin_->Stop();
  if (rpc_) rpc_->Stop();
  // After the heartbeat thread (the only writer) ended: a supervisor that
  // waits for the file must not find this stopped worker's ports in it.
  if (!config_.ready_file.empty()) RemoveReadyFileIfOurs(config_.ready_file, ports);
}

bool WorkerServer::WaitRegistered(Millis timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return registered_ || stopping_; }) && registered_;
}

WorkerReadiness WorkerServer::readiness() {
  WorkerReadiness r;
  r.master = config_.master_description();
  r.heartbeat_stale_ms =
      std::max(Millis(config_.heartbeat_interval_ms) * kHeartbeatStaleIntervals, kMinHeartbeatStale)
          .count();
  std::lock_guard lock(mu_);
  r.registered = registered_;
  if (last_master_ok_) {
    r.heartbeat_age_ms =
        std::chrono::duration_cast<Millis>(SteadyClock::now() - *last_master_ok_).count();
  }
  return r;
}

Result<void> WorkerServer::RegisterAndAnnounce() {
  if (!master_->NeedsRegistration()) return {};  // another registration covered it
  NodeRecord node{.node_id = config_.node_id,
                  .host = config_.advertise_host,
                  .port = port(),
                  .tiers = ToUsages(backend_->Stats())};
  if (auto registered = master_->Register(node); !registered) return registered;
  std::vector<std::string> keys = backend_->Keys();
  if (config_.test_announce_delay_ms > 0) {
    MC_LOG_WARN("test hook: announcing in {} ms keys={}", config_.test_announce_delay_ms,
                keys.size());
    std::this_thread::sleep_for(Millis(config_.test_announce_delay_ms));
  }
  auto rejected = master_->Announce(keys);
  if (!rejected) return Err(rejected.error());
  if (auto released = ReleaseKeysRemovedSince(master_->OfLastRound(keys)); !released) {
    // The master may still name this node for removed keys: registering
    // again purges them and announces what is here.
    master_->RegisterAgainLater();
    return released;
  }
  for (const std::string& key : *rejected) {
    MC_LOG_WARN("dropping local copy owned elsewhere key={}", key);
    backend_->DropLocal(key);
  }
  handler_->set_serving_reads(true);
  MC_LOG_INFO("registered with master node={} master={} keys_rejected={}", config_.node_id,
              config_.master_description(), rejected->size());
  return {};
}

std::vector<std::string> WorkerServer::NotHeld(const std::vector<std::string>& keys) const {
  // Held: complete and published. One being removed or dropped is as good
  // as gone (Keys() still lists it), and an unfinished put makes its own
  // claim.
  return backend_->NotHeld(keys);
}

Result<void> WorkerServer::ReleaseKeysRemovedSince(const std::vector<std::string>& announced) {
  // A key removed (or dropped) while the announcement was on its way was
  // released at a master that did not know it yet, and then announced:
  // release it again, or the master names this node for a key it lacks.
  // Only this node's ownership is released, so a key put elsewhere since
  // stays.
  std::vector<std::string> gone = NotHeld(announced);
  if (gone.empty()) return {};
  for (const Result<void>& released : master_->ReleaseMany(gone)) {
    if (!released && released.error() != ErrorCode::kObjectNotFound &&
        released.error() != ErrorCode::kNotOwner) {
      return Err(released.error());
    }
  }
  // A key put here again after it was found gone lost its claim to that
  // release: claim it once more (announced, so one owned elsewhere by now
  // is dropped here as any announced key would be).
  std::vector<std::string> back = gone;
  std::vector<std::string> still_gone = NotHeld(gone);
  std::erase_if(back, [gone_again = std::unordered_set<std::string_view>(
                           still_gone.begin(), still_gone.end())](const std::string& key) {
    return gone_again.contains(key);
  });
  if (!back.empty()) {
    auto rejected = master_->Announce(back);
    if (!rejected) return Err(rejected.error());
    for (const std::string& key : *rejected) backend_->DropLocal(key);
  }
  MC_LOG_INFO("released keys removed while announcing count={} put_again={}", gone.size(),
              back.size());
  return {};
}

std::optional<Result<void>> WorkerServer::TryRegisterAgain(uint64_t seen) {
  std::unique_lock lock(register_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return RegisterUnlessAnsweredLocked(seen);
}

Result<void> WorkerServer::RegisterAgain(uint64_t seen) {
  std::lock_guard lock(register_mu_);
  return RegisterUnlessAnsweredLocked(seen);
}

Result<void> WorkerServer::RegisterUnlessAnsweredLocked(uint64_t seen) {
  // A registration since the refused call went out answered it, unless a
  // shard still (or again) does not know this node.
  if (master_->registrations() != seen && !master_->NeedsRegistration()) return {};
  return RegisterAndAnnounce();
}

void WorkerServer::HeartbeatLoop() {
  bool registered = false;
  bool warned = false;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    uint64_t seen = master_->registrations();
    // Heartbeats go to every shard that knows this node, whatever happens
    // to the registration of another: waiting for it would let them all
    // declare this node dead.
    Result<void> outcome = master_->Heartbeat(ToUsages(backend_->Stats()));
    if (!outcome && outcome.error() == ErrorCode::kNodeNotFound) {
      MC_LOG_WARN("master does not know this node; registering again node={}", config_.node_id);
    }
    if (master_->NeedsRegistration()) {
      // Left to the thread registering already, if one is.
      std::optional<Result<void>> registered_again = TryRegisterAgain(seen);
      if (registered_again) outcome = *registered_again;
      if (outcome && master_->NeedsRegistration()) outcome = Err(ErrorCode::kNodeNotFound);
    }
    if (outcome && !registered) registered = true;
    if (!outcome && !warned) {
      MC_LOG_WARN("master {} master={} error={}", MasterFailure(outcome),
                  config_.master_description(), ToString(outcome.error()));
    }
    warned = !outcome;
    lock.lock();
    if (outcome) last_master_ok_ = SteadyClock::now();
    if (registered && !registered_) {
      registered_ = true;
      cv_.notify_all();
      // Only now, with registered_ and last_master_ok_ set: a supervisor
      // that reads the file and then asks /readyz finds the worker ready.
      if (!config_.ready_file.empty()) {
        lock.unlock();
        const int ports[] = {port(), admin_port()};
        WriteReadyFilePorts(config_.ready_file, ports);
        lock.lock();
      }
    }
    auto wait = registered && outcome ? Millis(config_.heartbeat_interval_ms) : kRegisterRetry;
    cv_.wait_for(lock, wait, [this] { return stopping_; });
  }
}

void WorkerServer::MaintenanceLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    backend_->WaitForWork(Millis(100));
    backend_->RunMaintenance();
    lock.lock();
  }
}

}  // namespace mooncake
