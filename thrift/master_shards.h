#pragma once

// MasterShards: the master directory as a set of shards (docs/sharding.md).
// Each shard is one MasterEndpoint (a static master, or an HA group that
// follows its leader) and owns the key slots a SlotTable gives it
// (common/key_slots.h). Key-level calls go to ForKey(key); node-level calls
// (ListNodes, PickNode) go to Any(), because workers register with every
// shard, so every shard knows every node.
//
// Without a slot table there is exactly one shard owning every key and no
// slot is ever computed: calls go exactly where one MasterEndpoint sends them.
//
// Thread-safety: immutable after construction; the endpoints are themselves
// safe from any number of threads.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/key_slots.h"
#include "common/status.h"
#include "thrift/master_endpoint.h"
#include "thrift/master_shard_list.h"

namespace mooncake {

// The keys of one shard: their positions in the caller's list, in order.
struct ShardKeys {
  uint32_t shard = 0;
  std::vector<size_t> indices;
};

class MasterShards {
 public:
  // One unsharded master (a static address or an etcd HA group).
  MasterShards(MasterTarget target, RpcOptions options);
  // One static master per shard of `table`, each at table.address(shard).
  MasterShards(SlotTable table, RpcOptions options);
  // `table` when it has a value, else the unsharded `target`.
  MasterShards(MasterTarget target, std::optional<SlotTable> table, RpcOptions options);
  MasterShards(const MasterShards&) = delete;
  MasterShards& operator=(const MasterShards&) = delete;

  uint32_t size() const { return static_cast<uint32_t>(shards_.size()); }
  bool sharded() const { return table_.has_value(); }
  // The shard of `key` (0 when unsharded).
  uint32_t ShardOf(std::string_view key) const;
  MasterEndpoint& ForKey(std::string_view key) { return *shards_[ShardOf(key)]; }
  MasterEndpoint& Shard(uint32_t shard) { return *shards_.at(shard); }
  // For node-level calls: every shard knows every node.
  MasterEndpoint& Any() { return *shards_.front(); }
  // keys[i] for every i in `indices`, grouped by shard: shards in ascending
  // order, only those with keys, indices in input order. Unsharded: one
  // group holding `indices` as given.
  std::vector<ShardKeys> ForKeys(const std::vector<std::string>& keys,
                                 const std::vector<size_t>& indices) const;
  // Every key of `keys`, grouped the same way.
  std::vector<ShardKeys> ForKeys(const std::vector<std::string>& keys) const;
  // Makes every waiting call of every shard give up (shutdown).
  void CancelAll();
  // "HOST:PORT" (or the etcd description) unsharded, else the slot table.
  std::string Describe() const;

 private:
  std::optional<SlotTable> table_;  // nullopt: one unsharded master
  std::vector<std::unique_ptr<MasterEndpoint>> shards_;
};

}  // namespace mooncake
