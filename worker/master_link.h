#pragma once

// The worker's connection to the master: the OwnerDirectory the backend
// claims and releases keys through, plus registration and heartbeats.
//
// Thread-safety: all methods are safe to call concurrently (pooled RPC).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/node.h"
#include "thrift/master_endpoint.h"
#include "thrift/master_shards.h"
#include "thrift/rpc_limits.h"
#include "worker/claim_batcher.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {

class RpcTlsContext;

class MasterLink : public OwnerDirectory {
 public:
  // `tls` (may be null: plain TCP) is this process's client TLS context.
  MasterLink(std::string master_host, int master_port,
             std::shared_ptr<const RpcTlsContext> tls = nullptr);
  // The master found through `target` (a static address or etcd, following
  // a change of leader: thrift/master_endpoint.h).
  explicit MasterLink(MasterTarget target, std::shared_ptr<const RpcTlsContext> tls = nullptr);
  // A sharded directory (docs/sharding.md) when `shards` has a value:
  // Register, Heartbeat go to every shard, Announce, claims, Release and
  // HandOver to each key's shard, PickNode and FindNode to the first shard.
  // Without one, the master found through `target`.
  // Its calls poll for replies up to `rpc_poll_us` (thrift/rpc_limits.h).
  MasterLink(MasterTarget target, std::optional<SlotTable> shards,
             std::shared_ptr<const RpcTlsContext> tls = nullptr,
             int rpc_poll_us = kDefaultRpcPollUs);
  ~MasterLink() override;

  // Set once the node id is known (after the port is bound, so while calls
  // may already be made: hence atomic).
  void set_node_id(std::string node_id) {
    node_id_.store(std::make_shared<const std::string>(std::move(node_id)));
  }
  std::string node_id() const { return *node_id_.load(); }
  // Called when the master no longer knows this node (it restarted or
  // declared us dead) before a claim is retried, with registrations() as it
  // was before the claim was sent: a registration since then answers that
  // claim's failure, and registering again would purge the keys claimed
  // under it (many claims of one batch fail together).
  void set_on_unknown_node(std::function<void(uint64_t seen_registrations)> callback) {
    on_unknown_node_ = std::move(callback);
  }
  // How many times Register succeeded (with one shard or more).
  uint64_t registrations() const override { return registrations_.load(std::memory_order_acquire); }
  // Whether a shard forgot this node (a heartbeat or claim was answered
  // kNodeNotFound) or was not told its keys since its last registration.
  bool NeedsRegistration();
  // Those of `keys` whose shard the last Register registered with.
  std::vector<std::string> OfLastRound(const std::vector<std::string>& keys);
  // Marks the shards of the last Register as needing registration again
  // (what they were told since could not be made right).
  void RegisterAgainLater();

  // Makes calls waiting for a new master leader give up, and refused claims
  // stop calling the on_unknown_node callback (shutdown).
  void StopFollowing();

  // Concurrent claims travel together (ClaimBatcher): one master call for
  // every claim that queued while the previous call was on the wire.
  Result<void> Claim(const std::string& key) override;
  // The keys of one batched write: through the same batcher, so concurrent
  // batches share calls too (within ClaimBatcherOptions' limits).
  std::vector<Result<void>> ClaimMany(const std::vector<std::string>& keys) override;
  // Through the batcher's sender threads, which answer `done` (or, alone
  // and on a thread that may wait, at once on this one); a claim the master
  // refuses because it forgot this node registers again and is sent once
  // more, as Claim does (on that thread: it is rare).
  void ClaimAsync(const std::string& key, std::function<void(Result<void>)> done) override;
  Result<void> Release(const std::string& key) override;
  // One BatchRemoveOwner to each shard the keys belong to.
  std::vector<Result<void>> ReleaseMany(const std::vector<std::string>& keys) override;

