#!/usr/bin/env bash
# Batched calls that span several workers: a fresh master and WORKERS
# workers (default 2) on free ports, keys loaded round-robin over them
# (mooncake-bench --load-nodes), then BatchGet of --batch keys, each call
# reaching every worker. It measures what the one-worker comparison with
# Redis cannot: a batch's per-node calls run in parallel (on the client's
# batch helpers).
#
#   bench/multi_node_batch.sh [MOONCAKE-BENCH ARGS...]
#   e.g. bench/multi_node_batch.sh --batch 16 --concurrency 16
#   WORKERS=4 KEYS=5000 BUILD_DIR=/tmp/other/build bench/multi_node_batch.sh ...
#
# The script sets --master, --load-nodes, --get-ratio 1, --keys (KEYS,
# default 20000), --value-size (VALUE_SIZE, 4KiB) and --duration-s
# (DURATION_S, 4) itself: do not pass them. Each worker is the one
# compare_with_redis.sh starts (2 GiB of DRAM, 1 GiB of SSD). Every wait is
# bounded and every process is stopped by PID.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
WORKERS="${WORKERS:-2}"
KEYS="${KEYS:-20000}"
VALUE_SIZE="${VALUE_SIZE:-4KiB}"
DURATION_S="${DURATION_S:-4}"
# shellcheck source=bench/bench_cluster.sh
source "$ROOT/bench/bench_cluster.sh" multinode

start_bench_cluster "$WORK/w1" node-1
nodes="node-1"
for i in $(seq 2 "$WORKERS"); do
  dir="$WORK/w$i"
  mkdir -p "$dir"
  "$BUILD_DIR/worker/mooncake-worker" --node-id "node-$i" --port 0 --admin-port -1 \
    --master "127.0.0.1:$MASTER_PORT" --dram-capacity 2GiB --ssd-capacity 1GiB \
    --ssd-path "$dir/ssd" --kv-lease-ttl-ms 0 --ready-file "$dir/worker.port" \
    >"$dir/worker.log" 2>&1 &
  PIDS+=("$!")
  wait_for_file "$dir/worker.port"
  nodes="$nodes,node-$i"
done

"$BUILD_DIR/bench/mooncake-bench" --master "127.0.0.1:$MASTER_PORT" --keys "$KEYS" \
  --value-size "$VALUE_SIZE" --duration-s "$DURATION_S" --get-ratio 1 --load-nodes "$nodes" "$@"
