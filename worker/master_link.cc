#include "worker/master_link.h"

#include <algorithm>
#include <ranges>
#include <utility>

#include "mooncake_rpc/MasterService.h"
#include "thrift/master_endpoint.h"
#include "thrift/master_shards.h"
#include "thrift/rpc_call_site.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake {
namespace {

// The node registry of one master (shard).
Result<std::vector<rpc::NodeInfo>> ListNodesAt(MasterEndpoint& master) {
  return master.Call([](rpc::MasterServiceClient& client) {
    std::vector<rpc::NodeInfo> nodes;
    client.ListNodes(nodes);
    return nodes;
  });
}

NodeRecord FromRpcNode(const rpc::NodeInfo& info) {
  NodeRecord node{.node_id = info.node_id,
                  .host = info.host,
                  .port = info.port,
                  .tiers = {},
                  .alive = info.alive,
                  .last_heartbeat_ms = info.last_heartbeat_ms};
  for (const auto& tier : info.tiers) {
    node.tiers.push_back({.name = tier.name,
                          .kind = tier.kind,
                          .capacity = static_cast<uint64_t>(tier.capacity),
                          .used = static_cast<uint64_t>(tier.used),
                          .objects = static_cast<uint64_t>(tier.objects)});
  }
  return node;
}

std::vector<rpc::TierUsage> ToRpcUsages(const std::vector<TierUsage>& tiers) {
  std::vector<rpc::TierUsage> usages;
  usages.reserve(tiers.size());
  for (const TierUsage& tier : tiers) {
    rpc::TierUsage usage;
    usage.name = tier.name;
    usage.kind = tier.kind;
    usage.capacity = static_cast<int64_t>(tier.capacity);
    usage.used = static_cast<int64_t>(tier.used);
    usage.objects = static_cast<int64_t>(tier.objects);
    usages.push_back(std::move(usage));
  }
  return usages;
}

// Keeps one announcement well inside the RPC frame limit: keys may be up to
// kMaxKeyBytes each, so the count alone does not bound the bytes.
constexpr size_t kAnnounceBatchKeys = 8192;

std::vector<std::string> KeysAt(const std::vector<std::string>& keys,
                                const std::vector<size_t>& indices) {
  std::vector<std::string> out;
  out.reserve(indices.size());
  for (size_t i : indices) out.push_back(keys[i]);
  return out;
}

// `send(master, keys)` to each shard for its share of `keys` (or to the one
// master), the answers merged back in key order.
template <typename SendFn>
std::vector<Result<void>> PerShard(MasterShards& shards, const std::vector<std::string>& keys,
                                   SendFn send) {
  if (!shards.sharded()) return send(0u, shards.Any(), keys);
  std::vector<Result<void>> results(keys.size());
  for (const ShardKeys& group : shards.ForKeys(keys)) {
    auto answers = send(group.shard, shards.Shard(group.shard), KeysAt(keys, group.indices));
    for (size_t j = 0; j < group.indices.size(); ++j) results[group.indices[j]] = answers[j];
  }
  return results;
}

// Which failure of several shards' answers a caller sees: kNodeNotFound
// first (it makes the worker register again), else the first one.
Result<void> WorstOf(const std::vector<Result<void>>& results) {
  Result<void> worst;
  for (const auto& result : results) {
    if (result) continue;
    if (result.error() == ErrorCode::kNodeNotFound) return result;
    if (worst) worst = result;
  }
  return worst;
}

}  // namespace

struct MasterLink::Channel {
  MasterShards shards;
};

MasterLink::MasterLink(std::string master_host, int master_port,
                       std::shared_ptr<const RpcTlsContext> tls)
    : MasterLink(MasterTarget{.host = std::move(master_host), .port = master_port},
                 std::move(tls)) {}

MasterLink::MasterLink(MasterTarget target, std::shared_ptr<const RpcTlsContext> tls)
    : MasterLink(std::move(target), std::nullopt, std::move(tls)) {}

