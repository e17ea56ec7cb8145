#include "client/client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "client/client_impl.h"
#include "client/hot_cache.h"
#include "client/rdma_reads.h"
#include "common/log.h"

namespace mooncake {

struct Client::Impl {
  Impl(ClientConfig config, std::unique_ptr<RdmaReads> rdma_reads,
       std::shared_ptr<const RpcTlsContext> tls)
      : rdma(std::move(rdma_reads)),
        router(
            std::move(config),
            [reads = rdma.get()](const std::string& node_id) { reads->Forget(node_id); },
            std::move(tls)),
        hot_cache(router.config().local_hot_cache_bytes) {}
  // Declared before the router, whose callback uses it.
  std::unique_ptr<RdmaReads> rdma;
  ClientRouter router;
  HotCache hot_cache;
};

namespace {

// An object may move between nodes (inter-node eviction) while a client
// talks to its old owner; following it twice covers a move during a move.
constexpr int kMaxRelocations = 2;
// A read restarts when the object is replaced under it (Upsert).
constexpr int kMaxReadRestarts = 3;
// REPLICA_IS_NOT_READY lasts as long as one write; back off ~0.2 s in all.
constexpr int kMaxNotReadyRetries = 8;
// Per worker batch request: bounded so requests stay far below Thrift's
// ~16 MB frame limit.
constexpr size_t kMaxBatchKeyBytes = 4ull << 20;
constexpr size_t kMaxBatchCount = 1024;
constexpr size_t kMaxBatchPutBytes = kRpcChunkBytes;
// Parallel requests one batch call issues at most.
constexpr size_t kMaxBatchParallelism = 16;

void Backoff(int attempt) {
  auto delay = std::chrono::milliseconds(std::min(1 << std::min(attempt, 6), 50));
  std::this_thread::sleep_for(delay);
}

bool IsMoved(ErrorCode code) {
  return code == ErrorCode::kObjectNotFound || code == ErrorCode::kNotOwner;
}

// A node that still denies the key after we followed it means the key is gone.
ErrorCode Settle(ErrorCode code) {
  return code == ErrorCode::kNotOwner ? ErrorCode::kObjectNotFound : code;
}

rpc::ReplicateConfig ToRpcConfig(const PutOptions& options) {
  rpc::ReplicateConfig config;
  config.with_hard_pin = options.hard_pin;
  config.with_soft_pin = options.soft_pin;
  config.preferred_node = options.preferred_node;
  config.soft_pin_ttl_ms = options.soft_pin_ttl_ms;
  config.preferred_tier = options.preferred_tier;
  return config;
}

uint64_t NonNegative(int64_t value) { return value > 0 ? static_cast<uint64_t>(value) : 0; }

TierUsage ToTierUsage(const rpc::TierUsage& usage) {
  return TierUsage{usage.name, usage.kind, NonNegative(usage.capacity), NonNegative(usage.used),
                   NonNegative(usage.objects)};
}

NodeRecord ToNodeRecord(const rpc::NodeInfo& info) {
  NodeRecord record;
  record.node_id = info.node_id;
  record.host = info.host;
  record.port = info.port;
  for (const auto& tier : info.tiers) record.tiers.push_back(ToTierUsage(tier));
  record.alive = info.alive;
  record.last_heartbeat_ms = info.last_heartbeat_ms;
  return record;
}

// Runs tasks on up to kMaxBatchParallelism threads; inline when there is one,
// since a batch that hits one node gains nothing from a thread.
void RunParallel(std::vector<std::function<void()>>& tasks) {
  if (tasks.size() == 1) {
    tasks[0]();
    return;
  }
  std::atomic<size_t> next{0};
  auto drain = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) tasks[i]();
  };
  size_t threads = std::min(tasks.size(), kMaxBatchParallelism);
  std::vector<std::future<void>> running;
  running.reserve(threads);
  for (size_t t = 0; t < threads; ++t) running.push_back(std::async(std::launch::async, drain));
  for (auto& f : running) f.wait();
}

// Runs `fn(owner)` against the key's owner, following the object once more
// each time the node says it no longer has it, and waiting out a write in
// progress (REPLICA_IS_NOT_READY).
template <typename T, typename Fn>
Result<T> WithOwner(ClientRouter& router, const std::string& key, Fn&& fn) {
  auto owner = router.Locate(key);
  if (!owner) return Err(owner.error());
  int moves = 0;
  int waits = 0;
  for (;;) {
    Result<T> result = fn(*owner);
    if (result) return result;
    ErrorCode code = result.error();
    if (code == ErrorCode::kReplicaIsNotReady && waits < kMaxNotReadyRetries) {
      Backoff(waits++);
      continue;
    }
    // A remembered owner that cannot be reached may simply be gone: ask the
    // master before giving up.
    bool unreachable = code == ErrorCode::kRpcFail || code == ErrorCode::kRpcTimeout;
    if (unreachable && owner->cached && moves++ < kMaxRelocations) {
      owner = router.RelocateUnreachable(key, owner->node_id, code);
      if (!owner) return Err(owner.error());
      continue;
    }
    if (!IsMoved(code) || moves++ >= kMaxRelocations) return Err(Settle(code));
    owner = router.Relocate(key, "", owner->node_id);
    if (!owner) return Err(Settle(owner.error()));
  }
}

