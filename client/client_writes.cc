#include "client/client_writes.h"

#include <istream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client_chunked_io.h"
#include "client/client_impl.h"
#include "client/client_retry.h"
#include "common/log.h"
#include "thrift/value_calls.h"

namespace mooncake {

rpc::ReplicateConfig ToRpcConfig(const PutOptions& options) {
  rpc::ReplicateConfig config;
  config.with_hard_pin = options.hard_pin;
  config.with_soft_pin = options.soft_pin;
  config.preferred_node = options.preferred_node;
  config.soft_pin_ttl_ms = options.soft_pin_ttl_ms;
  config.preferred_tier = options.preferred_tier;
  return config;
}

Result<void> PutPlaced(ClientRouter& router, const std::string& key, uint64_t size,
                       const PutOptions& options, const WriteAttempt& attempt,
                       const CanRetry& can_retry) {
  bool explicit_choice = false;
  auto target = router.PickTarget(size, options, explicit_choice);
  if (!target) return Err(target.error());
  Result<void> result = attempt(*target);
  if (result) router.RememberOwner(key, target->node_id);
  if (!result && IsRefusedPlacement(result.error()))
    router.ForgetPick(target->node_id, result.error());
  if (!result && result.error() == ErrorCode::kRpcFail && can_retry()) {
    // The cached address may be stale (the worker restarted on another
    // port): refresh the registry and try the node's current address once.
    if (router.FetchNodes()) {
      auto refreshed = router.PickTarget(size, options, explicit_choice);
      if (refreshed && refreshed->channel != target->channel) {
        target = refreshed;
        result = attempt(*target);
        if (result) router.RememberOwner(key, target->node_id);
      }
    }
  }
  // A node the client picked that has no room, or cannot be reached (a dead
  // worker stays in the registry until node_ttl passes), gets replaced once.
  if (result || explicit_choice || !IsRefusedPlacement(result.error()) || !can_retry()) {
    return result;
  }
  auto other = router.PickByMaster(size, {target->node_id});
  // No other node: the first node's answer says best why the put failed.
  if (!other || other->node_id == target->node_id) return result;
  MC_LOG_DEBUG("put retried on another node key={} from={} to={}", key, target->node_id,
               other->node_id);
  auto placed = attempt(*other);
  if (placed) router.RememberOwner(key, other->node_id);
  return placed;
}

Result<void> UpsertRouted(ClientRouter& router, const std::string& key, uint64_t size,
                          const PutOptions& options, const WriteAttempt& attempt,
                          const CanRetry& can_retry) {
  // Writes ask the master, not the owner cache: an upsert sent to a node that
  // lost the key would create a second object there and fail its claim.
  auto owner = router.LocateAtMaster(key);
  if (owner) {
    Result<void> result = attempt(*owner);
    if (result || !IsMoved(result.error()) || !can_retry()) return result;
    auto moved = router.Relocate(key, "", owner->node_id);
    if (moved) return attempt(*moved);
    if (moved.error() != ErrorCode::kObjectNotFound) return Err(moved.error());
    MC_LOG_DEBUG("upsert target lost the key; creating it key={} node={}", key, owner->node_id);
  } else if (owner.error() != ErrorCode::kObjectNotFound) {
    return Err(owner.error());
  }
  Result<void> created = PutPlaced(router, key, size, options, attempt, can_retry);
  if (created || created.error() != ErrorCode::kObjectAlreadyExists || !can_retry()) {
    return created;
  }
  auto winner = router.LocateAtMaster(key);
  // The winner's object vanished too: heavy contention; the caller retries.
  if (!winner) return Err(ErrorCode::kObjectReplicaBusy);
  MC_LOG_DEBUG("upsert lost the put race; replacing at winner key={} node={}", key,
               winner->node_id);
  return attempt(*winner);
}

// ---- Client: Put, Upsert and their streams ----

Result<void> Client::Put(std::string_view key, std::string_view value, const PutOptions& options) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (value.empty()) return Err(ErrorCode::kInvalidParams);
  if (value.size() <= kMaxCombinedValueBytes) {
    auto combiner = impl_->put_combiners.For(options, [&] {
      return std::make_unique<Impl::PutCombiner>(
          [this, options](std::span<const CombinedPut* const> puts) {
            return PutTogether(options, puts);
          },
          CallLimits{.max_units = kMaxCombinedCalls,
                     .max_in_flight = impl_->combined_calls_in_flight});
    });
    if (combiner) {
      if (auto together = combiner->Call(CombinedPut{key, value})) return *together;
    }
  }
  return PutAlone(key, value, options);
}

