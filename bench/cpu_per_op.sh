#!/usr/bin/env bash
# CPU time per operation of each process (master, worker, mooncake-bench) for
# mooncake-bench runs against a fresh master + worker: where the time goes
# when the machine is saturated (batch rows, concurrency 16 and 64), which a
# throughput figure does not say. It still moves 10-30% between sittings on
# a small VM: to compare two builds, alternate them and repeat.
#
#   bench/cpu_per_op.sh [MOONCAKE-BENCH ARGS...]
#   e.g. bench/cpu_per_op.sh --value-size 4KiB --batch 16 --concurrency 16
#   BUILD_DIR=/tmp/other/build bench/cpu_per_op.sh ...   # another build
#
# The script sets --keys, --ops and --get-ratio itself (do not pass them).
# Puts: the load phase of PUTS keys (default 200000). Gets: GETS keys
# (default 400000, in calls of --batch keys) over 20,000 keys loaded first, less the CPU of a run that only loads those 20,000. Each run has a
# fresh cluster, the one compare_with_redis.sh starts (DRAM 2 GiB
# prefaulted, SSD 1 GiB, --rpc-engine RPC_ENGINE or threads). Prints, per
# run, the keys and the CPU microseconds per key of the master, the worker,
# the bench (the client) and all three: user + system time, or user time
# alone with TIME=user (steadier: system time carries the machine's
# wake-up and page-fault costs, which vary most between sittings). Every
# wait is bounded and every process is stopped by PID.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
GETS="${GETS:-400000}"
USER_ONLY=0
[ "${TIME:-all}" = "user" ] && USER_ONLY=1
# shellcheck source=bench/bench_cluster.sh
source "$ROOT/bench/bench_cluster.sh" cpu
BENCH_WORKER_ARGS=(--dram-prefault)

# Clock ticks of user + system time a live process has used (user time
# alone with TIME=user).
cpu_ticks() { awk -v user_only="$USER_ONLY" '{print user_only ? $14 : $14 + $15}' "/proc/$1/stat"; }

stop_cluster() {
  kill "$WORKER_PID" "$MASTER_PID" 2>/dev/null || true
  wait "$WORKER_PID" "$MASTER_PID" 2>/dev/null || true
}

# measure NAME BENCH-ARGS...: one bench run on a fresh cluster; prints
# "ops master_ticks worker_ticks bench_ticks" (ticks of user + system time;
# a process's count includes its threads that have exited).
measure() {
  local name="$1"
  shift
  start_bench_cluster "$WORK/$name" cpu-1 --rpc-engine "${RPC_ENGINE:-threads}"
  local master0 worker0 master1 worker1 bench_ticks
  master0="$(cpu_ticks "$MASTER_PID")"
  worker0="$(cpu_ticks "$WORKER_PID")"
  # The bench's own user + system time, from the shell's `times` of a
  # subshell that runs only it.
  bench_ticks="$( (
    timeout 300 "$BUILD_DIR/bench/mooncake-bench" --master "127.0.0.1:$MASTER_PORT" --node cpu-1 \
      --json "$@" >"$WORK/$name.json" 2>"$WORK/$name.err" || {
      echo "mooncake-bench failed: $(tail -n 3 "$WORK/$name.err")" >&2
      exit 1
    }
    times >"$WORK/$name.times"  # not into a pipe: that subshell has no children
    awk -v hz="$(getconf CLK_TCK)" 'NR == 2 {
      split($1, u, /[ms]/); split($2, s, /[ms]/)
      printf "%.0f\n", (u[1] * 60 + u[2] + (user_only ? 0 : s[1] * 60 + s[2])) * hz }' \
      user_only="$USER_ONLY" "$WORK/$name.times"
  ))"
  master1="$(cpu_ticks "$MASTER_PID")"
  worker1="$(cpu_ticks "$WORKER_PID")"
  stop_cluster
  local ops
  ops="$(python3 -c 'import json,sys; print(sum(p["ops"] for p in json.load(open(sys.argv[1]))["phases"] if p["op"] != "all"))' "$WORK/$name.json")"
  echo "$ops $((master1 - master0)) $((worker1 - worker0)) $bench_ticks"
}

# report LABEL OPS MASTER WORKER BENCH (ticks)
report() {
  python3 - "$@" "$(getconf CLK_TCK)" <<'PY'
import sys
label, ops, master, worker, bench, hz = sys.argv[1], *map(float, sys.argv[2:])
us = lambda ticks: ticks / hz * 1e6 / ops
print(f"{label:<5} {ops:>9.0f} {us(master):9.2f} {us(worker):9.2f} {us(bench):9.2f} "
      f"{us(master + worker + bench):9.2f}")
PY
}

printf '%-5s %9s %9s %9s %9s %9s\n' run ops master_us worker_us bench_us total_us
read -r ops m w b <<<"$(measure puts "$@" --keys "${PUTS:-200000}" --get-ratio 1 --ops 1)"
report put "$ops" "$m" "$w" "$b"
# Gets: GETS keys over 20,000, less the load of those 20,000.
read -r lops lm lw lb <<<"$(measure load "$@" --keys 20000 --get-ratio 1 --ops 1)"
batch=1
args=("$@")
for i in "${!args[@]}"; do
  if [ "${args[$i]}" = "--batch" ]; then batch="${args[$((i + 1))]}"; fi
done
read -r ops m w b <<<"$(measure gets "$@" --keys 20000 --get-ratio 1 --ops $((GETS / batch)))"
report get "$((ops - lops))" "$((m - lm))" "$((w - lw))" "$((b - lb))"