// ---- Reads ----

// Receives the bytes of one read as they arrive.
struct ReadSink {
  // Called before the first byte, and again when the read restarts because
  // the object was replaced; `total` is the size of the version being read.
  std::function<Result<void>(uint64_t total)> begin;
  std::function<Result<void>(std::string_view data)> write;
};

struct ReadDone {
  uint64_t total = 0;
  int64_t version = 0;
  std::string node_id;  // the node that served the read
};

// Moves a reply without copying its payload (Thrift types have no move).
void TakeReply(rpc::GetResult& to, rpc::GetResult& from) {
  to.code = from.code;
  to.data.swap(from.data);
  to.total_size = from.total_size;
  to.version = from.version;
  to.owner_hint.swap(from.owner_hint);
}

// The state of a chunked read from one owner. With `rdma`, an object large
// enough has everything after its first chunk read by RDMA when the owner
// allows it (client/rdma_reads.h); the ranged Gets then cover only what RDMA
// did not.
class ChunkedRead {
 public:
  ChunkedRead(ClientRouter& router, const std::string& key, Owner owner, const ReadSink& sink,
              const ProgressFn& progress, RdmaReads* rdma = nullptr)
      : router_(router),
        key_(key),
        owner_(std::move(owner)),
        sink_(sink),
        progress_(progress),
        rdma_(rdma) {}

  // Reads the whole object. `first`, if given, is a reply already received
  // for offset 0 (from BatchGet).
  Result<ReadDone> Run(rpc::GetResult* first) {
    rpc::GetResult reply;
    bool have_reply = false;
    if (first) {
      TakeReply(reply, *first);
      have_reply = true;
      // Past its frame budget a BatchGet answers only size and version.
      batch_reply_ = true;
    }
    while (!started_ || offset_ < total_) {
      if (!have_reply) {
        auto call = owner_.channel->Call([&](rpc::WorkerServiceClient& c) {
          c.Get(reply, key_, static_cast<int64_t>(offset_), static_cast<int64_t>(kRpcChunkBytes));
        });
        if (!call && owner_.cached && !started_ && moves_++ < kMaxRelocations) {
          // A remembered owner may be gone: ask the master once.
          auto moved = router_.RelocateUnreachable(key_, owner_.node_id, call.error());
          if (!moved) return Err(moved.error());
          owner_ = std::move(*moved);
          continue;
        }
        if (!call) return Err(call.error());
      }
      have_reply = false;
      auto step = Accept(reply);
      batch_reply_ = false;
      if (!step) return Err(step.error());
      if (WantsRdma()) {
        if (auto step = ReadRestByRdma(); !step) return Err(step.error());
      }
    }
    return ReadDone{total_, version_, owner_.node_id};
  }

 private:
  // Handles one reply: keeps its bytes, or decides to wait, follow the
  // object, or start over.
  Result<void> Accept(rpc::GetResult& reply) {
    ErrorCode code = FromRpc(reply.code);
    if (code == ErrorCode::kReplicaIsNotReady && waits_ < kMaxNotReadyRetries) {
      Backoff(waits_++);
      return {};
    }
    if (IsMoved(code)) return Follow(reply.owner_hint, code);
    if (code != ErrorCode::kOk) return Err(code);
    if (reply.total_size < 0) return Err(ErrorCode::kInternalError);
    uint64_t total = static_cast<uint64_t>(reply.total_size);
    if (started_ && (reply.version != version_ || total != total_)) return Restart();
    if (!started_) {
      if (auto begun = sink_.begin(total); !begun) return begun;
      started_ = true;
      total_ = total;
      version_ = reply.version;
    }
    // An empty slice before the end would loop forever; an overlong one
    // would corrupt the value. Both are server bugs, except for the empty
    // first slice of a batch reply: the ranged Gets fetch it.
    const bool empty_allowed = batch_reply_ && offset_ == 0;
    if ((reply.data.empty() && offset_ < total_ && !empty_allowed) ||
        offset_ + reply.data.size() > total_) {
      MC_LOG_ERROR("bad read slice key={} offset={} bytes={} total={}", key_, offset_,
                   reply.data.size(), total_);
      return Err(ErrorCode::kInternalError);
    }
    if (auto written = sink_.write(reply.data); !written) return written;
    offset_ += reply.data.size();
    if (progress_) progress_(offset_, total_);
    return {};
  }

  Result<void> Follow(const std::string& hint, ErrorCode code) {
    if (moves_++ >= kMaxRelocations) return Err(Settle(code));
    auto moved = router_.Relocate(key_, hint, owner_.node_id);
    if (!moved) return Err(Settle(moved.error()));
    owner_ = std::move(*moved);
    return {};
  }