Result<void> Client::PutAlone(std::string_view key, std::string_view value,
                              const PutOptions& options) {
  std::string k(key);
  rpc::ReplicateConfig config = ToRpcConfig(options);
  auto result = PutPlaced(
      impl_->router, k, value.size(), options,
      [&](const Owner& owner) { return PutValue(owner, k, value, config); }, [] { return true; });
  // A put succeeds only where the key was absent: a copy this client
  // cached is of an object since removed.
  if (result) impl_->hot_cache.Erase(k);
  return result;
}

std::vector<std::optional<Result<void>>> Client::PutTogether(
    const PutOptions& options, std::span<const CombinedPut* const> puts) {
  std::vector<std::optional<Result<void>>> results;
  results.reserve(puts.size());
  if (puts.size() == 1) {
    results.emplace_back(PutAlone(puts.front()->key, puts.front()->value, options));
    return results;
  }
  // Views of the callers' keys and values, which wait until this returns.
  std::vector<ValueView> items;
  items.reserve(puts.size());
  for (const CombinedPut* put : puts) items.push_back({put->key, put->value});
  // BatchPutViews already retried an unreachable node's puts the single way.
  for (auto& result : BatchPutViews(items, options)) results.emplace_back(std::move(result));
  return results;
}

Result<void> Client::PutStream(std::string_view key, std::istream& in, uint64_t size,
                               const PutOptions& options, const ProgressFn& progress) {
  return WriteStream(key, in, size, options, progress, /*upsert=*/false);
}

Result<void> Client::Upsert(std::string_view key, std::string_view value,
                            const PutOptions& options) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (value.empty()) return Err(ErrorCode::kInvalidParams);
  std::string k(key);
  rpc::ReplicateConfig config = ToRpcConfig(options);
  auto result = UpsertRouted(
      impl_->router, k, value.size(), options,
      [&](const Owner& owner) { return UpsertValue(owner, k, value, config); },
      [] { return true; });
  // Even a failed upsert may have replaced or revoked the object.
  impl_->hot_cache.Erase(k);
  return result;
}

Result<void> Client::UpsertStream(std::string_view key, std::istream& in, uint64_t size,
                                  const PutOptions& options, const ProgressFn& progress) {
  return WriteStream(key, in, size, options, progress, /*upsert=*/true);
}

Result<void> Client::WriteStream(std::string_view key, std::istream& in, uint64_t size,
                                 const PutOptions& options, const ProgressFn& progress,
                                 bool upsert) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  if (size <= kRpcChunkBytes) {
    // One RPC carries it anyway; holding it lets a retry resend it.
    std::string value;
    if (auto read = ReadExactly(in, size, value); !read) return read;
    auto written = upsert ? Upsert(key, value, options) : Put(key, value, options);
    if (written && progress) progress(size, size);
    return written;
  }
  std::string k(key);
  rpc::ReplicateConfig config = ToRpcConfig(options);
  bool consumed = false;
  ChunkSource from_stream = [&](uint64_t, size_t length, std::string& buffer) {
    consumed = true;
    return ReadExactly(in, length, buffer);
  };
  auto send = [&](const Owner& owner) {
    return PutChunked(owner, k, size, config, from_stream, progress, upsert);
  };
  auto can_retry = [&] { return !consumed; };
  if (!upsert) {
    auto result = PutPlaced(impl_->router, k, size, options, send, can_retry);
    if (result) impl_->hot_cache.Erase(k);  // as in PutAlone
    return result;
  }
  auto result = UpsertRouted(impl_->router, k, size, options, send, can_retry);
  impl_->hot_cache.Erase(k);
  return result;
}

void Client::PutAsync(std::string key, std::string value, PutDone done, const PutOptions& options) {
  impl_->async_puts->Put(std::move(key), std::move(value), options, std::move(done));
}

}  // namespace mooncake
