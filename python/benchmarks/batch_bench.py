#!/usr/bin/env python3
"""Python batch put/get throughput, to set beside `mooncake-bench --batch`.

    python3 python/benchmarks/batch_bench.py --master 127.0.0.1:50051 \\
        --value-size 65536 --keys 2048 --batch 64

Puts --keys objects of --value-size bytes in batches of --batch
(batch_put_from, numpy arrays read in place), then reads them all back
--rounds times with batch_get_into (into preallocated arrays) and with
batch_get (new bytes objects). Reports keys/s, MiB/s and the mean and p99
latency of one batch call, one line per call; --json prints the same as
JSON. Removes its keys at the end. Single-threaded, as one serving process
issuing batch calls would be.
"""

import argparse
import json
import sys
import time
import uuid

import numpy as np

import mooncake


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().rstrip("ib").rstrip("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def timed_batches(call, batches):
    """Runs call(batch) for each batch; latencies in seconds."""
    latencies = []
    for batch in batches:
        start = time.perf_counter()
        call(batch)
        latencies.append(time.perf_counter() - start)
    return latencies


def summary(name, latencies, keys, value_size):
    total = sum(latencies)
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "call": name,
        "keys": keys,
        "keys_per_s": keys / total,
        "mib_per_s": keys * value_size / total / 2**20,
        "batch_mean_ms": total / len(latencies) * 1e3,
        "batch_p99_ms": p99 * 1e3,
    }


def check(results, ok, what):
    bad = [r for r in results if not ok(r)]
    if bad:
        raise SystemExit("%s failed for %d keys, e.g. %r" % (what, len(bad), bad[0]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", default=None)
    p.add_argument("--node", default="", help="local node id (put target)")
    p.add_argument("--value-size", default="65536")
    p.add_argument("--keys", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    size = parse_size(args.value_size)

    prefix = "pybench/" + uuid.uuid4().hex[:12]
    keys = ["%s/%d" % (prefix, i) for i in range(args.keys)]
    batches = [list(range(i, min(i + args.batch, args.keys)))
               for i in range(0, args.keys, args.batch)]
    rng = np.random.default_rng(0)
    values = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(args.keys)]
    buffers = [np.empty(size, dtype=np.uint8) for _ in range(args.keys)]

    client = mooncake.Client(master=args.master, local_node=args.node)
    rows = []
    try:
        def put(b):
            check(client.batch_put_from([keys[i] for i in b], [values[i] for i in b]),
                  lambda r: r == 0, "batch_put_from")

        def get_into(b):
            check(client.batch_get_into([keys[i] for i in b], [buffers[i] for i in b]),
                  lambda r: r == size, "batch_get_into")

        def get(b):
            check(client.batch_get([keys[i] for i in b]),
                  lambda r: isinstance(r, bytes), "batch_get")

        rows.append(summary("batch_put_from", timed_batches(put, batches), args.keys, size))
        for name, call in (("batch_get_into", get_into), ("batch_get", get)):
            latencies = []
            for _ in range(args.rounds):
                latencies += timed_batches(call, batches)
            rows.append(summary(name, latencies, args.keys * args.rounds, size))
        if not all(np.array_equal(a, b) for a, b in zip(values, buffers)):
            raise SystemExit("batch_get_into read back different bytes")
    finally:
        client.batch_remove(keys, force=True)
        client.close()

    if args.json:
        print(json.dumps({"value_size": size, "batch": args.batch, "results": rows}, indent=2))
        return 0
    print("value size %d B, %d keys, batch %d" % (size, args.keys, args.batch))
    for r in rows:
        print("%-15s %10.0f keys/s %9.1f MiB/s  batch mean %7.2f ms  p99 %7.2f ms" % (
            r["call"], r["keys_per_s"], r["mib_per_s"], r["batch_mean_ms"], r["batch_p99_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
