#pragma once

// Private to client/: ClientRouter, the routing half of mooncake::Client. It owns the master
// channel and one pooled channel per worker node, and answers "which node
// serves this key" and "which node should take this new object". Thrift types
// appear only in client/'s private headers and .cc files, never in client.h.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "client/client.h"
#include "client/owner_cache.h"
#include "mooncake_rpc/MasterService.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/master_endpoint.h"
#include "thrift/master_shards.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake {

// The master that leads now (a static address, or followed through etcd).
using MasterChannel = MasterEndpoint;
using WorkerChannel = RpcChannel<rpc::WorkerServiceClient>;

// A worker node and the channel that reaches it. The shared_ptr keeps a
// channel alive for calls in flight even if the node's address changes.
struct Owner {
  std::string node_id;
  std::shared_ptr<WorkerChannel> channel;
  // Came from the client's key -> owner cache or an owner hint, not from
  // the master: a failure to reach it is a reason to ask the master again.
  bool cached = false;
};

// Where each key of a batch goes: the owner and the input positions it serves.
struct OwnerGroup {
  Owner owner;
  std::vector<size_t> indices;
};

// Thread-safety: every method is safe from any thread. mu_ guards nodes_; the
// channels themselves are thread-safe and are used outside the lock.
// on_readdressed_ is set before the router is shared and never changes.
class ClientRouter {
 public:
  // Called, outside the router's lock, with a node whose address changed
  // (it restarted elsewhere), so per-node transport state can be dropped.
  using ReaddressedFn = std::function<void(const std::string& node_id)>;

  // `tls` (may be null: plain TCP) is the client's TLS context.
  explicit ClientRouter(ClientConfig config, ReaddressedFn on_readdressed = {},
                        std::shared_ptr<const RpcTlsContext> tls = nullptr);

  const ClientConfig& config() const { return config_; }
  // The options of this client's RPC connections (timeouts, polling, TLS).
  const RpcOptions& rpc_options() const { return rpc_options_; }
  // The master for node-level calls (the first shard when sharded).
  MasterChannel& master() { return masters_.Any(); }
  MasterShards& masters() { return masters_; }

  // Asks the master for the registry and refreshes the address cache.
  Result<std::vector<rpc::NodeInfo>> FetchNodes();
  // The channel of a known node; refreshes the registry once on a miss.
  // kNodeNotFound if the master does not know the node either.
  Result<Owner> Node(const std::string& node_id);
  // Runs `call` on `node_id`'s channel; when the node cannot be reached at
  // the address cached for it, asks the master for the registry once, and
  // if the node now has another address (it restarted elsewhere), runs
  // `call` there. `call` returns a Result (its error is returned as is).
  template <typename Call>
  auto OnNode(const std::string& node_id, Call&& call) -> std::invoke_result_t<Call&, Owner&>;
  // The owner of `key`: from the key -> owner cache when it has the key,
  // else from the master (kObjectNotFound if none).
  Result<Owner> Locate(const std::string& key);
  // The owner the key -> owner cache remembers, with no master round trip.
  std::optional<Owner> LocateCached(std::string_view key);
  // The owner according to the master, bypassing the cache (and refreshing it).
  Result<Owner> LocateAtMaster(const std::string& key);
  // Records that `node_id` owns `key` (after a put or a master answer).
  void RememberOwner(std::string_view key, std::string_view node_id);
  void ForgetOwner(const std::string& key);
  // After `stale_node` denied owning `key`: follows the worker's hint when it
  // names another node, else asks the master again. kObjectNotFound if the
  // master still names the node that denied it.
  Result<Owner> Relocate(const std::string& key, const std::string& hint,
                         const std::string& stale_node);
  // After a remembered owner could not be reached (`failure`): asks the
  // master. If the master names that same node at the same address, the
  // failure stands; at a new address (it restarted there), that is where
  // the key is.
  Result<Owner> RelocateUnreachable(const std::string& key, const Owner& stale, ErrorCode failure);
  // Locates keys[i] for every i in `todo` with one master round trip per slice
  // of keys (per shard when sharded) and groups them by owner, each group's
  // indices in `todo` order, and remembers each located owner in the owner
  // cache. Keys without an owner get their code in `missing` (index, code);
  // a failed master call fails the whole batch.
  Result<std::map<std::string, OwnerGroup>> GroupByOwner(
      const std::vector<std::string>& keys, const std::vector<size_t>& todo,
      std::vector<std::pair<size_t, ErrorCode>>& missing);
  // Groups keys[i] for every i in `todo` whose owner the cache remembers
  // (Owner::cached set); the other indices go to `uncached`, in order. No
  // master round trip.
  std::map<std::string, OwnerGroup> GroupCached(const std::vector<std::string>& keys,
                                                const std::vector<size_t>& todo,
                                                std::vector<size_t>& uncached);
  // The node a new object of `size` bytes goes to: options.preferred_node,
  // else the configured local node, else the master's pick by free space.
  // `explicit_choice` tells the caller the user named the node, so it must
  // not silently place the object elsewhere.
  Result<Owner> PickTarget(uint64_t size, const PutOptions& options, bool& explicit_choice);
  // The master's pick for `size` bytes, skipping `exclude`. Remembered for
  // PickTarget's next puts (ClientConfig::pick_reuse_ms).
  Result<Owner> PickByMaster(uint64_t size, const std::vector<std::string>& exclude);
  // A put to `node_id` failed for want of room or of a connection (`why`):
  // the master is asked again before the next put, and if it was the local
  // node, puts leave it aside for kLocalNodeRetry.
  void ForgetPick(const std::string& node_id, ErrorCode why);

