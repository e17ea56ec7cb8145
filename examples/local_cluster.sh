#!/usr/bin/env bash
# A local example cluster: one mooncake-master and three mooncake-workers
# (DRAM + SSD each) on 127.0.0.1, state, logs and PIDs under one directory.
#
#   examples/local_cluster.sh start [DIR]    # default DIR: ./var/example-cluster
#   examples/local_cluster.sh status [DIR]
#   examples/local_cluster.sh stop [DIR]     # stops exactly the recorded PIDs
#
# Environment knobs (defaults in brackets):
#   MASTER_PORT [50051]  WORKER_PORTS ["50061 50062 50063"]
#   DRAM [64MiB]  SSD [256MiB]  BUILD_DIR [./build]  (binaries are built
#   beforehand, e.g. cmake --build build --target mooncake-master mooncake-worker)
# Every wait is bounded: READY_TIMEOUT_S [30] for readiness, STOP_TIMEOUT_S [10]
# before SIGKILL. Exit status 0 on success, 1 on failure (with the log tail).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ACTION="${1:-start}"
DIR="${2:-$ROOT/var/example-cluster}"
MASTER_PORT="${MASTER_PORT:-50051}"
WORKER_PORTS="${WORKER_PORTS:-50061 50062 50063}"
DRAM="${DRAM:-64MiB}"
SSD="${SSD:-256MiB}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
READY_TIMEOUT_S="${READY_TIMEOUT_S:-30}"
STOP_TIMEOUT_S="${STOP_TIMEOUT_S:-10}"

MASTER_BIN="$BUILD_DIR/master/mooncake-master"
WORKER_BIN="$BUILD_DIR/worker/mooncake-worker"

die() {
  printf 'local_cluster: %s\n' "$*" >&2
  exit 1
}

# The PID recorded for NAME if that process is alive and still a mooncake
# binary (PIDs are reused), else nothing.
live_pid() {
  local pidfile="$DIR/$1.pid" pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  # No pipeline here: under pipefail, `tr | grep -q` fails when grep quits early.
  if kill -0 "$pid" 2>/dev/null && grep -qa "mooncake-" "/proc/$pid/cmdline" 2>/dev/null; then
    echo "$pid"
  fi
}

# start_process NAME BIN ARGS...: runs BIN detached, logs to DIR/NAME.log,
# records DIR/NAME.pid and waits for the ready file DIR/NAME.port.
start_process() {
  local name=$1 bin=$2
  shift 2
  local ready="$DIR/$name.port"
  [ -x "$bin" ] || die "$bin is not built (set BUILD_DIR)"
  [ -z "$(live_pid "$name")" ] || die "$name already runs (pid $(live_pid "$name")); stop first"
  rm -f "$ready"
  # setsid + nohup: the process outlives this script and its terminal.
  setsid nohup "$bin" "$@" --ready-file "$ready" >>"$DIR/$name.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$DIR/$name.pid"
  local waited=0
  until [ -s "$ready" ]; do
    # kill -0 on the PID just started, not live_pid: while the child is
    # still exec'ing, /proc/PID/cmdline can read empty, and a healthy start
    # would be reported as a crash.
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$DIR/$name.log" >&2 || true
      die "$name exited during start-up (log: $DIR/$name.log)"
    fi
    if [ "$waited" -ge $((READY_TIMEOUT_S * 10)) ]; then
      tail -n 20 "$DIR/$name.log" >&2 || true
      die "$name not ready after ${READY_TIMEOUT_S}s (log: $DIR/$name.log)"
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
}

worker_names() {
  local i=1
  for _ in $WORKER_PORTS; do
    echo "worker-$i"
    i=$((i + 1))
  done
}

start() {
  mkdir -p "$DIR"
  # Admin (REST) servers take free ports; the second line of each ready file
  # names them.
  start_process master "$MASTER_BIN" --host 127.0.0.1 --port "$MASTER_PORT" --admin-port 0
  echo "master   127.0.0.1:$(head -n 1 "$DIR/master.port") admin 127.0.0.1:$(sed -n 2p "$DIR/master.port") (pid $(cat "$DIR/master.pid"))"
  local i=1 name
  for port in $WORKER_PORTS; do
    name="worker-$i"
    mkdir -p "$DIR/$name"
    if ! start_process "$name" "$WORKER_BIN" --node-id "$name" --host 127.0.0.1 \
      --port "$port" --master "127.0.0.1:$MASTER_PORT" --dram-capacity "$DRAM" \
      --ssd-capacity "$SSD" --ssd-path "$DIR/$name/ssd" --admin-port 0; then
      stop >/dev/null
      exit 1
    fi
    echo "$name 127.0.0.1:$(head -n 1 "$DIR/$name.port") admin 127.0.0.1:$(sed -n 2p "$DIR/$name.port") (pid $(cat "$DIR/$name.pid"))"
    i=$((i + 1))
  done
  echo "export MOONCAKE_MASTER=127.0.0.1:$MASTER_PORT"
}

# stop_process NAME: SIGTERM, bounded wait, then SIGKILL; only the recorded PID.
stop_process() {
  local name=$1 pid waited=0
  pid=$(live_pid "$name")
  rm -f "$DIR/$name.pid" "$DIR/$name.port"
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((STOP_TIMEOUT_S * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    echo "$name (pid $pid) killed after ${STOP_TIMEOUT_S}s"
  else
    echo "$name (pid $pid) stopped"
  fi
}

stop() {
  [ -d "$DIR" ] || return 0
  # Workers first, so they do not spend their last seconds re-registering.
  local name
  for name in $(worker_names); do stop_process "$name"; done
  stop_process master
}

status() {
  local name pid rc=0
  for name in master $(worker_names); do
    pid=$(live_pid "$name")
    if [ -n "$pid" ]; then
      echo "$name running (pid $pid, port $(head -n 1 "$DIR/$name.port" 2>/dev/null || echo '?'))"
    else
      echo "$name not running"
      rc=1
    fi
  done
  return $rc
}

case "$ACTION" in
  start | up) start ;;
  stop | down) stop ;;
  status) status ;;
  *) die "usage: $0 start|status|stop [DIR]" ;;
esac