  // Once per read, after the first chunk named the version and the size.
  bool WantsRdma() const {
    return rdma_ != nullptr && !rdma_tried_ && started_ && offset_ > 0 && offset_ < total_ &&
           rdma_->Wants(total_);
  }

  // Hands the rest of the object to the sink by RDMA as far as that goes;
  // the TCP loop continues after the verified bytes, or from the start when
  // the sink took bytes that cannot be vouched for.
  Result<void> ReadRestByRdma() {
    rdma_tried_ = true;
    uint64_t position = offset_;
    auto write = [&](std::string_view data) -> Result<void> {
      if (auto written = sink_.write(data); !written) return written;
      position += data.size();
      if (progress_) progress_(position, total_);
      return {};
    };
    auto outcome = rdma_->Read(owner_, key_, version_, offset_, total_, write);
    if (!outcome) return Err(outcome.error());
    if (outcome->discard) return Restart();
    offset_ += outcome->verified;
    return {};
  }

  // The object was replaced mid-read; the bytes so far belong to the old one.
  Result<void> Restart() {
    if (restarts_++ >= kMaxReadRestarts) return Err(ErrorCode::kObjectReplicaBusy);
    MC_LOG_DEBUG("object changed during read key={} restart={}", key_, restarts_);
    started_ = false;
    offset_ = 0;
    return {};
  }

  ClientRouter& router_;
  const std::string& key_;
  Owner owner_;
  const ReadSink& sink_;
  const ProgressFn progress_;
  RdmaReads* const rdma_;  // null: TCP only
  bool rdma_tried_ = false;
  bool batch_reply_ = false;  // the reply being accepted came from BatchGet
  bool started_ = false;
  uint64_t offset_ = 0;
  uint64_t total_ = 0;
  int64_t version_ = 0;
  int moves_ = 0;
  int restarts_ = 0;
  int waits_ = 0;
};

ReadSink StringSink(std::string& out) {
  return ReadSink{[&out](uint64_t total) -> Result<void> {
                    out.clear();
                    out.reserve(total);
                    return {};
                  },
                  [&out](std::string_view data) -> Result<void> {
                    out.append(data);
                    return {};
                  }};
}

// Reads one object into memory, continuing from `first` when given.
// `served_by`, if given, receives the node that answered.
Result<ObjectValue> ReadValue(ClientRouter& router, RdmaReads* rdma, const std::string& key,
                              Owner owner, rpc::GetResult* first,
                              std::string* served_by = nullptr) {
  ObjectValue value;
  ReadSink sink = StringSink(value.data);
  ChunkedRead read(router, key, std::move(owner), sink, {}, rdma);
  auto done = read.Run(first);
  if (!done) return Err(done.error());
  value.version = done->version;
  if (served_by) *served_by = std::move(done->node_id);
  return value;
}

// Writes to a stream. Bytes already written cannot be taken back, so a
// restart works only on a seekable stream and when the new version covers
// everything written so far; otherwise the read fails with TRANSFER_FAIL.
class StreamSink {
 public:
  explicit StreamSink(std::ostream& out) : out_(out), start_(out.tellp()) {}

  ReadSink Sink() {
    return ReadSink{[this](uint64_t total) { return Begin(total); },
                    [this](std::string_view data) { return Write(data); }};
  }

 private:
  Result<void> Begin(uint64_t total) {
    if (written_ == 0) return {};
    if (start_ == std::ostream::pos_type(-1) || total < written_) {
      return Err(ErrorCode::kTransferFail);
    }
    out_.seekp(start_);
    position_ = 0;
    return out_ ? Result<void>{} : Err(ErrorCode::kTransferFail);
  }

  Result<void> Write(std::string_view data) {
    out_.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out_) return Err(ErrorCode::kTransferFail);
    position_ += data.size();
    written_ = std::max(written_, position_);
    return {};
  }

  std::ostream& out_;
  const std::ostream::pos_type start_;
  uint64_t position_ = 0;
  uint64_t written_ = 0;  // furthest byte written, across restarts
};

// ---- Writes ----

// Fills `buffer` with bytes [offset, offset + length) of the value.
using ChunkSource =
    std::function<Result<void>(uint64_t offset, size_t length, std::string& buffer)>;

Result<void> PutSingle(const Owner& owner, const std::string& key, const std::string& value,
                       const rpc::ReplicateConfig& config) {
  return Flatten(
      owner.channel->Call([&](rpc::WorkerServiceClient& c) { return c.Put(key, value, config); }));
}

void Revoke(const Owner& owner, int64_t handle, const std::string& key) {
  auto revoked = Flatten(
      owner.channel->Call([&](rpc::WorkerServiceClient& c) { return c.PutRevoke(handle); }));
  if (!revoked) {
    // The worker discards unfinished writes after a timeout anyway.
    MC_LOG_DEBUG("put revoke failed key={} node={} error={}", key, owner.node_id,
                 ToString(revoked.error()));
  }
}

