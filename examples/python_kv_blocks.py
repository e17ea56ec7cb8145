#!/usr/bin/env python3
"""KV-cache blocks in Mooncake from Python: store and load numpy blocks in batches.

A serving framework keeps its KV cache in fixed-size blocks, one per layer
and group of tokens: here float16 arrays of shape
[2 (K and V), tokens_per_block, kv_heads, head_dim]. After prefill it stores
each block under a key derived from the token prefix; a later request with
the same prefix probes which blocks exist and loads them straight into its
preallocated buffers. With the `mooncake` package (docs/python.md):

    client.batch_put_from(keys, blocks)       # reads the arrays in place
    client.batch_is_exist(keys)               # 1 / 0 / negative code per key
    client.batch_get_into(keys, buffers)      # fills the arrays in place

Run against a cluster (scripts/local-cluster.sh starts one):

    python3 examples/python_kv_blocks.py --master 127.0.0.1:50051

It checks every loaded block against what was stored, prints the time of
each batch call, removes its keys, and exits 1 on any mismatch or failure.
"""

import argparse
import sys
import time
import uuid

import numpy as np

import mooncake


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", default=None,
                   help="HOST:PORT (default: $MOONCAKE_MASTER, else 127.0.0.1:50051)")
    p.add_argument("--local-node", default="", help="node id of this machine's worker")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--blocks", type=int, default=16, help="blocks per layer")
    p.add_argument("--tokens-per-block", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3, help="timed get rounds")
    return p.parse_args()


def block_keys(prefix, layers, blocks):
    """One key per (layer, block), e.g. 'kv/<request>/L3/B12'."""
    return ["%s/L%d/B%d" % (prefix, layer, block)
            for layer in range(layers) for block in range(blocks)]


def report(what, seconds, count, nbytes):
    print("%-16s %6d blocks %9.1f MiB %8.1f ms %8.0f blocks/s %7.2f GiB/s" % (
        what, count, nbytes / 2**20, seconds * 1e3, count / seconds,
        nbytes / seconds / 2**30))


def main():
    args = parse_args()
    shape = (2, args.tokens_per_block, args.kv_heads, args.head_dim)
    keys = block_keys("kv/" + uuid.uuid4().hex[:12], args.layers, args.blocks)
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal(shape).astype(np.float16) for _ in keys]
    total = sum(b.nbytes for b in blocks)
    print("%d blocks of shape %s float16 (%d KiB each)" % (
        len(keys), shape, blocks[0].nbytes // 1024))

    client = mooncake.Client(master=args.master, local_node=args.local_node)
    try:
        # Store: one batch call, the arrays read in place.
        start = time.perf_counter()
        codes = client.batch_put_from(keys, blocks)
        report("batch_put_from", time.perf_counter() - start, len(keys), total)
        failed = [(k, mooncake.error_name(c)) for k, c in zip(keys, codes) if c != 0]
        if failed:
            print("put failed for %d blocks, first: %s %s" % (len(failed), *failed[0]))
            return 1

        # Probe: a prefix-cache lookup asks which blocks exist.
        start = time.perf_counter()
        present = client.batch_is_exist(keys)
        report("batch_is_exist", time.perf_counter() - start, len(keys), 0)
        if present != [1] * len(keys):
            print("blocks missing after put: %d" % present.count(0))
            return 1

        # Load into preallocated buffers, as a decode node would.
        buffers = [np.empty(shape, dtype=np.float16) for _ in keys]
        for round_ in range(args.rounds):
            start = time.perf_counter()
            sizes = client.batch_get_into(keys, buffers)
            report("batch_get_into", time.perf_counter() - start, len(keys), total)
            if sizes != [b.nbytes for b in blocks]:
                print("get failed: %s" % sorted({mooncake.error_name(s) for s in sizes if s < 0}))
                return 1
        mismatched = sum(not np.array_equal(a, b) for a, b in zip(blocks, buffers))
        if mismatched:
            print("%d blocks differ from what was stored" % mismatched)
            return 1
        print("all %d blocks read back byte-exact" % len(keys))
        return 0
    finally:
        client.batch_remove(keys, force=True)
        client.close()


if __name__ == "__main__":
    sys.exit(main())