MasterLink::MasterLink(MasterTarget target, std::optional<SlotTable> shards,
                       std::shared_ptr<const RpcTlsContext> tls, int rpc_poll_us)
    : channel_(new Channel{MasterShards(
          std::move(target), std::move(shards),
          RpcOptions{.io_timeout_ms = 10000, .poll_us = rpc_poll_us, .tls = std::move(tls)})}),
      forgotten_(channel_->shards.size(), 1),
      told_(channel_->shards.size(), 0),
      epoch_(channel_->shards.size(), 0),
      registering_(channel_->shards.size(), false) {}

void MasterLink::StopFollowing() {
  // From here on a refused claim no longer calls back: the worker is being
  // torn down, and the batcher's last continuations run in ~MasterLink.
  stopping_.store(true);
  channel_->shards.CancelAll();
}

bool MasterLink::CallBackOnUnknownNode(const Result<void>& claimed) const {
  return !claimed && claimed.error() == ErrorCode::kNodeNotFound && on_unknown_node_ &&
         !stopping_.load();
}

MasterLink::~MasterLink() = default;

Result<void> MasterLink::Claim(const std::string& key) {
  uint64_t seen = registrations();
  auto claimed = claims_.Claim(key);
  if (CallBackOnUnknownNode(claimed)) {
    on_unknown_node_(seen);
    claimed = claims_.Claim(key);
  }
  return claimed;
}

void MasterLink::ClaimAsync(const std::string& key, std::function<void(Result<void>)> done) {
  // A thread that may wait (the epoll engine's pool) sends a lone claim
  // itself; a loop thread never waits.
  uint64_t seen = registrations();
  claims_.ClaimAsync(
      key,
      [this, key, seen, done = std::move(done)](Result<void> claimed) {
        if (CallBackOnUnknownNode(claimed)) {
          on_unknown_node_(seen);
          claimed = claims_.Claim(key);
        }
        done(std::move(claimed));
      },
      /*may_lead=*/RpcCallMayBlock());
}

std::vector<Result<void>> MasterLink::ClaimMany(const std::vector<std::string>& keys) {
  // Through the batcher, so that concurrent batches (and single puts) share
  // master calls.
  uint64_t seen = registrations();
  std::vector<Result<void>> results = claims_.ClaimMany(keys);
  auto forgotten = [](const Result<void>& r) {
    return !r && r.error() == ErrorCode::kNodeNotFound;
  };
  auto first_forgotten = std::ranges::find_if(results, forgotten);
  if (first_forgotten == results.end() || !CallBackOnUnknownNode(*first_forgotten)) return results;
  // The master forgot this node: register again, then claim those keys once
  // more.
  on_unknown_node_(seen);
  std::vector<size_t> again;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (forgotten(results[i])) again.push_back(i);
  }
  auto answers = claims_.ClaimMany(KeysAt(keys, again));
  for (size_t j = 0; j < again.size(); ++j) results[again[j]] = std::move(answers[j]);
  return results;
}

std::vector<Result<void>> MasterLink::SendClaims(const std::vector<std::string>& keys) {
  return PerShard(channel_->shards, keys,
                  [this](uint32_t shard, MasterEndpoint& master, const auto& share) {
                    uint64_t sent_at = ShardEpoch(shard);
                    auto answers = SendShardClaims(master, share);
                    NoteForgotten(shard, sent_at, answers);
                    return answers;
                  });
}

std::vector<Result<void>> MasterLink::SendShardClaims(MasterEndpoint& master,
                                                      const std::vector<std::string>& keys) {
  std::vector<Result<void>> results;
  results.reserve(keys.size());
  if (keys.size() == 1) {
    auto reply = master.Call([&](rpc::MasterServiceClient& client) {
      rpc::PutOwnerResult result;
      client.PutOwner(result, keys.front(), *node_id_.load());
      return result;
    });
    results.push_back(reply ? ToResult(reply->code) : Err(reply.error()));
    return results;
  }
  auto reply = master.Call([&](rpc::MasterServiceClient& client) {
    std::vector<rpc::PutOwnerResult> answers;
    client.BatchPutOwner(answers, keys, *node_id_.load());
    return answers;
  });
  if (reply && reply->size() != keys.size()) reply = Err(ErrorCode::kInternalError);
  if (!reply) {
    results.assign(keys.size(), Err(reply.error()));
    return results;
  }
  for (const auto& answer : *reply) results.push_back(ToResult(answer.code));
  return results;
}

