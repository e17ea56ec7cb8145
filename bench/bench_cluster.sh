# Sourced by the bench scripts (bash): a work directory removed at exit,
# processes stopped by PID at exit, bounded waits, and the cluster the
# scripts measure: one master and one worker on free ports, the worker with
# 2 GiB of DRAM and 1 GiB of SSD.
#
#   source "$ROOT/bench/bench_cluster.sh" NAME   # WORK=/tmp/mooncake-NAME-XXXXXX
#   start_bench_cluster DIR NODE_ID [ARGS...]    # ARGS go to master and worker
#
# BUILD_DIR must be set before start_bench_cluster.

WORK="$(mktemp -d "/tmp/mooncake-$1-XXXXXX")"
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_for_file() {
  for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2
  return 1
}

# start_bench_cluster DIR NODE_ID [ARGS...]: starts a master, then a worker
# NODE_ID whose SSD and logs are under DIR, both with ARGS (--rpc-engine,
# TLS files; a worker-only flag such as --dram-prefault goes in
# BENCH_WORKER_ARGS, a master-only one in BENCH_MASTER_ARGS). Sets
# MASTER_PID, WORKER_PID, MASTER_PORT, WORKER_PORT.
start_bench_cluster() {
  local dir="$1" node="$2"
  shift 2
  mkdir -p "$dir"
  # --rebuild-ms 0: the master starts before its worker, so it has no keys to
  # wait for, and the measurement must not begin in its rebuild window
  # (key calls answer NOT_LEADER for 2.5 s after a start by default).
  "$BUILD_DIR/master/mooncake-master" --port 0 --admin-port -1 --ready-file "$dir/master.port" \
    --rebuild-ms 0 "${BENCH_MASTER_ARGS[@]}" "$@" >"$dir/master.log" 2>&1 &
  MASTER_PID=$!
  PIDS+=("$MASTER_PID")
  wait_for_file "$dir/master.port"
  MASTER_PORT="$(head -n1 "$dir/master.port")"
  "$BUILD_DIR/worker/mooncake-worker" --node-id "$node" --port 0 --admin-port -1 \
    --master "127.0.0.1:$MASTER_PORT" --dram-capacity 2GiB --ssd-capacity 1GiB \
    --ssd-path "$dir/ssd" --kv-lease-ttl-ms 0 --ready-file "$dir/worker.port" \
    "${BENCH_WORKER_ARGS[@]}" "$@" >"$dir/worker.log" 2>&1 &
  WORKER_PID=$!
  PIDS+=("$WORKER_PID")
  wait_for_file "$dir/worker.port"
  WORKER_PORT="$(head -n1 "$dir/worker.port")"
}
