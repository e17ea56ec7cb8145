#pragma once

// How mooncake-cli shows what the cluster answered: one JSON object (--json)
// or aligned text, per command. Formatting only; the runner prints.
//
// Thread-safety: pure functions.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "common/node.h"

namespace mooncake::cli {

// Standard base64 with padding, for values that are not valid UTF-8 and so
// cannot travel in a JSON string.
std::string Base64(std::string_view in);

// inspect: where `key` lives and in what state.
nlohmann::json InspectJson(const std::string& key, const ObjectInspection& o);
std::string InspectText(const std::string& key, const ObjectInspection& o);

// locate: the owner's placement of `key`, with its memory region.
nlohmann::json LocateJson(const std::string& key, const ObjectPlacement& p);
std::string LocateText(const std::string& key, const ObjectPlacement& p);

// stats: one worker's counters and a row per tier.
nlohmann::json StatsJson(const WorkerCounters& s);
std::string StatsText(const WorkerCounters& s);

// nodes: one object per node, or a table with a header row.
nlohmann::json NodeJson(const NodeRecord& n);
std::string NodesText(const std::vector<NodeRecord>& nodes);

}  // namespace mooncake::cli
