#pragma once

// mooncake::Client: the library serving frameworks link to put, get, probe
// and remove objects in the cluster. It asks the master where a key lives,
// talks to the owning worker directly, and moves values larger than one RPC
// (kRpcChunkBytes) in chunks, so objects of any size up to a tier's capacity
// work and no layer holds more than one extra copy of a value.
//
// Thread-safety: a Client is safe to share between threads; connections are
// pooled per node.

#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/node.h"
#include "common/status.h"

namespace mooncake {

struct ClientConfig {
  std::string master_host = "127.0.0.1";
  int master_port = 50051;
  // Node id of the worker on this client's own machine; Put prefers it when
  // no preferred_node is given. Empty: let the master pick by free space.
  std::string local_node;
  int connect_timeout_ms = 2000;
  int io_timeout_ms = 30000;
};

struct PutOptions {
  bool hard_pin = false;
  bool soft_pin = false;
  std::string preferred_node;  // node id; empty lets the client choose
};

// Called with (bytes done, bytes total) as a transfer progresses.
using ProgressFn = std::function<void(uint64_t, uint64_t)>;

struct ObjectValue {
  std::string data;  // binary; std::string because Thrift's binary is one
  int64_t version = 0;
};

// Per-tier counters one worker reports.
struct TierCounters {
  TierUsage usage;
  int64_t hits = 0;
  int64_t promotions_in = 0;
  int64_t demotions_out = 0;
  int64_t evictions = 0;
};

struct WorkerCounters {
  std::string node_id;
  std::vector<TierCounters> tiers;
  int64_t gets = 0;
  int64_t get_misses = 0;
  int64_t puts = 0;
  int64_t removes = 0;
  int64_t dropped = 0;
};

// Placement and state of one object as its owner sees it.
struct ObjectInspection {
  std::string node_id;
  std::string tier;
  int64_t offset = 0;
  int64_t size = 0;
  int64_t version = 0;
  bool hard_pinned = false;
  bool soft_pinned = false;
  std::string state;
  int32_t readers = 0;
  int64_t lease_remaining_ms = 0;
  int64_t idle_ms = 0;
};

class Client {
 public:
  // Connects to the master; kRpcFail if it cannot be reached.
  static Result<std::unique_ptr<Client>> Create(ClientConfig config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Stores a new object. kObjectAlreadyExists if the key has an owner.
  Result<void> Put(std::string_view key, std::string_view value, const PutOptions& options = {});
  // Stores `size` bytes read from `in`, one chunk in memory at a time.
  Result<void> PutStream(std::string_view key, std::istream& in, uint64_t size,
                         const PutOptions& options = {}, const ProgressFn& progress = {});

  Result<ObjectValue> Get(std::string_view key);
  // Writes the object to `out` chunk by chunk; returns its size.
  Result<uint64_t> GetStream(std::string_view key, std::ostream& out,
                             const ProgressFn& progress = {});

  Result<bool> Exist(std::string_view key);
  Result<void> Remove(std::string_view key, bool force = false);

  // One result per item, in input order. One master round trip; one call per
  // owner node, issued in parallel.
  std::vector<Result<void>> BatchPut(
      const std::vector<std::pair<std::string, std::string>>& items,
      const PutOptions& options = {});
  std::vector<Result<ObjectValue>> BatchGet(const std::vector<std::string>& keys);
  std::vector<Result<bool>> BatchExist(const std::vector<std::string>& keys);
  std::vector<Result<void>> BatchRemove(const std::vector<std::string>& keys, bool force = false);

  Result<std::vector<NodeRecord>> ListNodes();
  Result<WorkerCounters> Stats(const std::string& node_id);
  Result<ObjectInspection> Inspect(std::string_view key);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mooncake
