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

// Standard base64 with padding: how `get --json` carries the value.
std::string Base64(std::string_view in);

// The --json answer to a failed call: {"ok":false,"error":MESSAGE,
// "code":"OBJECT_NOT_FOUND","code_value":-704}.
nlohmann::json FailureJson(std::string_view message, ErrorCode code);
// A failure on this machine (a local file): code "LOCAL_IO".
nlohmann::json LocalFailureJson(std::string_view message);

// inspect: where `key` lives and in what state.
nlohmann::json InspectJson(const std::string& key, const ObjectInspection& o);
std::string InspectText(const std::string& key, const ObjectInspection& o);

// locate: the owner's placement of `key`, with its memory region.
nlohmann::json LocateJson(const std::string& key, const ObjectPlacement& p);
std::string LocateText(const std::string& key, const ObjectPlacement& p);

// stats: one worker's counters and a row per tier.
nlohmann::json StatsJson(const WorkerCounters& s);
std::string StatsText(const WorkerCounters& s);

// nodes: one object per node (a dead one with "error"), or a table with a
// header row.
nlohmann::json NodeJson(const NodeRecord& n);
std::string NodesText(const std::vector<NodeRecord>& nodes);

}  // namespace mooncake::cli
