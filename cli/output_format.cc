#include "cli/output_format.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstdint>

#include "cli/cli_args.h"
#include "common/tier_stats_json.h"

namespace mooncake::cli {
namespace {

using nlohmann::json;

// The kind of memory a placement points at, as scripts match it.
const char* MemoryKindName(MemoryRegionHandle::Kind kind) {
  return kind == MemoryRegionHandle::Kind::kHostFile    ? "host_file"
         : kind == MemoryRegionHandle::Kind::kDeviceIpc ? "device_ipc"
                                                        : "none";
}

// One row of the stats tier table; the header uses the same widths.
template <typename... Columns>
std::string TierRow(const Columns&... columns) {
  return fmt::format("  {:<12} {:<5} {:>11} {:>11} {:>9} {:>10} {:>10} {:>10} {:>10}\n",
                     columns...);
}

// One row of the nodes table; the header uses the same widths.
std::string NodeRow(std::string_view id, std::string_view address, std::string_view alive,
                    std::string_view tiers) {
  return fmt::format("{:<16} {:<22} {:<6} {}\n", id, address, alive, tiers);
}

}  // namespace

std::string Base64(std::string_view in) {
  static constexpr char kTable[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t n = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) n |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) n |= static_cast<unsigned char>(in[i + 2]);
    out += kTable[(n >> 18) & 63];
    out += kTable[(n >> 12) & 63];
    out += i + 1 < in.size() ? kTable[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kTable[n & 63] : '=';
  }
  return out;
}

json FailureJson(std::string_view message, ErrorCode code) {
  std::string_view text = message;
  if (text.starts_with("error: ")) text.remove_prefix(7);
  return {{"ok", false},
          {"error", std::string(text)},
          {"code", std::string(ToString(code))},
          {"code_value", static_cast<int32_t>(code)}};
}

json LocalFailureJson(std::string_view message) {
  return {{"ok", false}, {"error", std::string(message)}, {"code", "LOCAL_IO"}};
}

json InspectJson(const std::string& key, const ObjectInspection& o) {
  return {{"ok", true},
          {"key", key},
          {"node_id", o.node_id},
          {"tier", o.tier},
          {"offset", o.offset},
          {"size", o.size},
          {"version", o.version},
          {"hard_pinned", o.hard_pinned},
          {"soft_pinned", o.soft_pinned},
          {"state", o.state},
          {"readers", o.readers},
          {"lease_remaining_ms", o.lease_remaining_ms},
          {"idle_ms", o.idle_ms}};
}

std::string InspectText(const std::string& key, const ObjectInspection& o) {
  std::string pins = o.hard_pinned ? "hard" : o.soft_pinned ? "soft" : "none";
  return fmt::format(
      "key      {}\nowner    {}\ntier     {}\nsize     {} ({} bytes)\nversion  {}\n"
      "pin      {}\nstate    {}\nreaders  {}\nlease    {} ms left\nidle     {} ms\n",
      key, o.node_id, o.tier, FormatBytes(static_cast<uint64_t>(std::max<int64_t>(o.size, 0))),
      o.size, o.version, pins, o.state, o.readers, o.lease_remaining_ms, o.idle_ms);
}

json LocateJson(const std::string& key, const ObjectPlacement& p) {
  return {{"ok", true},
          {"key", key},
          {"node_id", p.node_id},
          {"tier", p.tier},
          {"offset", p.offset},
          {"size", p.size},
          {"version", p.version},
          {"hold_ms", p.hold_ms},
          {"memory",
           {{"kind", MemoryKindName(p.memory.kind)},
            {"path", p.memory.path},
            {"device_index", p.memory.device_index},
            {"region_size", p.memory.region_size},
            {"ipc_handle_bytes", p.memory.ipc_handle.size()}}}};
}

std::string LocateText(const std::string& key, const ObjectPlacement& p) {
  return fmt::format(
      "key      {}\nowner    {}\ntier     {}\noffset   {}\nsize     {} ({} bytes)\n"
      "version  {}\nmemory   {}{}\nheld     {} ms\n",
      key, p.node_id, p.tier, p.offset, FormatBytes(p.size), p.size, p.version,
      MemoryKindName(p.memory.kind), p.memory.path.empty() ? "" : " " + p.memory.path, p.hold_ms);
}

json StatsJson(const WorkerCounters& s) {
  return {{"node_id", s.node_id},
          {"gets", s.gets},
          {"get_misses", s.get_misses},
          {"puts", s.puts},
          {"removes", s.removes},
          {"dropped", s.dropped},
          {"upserts", s.upserts},
          {"prefetch_started", s.prefetch_started},
          {"prefetch_succeeded", s.prefetch_succeeded},
          {"prefetch_failed", s.prefetch_failed},
          {"prefetch_skipped", s.prefetch_skipped},
          {"moved_out", s.moved_out},
          {"moved_in", s.moved_in},
          {"pinned_bytes", s.pinned_bytes},
          {"tiers", TiersJson(s)}};
}

std::string StatsText(const WorkerCounters& s) {
  std::string out =
      fmt::format("node {}: gets {} (misses {}), puts {}, upserts {}, removes {}, dropped {}\n",
                  s.node_id, s.gets, s.get_misses, s.puts, s.upserts, s.removes, s.dropped);
  out += fmt::format(
      "  prefetch: started {}, succeeded {}, failed {}, skipped {}; moved out {}, in {}; "
      "pinned {}\n",
      s.prefetch_started, s.prefetch_succeeded, s.prefetch_failed, s.prefetch_skipped, s.moved_out,
      s.moved_in, FormatBytes(static_cast<uint64_t>(std::max<int64_t>(s.pinned_bytes, 0))));
  out += TierRow("TIER", "KIND", "CAPACITY", "USED", "OBJECTS", "HITS", "PROMOTIONS", "DEMOTIONS",
                 "EVICTIONS");
  for (const auto& t : s.tiers) {
    out += TierRow(t.usage.name, t.usage.kind, FormatBytes(t.usage.capacity),
                   FormatBytes(t.usage.used), t.usage.objects, t.hits, t.promotions_in,
                   t.demotions_out, t.evictions);
  }
  return out;
}

json NodeJson(const NodeRecord& n) {
  json tiers = json::array();
  for (const auto& t : n.tiers) {
    tiers.push_back({{"name", t.name},
                     {"kind", t.kind},
                     {"capacity", t.capacity},
                     {"used", t.used},
                     {"objects", t.objects}});
  }
  json out = {{"node_id", n.node_id},
              {"host", n.host},
              {"port", n.port},
              {"alive", n.alive},
              {"last_heartbeat_ms", n.last_heartbeat_ms},
              {"tiers", tiers}};
  if (!n.alive) out["error"] = "no heartbeat within the master's node TTL: the node is dead";
  return out;
}

std::string NodesText(const std::vector<NodeRecord>& nodes) {
  std::string out = NodeRow("NODE", "ADDRESS", "ALIVE", "TIERS (used/capacity)");
  for (const auto& n : nodes) {
    std::string tiers;
    for (const auto& t : n.tiers) {
      if (!tiers.empty()) tiers += ", ";
      tiers += fmt::format("{} {}/{}", t.name, FormatBytes(t.used), FormatBytes(t.capacity));
    }
    out += NodeRow(n.node_id, n.host + ":" + std::to_string(n.port), n.alive ? "yes" : "no", tiers);
  }
  return out;
}

}  // namespace mooncake::cli
