#include "thrift/master_shards.h"

#include <utility>

namespace mooncake {
namespace {

// A static target at "HOST:PORT" or "[IPV6]:PORT" (the slot table checked
// the form; an address it let through that does not split stays unreachable,
// its calls failing with RPC_FAIL).
MasterTarget StaticTarget(const std::string& address) {
  auto split = SplitMasterAddress(address);
  if (!split) return MasterTarget{.host = address};
  return MasterTarget{.host = std::move(split->first), .port = split->second};
}

}  // namespace

MasterShards::MasterShards(MasterTarget target, RpcOptions options)
    : MasterShards(std::move(target), std::nullopt, std::move(options)) {}

MasterShards::MasterShards(SlotTable table, RpcOptions options)
    : MasterShards(MasterTarget{}, std::move(table), std::move(options)) {}

MasterShards::MasterShards(MasterTarget target, std::optional<SlotTable> table, RpcOptions options)
    : table_(std::move(table)) {
  if (!table_) {
    shards_.push_back(std::make_unique<MasterEndpoint>(std::move(target), std::move(options)));
    return;
  }
  for (uint32_t shard = 0; shard < table_->shard_count(); ++shard) {
    shards_.push_back(
        std::make_unique<MasterEndpoint>(StaticTarget(table_->address(shard)), options));
  }
}

uint32_t MasterShards::ShardOf(std::string_view key) const {
  return table_ ? table_->ShardOf(key) : 0;
}

std::vector<ShardKeys> MasterShards::ForKeys(const std::vector<std::string>& keys,
                                             const std::vector<size_t>& indices) const {
  if (!table_) return {ShardKeys{.shard = 0, .indices = indices}};
  std::vector<ShardKeys> by_shard(size());
  for (size_t i : indices) by_shard[table_->ShardOf(keys[i])].indices.push_back(i);
  std::vector<ShardKeys> groups;
  for (uint32_t shard = 0; shard < size(); ++shard) {
    if (by_shard[shard].indices.empty()) continue;
    by_shard[shard].shard = shard;
    groups.push_back(std::move(by_shard[shard]));
  }
  return groups;
}

std::vector<ShardKeys> MasterShards::ForKeys(const std::vector<std::string>& keys) const {
  std::vector<size_t> all(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) all[i] = i;
  return ForKeys(keys, all);
}

void MasterShards::CancelAll() {
  for (auto& shard : shards_) shard->Cancel();
}

std::string MasterShards::Describe() const {
  return table_ ? "shards " + table_->Format() : shards_.front()->target().Describe();
}

}  // namespace mooncake
