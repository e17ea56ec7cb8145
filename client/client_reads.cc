// Client::Get, GetInto and GetStream: the single-object reads. Get and
// GetInto (into a caller's buffer) put the client's hot cache
// (client/hot_cache.h) in front of the owner and offer what they read back
// to the cache; GetStream bypasses the cache, since a streamed value is
// meant not to be held in memory. All hand the transfer to ReadChunked
// (client/client_chunked_io.h), which also does the RDMA part.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/client_batch.h"
#include "client/client_chunked_io.h"
#include "client/client_impl.h"

namespace mooncake {

namespace {

// Serves a hot-cache entry if it is still current; see client/hot_cache.h
// for the staleness bound this implements.
std::optional<ObjectValue> ServeCached(ClientRouter& router, HotCache& cache,
                                       const std::string& key) {
  auto entry = cache.Lookup(key);
  if (!entry) {
    cache.CountMiss();
    return std::nullopt;
  }
  const ClientConfig& config = router.config();
  auto now = HotCache::Clock::now();
  bool young = now - entry->fetched < std::chrono::milliseconds(config.hot_cache_max_staleness_ms);
  if (entry->data->size() >= config.hot_cache_validate_min_bytes || !young) {
    cache.CountValidation();
    // Validation must be authoritative: ask the master, not the owner cache.
    auto owner = router.LocateAtMaster(key);
    rpc::ObjectInfo info;
    Result<void> call =
        owner ? owner->channel->Call([&](rpc::WorkerServiceClient& c) { c.Inspect(info, key); })
              : Err(owner.error());
    if (!call || info.code != rpc::ErrorCode::OK || owner->node_id != entry->node_id ||
        info.version != entry->version) {
      cache.CountStale();
      cache.Erase(key);
      cache.CountMiss();
      return std::nullopt;
    }
    cache.Refresh(key, entry->version, now);
  }
  cache.CountHit();
  return ObjectValue{*entry->data, entry->version};
}

}  // namespace

Result<ObjectValue> Client::Get(std::string_view key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::atomic<uint64_t>& typical = impl_->typical_get_bytes;
  std::optional<Result<ObjectValue>> got;
  // Hot-cache hits and offers are per key: with the cache on, gets go alone.
  if (!impl_->hot_cache.enabled() &&
      typical.load(std::memory_order_relaxed) <= kMaxCombinedValueBytes) {
    got = GetWithOthers(key);
  }
  if (!got) got = GetAlone(key);
  // An average over about the last eight gets; a lost update between
  // threads only delays the switch.
  if (*got) {
    uint64_t before = typical.load(std::memory_order_relaxed);
    typical.store(before - before / 8 + (*got)->data.size() / 8, std::memory_order_relaxed);
  }
  return std::move(*got);
}

std::optional<Result<ObjectValue>> Client::GetWithOthers(std::string_view key) {
  // Only a remembered owner has a combiner; the rest ask the master alone.
  auto owner = impl_->router.LocateCached(key);
  if (!owner) return std::nullopt;
  auto combiner = impl_->get_combiners.For(owner->node_id, [&] {
    return std::make_unique<Impl::GetCombiner>(
        [this](std::span<const CombinedGet* const> gets) {
          return GetTogether(impl_->router, impl_->rdma.get(), gets);
        },
        CallLimits{.max_units = kMaxCombinedCalls,
                   .max_in_flight = impl_->combined_calls_in_flight});
  });
  if (!combiner) return std::nullopt;
  return combiner->Call(CombinedGet{key, &*owner});
}

Result<ObjectValue> Client::GetAlone(std::string_view key) {
  std::string k(key);
  HotCache& cache = impl_->hot_cache;
  if (cache.enabled()) {
    if (auto cached = ServeCached(impl_->router, cache, k)) return std::move(*cached);
  }
  // Ticket and time before the read: the copy is known current only as of
  // the moment the read started.
  uint64_t ticket = cache.enabled() ? cache.Ticket() : 0;
  auto started = HotCache::Clock::now();
  auto owner = impl_->router.Locate(k);
  if (!owner) return Err(owner.error());
  std::string served_by;
  auto value =
      ReadValue(impl_->router, impl_->rdma.get(), k, std::move(*owner), nullptr, &served_by);
  if (value && cache.Admits(value->data.size())) {
    auto data = std::make_shared<const std::string>(value->data);
    cache.Offer(k, HotCache::Entry{std::move(data), std::move(served_by), value->version, started},
                ticket);
  }
  return value;
}

void Client::GetAsync(std::string_view key, GetDone done) {
  if (auto valid = ValidateKey(key); !valid) {
    done(Err(valid.error()));
    return;
  }
  impl_->async_reads->Get(std::string(key), std::move(done));
}

Result<uint64_t> Client::GetInto(std::string_view key, std::span<char> buffer, uint64_t* needed) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::string k(key);
  HotCache& cache = impl_->hot_cache;
  if (cache.enabled()) {
    if (auto cached = ServeCached(impl_->router, cache, k)) {
      if (needed) *needed = cached->data.size();
      if (cached->data.size() > buffer.size()) return Err(ErrorCode::kInvalidParams);
      std::copy(cached->data.begin(), cached->data.end(), buffer.begin());
      return cached->data.size();
    }
  }
  uint64_t ticket = cache.enabled() ? cache.Ticket() : 0;
  auto started = HotCache::Clock::now();
  auto owner = impl_->router.Locate(k);
  if (!owner) return Err(owner.error());
  uint64_t total = 0;
  ReadSink sink = SpanSink(buffer, total);
  auto done = ReadChunked(impl_->router, k, std::move(*owner), sink, {}, impl_->rdma.get(),
                          /*first=*/nullptr);
  if (needed) *needed = total;
  if (!done) return Err(done.error());
  if (cache.Admits(done->total)) {
    auto data = std::make_shared<const std::string>(buffer.data(), done->total);
    cache.Offer(k,
                HotCache::Entry{std::move(data), std::move(done->node_id), done->version, started},
                ticket);
  }
  return done->total;
}

Result<uint64_t> Client::GetStream(std::string_view key, std::ostream& out,
                                   const ProgressFn& progress) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::string k(key);
  auto owner = impl_->router.Locate(k);
  if (!owner) return Err(owner.error());
  StreamSink stream(out);
  ReadSink sink = stream.Sink();
  auto done = ReadChunked(impl_->router, k, std::move(*owner), sink, progress, impl_->rdma.get(),
                          /*first=*/nullptr);
  if (!done) return Err(done.error());
  out.flush();
  if (!out) return Err(ErrorCode::kTransferFail);
  return done->total;
}

}  // namespace mooncake
