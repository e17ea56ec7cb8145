#pragma once

// Private to client/: moving one value in chunks of at most kRpcChunkBytes,
// so objects of any size work and no layer holds more than one extra copy.
//
//   Reads   ReadChunked drives ranged Gets from one owner into a ReadSink,
//           following the object when it moves and starting over when it is
//           replaced; with RdmaReads, everything after the first chunk may
//           come by RDMA instead (client/rdma_reads.h).
//   Writes  PutChunked drives PutStart / PutChunk / PutEnd from a ChunkSource
//           and revokes the write when a step fails. PutValue and UpsertValue
//           choose between one call and the chunked path by size, so every
//           writer (single, stream, batch) applies the same rule.
//
// Thread-safety: the functions keep no state of their own; a sink or source
// is used by one read or write at a time.

#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "client/client.h"
#include "client/client_router.h"
#include "common/status.h"

namespace mooncake {

class RdmaReads;

// ---- Reads ----

// Receives the bytes of one read as they arrive.
struct ReadSink {
  // Called before the first byte, and again when the read restarts because
  // the object was replaced; `total` is the size of the version being read.
  std::function<Result<void>(uint64_t total)> begin;
  std::function<Result<void>(std::string_view data)> write;
  // Optional: takes the whole object when one reply carries all of it,
  // instead of `write` copying it (a string sink keeps the reply's bytes).
  std::function<void(std::string&& whole)> take;
};

struct ReadDone {
  uint64_t total = 0;
  int64_t version = 0;
  std::string node_id;  // the node that served the read
};

// Reads the whole object `key` from `owner` into `sink`. `first`, if given,
// is a reply already received for offset 0 (from BatchGet); its payload is
// taken. `rdma` may be null (TCP only). `sink` and `key` are borrowed for the
// call.
Result<ReadDone> ReadChunked(ClientRouter& router, const std::string& key, Owner owner,
                             const ReadSink& sink, const ProgressFn& progress, RdmaReads* rdma,
                             rpc::GetResult* first);

// A sink that replaces `out` with the value (on every restart too). It
// reserves room for at most 64 MiB before the bytes arrive, whatever size
// the reply names; a value this process has no memory for fails with
// kNoAvailableHandle.
ReadSink StringSink(std::string& out);

// A sink that writes into `out` (a caller's buffer) and stores the size of
// the object in `total`; an object larger than `out` fails with
// kInvalidParams. Borrows `out` and `total`, which must outlive the sink.
ReadSink SpanSink(std::span<char> out, uint64_t& total);

// Reads one object into memory, continuing from `first` when given.
// `served_by`, if given, receives the node that answered.
Result<ObjectValue> ReadValue(ClientRouter& router, RdmaReads* rdma, const std::string& key,
                              Owner owner, rpc::GetResult* first, std::string* served_by = nullptr);

// Writes to a stream. Bytes already written cannot be taken back, so a
// restart works only on a seekable stream and when the new version covers
// everything written so far; otherwise the read fails with TRANSFER_FAIL.
// Borrows `out`, which must outlive the sink.
class StreamSink {
 public:
  explicit StreamSink(std::ostream& out) : out_(out), start_(out.tellp()) {}

  ReadSink Sink();

 private:
  Result<void> Begin(uint64_t total);
  Result<void> Write(std::string_view data);

  std::ostream& out_;
  const std::ostream::pos_type start_;
  uint64_t position_ = 0;
  uint64_t written_ = 0;  // furthest byte written, across restarts
};

// ---- Writes ----

// Fills `buffer` with bytes [offset, offset + length) of the value.
using ChunkSource =
    std::function<Result<void>(uint64_t offset, size_t length, std::string& buffer)>;

// A source over an in-memory value; `value` must outlive it.
ChunkSource SlicesOf(std::string_view value);

// Reads exactly `length` bytes of `in` into `buffer`; a short stream means the
// caller's size was wrong (INVALID_PARAMS), a failing one TRANSFER_FAIL.
Result<void> ReadExactly(std::istream& in, size_t length, std::string& buffer);

// Two-phase write: one chunk of the value in memory at a time. With
// `upsert` the owner replaces an existing object instead of refusing.
Result<void> PutChunked(const Owner& owner, const std::string& key, uint64_t size,
                        const rpc::ReplicateConfig& config, const ChunkSource& source,
                        const ProgressFn& progress, bool upsert = false);

// Writes an in-memory value, in one call or in chunks by size.
Result<void> PutValue(const Owner& owner, const std::string& key, std::string_view value,
                      const rpc::ReplicateConfig& config);

// Upsert of an in-memory value at `owner`: the Upsert RPC, or the two-phase
// write with upsert semantics when it outgrows one message.
Result<void> UpsertValue(const Owner& owner, const std::string& key, std::string_view value,
                         const rpc::ReplicateConfig& config);

}  // namespace mooncake