  // Registers with the shards that forgot this node (told by a heartbeat or
  // a claim answering kNodeNotFound) or were not yet told its keys; every
  // shard the first time. Each of those is asked even after one fails; the
  // ones that took it are the next Announce's, and a failure is returned
  // only when none did. Heartbeat asks every shard not awaiting
  // registration and returns the first failure, kNodeNotFound before any
  // other.
  Result<void> Register(const NodeRecord& node);
  Result<void> Heartbeat(const std::vector<TierUsage>& tiers);
  // Announces those of `keys` that belong to the shards of the last
  // Register, which then count as told. Returns the keys another node owns
  // already.
  Result<std::vector<std::string>> Announce(const std::vector<std::string>& keys);

  // The live node with the most free space for `size` bytes, neither this
  // one nor any in `exclude` (nodes that refused the object already).
  Result<NodeRecord> PickNode(uint64_t size, const std::vector<std::string>& exclude = {});
  // A live node by id, with its address.
  Result<NodeRecord> FindNode(const std::string& node_id);
  // Swaps the key's owner from this node to `new_owner` (compare-and-set).
  Result<void> HandOver(const std::string& key, const std::string& new_owner);
  // The node the master names as the key's owner (kObjectNotFound: none).
  Result<std::string> OwnerOf(const std::string& key) override;
  // Asks the key's shard: its owner, then its live nodes (this one among
  // them, else kNodeNotFound: the shard forgot us).
  Result<bool> RemovedSinceSent(const std::string& key, const std::string& sender) override;
  Result<bool> OwnedHere(const std::string& key) override;
  // kNodeNotFound also while a registration is pending or its announcement
  // is on its way: the master lists this node alive but not yet its keys.
  Result<bool> UnownedWhileHere(const std::string& key) override;

 private:
  struct Channel;
  // The claims of one batch, one call per shard holding some of the keys.
  std::vector<Result<void>> SendClaims(const std::vector<std::string>& keys);
  // One claim call to one master: PutOwner for one key, else BatchPutOwner.
  std::vector<Result<void>> SendShardClaims(MasterEndpoint& master,
                                            const std::vector<std::string>& keys);
  // RemoveOwner of `key` at `master` (its shard).
  Result<void> ReleaseAt(MasterEndpoint& master, const std::string& key);
  // The releases of one shard's keys: RemoveOwner for one key, else
  // BatchRemoveOwner in slices.
  std::vector<Result<void>> SendShardReleases(MasterEndpoint& master,
                                              const std::vector<std::string>& keys);
  // Announce's batches to one shard; appends the rejected keys.
  Result<void> AnnounceTo(MasterEndpoint& master, const std::vector<std::string>& keys,
                          std::vector<std::string>& rejected);

  // The count of `shard`'s completed registrations, taken as a call to it
  // is sent.
  uint64_t ShardEpoch(uint32_t shard);
  // Marks `shard` as forgetting this node if one of its `answers` (to a
  // call sent at epoch `sent_at`) says so.
  void NoteForgotten(uint32_t shard, uint64_t sent_at, const std::vector<Result<void>>& answers);
  // The shards the next Register registers with, each with its forgotten_
  // count then.
  std::vector<std::pair<uint32_t, uint64_t>> ShardsToRegister();
  // A refused claim's answer that should register again and retry.
  bool CallBackOnUnknownNode(const Result<void>& claimed) const;

  std::unique_ptr<Channel> channel_;
  std::atomic<std::shared_ptr<const std::string>> node_id_{std::make_shared<const std::string>()};
  std::function<void(uint64_t)> on_unknown_node_;
  std::atomic<uint64_t> registrations_{0};
  std::atomic<bool> stopping_{false};
  std::mutex shards_mu_;
  // Per shard: how many times it was found to have forgotten this node (1
  // at start: it never knew it), and the count its last completed
  // announcement answered. They differ while the shard needs registering.
  // Guarded by shards_mu_.
  std::vector<uint64_t> forgotten_;
  std::vector<uint64_t> told_;
  std::vector<uint64_t> epoch_;    // completed registrations per shard
  std::vector<bool> registering_;  // a Register of the shard under way
  // The last Register's shards with their forgotten_ counts; shards_mu_.
  std::vector<std::pair<uint32_t, uint64_t>> registered_round_;
  ClaimBatcher claims_{[this](const std::vector<std::string>& keys) { return SendClaims(keys); }};
};

}  // namespace mooncake
