#include "bench/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace mooncake::bench {
namespace {

using nlohmann::json;

void PrintHeader(const BenchOptions& o, const std::string& run) {
  std::printf(
      "mooncake-bench workload=%s master=%s value_size=%llu keys=%llu concurrency=%d batch=%llu "
      "get_ratio=%.2f zipf_theta=%.2f hot_cache_bytes=%llu run=%s\n",
      o.workload.c_str(), o.master.c_str(), static_cast<unsigned long long>(o.value_size),
      static_cast<unsigned long long>(o.keys), o.concurrency,
      static_cast<unsigned long long>(o.batch), o.get_ratio, o.zipf_theta,
      static_cast<unsigned long long>(o.hot_cache_bytes), run.c_str());
}

void PrintRows(std::vector<PhaseRow>& rows) {
  // ops are keys; latencies are per call (one key per call unless --batch).
  std::printf("%-8s %-18s %10s %12s %12s %10s %9s %9s %9s %8s\n", "phase", "op", "ops", "ops/s",
              "calls/s", "MB/s", "p50_us", "p99_us", "p999_us", "errors");
  for (auto& row : rows) {
    Summary s = Summarize(row);
    std::printf("%-8s %-18s %10llu %12.1f %12.1f %10.1f %9u %9u %9u %8llu\n", row.phase.c_str(),
                row.op.c_str(), static_cast<unsigned long long>(s.ops), s.ops_per_s, s.calls_per_s,
                s.mb_per_s, s.p50, s.p99, s.p999, static_cast<unsigned long long>(s.errors));
  }
  // The "all" row repeats the get and put rows' errors; list them once.
  for (const auto& row : rows) {
    if (row.op != "all" && !row.stats.errors.empty()) {
      std::printf("errors %s/%s: %s\n", row.phase.c_str(), row.op.c_str(),
                  ErrorBreakdown(row.stats).c_str());
    }
  }
}

void PrintExtras(const json& extra) {
  if (extra.contains("hot_cache")) {
    const json& h = extra["hot_cache"];
    std::printf(
        "hot cache: hit ratio %.3f (hits %llu, misses %llu, validations %llu, stale %llu, "
        "%llu entries)\n",
        h["hit_ratio"].get<double>(), h["hits"].get<unsigned long long>(),
        h["misses"].get<unsigned long long>(), h["validations"].get<unsigned long long>(),
        h["stale"].get<unsigned long long>(), h["entries"].get<unsigned long long>());
  }
  if (extra.contains("transport")) {
    const json& t = extra["transport"];
    std::printf("transport: rdma %s (%s), rdma gets %llu, rdma bytes %llu, fallbacks %llu\n",
                t["rdma_enabled"].get<bool>() ? "enabled" : "disabled",
                t["rdma_reason"].get<std::string>().c_str(),
                t["rdma_gets"].get<unsigned long long>(), t["rdma_bytes"].get<unsigned long long>(),
                t["rdma_fallbacks"].get<unsigned long long>());
  }
  if (extra.contains("rpc_polls")) {
    const json& p = extra["rpc_polls"];
    std::printf(
        "rpc polls (--rpc-poll-us %d): %llu replies came while polling, %llu polls ran out, "
        "%llu waits found no spare CPU\n",
        p["poll_us"].get<int>(), p["data"].get<unsigned long long>(),
        p["expired"].get<unsigned long long>(), p["busy"].get<unsigned long long>());
  }
  if (extra.contains("async")) {
    const json& a = extra["async"];
    std::printf(
        "async: gets %llu on pipelined connections, %llu the ordinary way; puts %llu in %llu "
        "batches\n",
        a["gets_pipelined"].get<unsigned long long>(), a["gets_slow"].get<unsigned long long>(),
        a["puts"].get<unsigned long long>(), a["put_batches"].get<unsigned long long>());
  }
  if (extra.contains("combined")) {
    const json& c = extra["combined"];
    std::printf("combined: gets %llu in %llu shared calls; puts %llu in %llu shared calls\n",
                c["gets"].get<unsigned long long>(), c["get_batches"].get<unsigned long long>(),
                c["puts"].get<unsigned long long>(), c["put_batches"].get<unsigned long long>());
  }
  if (extra.contains("groups"))
    std::printf("prefetch groups: %s\n", extra["groups"].dump().c_str());
  if (extra.contains("master")) {
    const json& m = extra["master"];
    std::printf("master: %d fake nodes, %llu keys per BatchGetLocation, avg key %.1f bytes\n",
                m["nodes"].get<int>(), m["location_batch"].get<unsigned long long>(),
                m["avg_key_bytes"].get<double>());
    if (extra.contains("master_bytes_per_key") && extra["master_bytes_per_key"].is_number()) {
      std::printf("master_bytes_per_key: %.1f (rss %llu -> %llu bytes)\n",
                  extra["master_bytes_per_key"].get<double>(),
                  m["rss_before"].get<unsigned long long>(),
                  m["rss_after"].get<unsigned long long>());
    } else {
      std::printf("master_bytes_per_key: skipped (%s)\n", m["rss_note"].get<std::string>().c_str());
    }
  }
  if (extra.contains("prefetch_counters")) {
    std::printf("worker prefetch counters (delta): %s\n",
                extra["prefetch_counters"].dump().c_str());
  }
}

json PhaseJson(PhaseRow& row) {
  Summary s = Summarize(row);
  json codes = json::object();
  for (const auto& [code, count] : row.stats.errors) codes[std::string(ToString(code))] = count;
  // ops and ops_per_s count keys (as keys_per_s); calls and the latency
  // percentiles are per client call.
  return {{"phase", row.phase},       {"op", row.op},
          {"seconds", row.seconds},   {"ops", s.ops},
          {"ops_per_s", s.ops_per_s}, {"keys_per_s", s.ops_per_s},
          {"calls", s.calls},         {"calls_per_s", s.calls_per_s},
          {"mb_per_s", s.mb_per_s},   {"bytes", row.stats.bytes},
          {"p50_us", s.p50},          {"p99_us", s.p99},
          {"p999_us", s.p999},        {"errors", s.errors},
          {"error_codes", codes}};
}

json ConfigJson(const BenchOptions& o, const std::string& run) {
  return {{"master", o.master},
          {"value_size", o.value_size},
          {"keys", o.keys},
          {"concurrency", o.concurrency},
          {"batch", o.batch},
          {"get_ratio", o.get_ratio},
          {"duration_s", o.duration_s},
          {"ops", o.ops},
          {"workload", o.workload},
          {"zipf_theta", o.zipf_theta},
          {"hot_cache_bytes", o.hot_cache_bytes},
          {"location_cache_bytes", o.location_cache_bytes},
          {"rpc_poll_us", o.rpc_poll_us},
          {"rdma", o.rdma},
          {"prefetch_wait_ms", o.prefetch_wait_ms},
          {"run_prefix", run}};
}

}  // namespace

