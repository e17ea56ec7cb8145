#pragma once

// The JSON of a worker's tiers, one schema for `mooncake-cli stats --json`
// and the master's admin API (GET /workers/{id}/stats). A template because
// the CLI holds the client's WorkerCounters and the master the Thrift
// rpc::WorkerStats: their tiers have the same fields, and a field added to
// one then shows in both.

#include <nlohmann/json.hpp>

namespace mooncake {

template <typename Stats>
nlohmann::json TiersJson(const Stats& stats) {
  nlohmann::json tiers = nlohmann::json::array();
  for (const auto& t : stats.tiers) {
    tiers.push_back({{"name", t.usage.name},
                     {"kind", t.usage.kind},
                     {"capacity", t.usage.capacity},
                     {"used", t.usage.used},
                     {"objects", t.usage.objects},
                     {"hits", t.hits},
                     {"promotions_in", t.promotions_in},
                     {"demotions_out", t.demotions_out},
                     {"evictions", t.evictions}});
  }
  return tiers;
}

}  // namespace mooncake