// Two-phase write: one chunk of the value in memory at a time. With
// `upsert` the owner replaces an existing object instead of refusing.
Result<void> PutChunked(const Owner& owner, const std::string& key, uint64_t size,
                        const rpc::ReplicateConfig& config, const ChunkSource& source,
                        const ProgressFn& progress, bool upsert = false) {
  rpc::PutStartResult start;
  auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
    c.PutStart(start, key, static_cast<int64_t>(size), config, upsert);
  });
  if (!call) return Err(call.error());
  if (start.code != rpc::ErrorCode::OK) return Err(FromRpc(start.code));
  std::string buffer;
  for (uint64_t offset = 0; offset < size;) {
    size_t length = static_cast<size_t>(std::min<uint64_t>(kRpcChunkBytes, size - offset));
    Result<void> step = source(offset, length, buffer);
    if (step) {
      step = Flatten(owner.channel->Call([&](rpc::WorkerServiceClient& c) {
        return c.PutChunk(start.handle, static_cast<int64_t>(offset), buffer);
      }));
    }
    if (!step) {
      Revoke(owner, start.handle, key);
      return step;
    }
    offset += length;
    if (progress) progress(offset, size);
  }
  auto end = Flatten(
      owner.channel->Call([&](rpc::WorkerServiceClient& c) { return c.PutEnd(start.handle); }));
  if (!end) Revoke(owner, start.handle, key);
  return end;
}

ChunkSource SlicesOf(std::string_view value) {
  return [value](uint64_t offset, size_t length, std::string& buffer) {
    buffer.assign(value.substr(offset, length));
    return Result<void>{};
  };
}

// Writes an in-memory value, in one call or in chunks by size.
Result<void> PutValue(const Owner& owner, const std::string& key, std::string_view value,
                      const rpc::ReplicateConfig& config) {
  if (value.size() <= kRpcChunkBytes) return PutSingle(owner, key, std::string(value), config);
  return PutChunked(owner, key, value.size(), config, SlicesOf(value), {});
}

// Upsert of an in-memory value at `owner`: the Upsert RPC, or the two-phase
// write with upsert semantics when it outgrows one message.
Result<void> UpsertValue(const Owner& owner, const std::string& key, std::string_view value,
                         const rpc::ReplicateConfig& config) {
  if (value.size() > kRpcChunkBytes) {
    return PutChunked(owner, key, value.size(), config, SlicesOf(value), {}, /*upsert=*/true);
  }
  std::string copy(value);
  return Flatten(owner.channel->Call(
      [&](rpc::WorkerServiceClient& c) { return c.Upsert(key, copy, config); }));
}

// Runs `attempt` on the chosen target. When the client chose the node itself
// and that node has no room or is unreachable, the master gets one chance to
// name another, provided `attempt` can still be repeated (its input was not
// consumed).
template <typename Attempt, typename CanRetry>
Result<void> PutPlaced(ClientRouter& router, const std::string& key, uint64_t size,
                       const PutOptions& options, Attempt&& attempt, CanRetry&& can_retry) {
  bool explicit_choice = false;
  auto target = router.PickTarget(size, options, explicit_choice);
  if (!target) return Err(target.error());
  Result<void> result = attempt(*target);
  if (result) router.RememberOwner(key, target->node_id);
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
  bool replaceable = !result && (result.error() == ErrorCode::kNoAvailableHandle ||
                                 result.error() == ErrorCode::kRpcFail);
  if (result || explicit_choice || !replaceable || !can_retry()) return result;
  auto other = router.PickByMaster(size, {target->node_id});
  // No other node: the first node's answer says best why the put failed.
  if (!other || other->node_id == target->node_id) return result;
  MC_LOG_DEBUG("put retried on another node key={} from={} to={}", key, target->node_id,
               other->node_id);
  auto placed = attempt(*other);
  if (placed) router.RememberOwner(key, other->node_id);
  return placed;
}

// Upsert routing. A key with an owner is replaced AT its owner, whatever
// options.preferred_node says: one object, one owner. If the owner denies it
// (the object moved or was removed since the master answered), the master is
// asked once more. A key without an owner takes the put path (same target
// choice as Put) with upsert semantics; if another writer's put wins the
// claim meanwhile (OBJECT_ALREADY_EXISTS), the value is upserted at the
// winner once. Every retry needs `can_retry()`: a stream already consumed
// cannot be sent again.
template <typename Attempt, typename CanRetry>
Result<void> UpsertRouted(ClientRouter& router, const std::string& key, uint64_t size,
                          const PutOptions& options, Attempt&& attempt, CanRetry&& can_retry) {
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

// Reads exactly `length` bytes of `in` into `buffer`; a short stream means the
// caller's size was wrong.
Result<void> ReadExactly(std::istream& in, size_t length, std::string& buffer) {
  buffer.resize(length);
  in.read(buffer.data(), static_cast<std::streamsize>(length));
  if (static_cast<size_t>(in.gcount()) != length) {
    return Err(in.bad() ? ErrorCode::kTransferFail : ErrorCode::kInvalidParams);
  }
  return {};
}

}  // namespace

