#include "worker/worker_handler.h"

#include <algorithm>
#include <deque>

#include "common/log.h"
#include "thrift/rdma_wire.h"
#include "thrift/rpc_codes.h"
#include "transport/rdma_link.h"
#include "worker/peer_transfer.h"

namespace mooncake {
namespace {

int32_t ToExistCode(const Result<bool>& exists) {
  if (!exists) return static_cast<int32_t>(exists.error());
  return *exists ? 1 : 0;
}

ErrorCode CodeOf(rpc::ErrorCode::type code) { return FromRpc(code); }

ErrorCode CodeOfExist(int32_t answer) {
  return answer < 0 ? ErrorCodeFromInt(answer) : ErrorCode::kOk;
}

rpc::MemoryHandle ToRpc(const SharedRegion& region) {
  rpc::MemoryHandle handle;
  handle.kind = region.kind == SharedRegion::Kind::kDeviceIpc ? rpc::MemoryHandleKind::DEVICE_IPC
                                                              : rpc::MemoryHandleKind::HOST_FILE;
  handle.path = region.path;
  handle.ipc_handle = region.ipc_handle;
  handle.device_index = region.device_index;
  handle.region_size = static_cast<int64_t>(region.size);
  handle.machine_id = region.machine_id;
  return handle;
}

}  // namespace

std::vector<std::string> WorkerHandler::OperationNames() {
  return {"put",         "upsert",        "put_start",    "put_chunk",     "put_end",
          "put_revoke",  "get",           "exist",        "remove",        "inspect",
          "adopt_start", "adopt_end",     "adopt_abort",  "adopt_confirm", "open_for_write",
          "commit",      "get_placement", "rdma_connect", "stats"};
}

Result<ObjectOptions> WorkerHandler::ToObjectOptions(const rpc::ReplicateConfig& config) const {
  if (config.soft_pin_ttl_ms < 0 || (config.with_hard_pin && config.with_soft_pin)) {
    return Err(ErrorCode::kInvalidParams);
  }
  ObjectOptions options{.soft_pin_ttl = Millis(config.soft_pin_ttl_ms),
                        .preferred_tier = -1,
                        .hard_pin = config.with_hard_pin,
                        .soft_pin = config.with_soft_pin};
  if (!config.preferred_tier.empty()) {
    options.preferred_tier = backend_.TierIndex(config.preferred_tier);
    if (options.preferred_tier < 0) return Err(ErrorCode::kTierNotFound);
  }
  return options;
}

rpc::ErrorCode::type WorkerHandler::Put(const std::string& key, const std::string& value,
                                        const rpc::ReplicateConfig& config) {
  return WriteValue(WriteMode::kCreate, key, value, config);
}

rpc::ErrorCode::type WorkerHandler::Upsert(const std::string& key, const std::string& value,
                                           const rpc::ReplicateConfig& config) {
  return WriteValue(WriteMode::kUpsert, key, value, config);
}

rpc::ErrorCode::type WorkerHandler::WriteValue(WriteMode mode, const std::string& key,
                                               std::string_view value,
                                               const rpc::ReplicateConfig& config) {
  const std::string_view op = mode == WriteMode::kUpsert ? "upsert" : "put";
  RequestTimer timer(requests_, op);
  auto options = ToObjectOptions(config);
  Result<void> written = !options                     ? Err(options.error())
                         : mode == WriteMode::kUpsert ? backend_.Upsert(key, value, *options)
                                                      : backend_.Put(key, value, *options);
  auto code = ToRpc(written);
  timer.Finish(CodeOf(code));
  LogWriteFailure(op, key, value.size(), code);
  return code;
}

bool WorkerHandler::TryPutAsync(const std::string& key, std::string_view value,
                                const rpc::ReplicateConfig& config, WriteDone done) {
  auto options = ToObjectOptions(config);
  if (!options) return false;  // WriteValue answers it
  // Not a RequestTimer: a put handed back to WriteValue must not count.
  auto started = std::chrono::steady_clock::now();
  return backend_.TryPutAsync(
      key, value, *options,
      [this, started, key, size = value.size(), done = std::move(done)](Result<void> written) {
        auto code = ToRpc(written);
        requests_.Record("put", CodeOf(code), std::chrono::steady_clock::now() - started);
        LogWriteFailure("put", key, size, code);
        done(code);
      });
}

std::unique_ptr<WorkerHandler::PlacedPut> WorkerHandler::StartPlacedPut(
    const std::string& key, uint64_t size, const rpc::ReplicateConfig& config) {
  auto options = ToObjectOptions(config);
  if (!options) return nullptr;
  uint64_t held = placed_bytes_.load();
  do {
    if (size > placed_bytes_limit_ - std::min(held, placed_bytes_limit_)) return nullptr;
  } while (!placed_bytes_.compare_exchange_weak(held, held + size));
  auto started = backend_.StartPlacedPut(key, size, *options);
  if (!started) {
    placed_bytes_.fetch_sub(size);
    return nullptr;
  }
  return std::make_unique<PlacedPut>(*this, std::move(*started), key, config);
}

WorkerHandler::PlacedPut::PlacedPut(WorkerHandler& handler, PlacedWrite write, std::string key,
                                    rpc::ReplicateConfig config)
    : handler_(handler),
      write_(std::move(write)),
      key_(std::move(key)),
      config_(std::move(config)),
      timer_(handler.requests_, "put") {}

WorkerHandler::PlacedPut::~PlacedPut() {
  handler_.placed_bytes_.fetch_sub(write_.bytes.size());
  if (finished_) return;
  // Nothing was published; the key and the space are given back.
  (void)handler_.backend_.PutRevoke(write_.handle);
}

bool WorkerHandler::PlacedPut::Describes(const ValueItem& item) const {
  return item.key == key_ && item.config == config_ &&
         item.value.data() == reinterpret_cast<const char*>(write_.bytes.data()) &&
         item.value.size() == write_.bytes.size();
}

rpc::ErrorCode::type WorkerHandler::PlacedPut::Finish() {
  finished_ = true;
  auto code = ToRpc(handler_.backend_.EndPlacedPut(write_.handle));
  timer_.Finish(CodeOf(code));
  handler_.LogWriteFailure("put", key_, write_.bytes.size(), code);
  return code;
}

void WorkerHandler::LogWriteFailure(std::string_view op, const std::string& key, uint64_t size,
                                    rpc::ErrorCode::type code) {
  if (code == rpc::ErrorCode::OK) return;
  ErrorCode error = CodeOf(code);
  uint64_t suppressed = 0;
  if (!write_failures_.Admit(error, std::chrono::steady_clock::now(), &suppressed)) return;
  MC_LOG_WARN("{} failed key={} size={} error={} suppressed_since_last={}", op, key, size,
              ToString(error), suppressed);
}

void WorkerHandler::StartWrite(rpc::PutStartResult& result, const std::string& key, int64_t size,
                               const rpc::ReplicateConfig& config, WriteMode mode, int64_t version,
                               const std::string& sender) {
  RequestTimer timer(requests_, mode == WriteMode::kAdopt ? "adopt_start" : "put_start");
  StartWriteUntimed(result, key, size, config, mode, version, sender);
  timer.Finish(CodeOf(result.code));
  LogWriteFailure(mode == WriteMode::kAdopt ? "adopt_start" : "put_start", key,
                  static_cast<uint64_t>(std::max<int64_t>(size, 0)), result.code);
}

void WorkerHandler::StartWriteUntimed(rpc::PutStartResult& result, const std::string& key,
                                      int64_t size, const rpc::ReplicateConfig& config,
                                      WriteMode mode, int64_t version, const std::string& sender) {
  auto options = ToObjectOptions(config);
  if (size <= 0 || version < 0 || !options || sender.size() > kMaxKeyBytes) {
    result.code = options ? rpc::ErrorCode::INVALID_PARAMS : ToRpc(options.error());
    return;
  }
  auto handle = backend_.PutStart(key, static_cast<uint64_t>(size), *options, mode,
                                  {.version = static_cast<uint64_t>(version), .sender = sender});
  result.code = handle ? rpc::ErrorCode::OK : ToRpc(handle.error());
  result.handle = handle ? static_cast<int64_t>(*handle) : 0;
  if (!handle || mode != WriteMode::kAdopt) return;
  // An RDMA sender may write straight into the allocation.
  if (auto target = backend_.PendingWriteTarget(*handle)) {
    result.tier = target->tier_name;
    result.tier_offset = static_cast<int64_t>(target->location.offset);
  }
}

void WorkerHandler::PutStart(rpc::PutStartResult& result, const std::string& key, int64_t size,
                             const rpc::ReplicateConfig& config, bool upsert) {
  StartWrite(result, key, size, config, upsert ? WriteMode::kUpsert : WriteMode::kCreate, 0, "");
}

void WorkerHandler::AdoptStart(rpc::PutStartResult& result, const std::string& key, int64_t size,
                               const rpc::ReplicateConfig& config, int64_t version,
                               const std::string& sender) {
  StartWrite(result, key, size, config, WriteMode::kAdopt, version, sender);
}

rpc::ErrorCode::type WorkerHandler::AdoptEnd(int64_t handle, bool written_directly) {
  if (!written_directly) return PutEnd(handle);
  RequestTimer timer(requests_, "adopt_end");
  // Without RDMA here nobody could have written the bytes directly: the
  // pending write stays as it is (the sender may still PutChunk them).
  const bool rdma = rdma_ != nullptr && rdma_->enabled();
  auto code = !rdma         ? rpc::ErrorCode::INVALID_PARAMS
              : handle <= 0 ? rpc::ErrorCode::ILLEGAL_CLIENT
                            : ToRpc(backend_.CommitDirect(static_cast<uint64_t>(handle), ""));
  timer.Finish(CodeOf(code));
  return code;
}

void WorkerHandler::OpenForWrite(rpc::WritePlan& result, const std::string& key, int64_t size,
                                 const rpc::ReplicateConfig& config, bool upsert) {
  RequestTimer timer(requests_, "open_for_write");
  OpenForWriteUntimed(result, key, size, config, upsert);
  timer.Finish(CodeOf(result.code));
  LogWriteFailure("open_for_write", key, static_cast<uint64_t>(std::max<int64_t>(size, 0)),
                  result.code);
}

void WorkerHandler::OpenForWriteUntimed(rpc::WritePlan& result, const std::string& key,
                                        int64_t size, const rpc::ReplicateConfig& config,
                                        bool upsert) {
  auto options = ToObjectOptions(config);
  if (size <= 0 || !options) {
    result.code = options ? rpc::ErrorCode::INVALID_PARAMS : ToRpc(options.error());
    return;
  }
  auto plan = backend_.OpenForWrite(key, static_cast<uint64_t>(size), *options,
                                    upsert ? WriteMode::kUpsert : WriteMode::kCreate);
  if (!plan) {
    result.code = ToRpc(plan.error());
    return;
  }
  result.code = rpc::ErrorCode::OK;
  result.node_id = *node_id_.load();
  result.tier = plan->target.tier_name;
  result.memory = ToRpc(plan->region);
  result.offset = static_cast<int64_t>(plan->target.location.offset);
  result.size = size;
  result.epoch = static_cast<int64_t>(plan->epoch);
  result.timeout_ms = plan->timeout.count();
}

rpc::ErrorCode::type WorkerHandler::Commit(const std::string& key, int64_t epoch) {
  RequestTimer timer(requests_, "commit");
  auto code = epoch <= 0    ? rpc::ErrorCode::ILLEGAL_CLIENT
              : key.empty() ? rpc::ErrorCode::INVALID_KEY
                            : ToRpc(backend_.CommitDirect(static_cast<uint64_t>(epoch), key));
  timer.Finish(CodeOf(code));
  return code;
}

void WorkerHandler::GetPlacement(rpc::Placement& result, const std::string& key) {
  RequestTimer timer(requests_, "get_placement");
  GetPlacementUntimed(result, key);
  timer.Finish(CodeOf(result.code));
}

void WorkerHandler::GetPlacementUntimed(rpc::Placement& result, const std::string& key) {
  if (!serving_reads_.load()) {
    result.code = rpc::ErrorCode::REPLICA_IS_NOT_READY;
    return;
  }
  auto placement = backend_.Locate(key);
  if (!placement) {
    result.code = ToRpc(placement.error());
    std::string owner =
        result.code == rpc::ErrorCode::OBJECT_NOT_FOUND ? backend_.MovedTo(key) : std::string();
    if (!owner.empty()) {
      result.code = rpc::ErrorCode::NOT_OWNER;
      result.owner_hint = owner;
    }
    return;
  }
  result.code = rpc::ErrorCode::OK;
  result.node_id = *node_id_.load();
  result.tier = placement->where.tier_name;
  if (placement->region) result.memory = ToRpc(*placement->region);
  result.offset = static_cast<int64_t>(placement->where.location.offset);
  result.size = static_cast<int64_t>(placement->size);
  result.version = static_cast<int64_t>(placement->version);
  result.hold_ms = placement->hold.count();
}

void WorkerHandler::RdmaConnect(rpc::RdmaConnectResult& result, const std::string& initiator_node,
                                const rpc::RdmaEndpoint& initiator) {
  RequestTimer timer(requests_, "rdma_connect");
  if (rdma_ == nullptr || !rdma_->enabled()) {
    result.code = rpc::ErrorCode::TIER_NOT_FOUND;
    result.reason = rdma_ != nullptr ? rdma_->reason() : "this worker has no RDMA transport";
  } else if (auto endpoint = FromRpcEndpoint(initiator); !endpoint) {
    result.code = rpc::ErrorCode::INVALID_PARAMS;
    result.reason = "malformed initiator endpoint";
  } else if (auto accepted = rdma_->Accept(initiator_node, *endpoint, &result.reason); !accepted) {
    result.code = ToRpc(accepted.error());
  } else {
    result.code = rpc::ErrorCode::OK;
    result.endpoint = ToRpcEndpoint(accepted->endpoint);
    for (const RdmaExport& region : accepted->regions) {
      result.regions.push_back(ToRpcRegion(region));
    }
  }
  timer.Finish(CodeOf(result.code));
}

rpc::ErrorCode::type WorkerHandler::AdoptAbort(const std::string& key) {
  RequestTimer timer(requests_, "adopt_abort");
  auto code = ToRpc(backend_.AdoptAbort(key));
  timer.Finish(CodeOf(code));
  return code;
}

rpc::ErrorCode::type WorkerHandler::AdoptConfirm(const std::string& key) {
  RequestTimer timer(requests_, "adopt_confirm");
  auto code = ToRpc(backend_.ConfirmAdoptSoon(key));
  timer.Finish(CodeOf(code));
  return code;
}

void WorkerHandler::HintMovedKey(rpc::GetResult& result, const std::string& key) const {
  if (result.code != rpc::ErrorCode::OBJECT_NOT_FOUND) return;
  std::string owner = backend_.MovedTo(key);
  if (owner.empty()) return;
  result.code = rpc::ErrorCode::NOT_OWNER;
  result.owner_hint = owner;
}

rpc::ErrorCode::type WorkerHandler::PutChunk(int64_t handle, int64_t offset,
                                             const std::string& data) {
  RequestTimer timer(requests_, "put_chunk");
  auto code = handle <= 0  ? rpc::ErrorCode::ILLEGAL_CLIENT
              : offset < 0 ? rpc::ErrorCode::INVALID_PARAMS
                           : ToRpc(backend_.PutChunk(static_cast<uint64_t>(handle),
                                                     static_cast<uint64_t>(offset), data));
  timer.Finish(CodeOf(code));
  return code;
}

rpc::ErrorCode::type WorkerHandler::PutEnd(int64_t handle) {
  RequestTimer timer(requests_, "put_end");
  auto code = handle <= 0 ? rpc::ErrorCode::ILLEGAL_CLIENT
                          : ToRpc(backend_.PutEnd(static_cast<uint64_t>(handle)));
  timer.Finish(CodeOf(code));
  return code;
}

rpc::ErrorCode::type WorkerHandler::PutRevoke(int64_t handle) {
  RequestTimer timer(requests_, "put_revoke");
  auto code = handle <= 0 ? rpc::ErrorCode::ILLEGAL_CLIENT
                          : ToRpc(backend_.PutRevoke(static_cast<uint64_t>(handle)));
  timer.Finish(CodeOf(code));
  return code;
}

void WorkerHandler::Get(rpc::GetResult& result, const std::string& key, int64_t offset,
                        int64_t length) {
  // The generated processor's path (WorkerProcessor replies in place).
  GetInPlace(key, offset, length, [&](const rpc::GetResult& head, std::span<const std::byte> data) {
    result = head;
    result.data.assign(reinterpret_cast<const char*>(data.data()), data.size());
  });
}

void WorkerHandler::GetInPlace(const std::string& key, int64_t offset, int64_t length,
                               const GetReply& reply) {
  RequestTimer timer(requests_, "get");
  rpc::GetResult head;
  if (!serving_reads_.load()) {
    head.code = rpc::ErrorCode::REPLICA_IS_NOT_READY;
  } else if (offset < 0 || length < 0) {
    head.code = rpc::ErrorCode::INVALID_PARAMS;
  } else {
    auto read =
        backend_.ReadInPlace(key, static_cast<uint64_t>(offset), static_cast<uint64_t>(length),
                             [&](const ReadInfo& info, std::span<const std::byte> data) {
                               head.code = rpc::ErrorCode::OK;
                               head.total_size = static_cast<int64_t>(info.total_size);
                               head.version = static_cast<int64_t>(info.version);
                               // Timed up to the reply, as Get is: the send is the caller's.
                               timer.Finish(CodeOf(head.code));
                               reply(head, data);
                             });
    if (read) return;
    head.code = ToRpc(read.error());
    HintMovedKey(head, key);
  }
  timer.Finish(CodeOf(head.code));
  reply(head, {});
}

int32_t WorkerHandler::Exist(const std::string& key, bool prefetch,
                             const std::string& requester_node) {
  if (!serving_reads_.load()) return static_cast<int32_t>(ErrorCode::kReplicaIsNotReady);
  // A prefetch for this very node is an ordinary local promotion.
  RequestTimer timer(requests_, "exist");
  const std::string& target = requester_node == *node_id_.load() ? std::string() : requester_node;
  int32_t answer = ToExistCode(backend_.Exist(key, prefetch, target));
  timer.Finish(CodeOfExist(answer));
  return answer;
}

rpc::ErrorCode::type WorkerHandler::Remove(const std::string& key, bool force) {
  RequestTimer timer(requests_, "remove");
  auto code = ToRpc(backend_.Remove(key, force));
  timer.Finish(CodeOf(code));
  return code;
}

namespace {

// The generated arguments of BatchPut/BatchUpsert, their values viewed.
std::vector<ValueItem> ToValueItems(const std::vector<rpc::PutItem>& items) {
  std::vector<ValueItem> views(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    views[i].key = items[i].key;
    views[i].value = items[i].value;
    views[i].config = items[i].config;
  }
  return views;
}

}  // namespace

void WorkerHandler::BatchPut(std::vector<rpc::ErrorCode::type>& results,
                             const std::vector<rpc::PutItem>& items) {
  WriteValues(WriteMode::kCreate, ToValueItems(items), results);
}

void WorkerHandler::BatchGet(std::vector<rpc::GetResult>& results,
                             const std::vector<std::string>& keys) {
  BatchGetInPlace(keys, [&](std::span<const rpc::GetResult> heads,
                            std::span<const std::span<const std::byte>> data) {
    results.assign(heads.begin(), heads.end());
    for (size_t i = 0; i < results.size(); ++i) {
      results[i].data.assign(reinterpret_cast<const char*>(data[i].data()), data[i].size());
    }
  });
}

void WorkerHandler::BatchGetInPlace(const std::vector<std::string>& keys,
                                    const BatchGetReply& reply) {
  // Each key is counted as one get that took the whole batch's time, up to
  // its reply.
  auto started = std::chrono::steady_clock::now();
  std::vector<rpc::GetResult> heads(keys.size());
  std::vector<std::span<const std::byte>> data(keys.size());
  auto answer = [&] {
    auto elapsed = std::chrono::steady_clock::now() - started;
    for (const auto& head : heads) requests_.Record("get", CodeOf(head.code), elapsed);
    reply(heads, data);
  };
  if (!serving_reads_.load()) {
    for (auto& head : heads) head.code = rpc::ErrorCode::REPLICA_IS_NOT_READY;
    answer();
    return;
  }
  // The whole reply must fit one Thrift frame (~16 MB). Past the budget each
  // result carries only its size and version; the client reads the rest
  // with ranged Gets.
  backend_.ReadManyInPlace(keys, 2 * kRpcChunkBytes, [&](std::span<const ReadPiece> pieces) {
    for (size_t i = 0; i < keys.size(); ++i) {
      rpc::GetResult& head = heads[i];
      if (!pieces[i].info) {
        head.code = ToRpc(pieces[i].info.error());
        HintMovedKey(head, keys[i]);
        continue;
      }
      head.code = rpc::ErrorCode::OK;
      head.total_size = static_cast<int64_t>(pieces[i].info->total_size);
      head.version = static_cast<int64_t>(pieces[i].info->version);
      data[i] = pieces[i].bytes;
    }
    answer();
  });
}

void WorkerHandler::BatchUpsert(std::vector<rpc::ErrorCode::type>& results,
                                const std::vector<rpc::PutItem>& items) {
  WriteValues(WriteMode::kUpsert, ToValueItems(items), results);
}

void WorkerHandler::WriteValues(WriteMode mode, std::span<const ValueItem> items,
                                std::vector<rpc::ErrorCode::type>& results) {
  const std::string_view op = mode == WriteMode::kUpsert ? "upsert" : "put";
  // Each item is counted as one request that took the whole batch's time.
  std::deque<RequestTimer> timers;  // neither copyable nor movable
  std::vector<WholeWrite> writes;
  std::vector<size_t> write_of;  // writes[j] is items[write_of[j]]
  writes.reserve(items.size());
  write_of.reserve(items.size());
  results.assign(items.size(), rpc::ErrorCode::OK);
  for (size_t i = 0; i < items.size(); ++i) {
    timers.emplace_back(requests_, op);
    auto options = ToObjectOptions(items[i].config);
    if (!options) {
      results[i] = ToRpc(Result<void>(Err(options.error())));
      continue;
    }
    writes.push_back(WholeWrite{items[i].key, items[i].value, *options, mode});
    write_of.push_back(i);
  }
  auto written = backend_.PutMany(writes);
  for (size_t j = 0; j < written.size(); ++j) results[write_of[j]] = ToRpc(written[j]);
  for (size_t i = 0; i < items.size(); ++i) timers[i].Finish(CodeOf(results[i]));
}

void WorkerHandler::BatchExist(std::vector<int32_t>& results, const std::vector<std::string>& keys,
                               bool prefetch, const std::string& requester_node) {
  results.reserve(keys.size());
  for (const auto& key : keys) results.push_back(Exist(key, prefetch, requester_node));
}

void WorkerHandler::BatchRemove(std::vector<rpc::ErrorCode::type>& results,
                                const std::vector<std::string>& keys, bool force) {
  std::deque<RequestTimer> timers;  // neither copyable nor movable
  for (size_t i = 0; i < keys.size(); ++i) timers.emplace_back(requests_, "remove");
  // One master call for the keys' ownership, not one per key.
  auto removed = backend_.RemoveMany(keys, force);
  results.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    results.push_back(ToRpc(removed[i]));
    timers[i].Finish(CodeOf(results.back()));
  }
}

