#include "client/client_chunked_io.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "client/client_retry.h"
#include "client/rdma_reads.h"
#include "common/log.h"
#include "thrift/value_calls.h"

namespace mooncake {
namespace {

// What StringSink reserves at most before the bytes arrive. The size a
// reply names is the worker's word, not bytes it sent: a wrong one must not
// make this process allocate for it. A larger value grows as it arrives.
constexpr uint64_t kStringReserveAheadBytes = 64ull << 20;

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
          auto moved = router_.RelocateUnreachable(key_, owner_, call.error());
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
    const uint64_t size = reply.data.size();
    if (sink_.take && offset_ == 0 && size == total_) {
      sink_.take(std::move(reply.data));  // the whole object in one reply
    } else if (auto written = sink_.write(reply.data); !written) {
      return written;
    }
    offset_ += size;
    if (progress_) progress_(offset_, total_);
    return {};
  }

  // The node no longer has the key: the read goes on at whichever node has
  // it now, from the start if bytes were already taken. A version is a
  // per-node counter, so the same version and size at the new node do not
  // prove it is the same object (it may have been removed and put again
  // there); going on at offset_ could splice the old value and the new.
  Result<void> Follow(const std::string& hint, ErrorCode code) {
    if (moves_++ >= kMaxRelocations) return Err(Settle(code));
    auto moved = router_.Relocate(key_, hint, owner_.node_id);
    if (!moved) return Err(Settle(moved.error()));
    owner_ = std::move(*moved);
    if (started_) return Restart();
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

// Single-call put of a value that fits one RPC.
// One Put (or Upsert) call carrying the whole value, sent from the caller's
// bytes (thrift/value_calls.h).
Result<void> PutSingle(const Owner& owner, const std::string& key, std::string_view value,
                       const rpc::ReplicateConfig& config, bool upsert) {
  return Flatten(owner.channel->Call([&](rpc::WorkerServiceClient& c) {
    SendValueCall(c, upsert, key, value, config);
    return upsert ? c.recv_Upsert() : c.recv_Put();
  }));
}

// Gives a two-phase write's reservation back after a failed step.
void RevokeHandle(const Owner& owner, int64_t handle, const std::string& key) {
  auto revoked = Flatten(
      owner.channel->Call([&](rpc::WorkerServiceClient& c) { return c.PutRevoke(handle); }));
  if (!revoked) {
    // The worker discards unfinished writes after a timeout anyway.
    MC_LOG_DEBUG("put revoke failed key={} node={} error={}", key, owner.node_id,
                 ToString(revoked.error()));
  }
}

}  // namespace

// ---- Reads ----

Result<ReadDone> ReadChunked(ClientRouter& router, const std::string& key, Owner owner,
                             const ReadSink& sink, const ProgressFn& progress, RdmaReads* rdma,
                             rpc::GetResult* first) {
  ChunkedRead read(router, key, std::move(owner), sink, progress, rdma);
  return read.Run(first);
}

ReadSink StringSink(std::string& out) {
  // Memory this process cannot get fails the read, not the process: a
  // read on a helper thread has nobody to catch an exception.
  return ReadSink{[&out](uint64_t total) -> Result<void> {
                    out.clear();
                    if (total > out.max_size()) return Err(ErrorCode::kNoAvailableHandle);
                    try {
                      out.reserve(std::min(total, kStringReserveAheadBytes));
                    } catch (const std::bad_alloc&) {
                      return Err(ErrorCode::kNoAvailableHandle);
                    }
                    return {};
                  },
                  [&out](std::string_view data) -> Result<void> {
                    try {
                      out.append(data);
                    } catch (const std::bad_alloc&) {
                      return Err(ErrorCode::kNoAvailableHandle);
                    }
                    return {};
                  },
                  [&out](std::string&& whole) { out = std::move(whole); }};
}

ReadSink SpanSink(std::span<char> out, uint64_t& total) {
  // Shared by the two callbacks; a restart writes from the start again.
  auto position = std::make_shared<uint64_t>(0);
  return ReadSink{[out, &total, position](uint64_t size) -> Result<void> {
                    total = size;
                    *position = 0;
                    if (size > out.size()) return Err(ErrorCode::kInvalidParams);
                    return {};
                  },
                  [out, position](std::string_view data) -> Result<void> {
                    // ChunkedRead never writes past the size begin() accepted.
                    if (*position + data.size() > out.size()) return Err(ErrorCode::kInternalError);
                    std::memcpy(out.data() + *position, data.data(), data.size());
                    *position += data.size();
                    return {};
                  }};
}

Result<ObjectValue> ReadValue(ClientRouter& router, RdmaReads* rdma, const std::string& key,
                              Owner owner, rpc::GetResult* first, std::string* served_by) {
  ObjectValue value;
  ReadSink sink = StringSink(value.data);
  auto done = ReadChunked(router, key, std::move(owner), sink, {}, rdma, first);
  if (!done) return Err(done.error());
  value.version = done->version;
  if (served_by) *served_by = std::move(done->node_id);
  return value;
}

ReadSink StreamSink::Sink() {
  return ReadSink{[this](uint64_t total) { return Begin(total); },
                  [this](std::string_view data) { return Write(data); }};
}

Result<void> StreamSink::Begin(uint64_t total) {
  if (written_ == 0) return {};
  if (start_ == std::ostream::pos_type(-1) || total < written_) {
    return Err(ErrorCode::kTransferFail);
  }
  out_.seekp(start_);
  position_ = 0;
  return out_ ? Result<void>{} : Err(ErrorCode::kTransferFail);
}

Result<void> StreamSink::Write(std::string_view data) {
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out_) return Err(ErrorCode::kTransferFail);
  position_ += data.size();
  written_ = std::max(written_, position_);
  return {};
}

// ---- Writes ----

ChunkSource SlicesOf(std::string_view value) {
  return [value](uint64_t offset, size_t length, std::string& buffer) {
    buffer.assign(value.substr(offset, length));
    return Result<void>{};
  };
}

Result<void> ReadExactly(std::istream& in, size_t length, std::string& buffer) {
  buffer.resize(length);
  in.read(buffer.data(), static_cast<std::streamsize>(length));
  if (static_cast<size_t>(in.gcount()) != length) {
    return Err(in.bad() ? ErrorCode::kTransferFail : ErrorCode::kInvalidParams);
  }
  return {};
}

Result<void> PutChunked(const Owner& owner, const std::string& key, uint64_t size,
                        const rpc::ReplicateConfig& config, const ChunkSource& source,
                        const ProgressFn& progress, bool upsert) {
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
      RevokeHandle(owner, start.handle, key);
      return step;
    }
    offset += length;
    if (progress) progress(offset, size);
  }
  auto end = Flatten(
      owner.channel->Call([&](rpc::WorkerServiceClient& c) { return c.PutEnd(start.handle); }));
  if (!end) RevokeHandle(owner, start.handle, key);
  return end;
}

Result<void> PutValue(const Owner& owner, const std::string& key, std::string_view value,
                      const rpc::ReplicateConfig& config) {
  if (value.size() <= kRpcChunkBytes) return PutSingle(owner, key, value, config, /*upsert=*/false);
  return PutChunked(owner, key, value.size(), config, SlicesOf(value), {});
}

Result<void> UpsertValue(const Owner& owner, const std::string& key, std::string_view value,
                         const rpc::ReplicateConfig& config) {
  if (value.size() > kRpcChunkBytes) {
    return PutChunked(owner, key, value.size(), config, SlicesOf(value), {}, /*upsert=*/true);
  }
  return PutSingle(owner, key, value, config, /*upsert=*/true);
}

}  // namespace mooncake