Result<void> MasterLink::Release(const std::string& key) {
  return ReleaseAt(channel_->shards.ForKey(key), key);
}

Result<void> MasterLink::ReleaseAt(MasterEndpoint& master, const std::string& key) {
  auto reply = master.Call(
      [&](rpc::MasterServiceClient& client) { return client.RemoveOwner(key, *node_id_.load()); });
  if (!reply) return Err(reply.error());
  return ToResult(*reply);
}

std::vector<Result<void>> MasterLink::ReleaseMany(const std::vector<std::string>& keys) {
  return PerShard(channel_->shards, keys,
                  [this](uint32_t, MasterEndpoint& master, const auto& share) {
                    return SendShardReleases(master, share);
                  });
}

std::vector<Result<void>> MasterLink::SendShardReleases(MasterEndpoint& master,
                                                        const std::vector<std::string>& keys) {
  if (keys.size() == 1) return {ReleaseAt(master, keys.front())};
  std::vector<Result<void>> results;
  results.reserve(keys.size());
  // Sliced as announcements are, well inside the master's frame limits.
  for (size_t begin = 0, end = 0; begin < keys.size(); begin = end) {
    end = KeyBatchEnd(keys, begin, kAnnounceBatchKeys, kRpcMaxKeyListBytes);
    std::vector<std::string> batch(keys.begin() + begin, keys.begin() + end);
    auto reply = master.Call([&](rpc::MasterServiceClient& client) {
      std::vector<rpc::ErrorCode::type> codes;
      client.BatchRemoveOwner(codes, batch, *node_id_.load());
      return codes;
    });
    if (reply && reply->size() != batch.size()) reply = Err(ErrorCode::kInternalError);
    for (size_t i = 0; i < batch.size(); ++i) {
      results.push_back(reply ? ToResult((*reply)[i]) : Err(reply.error()));
    }
  }
  return results;
}

uint64_t MasterLink::ShardEpoch(uint32_t shard) {
  std::lock_guard lock(shards_mu_);
  return epoch_[shard];
}

void MasterLink::NoteForgotten(uint32_t shard, uint64_t sent_at,
                               const std::vector<Result<void>>& answers) {
  bool forgotten = std::ranges::any_of(
      answers, [](const Result<void>& r) { return !r && r.error() == ErrorCode::kNodeNotFound; });
  if (!forgotten) return;
  std::lock_guard lock(shards_mu_);
  // A refusal of a call sent before the shard's last registration, or
  // while one is under way, is about the incarnation that registration
  // replaces: counting it would register once more and purge the keys
  // claimed under the new one.
  if (epoch_[shard] != sent_at || registering_[shard]) return;
  ++forgotten_[shard];
}

bool MasterLink::NeedsRegistration() {
  std::lock_guard lock(shards_mu_);
  return forgotten_ != told_;
}

std::vector<std::string> MasterLink::OfLastRound(const std::vector<std::string>& keys) {
  std::lock_guard lock(shards_mu_);
  std::vector<std::string> ours;
  for (const std::string& key : keys) {
    uint32_t shard = channel_->shards.ShardOf(key);
    if (std::ranges::find(registered_round_ | std::views::keys, shard) !=
        (registered_round_ | std::views::keys).end()) {
      ours.push_back(key);
    }
  }
  return ours;
}

void MasterLink::RegisterAgainLater() {
  std::lock_guard lock(shards_mu_);
  for (uint32_t shard : registered_round_ | std::views::keys) ++forgotten_[shard];
}

std::vector<std::pair<uint32_t, uint64_t>> MasterLink::ShardsToRegister() {
  std::lock_guard lock(shards_mu_);
  std::vector<std::pair<uint32_t, uint64_t>> shards;
  for (uint32_t shard = 0; shard < forgotten_.size(); ++shard) {
    if (forgotten_[shard] == told_[shard]) continue;
    shards.emplace_back(shard, forgotten_[shard]);
    registering_[shard] = true;
  }
  return shards;
}