// ---- Client ----

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Create(ClientConfig config) {
  if (config.master_host.empty() || config.master_port <= 0 || config.master_port > 65535) {
    return Err(ErrorCode::kInvalidParams);
  }
  // Before the master: a bad mode or a missing device is the caller's
  // configuration, whatever the cluster's state.
  auto rdma = RdmaReads::Open(config);
  if (!rdma) return Err(rdma.error());
  std::shared_ptr<const RpcTlsContext> tls;
  if (config.tls.enabled()) {
    std::string why;
    auto context = RpcTlsContext::Create(config.tls, /*server=*/false, &why);
    if (!context) {
      MC_LOG_ERROR("client TLS files unusable reason=\"{}\"", why);
      return Err(context.error());
    }
    tls = std::move(*context);
  }
  auto impl = std::make_unique<Impl>(std::move(config), std::move(*rdma), std::move(tls));
  // Checking the master now turns a wrong address into one clear error at
  // startup, and warms the node cache.
  auto nodes = impl->router.FetchNodes();
  if (!nodes) return Err(nodes.error());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<void> Client::Put(std::string_view key, std::string_view value, const PutOptions& options) {
  if (auto valid = ValidateKey(key); !valid) return valid;
  if (value.empty()) return Err(ErrorCode::kInvalidParams);
  std::string k(key);
  rpc::ReplicateConfig config = ToRpcConfig(options);
  return PutPlaced(
      impl_->router, k, value.size(), options,
      [&](const Owner& owner) { return PutValue(owner, k, value, config); }, [] { return true; });
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
  if (!upsert) return PutPlaced(impl_->router, k, size, options, send, can_retry);
  auto result = UpsertRouted(impl_->router, k, size, options, send, can_retry);
  impl_->hot_cache.Erase(k);
  return result;
}

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

Result<uint64_t> Client::GetStream(std::string_view key, std::ostream& out,
                                   const ProgressFn& progress) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::string k(key);
  auto owner = impl_->router.Locate(k);
  if (!owner) return Err(owner.error());
  StreamSink stream(out);
  ReadSink sink = stream.Sink();
  ChunkedRead read(impl_->router, k, std::move(*owner), sink, progress, impl_->rdma.get());
  auto done = read.Run(nullptr);
  if (!done) return Err(done.error());
  out.flush();
  if (!out) return Err(ErrorCode::kTransferFail);
  return done->total;
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

// ---- Plan-based writes and placement ----

namespace {

MemoryRegionHandle ToRegionHandle(const rpc::MemoryHandle& handle) {
  MemoryRegionHandle region;
  switch (handle.kind) {
    case rpc::MemoryHandleKind::HOST_FILE:
      region.kind = MemoryRegionHandle::Kind::kHostFile;
      break;
    case rpc::MemoryHandleKind::DEVICE_IPC:
      region.kind = MemoryRegionHandle::Kind::kDeviceIpc;
      break;
    default:
      region.kind = MemoryRegionHandle::Kind::kNone;
  }
  region.path = handle.path;
  region.ipc_handle = handle.ipc_handle;
  region.device_index = handle.device_index;
  region.region_size = static_cast<uint64_t>(std::max<int64_t>(handle.region_size, 0));
  region.machine_id = handle.machine_id;
  return region;
}

Result<WritePlan> OpenPlanAt(const Owner& owner, const std::string& key, uint64_t size,
                             const rpc::ReplicateConfig& config, bool upsert) {
  rpc::WritePlan answer;
  auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
    c.OpenForWrite(answer, key, static_cast<int64_t>(size), config, upsert);
  });
  if (!call) return Err(call.error());
  if (answer.code != rpc::ErrorCode::OK) return Err(FromRpc(answer.code));
  if (answer.offset < 0 || answer.size != static_cast<int64_t>(size)) {
    return Err(ErrorCode::kInternalError);  // a worker that breaks the contract
  }
  return WritePlan{.key = key,
                   .node_id = answer.node_id.empty() ? owner.node_id : answer.node_id,
                   .tier = answer.tier,
                   .memory = ToRegionHandle(answer.memory),
                   .offset = static_cast<uint64_t>(answer.offset),
                   .size = size,
                   .epoch = answer.epoch,
                   .timeout_ms = answer.timeout_ms};
}

}  // namespace

Result<WritePlan> Client::OpenForWrite(std::string_view key, uint64_t size,
                                       const PutOptions& options, bool upsert) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  if (size == 0) return Err(ErrorCode::kInvalidParams);
  std::string k(key);
  rpc::ReplicateConfig config = ToRpcConfig(options);
  WritePlan plan;
  auto attempt = [&](const Owner& owner) -> Result<void> {
    auto opened = OpenPlanAt(owner, k, size, config, upsert);
    if (!opened) return Err(opened.error());
    plan = std::move(*opened);
    return {};
  };
  auto opened = upsert ? UpsertRouted(impl_->router, k, size, options, attempt, [] { return true; })
                       : PutPlaced(impl_->router, k, size, options, attempt, [] { return true; });
  if (!opened) return Err(opened.error());
  // The placement routines remember the target as the owner; until Commit
  // the key is not readable there, so readers keep asking the master.
  impl_->router.ForgetOwner(k);
  return plan;
}

