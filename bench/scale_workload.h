#pragma once

// --workload scale: how the master directory scales with shards
// (docs/scale.md). For each count in --shards it starts that many
// mooncake-master processes on free loopback ports (or uses the running
// masters of --shard-table), splits the 16384 key slots evenly over them
// (common/key_slots.h), and:
//   register   --sim-workers simulated workers RegisterNode with every shard
//              (fake host/port, one DRAM tier)
//   idle       nothing, for half the quiet phase: the masters' CPU at rest;
//              from here on one thread per shard keeps every worker
//              heartbeating every --heartbeat-ms to that shard
//   announce   --keys keys "kv/<run>/w<worker>/<n>", spread over the workers
//              and routed by KeySlot, with AnnounceKeys of <= 8192 keys
//              (4 MiB) per call; each master's RSS before and after gives
//              bytes per key beyond the key text
//   quiet      heartbeats only, for max(--duration-s, two periods): the
//              masters' CPU per 1,000 heartbeats
//   lookup     BatchGetLocation of --location-batch random announced keys,
//              grouped by shard, from --concurrency threads, --duration-s
//   claim      owner claims of new keys for --duration-s: PutOwner, or
//              BatchPutOwner of --batch keys grouped by shard
// then stops the masters it started (by PID) and prints one row per shard
// count: a text table, or JSON with --json.
//
// Thread-safety: call from one thread; it starts and joins its threads.

#include "bench/bench_options.h"

namespace mooncake::bench {

// Runs the scale workload and prints its report. Exit codes: 0 when every
// shard count announced and looked up keys, 2 for a usage error (bad
// --shard-table, no master binary), 3 when a master did not start or a
// phase did nothing.
int RunScaleBench(const BenchOptions& options);

}  // namespace mooncake::bench