Result<void> MasterLink::Register(const NodeRecord& node) {
  rpc::NodeInfo info;
  info.node_id = node.node_id;
  info.host = node.host;
  info.port = node.port;
  info.alive = true;
  info.tiers = ToRpcUsages(node.tiers);
  MasterShards& shards = channel_->shards;
  // Only the shards that forgot this node: registering with one that knows
  // it would purge every key of this node there until the announcement
  // lands, and lose what was claimed there meanwhile.
  std::vector<std::pair<uint32_t, uint64_t>> round = ShardsToRegister();
  std::vector<Result<void>> results;
  for (uint32_t shard : round | std::views::keys) {
    auto reply = shards.Shard(shard).Call(
        [&](rpc::MasterServiceClient& client) { return client.RegisterNode(info); });
    results.push_back(reply ? ToResult(*reply) : Err(reply.error()));
  }
  // The shards that took the registration are announced to even when
  // another refused it: that one stays pending and is retried alone.
  std::vector<std::pair<uint32_t, uint64_t>> took;
  {
    std::lock_guard lock(shards_mu_);
    for (size_t i = 0; i < round.size(); ++i) {
      registering_[round[i].first] = false;
      if (!results[i]) continue;
      ++epoch_[round[i].first];
      took.push_back(round[i]);
    }
    registered_round_ = took;
  }
  if (took.empty()) return WorstOf(results);
  registrations_.fetch_add(1, std::memory_order_acq_rel);
  return {};
}

Result<void> MasterLink::Heartbeat(const std::vector<TierUsage>& tiers) {
  auto usages = ToRpcUsages(tiers);
  MasterShards& shards = channel_->shards;
  std::vector<Result<void>> results;
  for (uint32_t shard = 0; shard < shards.size(); ++shard) {
    // A shard awaiting registration is the registration's to settle; the
    // others must go on hearing from this node meanwhile.
    uint64_t sent_at = 0;
    {
      std::lock_guard lock(shards_mu_);
      if (forgotten_[shard] != told_[shard] || registering_[shard]) continue;
      sent_at = epoch_[shard];
    }
    auto reply = shards.Shard(shard).Call([&](rpc::MasterServiceClient& client) {
      return client.Heartbeat(*node_id_.load(), usages);
    });
    results.push_back(reply ? ToResult(*reply) : Err(reply.error()));
    NoteForgotten(shard, sent_at, {results.back()});
  }
  return WorstOf(results);
}

Result<std::vector<std::string>> MasterLink::Announce(const std::vector<std::string>& keys) {
  std::vector<std::string> rejected;
  MasterShards& shards = channel_->shards;
  std::vector<std::pair<uint32_t, uint64_t>> round;
  {
    std::lock_guard lock(shards_mu_);
    round = registered_round_;
  }
  auto in_round = [&](uint32_t shard) {
    return std::ranges::find(round | std::views::keys, shard) != (round | std::views::keys).end();
  };
  Result<void> outcome;
  std::vector<uint32_t> failed;
  auto send = [&](uint32_t shard, const std::vector<std::string>& share) {
    if (auto sent = AnnounceTo(shards.Shard(shard), share, rejected); !sent) {
      failed.push_back(shard);
      if (outcome) outcome = Err(sent.error());
    }
  };
  if (!shards.sharded()) {
    if (in_round(0)) send(0, keys);
  } else {
    for (const ShardKeys& group : shards.ForKeys(keys)) {
      // A shard that kept this node registered kept its keys too.
      if (in_round(group.shard)) send(group.shard, KeysAt(keys, group.indices));
    }
  }
  {
    // Told, unless the shard forgot this node again since it was registered
    // (a claim or heartbeat counted it meanwhile): then it is registered
    // anew, as is a shard whose announcement failed.
    std::lock_guard lock(shards_mu_);
    for (const auto& [shard, count] : round) {
      if (std::ranges::find(failed, shard) == failed.end()) {
        told_[shard] = std::max(told_[shard], count);
      }
    }
  }
  if (!outcome) return Err(outcome.error());
  return rejected;
}

