#pragma once

// --workload loop: one worker driven the way redis-benchmark drives Redis.
// ONE thread keeps one call in flight on each of --concurrency connections
// to the worker at --worker HOST:PORT and waits for their replies with
// epoll, instead of a blocked thread per call. It measures what the worker
// serves when the client side costs little, which mooncake::Client (a
// blocking call per thread) cannot show on a small machine:
//   load/put    Put of --keys keys of --value-size (the worker claims each
//               at its master, as for any put)
//   mixed/get   Gets of random loaded keys for --duration-s
//   cleanup/remove  Remove of every key (--cleanup only)
// Calls are the generated WorkerService ones on our bounded transport; no
// master is asked, no owner cache, no retries on another node. It is a
// bench of the worker, not a client for applications.
//
// Thread-safety: call from one thread.

#include "bench/bench_options.h"

namespace mooncake::bench {

// Runs the loop workload and prints its report (text or --json). Exit codes
// as the other workloads: 0 when any operation succeeded, 2 for a bad
// --worker, 3 when the worker is unreachable or nothing succeeded.
int RunWorkerLoopBench(const BenchOptions& options);

}  // namespace mooncake::bench
