#pragma once

// PeerTransfer over Thrift: streams an object to another worker (AdoptStart,
// PutChunk, AdoptEnd), then asks the master to swap the owner. DESIGN.md,
// "Inter-node eviction", steps 1-3; the backend does step 4 (free the copy).
//
// Thread-safety: Transfer may run from several threads; worker channels are
// cached under mu_ and are themselves thread-safe.

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "worker/master_link.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {

// Steps at which a test may have the sending worker die (kill -9), to check
// that a move interrupted anywhere never loses the key's data.
enum class CrashPoint { kNone, kAfterAdopt, kAfterHandOver };

Result<CrashPoint> ParseCrashPoint(std::string_view text);

class ThriftPeerTransfer : public PeerTransfer {
 public:
  ThriftPeerTransfer(MasterLink& master, CrashPoint crash_point = CrashPoint::kNone);
  ~ThriftPeerTransfer() override;

  Result<std::string> Transfer(const std::string& key, uint64_t size, uint64_t version,
                               const ObjectOptions& options, const ObjectReader& read,
                               const std::string& target, bool dram_only) override;

 private:
  struct WorkerChannel;
  std::shared_ptr<WorkerChannel> Channel(const NodeRecord& node);
  Result<void> SendTo(WorkerChannel& channel, const std::string& key, uint64_t size,
                      uint64_t version, const ObjectOptions& options, const ObjectReader& read,
                      bool dram_only);
  void MaybeCrash(CrashPoint point) const;

  MasterLink& master_;
  const CrashPoint crash_point_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<WorkerChannel>> channels_;  // guarded by mu_
};

}  // namespace mooncake