Result<void> MasterLink::AnnounceTo(MasterEndpoint& master, const std::vector<std::string>& keys,
                                    std::vector<std::string>& rejected) {
  for (size_t begin = 0, end = 0; begin < keys.size(); begin = end) {
    end = KeyBatchEnd(keys, begin, kAnnounceBatchKeys, kRpcMaxKeyListBytes);
    std::vector<std::string> batch(keys.begin() + begin, keys.begin() + end);
    auto reply = master.Call([&](rpc::MasterServiceClient& client) {
      rpc::AnnounceResult result;
      client.AnnounceKeys(result, *node_id_.load(), batch);
      return result;
    });
    if (!reply) return Err(reply.error());
    if (auto ok = ToResult(reply->code); !ok) return Err(ok.error());
    rejected.insert(rejected.end(), reply->rejected.begin(), reply->rejected.end());
  }
  return {};
}

Result<NodeRecord> MasterLink::PickNode(uint64_t size, const std::vector<std::string>& exclude) {
  std::vector<std::string> not_these = exclude;
  not_these.push_back(*node_id_.load());
  auto reply = channel_->shards.Any().Call([&](rpc::MasterServiceClient& client) {
    rpc::PickNodeResult result;
    client.PickNode(result, static_cast<int64_t>(size), not_these);
    return result;
  });
  if (!reply) return Err(reply.error());
  if (auto ok = ToResult(reply->code); !ok) return Err(ok.error());
  return FromRpcNode(reply->node);
}

Result<NodeRecord> MasterLink::FindNode(const std::string& node_id) {
  auto reply = ListNodesAt(channel_->shards.Any());
  if (!reply) return Err(reply.error());
  for (const auto& node : *reply) {
    if (node.node_id == node_id && node.alive) return FromRpcNode(node);
  }
  return Err(ErrorCode::kNodeNotFound);
}

Result<void> MasterLink::HandOver(const std::string& key, const std::string& new_owner) {
  auto reply = channel_->shards.ForKey(key).Call([&](rpc::MasterServiceClient& client) {
    return client.UpdateOwner(key, *node_id_.load(), new_owner);
  });
  if (!reply) return Err(reply.error());
  return ToResult(*reply);
}

Result<std::string> MasterLink::OwnerOf(const std::string& key) {
  // The reply goes back through Call, which follows a NOT_LEADER to the new
  // leader (a void lambda would leave that code to the caller).
  auto reply = channel_->shards.ForKey(key).Call([&](rpc::MasterServiceClient& client) {
    rpc::LocationResult location;
    client.GetLocation(location, key);
    return location;
  });
  if (!reply) return Err(reply.error());
  if (auto found = ToResult(reply->code); !found) return Err(found.error());
  return reply->node_id;
}

Result<bool> MasterLink::OwnedHere(const std::string& key) {
  auto owner = OwnerOf(key);
  if (!owner) return Err(owner.error());
  return *owner == *node_id_.load();
}

Result<bool> MasterLink::UnownedWhileHere(const std::string& key) {
  const uint64_t registrations = this->registrations();
  if (NeedsRegistration()) return Err(ErrorCode::kNodeNotFound);
  auto unowned = RemovedSinceSent(key, node_id());
  // A registration that began meanwhile purged this node's keys first.
  if (NeedsRegistration() || this->registrations() != registrations) {
    return Err(ErrorCode::kNodeNotFound);
  }
  return unowned;
}

Result<bool> MasterLink::RemovedSinceSent(const std::string& key, const std::string& sender) {
  auto owner = OwnerOf(key);
  if (owner) return false;
  if (owner.error() != ErrorCode::kObjectNotFound) return Err(owner.error());
  // The same shard's registry: it is the one that would have forgotten the
  // key with its sender, or lost both in a restart.
  auto reply = ListNodesAt(channel_->shards.ForKey(key));
  if (!reply) return Err(reply.error());
  auto alive = [&](const std::string& id) {
    return std::ranges::any_of(*reply,
                               [&](const rpc::NodeInfo& n) { return n.node_id == id && n.alive; });
  };
  if (!alive(*node_id_.load())) return Err(ErrorCode::kNodeNotFound);
  return alive(sender);
}

}  // namespace mooncake