  // How long puts go to the master's pick after the local node could not
  // be used (not in the registry, full, unreachable) before it is tried
  // again: a co-located worker that is down must not cost every put a
  // registry listing or a refused call, and a warning line each.
  static constexpr std::chrono::milliseconds kLocalNodeRetry{1000};

 private:
  struct NodeEntry {
    std::string host;
    int port = 0;
    std::shared_ptr<WorkerChannel> channel;
  };

  // The master's last PickNode answer. Its free space shrinks by what this
  // client placed there since, so a reuse never counts on room the node
  // did not report.
  struct RecentPick {
    std::string node_id;
    uint64_t free_bytes = 0;
    std::chrono::steady_clock::time_point at;
  };
  // The recent pick's owner, if it is young enough and has room for `size`
  // (which it then counts as used).
  std::optional<Owner> ReusePick(uint64_t size);
  // config_.local_node's channel, unless it is left aside (kLocalNodeRetry)
  // or the registry does not have it (which then leaves it aside).
  std::optional<Owner> LocalNode();
  // Leaves the local node aside for kLocalNodeRetry; warns once per period.
  void SetLocalNodeAside(ErrorCode why);

  // Returns the cached channel for the node, replacing it when the address
  // changed (a worker restarted elsewhere).
  Owner Remember(const std::string& node_id, const std::string& host, int port);
  std::shared_ptr<WorkerChannel> Cached(const std::string& node_id);
  // GroupByOwner's master round trips for the keys of one shard.
  Result<void> LocateAtShard(const ShardKeys& shard, const std::vector<std::string>& keys,
                             std::map<std::string, OwnerGroup>& groups,
                             std::vector<std::pair<size_t, ErrorCode>>& missing);

  const ClientConfig config_;
  const ReaddressedFn on_readdressed_;
  const RpcOptions rpc_options_;
  // One shard, or one per slot-table shard (config_.master_shards).
  MasterShards masters_;
  std::shared_mutex mu_;                    // shared for lookups, exclusive for changes
  std::map<std::string, NodeEntry> nodes_;  // guarded by mu_
  // key -> owner node id; thread-safe on its own (not guarded by mu_).
  OwnerCache owners_{config_.location_cache_bytes};
  // config_.pick_reuse_ms, within [0, 1 h] (a larger count of milliseconds
  // would overflow the clock's nanoseconds).
  const std::chrono::milliseconds pick_reuse_;
  std::mutex pick_mu_;
  std::optional<RecentPick> recent_pick_;  // guarded by pick_mu_
  // Until when (steady clock, ns) puts skip the local node; 0: they do not.
  // An atomic, not pick_mu_: every put with a local node reads it.
  std::atomic<int64_t> local_aside_until_ns_{0};
};

// The registry's view of a node and its tiers, as the master reported it
// (negative counts read as 0).
TierUsage ToTierUsage(const rpc::TierUsage& usage);
NodeRecord ToNodeRecord(const rpc::NodeInfo& info);

// Where the client's master is: config.master_host:port, or etcd.
MasterTarget ToMasterTarget(const ClientConfig& config);
// The slot table of config.master_shards; nullopt when empty (one master) or
// unusable (Client::Create refuses those first).
std::optional<SlotTable> ToSlotTable(const ClientConfig& config);

// Turns a call that answers an rpc ErrorCode into one Result.
inline Result<void> Flatten(const Result<rpc::ErrorCode::type>& result) {
  if (!result) return Err(result.error());
  return ToResult(*result);
}

// Splits `indices`, in order, into runs whose sizes (`size_of(i)`) total at
// most `max_bytes` and number at most `max_count`, so no single request
// outgrows a Thrift frame. An index larger than `max_bytes` alone gets a run
// of its own; no run is empty.
std::vector<std::vector<size_t>> SliceIndices(const std::vector<size_t>& indices,
                                              const std::function<size_t(size_t)>& size_of,
                                              size_t max_bytes, size_t max_count);
// The same, sized by the keys: keys[i] is the size of i.
std::vector<std::vector<size_t>> SliceIndices(const std::vector<size_t>& indices,
                                              const std::vector<std::string>& keys,
                                              size_t max_bytes, size_t max_count);

template <typename Call>
auto ClientRouter::OnNode(const std::string& node_id, Call&& call)
    -> std::invoke_result_t<Call&, Owner&> {
  auto node = Node(node_id);
  if (!node) return Err(node.error());
  auto result = call(*node);
  if (result || result.error() != ErrorCode::kRpcFail) return result;
  // A refused or broken connection: the node may have restarted on another
  // port. The registry names its address now; the same one means the
  // failure stands.
  if (!FetchNodes()) return result;
  auto again = Node(node_id);
  if (!again || again->channel == node->channel) return result;
  return call(*again);
}

}  // namespace mooncake
