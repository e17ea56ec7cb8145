#!/usr/bin/env bash
# A local example cluster: one mooncake-master and three mooncake-workers
# (DRAM + SSD each) on 127.0.0.1, state, logs and PIDs under one directory.
#
#   examples/local_cluster.sh start [DIR]    # default DIR: ./var/example-cluster
#   examples/local_cluster.sh status [DIR]
#   examples/local_cluster.sh stop [DIR]     # stops exactly the recorded PIDs
#
# stop and status go by the PID files in DIR (DIR/*.pid), so they need neither
# the WORKER_PORTS nor the MASTER_PORT that start was given. start checks every
# port first and, if any process fails to come up, stops what it started.
#
# Environment knobs (defaults in brackets):
#   MASTER_PORT [50051]  WORKER_PORTS ["50061 50062 50063"]
#   DRAM [64MiB]  SSD [256MiB]  BUILD_DIR [./build]  (binaries are built
#   beforehand, e.g. cmake --build build --target mooncake-master mooncake-worker)
# Every wait is bounded: READY_TIMEOUT_S [30] for readiness, STOP_TIMEOUT_S [10]
# before SIGKILL. Exit status 0 on success, 1 on failure (with the log tail).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/pid_file.sh
source "$ROOT/scripts/lib/pid_file.sh"
ACTION="${1:-start}"
# Absolute, so the --ready-file paths in the processes' command lines (what
# live_pid matches) are the same whatever directory stop is run from.
DIR="$(realpath -m -- "${2:-$ROOT/var/example-cluster}")"
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

# The PID recorded for NAME if that process is alive and still ours, else
# nothing. PIDs are reused, so "ours" means: one of its arguments is this
# cluster's ready file for NAME (DIR/NAME.port), which no other process has.
live_pid() { pid_if_ours "$DIR/$1.pid" "$DIR/$1.port"; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Names with a PID file in DIR: workers in numeric order, master last (the
# order stop uses).
recorded_names() {
  local f names=()
  for f in "$DIR"/*.pid; do
    [ -f "$f" ] || continue
    f=${f##*/}
    [ "${f%.pid}" = master ] || names+=("${f%.pid}")
  done
  [ ${#names[@]} -eq 0 ] || printf '%s\n' "${names[@]}" | sort -V
  [ ! -f "$DIR/master.pid" ] || echo master
}

# start_process NAME BIN ARGS...: runs BIN detached, logs to DIR/NAME.log,
# records DIR/NAME.pid and waits for the ready file DIR/NAME.port. Returns 1
# (after showing the log tail) when it exits or is not ready in time; the
# caller stops it and the others.
start_process() {
  local name=$1 bin=$2
  shift 2
  local ready="$DIR/$name.port"
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
      printf 'local_cluster: %s exited during start-up (log: %s)\n' "$name" "$DIR/$name.log" >&2
      return 1
    fi
    if [ "$waited" -ge $((READY_TIMEOUT_S * 10)) ]; then
      tail -n 20 "$DIR/$name.log" >&2 || true
      printf 'local_cluster: %s not ready after %ss (log: %s)\n' "$name" "$READY_TIMEOUT_S" "$DIR/$name.log" >&2
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
}

# Until start has brought every process up, leaving the script (a failed
# start, an error, Ctrl-C) stops whatever it had started.
rollback() {
  trap - EXIT INT TERM
  echo "local_cluster: start failed; stopping what it started" >&2
  stop >&2 || true
  exit 1
}

start() {
  [ -x "$MASTER_BIN" ] || die "$MASTER_BIN is not built (set BUILD_DIR)"
  [ -x "$WORKER_BIN" ] || die "$WORKER_BIN is not built (set BUILD_DIR)"
  [ -n "${WORKER_PORTS// /}" ] || die "WORKER_PORTS is empty"
  local name pid
  if [ -d "$DIR" ]; then
    while read -r name; do
      pid=$(live_pid "$name")
      [ -z "$pid" ] || die "$name already runs in $DIR (pid $pid); stop first"
    done < <(recorded_names)
  fi
  # Every port before anything starts, so a busy one leaves nothing behind.
  local port
  for port in "$MASTER_PORT" $WORKER_PORTS; do
    ! port_in_use "$port" || die "port $port is busy; set MASTER_PORT / WORKER_PORTS"
  done
  mkdir -p "$DIR"
  # Only stale (dead) PID files can be left here; clear them, so that the
  # rollback and a later stop see just this start's processes.
  rm -f "$DIR"/*.pid
  trap rollback EXIT INT TERM
  # Admin (REST) servers take free ports; the second line of each ready file
  # names them. --rebuild-ms 0: start refuses to run beside any live process
  # of DIR, so the master always starts before its workers and has no keys
  # to wait for; it serves at once instead of answering NOT_LEADER for the
  # default 2.5 s. Keep the default for a master that may be restarted under
  # live workers (a supervisor's restart uses the same flags).
  start_process master "$MASTER_BIN" --host 127.0.0.1 --port "$MASTER_PORT" --admin-port 0 \
    --rebuild-ms 0 || rollback
  echo "master   127.0.0.1:$(head -n 1 "$DIR/master.port") admin 127.0.0.1:$(sed -n 2p "$DIR/master.port") (pid $(cat "$DIR/master.pid"))"
  local i=1
  for port in $WORKER_PORTS; do
    name="worker-$i"
    mkdir -p "$DIR/$name"
    start_process "$name" "$WORKER_BIN" --node-id "$name" --host 127.0.0.1 \
      --port "$port" --master "127.0.0.1:$MASTER_PORT" --dram-capacity "$DRAM" \
      --ssd-capacity "$SSD" --ssd-path "$DIR/$name/ssd" --admin-port 0 || rollback
    echo "$name 127.0.0.1:$(head -n 1 "$DIR/$name.port") admin 127.0.0.1:$(sed -n 2p "$DIR/$name.port") (pid $(cat "$DIR/$name.pid"))"
    i=$((i + 1))
  done
  trap - EXIT INT TERM
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

# Every process with a PID file in DIR, whatever WORKER_PORTS says now.
stop() {
  [ -d "$DIR" ] || return 0
  # Workers first (recorded_names puts master last), so they do not spend
  # their last seconds re-registering.
  local name
  for name in $(recorded_names); do stop_process "$name"; done
}

status() {
  local name pid rc=0 names
  names=$(recorded_names)
  if [ -z "$names" ]; then
    echo "nothing recorded in $DIR (not started, or stopped)"
    return 1
  fi
  grep -qx master <<<"$names" || { echo "master not recorded"; rc=1; }
  # Master first here, then the workers.
  for name in $(grep -x master <<<"$names") $(grep -vx master <<<"$names"); do
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