void PrintText(const BenchOptions& options, const std::string& run, std::vector<PhaseRow>& rows,
               const json& extra) {
  PrintHeader(options, run);
  PrintRows(rows);
  PrintExtras(extra);
}

json ReportJson(const BenchOptions& options, const std::string& run, std::vector<PhaseRow>& rows,
                const json& extra) {
  json phases = json::array();
  for (auto& row : rows) phases.push_back(PhaseJson(row));
  json out = {{"config", ConfigJson(options, run)}, {"phases", phases}};
  for (const auto& [name, value] : extra.items()) out[name] = value;
  return out;
}

void PrintJson(const BenchOptions& options, const std::string& run, std::vector<PhaseRow>& rows,
               const json& extra) {
  std::cout << ReportJson(options, run, rows, extra).dump(2) << std::endl;
}

int Report(const BenchOptions& options, const std::string& run, std::vector<PhaseRow>& rows,
           const nlohmann::json& extra) {
  if (options.json) {
    PrintJson(options, run, rows, extra);
  } else {
    PrintText(options, run, rows, extra);
  }
  bool any_success = std::any_of(rows.begin(), rows.end(),
                                 [](const PhaseRow& r) { return !r.stats.latencies_us.empty(); });
  return any_success ? 0 : 3;
}

}  // namespace mooncake::bench