void WorkerHandler::Inspect(rpc::ObjectInfo& result, const std::string& key) {
  RequestTimer timer(requests_, "inspect");
  auto snapshot = backend_.Inspect(key);
  if (!snapshot) {
    result.code = ToRpc(snapshot.error());
    timer.Finish(CodeOf(result.code));
    return;
  }
  timer.Finish(ErrorCode::kOk);
  result.code = rpc::ErrorCode::OK;
  result.tier = snapshot->tier;
  result.offset = static_cast<int64_t>(snapshot->offset);
  result.size = static_cast<int64_t>(snapshot->size);
  result.version = static_cast<int64_t>(snapshot->version);
  result.hard_pinned = snapshot->hard_pinned;
  result.soft_pinned = snapshot->soft_pinned;
  result.state = snapshot->state;
  result.readers = snapshot->readers;
  result.lease_remaining_ms = snapshot->lease_remaining_ms;
  result.idle_ms = snapshot->idle_ms;
}

void WorkerHandler::Stats(rpc::WorkerStats& result) {
  RequestTimer timer(requests_, "stats");
  BackendStats stats = backend_.Stats();
  result.node_id = *node_id_.load();
  for (const TierSnapshot& tier : stats.tiers) {
    rpc::TierStats out;
    out.usage.name = tier.name;
    out.usage.kind = std::string(ToString(tier.kind));
    out.usage.capacity = static_cast<int64_t>(tier.capacity);
    out.usage.used = static_cast<int64_t>(tier.used);
    out.usage.objects = static_cast<int64_t>(tier.objects);
    out.hits = static_cast<int64_t>(tier.hits);
    out.promotions_in = static_cast<int64_t>(tier.promotions_in);
    out.demotions_out = static_cast<int64_t>(tier.demotions_out);
    out.evictions = static_cast<int64_t>(tier.evictions);
    result.tiers.push_back(std::move(out));
  }
  result.gets = static_cast<int64_t>(stats.gets);
  result.get_misses = static_cast<int64_t>(stats.get_misses);
  result.puts = static_cast<int64_t>(stats.puts);
  result.removes = static_cast<int64_t>(stats.removes);
  result.dropped = static_cast<int64_t>(stats.dropped);
  result.upserts = static_cast<int64_t>(stats.upserts);
  result.prefetch_started = static_cast<int64_t>(stats.prefetch_started);
  result.prefetch_succeeded = static_cast<int64_t>(stats.prefetch_succeeded);
  result.prefetch_failed = static_cast<int64_t>(stats.prefetch_failed);
  result.prefetch_skipped = static_cast<int64_t>(stats.prefetch_skipped);
  result.moved_out = static_cast<int64_t>(stats.moved_out);
  result.moved_in = static_cast<int64_t>(stats.moved_in);
  for (const TierSnapshot& tier : stats.tiers) {
    result.pinned_bytes += static_cast<int64_t>(tier.pinned_bytes);
  }
  timer.Finish(ErrorCode::kOk);
}

}  // namespace mooncake
