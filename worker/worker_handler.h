#pragma once

// Thrift face of the worker: translates WorkerService calls into
// TieredCacheBackend calls and results back into wire structs. No logic of
// its own; never throws.
//
// Thread-safety: stateless apart from references to thread-safe objects.

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/value_calls.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {

class RdmaLink;

class WorkerHandler : public rpc::WorkerServiceIf {
 public:
  WorkerHandler(TieredCacheBackend& backend, std::string node_id, RequestMetrics& requests)
      : backend_(backend),
        node_id_(std::make_shared<const std::string>(std::move(node_id))),
        requests_(requests) {}

  // Reads are answered only once the node has announced its keys to the
  // master: before that, a recovered copy may belong to a key the cluster
  // has since given to another node. Until then reads answer
  // REPLICA_IS_NOT_READY (retryable).
  void set_serving_reads(bool serving) { serving_reads_.store(serving); }
  // The most bytes placed puts may hold reserved at once. A placed put takes
  // the object's space when the frame's header arrives, before its value: a
  // client that declares large values and never sends them would otherwise
  // reserve (and evict others to make) as much space as it has connections
  // times the frame limit. Past the budget a value is read into the frame,
  // as a value the client has sent. Set before serving.
  void set_placed_bytes_limit(uint64_t limit) { placed_bytes_limit_ = limit; }
  uint64_t placed_bytes_in_flight() const { return placed_bytes_.load(); }

  // The operation names requests are counted under (for RequestMetrics).
  static std::vector<std::string> OperationNames();
  // Set once the port is bound, before the node registers; a call that
  // comes first (nobody can know the node yet) answers with the old id.
  void set_node_id(std::string node_id) {
    node_id_.store(std::make_shared<const std::string>(std::move(node_id)));
  }
  // The RDMA side RdmaConnect answers from (null or disabled: TIER_NOT_FOUND,
  // and AdoptEnd refuses written_directly). Set before serving; `rdma` must
  // outlive the handler's calls.
  void set_rdma_link(RdmaLink* rdma) { rdma_ = rdma; }

  rpc::ErrorCode::type Put(const std::string& key, const std::string& value,
                           const rpc::ReplicateConfig& config) override;
  rpc::ErrorCode::type Upsert(const std::string& key, const std::string& value,
                              const rpc::ReplicateConfig& config) override;
  void PutStart(rpc::PutStartResult& result, const std::string& key, int64_t size,
                const rpc::ReplicateConfig& config, bool upsert) override;
  rpc::ErrorCode::type PutChunk(int64_t handle, int64_t offset, const std::string& data) override;
  rpc::ErrorCode::type PutEnd(int64_t handle) override;
  rpc::ErrorCode::type PutRevoke(int64_t handle) override;
  void Get(rpc::GetResult& result, const std::string& key, int64_t offset, int64_t length) override;
  // Get, answered through `reply` with the bytes where they lie instead of
  // in result.data (WorkerProcessor sends them from there). `reply` is
  // called exactly once, also for an error (with no bytes); the object
  // stays pinned while it runs. Counted in the metrics as a get.
  using GetReply = std::function<void(const rpc::GetResult& head, std::span<const std::byte> data)>;
  void GetInPlace(const std::string& key, int64_t offset, int64_t length, const GetReply& reply);
  // Put (kCreate) or Upsert (kUpsert) of a value the caller holds:
  // WorkerProcessor passes a view of the request's frame, not a copy.
  rpc::ErrorCode::type WriteValue(WriteMode mode, const std::string& key, std::string_view value,
                                  const rpc::ReplicateConfig& config);
  // A Put answered without waiting on this thread for the master's claim
  // (TieredCacheBackend::TryPutAsync): `done` gets its code exactly once,
  // here or from the thread that answers the claim; counted and logged as
  // WriteValue counts and logs. False, with nothing done, for a put that
  // might wait here: WriteValue writes it.
  using WriteDone = std::function<void(rpc::ErrorCode::type)>;
  bool TryPutAsync(const std::string& key, std::string_view value,
                   const rpc::ReplicateConfig& config, WriteDone done);
  // A Put whose value WorkerProcessor receives from its socket straight
  // into the object's space (TieredCacheBackend::StartPlacedPut), counted
  // and logged as a put. Revoked when destroyed unfinished: the value did
  // not all come, and the key stays free.
  class PlacedPut {
   public:
    PlacedPut(WorkerHandler& handler, PlacedWrite write, std::string key,
              rpc::ReplicateConfig config);
    ~PlacedPut();
    PlacedPut(const PlacedPut&) = delete;
    PlacedPut& operator=(const PlacedPut&) = delete;

    // Where the value's bytes go.
    std::span<std::byte> bytes() const { return write_.bytes; }
    // Whether `item` is the call this put was started for: its key, its
    // config and its value in bytes(). A call that repeats a field after the
    // value differs, and is written as read, with WriteValue.
    bool Describes(const ValueItem& item) const;
    // Publishes the object once bytes() holds the whole value.
    rpc::ErrorCode::type Finish();

   private:
    WorkerHandler& handler_;
    const PlacedWrite write_;
    const std::string key_;
    const rpc::ReplicateConfig config_;
    RequestTimer timer_;
    bool finished_ = false;
  };
  // Null when the value should go through WriteValue instead: the object
  // would not be in host memory, or the put fails at once (its error is
  // then WriteValue's to give).
  std::unique_ptr<PlacedPut> StartPlacedPut(const std::string& key, uint64_t size,
                                            const rpc::ReplicateConfig& config);
  // BatchPut (kCreate) and BatchUpsert (kUpsert): one backend call, so the
  // batch's keys are claimed at the master together. One code per item.
  void WriteValues(WriteMode mode, std::span<const ValueItem> items,
                   std::vector<rpc::ErrorCode::type>& results);
  // BatchGet, answered the same way: one head and one view per key.
  using BatchGetReply = std::function<void(std::span<const rpc::GetResult> heads,
                                           std::span<const std::span<const std::byte>> data)>;
  void BatchGetInPlace(const std::vector<std::string>& keys, const BatchGetReply& reply);
  // False when a read of one of `keys` would wait for a tier outside host
  // memory (an SSD, a GPU): WorkerProcessor then reads on a thread that may
  // wait.
  bool ReadableFromHostMemory(std::span<const std::string> keys) const {
    return backend_.ReadableFromHostMemory(keys);
  }
  int32_t Exist(const std::string& key, bool prefetch, const std::string& requester_node) override;
  rpc::ErrorCode::type Remove(const std::string& key, bool force) override;
  void BatchPut(std::vector<rpc::ErrorCode::type>& results,
                const std::vector<rpc::PutItem>& items) override;
  void BatchGet(std::vector<rpc::GetResult>& results,
                const std::vector<std::string>& keys) override;
  void BatchUpsert(std::vector<rpc::ErrorCode::type>& results,
                   const std::vector<rpc::PutItem>& items) override;
  void BatchExist(std::vector<int32_t>& results, const std::vector<std::string>& keys,
                  bool prefetch, const std::string& requester_node) override;
  void BatchRemove(std::vector<rpc::ErrorCode::type>& results, const std::vector<std::string>& keys,
                   bool force) override;
  void Inspect(rpc::ObjectInfo& result, const std::string& key) override;
  void Stats(rpc::WorkerStats& result) override;
  void AdoptStart(rpc::PutStartResult& result, const std::string& key, int64_t size,
                  const rpc::ReplicateConfig& config, int64_t version,
                  const std::string& sender) override;
  rpc::ErrorCode::type AdoptEnd(int64_t handle, bool written_directly) override;
  rpc::ErrorCode::type AdoptAbort(const std::string& key) override;
  rpc::ErrorCode::type AdoptConfirm(const std::string& key) override;
  void OpenForWrite(rpc::WritePlan& result, const std::string& key, int64_t size,
                    const rpc::ReplicateConfig& config, bool upsert) override;
  rpc::ErrorCode::type Commit(const std::string& key, int64_t epoch) override;
  void GetPlacement(rpc::Placement& result, const std::string& key) override;
  void RdmaConnect(rpc::RdmaConnectResult& result, const std::string& initiator_node,
                   const rpc::RdmaEndpoint& initiator) override;

 private:
  // Translates a ReplicateConfig; kTierNotFound for an unknown tier name.
  Result<ObjectOptions> ToObjectOptions(const rpc::ReplicateConfig& config) const;
  // `version` and `sender` are an adopt's (WriteMode::kAdopt).
  void StartWrite(rpc::PutStartResult& result, const std::string& key, int64_t size,
                  const rpc::ReplicateConfig& config, WriteMode mode, int64_t version,
                  const std::string& sender);
  void StartWriteUntimed(rpc::PutStartResult& result, const std::string& key, int64_t size,
                         const rpc::ReplicateConfig& config, WriteMode mode, int64_t version,
                         const std::string& sender);
  void OpenForWriteUntimed(rpc::WritePlan& result, const std::string& key, int64_t size,
                           const rpc::ReplicateConfig& config, bool upsert);
  void GetPlacementUntimed(rpc::Placement& result, const std::string& key);
  // Logs a failed put, upsert, put_start or open_for_write at WARN, at most
  // once per second per error code, with the count of lines held back.
  void LogWriteFailure(std::string_view op, const std::string& key, uint64_t size,
                       rpc::ErrorCode::type code);
  // Fills a NOT_OWNER answer with the new owner when this node handed it off.
  void HintMovedKey(rpc::GetResult& result, const std::string& key) const;

  TieredCacheBackend& backend_;
  std::atomic<std::shared_ptr<const std::string>> node_id_;
  RequestMetrics& requests_;
  std::atomic<bool> serving_reads_{false};
  uint64_t placed_bytes_limit_ = UINT64_MAX;
  std::atomic<uint64_t> placed_bytes_{0};  // reserved by live PlacedPuts
  RdmaLink* rdma_ = nullptr;               // set before serving, then read-only
  LogRateLimiter write_failures_{std::chrono::seconds(1)};
};

}  // namespace mooncake