Result<void> Client::Commit(const WritePlan& plan) {
  if (auto valid = ValidateKey(plan.key); !valid) return valid;
  auto node = impl_->router.Node(plan.node_id);
  if (!node) return Err(node.error());
  auto committed = Flatten(node->channel->Call(
      [&](rpc::WorkerServiceClient& c) { return c.Commit(plan.key, plan.epoch); }));
  impl_->hot_cache.Erase(plan.key);
  if (committed) impl_->router.RememberOwner(plan.key, plan.node_id);
  return committed;
}

Result<void> Client::Revoke(const WritePlan& plan) {
  auto node = impl_->router.Node(plan.node_id);
  if (!node) return Err(node.error());
  return Flatten(
      node->channel->Call([&](rpc::WorkerServiceClient& c) { return c.PutRevoke(plan.epoch); }));
}

Result<ObjectPlacement> Client::GetLocation(std::string_view key) {
  if (auto valid = ValidateKey(key); !valid) return Err(valid.error());
  std::string k(key);
  return WithOwner<ObjectPlacement>(
      impl_->router, k, [&](const Owner& owner) -> Result<ObjectPlacement> {
        rpc::Placement answer;
        auto call =
            owner.channel->Call([&](rpc::WorkerServiceClient& c) { c.GetPlacement(answer, k); });
        if (!call) return Err(call.error());
        if (answer.code != rpc::ErrorCode::OK) return Err(FromRpc(answer.code));
        return ObjectPlacement{.node_id = owner.node_id,
                               .tier = answer.tier,
                               .memory = ToRegionHandle(answer.memory),
                               .offset = static_cast<uint64_t>(answer.offset),
                               .size = static_cast<uint64_t>(answer.size),
                               .version = answer.version,
                               .hold_ms = answer.hold_ms};
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
  auto node = impl_->router.Node(node_id);
  if (!node) return Err(node.error());
  rpc::WorkerStats stats;
  auto call = node->channel->Call([&](rpc::WorkerServiceClient& c) { c.Stats(stats); });
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

TransportCounters Client::transport_counters() const { return impl_->rdma->counters(); }

// ---- Batches ----

namespace {

// Input positions whose keys are valid; the others get INVALID_KEY.
template <typename R>
std::vector<size_t> ValidIndices(const std::vector<std::string>& keys, std::vector<R>& results) {
  std::vector<size_t> valid;
  valid.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (ValidateKey(keys[i])) {
      valid.push_back(i);
    } else {
      results[i] = Err(ErrorCode::kInvalidKey);
    }
  }
  return valid;
}

// One task per (owner, slice of its keys). `per_slice(owner, slice)` fills
// the results of the slice's positions; slices never share a position.
template <typename R, typename PerSlice>
void FanOut(ClientRouter& router, const std::vector<std::string>& keys, std::vector<R>& results,
            const std::function<void(size_t, ErrorCode)>& on_missing, PerSlice&& per_slice) {
  std::vector<size_t> todo = ValidIndices(keys, results);
  if (todo.empty()) return;
  std::vector<std::pair<size_t, ErrorCode>> missing;
  auto groups = router.GroupByOwner(keys, todo, missing);
  if (!groups) {
    for (size_t i : todo) results[i] = Err(groups.error());
    return;
  }
  for (const auto& [i, code] : missing) on_missing(i, code);
  std::vector<std::function<void()>> tasks;
  for (const auto& [node_id, group] : *groups) {
    for (auto& slice : SliceIndices(group.indices, keys, kMaxBatchKeyBytes, kMaxBatchCount)) {
      tasks.emplace_back(
          [&per_slice, owner = group.owner, slice = std::move(slice)] { per_slice(owner, slice); });
    }
  }
  RunParallel(tasks);
}

std::vector<std::string> KeysAt(const std::vector<std::string>& keys,
                                const std::vector<size_t>& slice) {
  std::vector<std::string> out;
  out.reserve(slice.size());
  for (size_t i : slice) out.push_back(keys[i]);
  return out;
}

}  // namespace

std::vector<Result<ObjectValue>> Client::BatchGet(const std::vector<std::string>& keys) {
  std::vector<Result<ObjectValue>> results(keys.size());
  auto on_missing = [&](size_t i, ErrorCode code) { results[i] = Err(code); };
  FanOut(impl_->router, keys, results, on_missing,
         [&](const Owner& owner, const std::vector<size_t>& slice) {
           std::vector<rpc::GetResult> replies;
           auto call = owner.channel->Call(
               [&](rpc::WorkerServiceClient& c) { c.BatchGet(replies, KeysAt(keys, slice)); });
           if (!call || replies.size() != slice.size()) {
             // A transport failure may be a reply too large for one frame;
             // single reads are chunked, so try them. If one fails in
             // transport too, the node is down: spare the rest the wait.
             ErrorCode failure = call ? ErrorCode::kInternalError : call.error();
             bool singly = failure == ErrorCode::kRpcFail;
             for (size_t i : slice) {
               if (!singly) {
                 results[i] = Err(failure);
                 continue;
               }
               results[i] = Get(keys[i]);
               if (!results[i] && (results[i].error() == ErrorCode::kRpcFail ||
                                   results[i].error() == ErrorCode::kRpcTimeout)) {
                 singly = false;
                 failure = results[i].error();
               }
             }
             return;
           }
           // Each reply carries at most one chunk; ChunkedRead completes larger
           // values and follows keys that moved.
           for (size_t j = 0; j < slice.size(); ++j) {
             results[slice[j]] =
                 ReadValue(impl_->router, impl_->rdma.get(), keys[slice[j]], owner, &replies[j]);
           }
         });
  return results;
}

std::vector<Result<bool>> Client::BatchExist(const std::vector<std::string>& keys, bool prefetch) {
  const std::string& requester = impl_->router.config().local_node;
  std::vector<Result<bool>> results(keys.size(), false);
  auto on_missing = [&](size_t i, ErrorCode code) {
    results[i] = code == ErrorCode::kObjectNotFound ? Result<bool>(false) : Err(code);
  };
  FanOut(impl_->router, keys, results, on_missing,
         [&](const Owner& owner, const std::vector<size_t>& slice) {
           std::vector<int32_t> answers;
           auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
             c.BatchExist(answers, KeysAt(keys, slice), prefetch, requester);
           });
           for (size_t j = 0; j < slice.size(); ++j) {
             size_t i = slice[j];
             if (!call || answers.size() != slice.size()) {
               results[i] = Err(call ? ErrorCode::kInternalError : call.error());
             } else if (answers[j] == 1) {
               results[i] = true;
             } else if (answers[j] == 0 || IsMoved(ErrorCodeFromInt(answers[j])) ||
                        ErrorCodeFromInt(answers[j]) == ErrorCode::kReplicaIsNotReady) {
               // Moved or racing a write: the single path re-asks the master.
               results[i] = Exist(keys[i], prefetch);
             } else {
               results[i] = Err(ErrorCodeFromInt(answers[j]));
             }
           }
         });
  return results;
}

