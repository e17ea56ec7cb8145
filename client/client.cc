// mooncake::Client: construction, and the calls that are one RPC to the
// master or to a key's owner (Exist, Remove, Inspect, ListNodes, Stats). The
// rest of Client is split by concern; client/client_impl.h lists the files.

#include "client/client.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client_impl.h"
#include "client/client_retry.h"
#include "common/log.h"
#include "thrift/master_shards.h"

namespace mooncake {
namespace {

// An empty master_shards (one master) or a parseable one without etcd.
bool MasterShardsUsable(const ClientConfig& config, std::string* why) {
  if (config.master_shards.empty()) return true;
  if (!config.etcd_endpoints.empty()) {
    *why = "master_shards and etcd_endpoints are exclusive";
    return false;
  }
  return ParseMasterShards(config.master_shards, why).has_value();
}

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  const ClientConfig& config = impl_->router.config();
  // A TLS session cannot be read and written by two threads at once, and
  // hot-cache hits and offers belong to Get: both keep GetAsync on Get.
  bool pipelined = !config.tls.enabled() && !impl_->hot_cache.enabled();
  impl_->async_reads = std::make_unique<AsyncReads>(
      impl_->router, impl_->rdma.get(), impl_->helpers,
      [this](const std::string& key) { return Get(key); }, pipelined);
  impl_->async_puts = std::make_unique<AsyncPuts>(
      impl_->helpers, [this](const std::vector<std::pair<std::string, std::string>>& items,
                             const PutOptions& options) { return BatchPut(items, options); });
}

Client::~Client() {
  // Calls still in flight complete while everything they use is whole:
  // first no new ones, then those out on connections, then the helpers'.
  impl_->async_puts->Close();
  impl_->async_reads->Close();
  impl_->helpers.Stop();
}

Result<std::unique_ptr<Client>> Client::Create(ClientConfig config) {
  if (std::string why; !ValidateMasterTarget(ToMasterTarget(config), &why)) {
    MC_LOG_ERROR("client master settings unusable reason=\"{}\"", why);
    return Err(ErrorCode::kInvalidParams);
  }
  if (std::string why; !MasterShardsUsable(config, &why)) {
    MC_LOG_ERROR("client master shards unusable reason=\"{}\"", why);
    return Err(ErrorCode::kInvalidParams);
  }
  if (config.combined_calls_in_flight < 0) {
    MC_LOG_ERROR("client combined_calls_in_flight must be 0 (automatic) or more, got {}",
                 config.combined_calls_in_flight);
    return Err(ErrorCode::kInvalidParams);
  }
  // Before the master: a bad mode or a missing device is the caller's
  // configuration, whatever the cluster's state.
  auto rdma = RdmaReads::Open(config);
  if (!rdma) return Err(rdma.error());
  std::string why;
  auto tls = RpcTlsContext::Create(config.tls, /*server=*/false, &why);
  if (!tls) {
    MC_LOG_ERROR("client TLS files unusable reason=\"{}\"", why);
    return Err(tls.error());
  }
  auto impl = std::make_unique<Impl>(std::move(config), std::move(*rdma), std::move(*tls));
  // Checking the master now turns a wrong address into one clear error at
  // startup, and warms the node cache.
  auto nodes = impl->router.FetchNodes();
  if (!nodes) return Err(nodes.error());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<bool> Client::Exist(std::string_view key, bool prefetch) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::string k(key);
  // A 0 from the owner the master named is treated like "moved": between the
  // two calls the object may have changed node.
  auto found = WithOwner<bool>(impl_->router, k, [&](const Owner& owner) -> Result<bool> {
    auto answer = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
      return c.Exist(k, prefetch, impl_->router.config().local_node);
    });
    if (!answer) return Err(answer.error());
    if (*answer == 1) return true;
    if (*answer == 0) return Err(ErrorCode::kObjectNotFound);
    return Err(ErrorCodeFromInt(*answer));
  });
  if (!found && found.error() == ErrorCode::kObjectNotFound) return false;
  return found;
}

Result<void> Client::Remove(std::string_view key, bool force) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  std::string k(key);
  auto removed = WithOwner<void>(impl_->router, k, [&](const Owner& owner) {
    return Flatten(
        owner.channel->Call([&](rpc::WorkerServiceClient& c) { return c.Remove(k, force); }));
  });
  if (removed) impl_->router.ForgetOwner(k);
  impl_->hot_cache.Erase(k);
  return removed;
}

Result<ObjectInspection> Client::Inspect(std::string_view key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::string k(key);
  return WithOwner<ObjectInspection>(
      impl_->router, k, [&](const Owner& owner) -> Result<ObjectInspection> {
        rpc::ObjectInfo info;
        auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) { c.Inspect(info, k); });
        if (!call) return Err(call.error());
        if (info.code != rpc::ErrorCode::OK) return Err(FromRpc(info.code));
        return ObjectInspection{
            owner.node_id,    info.tier,        info.offset, info.size,    info.version,
            info.hard_pinned, info.soft_pinned, info.state,  info.readers, info.lease_remaining_ms,
            info.idle_ms};
      });
}

Result<std::vector<NodeRecord>> Client::ListNodes() {
  auto nodes = impl_->router.FetchNodes();
  if (!nodes) return Err(nodes.error());
  std::vector<NodeRecord> records;
  records.reserve(nodes->size());
  for (const auto& node : *nodes) records.push_back(ToNodeRecord(node));
  return records;
}

Result<WorkerCounters> Client::Stats(const std::string& node_id) {
  rpc::WorkerStats stats;
  auto call = impl_->router.OnNode(node_id, [&](Owner& node) {
    return node.channel->Call([&](rpc::WorkerServiceClient& c) { c.Stats(stats); });
  });
  if (!call) return Err(call.error());
  WorkerCounters counters;
  counters.node_id = stats.node_id.empty() ? node_id : stats.node_id;
  for (const auto& tier : stats.tiers) {
    counters.tiers.push_back(TierCounters{ToTierUsage(tier.usage), tier.hits, tier.promotions_in,
                                          tier.demotions_out, tier.evictions});
  }
  counters.gets = stats.gets;
  counters.get_misses = stats.get_misses;
  counters.puts = stats.puts;
  counters.removes = stats.removes;
  counters.dropped = stats.dropped;
  counters.upserts = stats.upserts;
  counters.prefetch_started = stats.prefetch_started;
  counters.prefetch_succeeded = stats.prefetch_succeeded;
  counters.prefetch_failed = stats.prefetch_failed;
  counters.prefetch_skipped = stats.prefetch_skipped;
  counters.moved_out = stats.moved_out;
  counters.moved_in = stats.moved_in;
  counters.pinned_bytes = stats.pinned_bytes;
  return counters;
}

HotCacheCounters Client::hot_cache_counters() const { return impl_->hot_cache.counters(); }

TransportCounters Client::transport_counters() const {
  TransportCounters counters = impl_->rdma->counters();
  impl_->async_reads->AddCounters(counters);
  counters.async_puts = impl_->async_puts->puts();
  counters.async_put_batches = impl_->async_puts->batches();
  counters.combined_gets = impl_->get_combiners.shared_requests();
  counters.combined_get_batches = impl_->get_combiners.shared_calls();
  counters.combined_puts = impl_->put_combiners.shared_requests();
  counters.combined_put_batches = impl_->put_combiners.shared_calls();
  counters.combining_waiters = impl_->get_combiners.waiting() + impl_->put_combiners.waiting();
  return counters;
}

}  // namespace mooncake
