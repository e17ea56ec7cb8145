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

  // Free bytes over all tiers. Saturates at UINT64_MAX: a node reports each
  // tier's size (up to INT64_MAX over Thrift), and a sum that wrapped would
  // make the node with the most room look nearly full.
  uint64_t free_bytes() const {
    uint64_t free = 0;
    for (const auto& t : tiers) {
      uint64_t tier_free = t.capacity > t.used ? t.capacity - t.used : 0;
      free = tier_free > UINT64_MAX - free ? UINT64_MAX : free + tier_free;
    }
    return free;
  }
};

}  // namespace mooncake