std::vector<Result<void>> Client::BatchRemove(const std::vector<std::string>& keys, bool force) {
  std::vector<Result<void>> results(keys.size());
  auto on_missing = [&](size_t i, ErrorCode code) { results[i] = Err(code); };
  FanOut(impl_->router, keys, results, on_missing,
         [&](const Owner& owner, const std::vector<size_t>& slice) {
           std::vector<rpc::ErrorCode::type> codes;
           auto call = owner.channel->Call([&](rpc::WorkerServiceClient& c) {
             c.BatchRemove(codes, KeysAt(keys, slice), force);
           });
           for (size_t j = 0; j < slice.size(); ++j) {
             size_t i = slice[j];
             if (!call || codes.size() != slice.size()) {
               results[i] = Err(call ? ErrorCode::kInternalError : call.error());
             } else if (IsMoved(FromRpc(codes[j])) ||
                        FromRpc(codes[j]) == ErrorCode::kReplicaIsNotReady) {
               results[i] = Remove(keys[i], force);
             } else {
               results[i] = ToResult(codes[j]);
             }
           }
         });
  for (const auto& key : keys) impl_->hot_cache.Erase(key);
  return results;
}

namespace {

// Splits positions into BatchPut requests of bounded payload; values too big
// for one request are returned in `large` for the two-phase path.
std::vector<std::vector<size_t>> PlanPutRequests(
    const std::vector<std::pair<std::string, std::string>>& items,
    const std::vector<size_t>& positions, std::vector<size_t>& large) {
  std::vector<std::vector<size_t>> requests;
  size_t bytes = 0;
  for (size_t i : positions) {
    size_t item_bytes = items[i].first.size() + items[i].second.size();
    if (items[i].second.size() > kRpcChunkBytes) {
      large.push_back(i);
      continue;
    }
    if (requests.empty() || requests.back().size() >= kMaxBatchCount ||
        (bytes + item_bytes > kMaxBatchPutBytes && !requests.back().empty())) {
      requests.emplace_back();
      bytes = 0;
    }
    requests.back().push_back(i);
    bytes += item_bytes;
  }
  return requests;
}

// Input positions that can be written; the others get their error now.
std::vector<size_t> WritablePositions(const std::vector<std::pair<std::string, std::string>>& items,
                                      std::vector<Result<void>>& results) {
  std::vector<size_t> positions;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!ValidateKey(items[i].first)) {
      results[i] = Err(ErrorCode::kInvalidKey);
    } else if (items[i].second.empty()) {
      results[i] = Err(ErrorCode::kInvalidParams);
    } else {
      positions.push_back(i);
    }
  }
  return positions;
}

uint64_t TotalBytes(const std::vector<std::pair<std::string, std::string>>& items,
                    const std::vector<size_t>& positions) {
  uint64_t total = 0;
  for (size_t i : positions) total += items[i].second.size();
  return total;
}

