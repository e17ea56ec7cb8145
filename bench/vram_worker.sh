#!/usr/bin/env bash
# The VRAM tier through a worker, next to DRAM: for each value size, the same
# mooncake-bench run (a load phase of puts, then gets) against a fresh master
# and worker three times: DRAM only; VRAM_CAPACITY of VRAM on top of it; and
# VRAM with --dram-pin-for-vram (the DRAM arena registered with the device).
# `mooncake-bench --workload vram` measures the tier alone; this measures
# what a client sees. The data fits every tier (keys = DATA_BYTES / size), so
# each run reads from its top tier.
#
#   bench/vram_worker.sh [SIZES]     e.g. bench/vram_worker.sh "64KiB 1MiB"
#
# Knobs (environment): SIZES="64KiB 1MiB", VRAM_CAPACITY=4GiB, DATA_BYTES=1GiB,
# CONCURRENCY=16, DURATION_S=5, BUILD_DIR=./build. The worker is the one
# bench/bench_cluster.sh starts (2 GiB of DRAM, 1 GiB of SSD), with
# --dram-prefault in every row, so no row pays the first touch of its arena.
#
# Without a usable GPU the worker runs without the tier and says why; the
# VRAM rows then print that reason instead of figures, and the script still
# exits 0. Every wait is bounded and every process is stopped by PID.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
SIZES="${1:-${SIZES:-64KiB 1MiB}}"
VRAM_CAPACITY="${VRAM_CAPACITY:-4GiB}"
DATA_BYTES="${DATA_BYTES:-1GiB}"
CONCURRENCY="${CONCURRENCY:-16}"
DURATION_S="${DURATION_S:-5}"
RUN_LIMIT_S=$((DURATION_S + 120))
# shellcheck source=bench/bench_cluster.sh
source "$ROOT/bench/bench_cluster.sh" vram-worker

bytes_of() { numfmt --from=iec "${1%iB}"; }

# run_row SIZE TIERS [WORKER ARGS...]: one fresh cluster, one bench run, one row.
run_row() {
  local size="$1" tiers="$2"
  shift 2
  local dir="$WORK/$tiers-$size"
  local keys=$(($(bytes_of "$DATA_BYTES") / $(bytes_of "$size")))
  BENCH_WORKER_ARGS=(--dram-prefault "$@")
  start_bench_cluster "$dir" "vram-$tiers"
  local disabled
  disabled="$(grep -m1 -o 'vram tier disabled.*' "$dir/worker.log" || true)"
  if [ -n "$disabled" ]; then
    printf '%-7s %-11s vram unavailable: %s\n' "$size" "$tiers" "${disabled#*: }"
  elif timeout "$RUN_LIMIT_S" "$BUILD_DIR/bench/mooncake-bench" --master "127.0.0.1:$MASTER_PORT" \
      --node bench-1 --value-size "$size" --keys "$keys" --concurrency "$CONCURRENCY" \
      --get-ratio 1 --duration-s "$DURATION_S" --cleanup --json >"$dir/bench.json" \
      2>"$dir/bench.err"; then
    python3 - "$dir/bench.json" "$size" "$tiers" "$keys" <<'PY'
import json, sys
path, size, tiers, keys = sys.argv[1:]
phases = json.load(open(path))["phases"]
put = next(p for p in phases if p["phase"] == "load" and p["op"] == "put")
get = next(p for p in phases if p["phase"] != "load" and p["op"] == "get")
print(f'{size:<7} {tiers:<11} {keys:>7} {put["ops_per_s"]:>10.0f} {get["ops_per_s"]:>10.0f} '
      f'{get["p50_us"]:>8} {get["p99_us"]:>8} {put["errors"] + get["errors"]:>6}')
PY
  else
    printf '%-7s %-11s bench failed: %s\n' "$size" "$tiers" "$(tail -n1 "$dir/bench.err")"
  fi
  kill "$WORKER_PID" "$MASTER_PID" 2>/dev/null || true
  wait "$WORKER_PID" "$MASTER_PID" 2>/dev/null || true
}

echo "vram through a worker: $CONCURRENCY client threads, ${DURATION_S}s of gets," \
  "$DATA_BYTES of data per size, $VRAM_CAPACITY of VRAM"
printf '%-7s %-11s %7s %10s %10s %8s %8s %6s\n' size tiers keys put/s get/s p50_us p99_us errors
for size in $SIZES; do
  run_row "$size" dram
  run_row "$size" vram --vram-capacity "$VRAM_CAPACITY"
  run_row "$size" vram-pinned --vram-capacity "$VRAM_CAPACITY" --dram-pin-for-vram
done
