#pragma once

// What the cluster knows about a node: its address and tier usage as last
// reported by heartbeat. Shared by the master's registry and the client.

#include <cstdint>
#include <string>
#include <vector>

namespace mooncake {

struct TierUsage {
  std::string name;
  std::string kind;  // "vram", "dram" or "ssd"
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t objects = 0;
};

struct NodeRecord {
  std::string node_id;
  std::string host;
  int port = 0;
  std::vector<TierUsage> tiers;
  bool alive = true;
  int64_t last_heartbeat_ms = 0;  // wall clock, for display

  uint64_t free_bytes() const {
    uint64_t free = 0;
    for (const auto& t : tiers) free += t.capacity > t.used ? t.capacity - t.used : 0;
    return free;
  }
};

}  // namespace mooncake
