#pragma once

// --workload master: drives the master alone, with no worker and no data
// path. It registers --master-nodes fake nodes (heartbeating them while it
// runs), then
//   put_owner     PutOwner of --keys keys, round-robin over the fake nodes;
//                 with --batch N > 1, BatchPutOwner of N keys per call (one
//                 node per call), the fast way to load millions of keys
//   get_location  BatchGetLocation of --location-batch keys per call, once
//                 over every key owned; with --duration-s, pass after pass
//                 for that long
//   remove_owner  RemoveOwner of every key owned (--cleanup only)
// and, with --master-admin, reads the master's RSS from its /metrics before
// and after the puts to report master_bytes_per_key. The fake nodes stay
// registered until the master's node TTL expires them (no RPC unregisters a
// node); they report no tiers, so PickNode never chooses them.
//
// Thread-safety: call from one thread; it starts --concurrency threads and
// joins them before it returns.

#include "bench/bench_options.h"

namespace mooncake::bench {

// Runs the master workload and prints its report (text or --json). Exit
// codes as the cluster workloads: 0 when any operation succeeded, 2 for a
// bad --master, 3 when the master is unreachable or nothing succeeded.
int RunMasterBench(const BenchOptions& options);

}  // namespace mooncake::bench