// Adds tasks that write items[positions] to `target`: bounded BatchPut (or
// BatchUpsert) requests, and values too big for one request one by one.
// Tasks hold references to items, config and results: run them before
// those go away.
void AddWriteTasks(const Owner& target,
                   const std::vector<std::pair<std::string, std::string>>& items,
                   const std::vector<size_t>& positions, const rpc::ReplicateConfig& config,
                   bool upsert, std::vector<Result<void>>& results,
                   std::vector<std::function<void()>>& tasks) {
  std::vector<size_t> large;
  for (auto& request : PlanPutRequests(items, positions, large)) {
    tasks.emplace_back([&items, &config, &results, target, upsert, request = std::move(request)] {
      std::vector<rpc::PutItem> batch(request.size());
      for (size_t j = 0; j < request.size(); ++j) {
        batch[j].key = items[request[j]].first;
        batch[j].value = items[request[j]].second;
        batch[j].config = config;
      }
      std::vector<rpc::ErrorCode::type> codes;
      auto call = target.channel->Call([&](rpc::WorkerServiceClient& c) {
        if (upsert) {
          c.BatchUpsert(codes, batch);
        } else {
          c.BatchPut(codes, batch);
        }
      });
      for (size_t j = 0; j < request.size(); ++j) {
        if (!call || codes.size() != request.size()) {
          results[request[j]] = Err(call ? ErrorCode::kInternalError : call.error());
        } else {
          results[request[j]] = ToResult(codes[j]);
        }
      }
    });
  }
  for (size_t i : large) {
    tasks.emplace_back([&items, &config, &results, target, upsert, i] {
      const auto& [key, value] = items[i];
      results[i] =
          upsert ? UpsertValue(target, key, value, config) : PutValue(target, key, value, config);
    });
  }
}

}  // namespace

std::vector<Result<void>> Client::BatchPut(
    const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options) {
  std::vector<Result<void>> results(items.size());
  std::vector<size_t> positions = WritablePositions(items, results);
  if (positions.empty()) return results;
  // One placement for the whole batch: one master round trip at most, and
  // one node takes the batch.
  bool explicit_choice = false;
  auto target = impl_->router.PickTarget(TotalBytes(items, positions), options, explicit_choice);
  if (!target) {
    for (size_t i : positions) results[i] = Err(target.error());
    return results;
  }
  rpc::ReplicateConfig config = ToRpcConfig(options);
  std::vector<std::function<void()>> tasks;
  AddWriteTasks(*target, items, positions, config, /*upsert=*/false, results, tasks);
  RunParallel(tasks);
  // A node the client chose may be full; the single path asks the master for
  // another node, item by item.
  if (!explicit_choice) {
    for (size_t i : positions) {
      if (!results[i] && results[i].error() == ErrorCode::kNoAvailableHandle) {
        results[i] = Put(items[i].first, items[i].second, options);
      }
    }
  }
  return results;
}

std::vector<Result<void>> Client::BatchUpsert(
    const std::vector<std::pair<std::string, std::string>>& items, const PutOptions& options) {
  std::vector<Result<void>> results(items.size());
  std::vector<size_t> positions = WritablePositions(items, results);
  if (positions.empty()) return results;
  std::vector<std::string> keys;
  keys.reserve(items.size());
  for (const auto& item : items) keys.push_back(item.first);
  // One master round trip locates every key; keys with an owner are replaced
  // there, one request stream per owner, all owners in parallel.
  std::vector<std::pair<size_t, ErrorCode>> missing;
  auto groups = impl_->router.GroupByOwner(keys, positions, missing);
  if (!groups) {
    for (size_t i : positions) results[i] = Err(groups.error());
    return results;
  }
  rpc::ReplicateConfig config = ToRpcConfig(options);
  std::vector<std::function<void()>> tasks;
  for (const auto& [node_id, group] : *groups) {
    AddWriteTasks(group.owner, items, group.indices, config, /*upsert=*/true, results, tasks);
  }
  std::vector<size_t> absent;
  for (const auto& [i, code] : missing) {
    if (code == ErrorCode::kObjectNotFound) {
      absent.push_back(i);
    } else {
      results[i] = Err(code);
    }
  }
  // Keys without an owner take the put path: one target for all of them.
  bool explicit_choice = false;
  if (!absent.empty()) {
    auto target = impl_->router.PickTarget(TotalBytes(items, absent), options, explicit_choice);
    if (target) {
      AddWriteTasks(*target, items, absent, config, /*upsert=*/true, results, tasks);
    } else {
      for (size_t i : absent) results[i] = Err(target.error());
    }
  }
  RunParallel(tasks);
  // Keys that moved, lost a put race or found the chosen node full go
  // through the single path, which re-locates them once.
  for (size_t i : positions) {
    if (results[i]) continue;
    ErrorCode code = results[i].error();
    if (IsMoved(code) || code == ErrorCode::kObjectAlreadyExists ||
        (code == ErrorCode::kNoAvailableHandle && !explicit_choice)) {
      results[i] = Upsert(items[i].first, items[i].second, options);
    }
  }
  for (const auto& key : keys) impl_->hot_cache.Erase(key);
  return results;
}

}  // namespace mooncake
