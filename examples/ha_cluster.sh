#!/usr/bin/env bash
# A highly available cluster on this machine (docs/ha.md): one etcd, three
# mooncake-master processes that elect a leader in etcd, three workers that
# find and follow the leader there. State and logs under DATA_DIR.
#
#   examples/ha_cluster.sh up        # start etcd, 3 masters, 3 workers
#   examples/ha_cluster.sh status    # who runs, who leads, what the leader sees
#   examples/ha_cluster.sh failover  # kill -9 the leader, time the takeover, restart it
#   examples/ha_cluster.sh down      # stop everything (by recorded PIDs)
#
# Then, for example:
#   build/cli/mooncake-cli --etcd http://127.0.0.1:23790 put hello world
#   build/cli/mooncake-cli --etcd http://127.0.0.1:23790 get hello
#
# Environment knobs (defaults in brackets):
#   ETCD_PORT [23790]  ETCD_PEER_PORT [23800]  CLUSTER [mooncake]
#   MASTER_PORTS ["50151 50152 50153"]  WORKER_PORTS ["50161 50162 50163"]
#   DRAM [128MiB] per worker (no SSD tier)  DATA_DIR [./var/ha]
#   BUILD_DIR [./build] (binaries must be built: see README "Build")
#   ETCD_BIN [etcd from PATH or /usr/bin/etcd]
# Admin (REST) servers get free ports; `status` shows them.
# `up` checks every port it needs first and, if a process fails to come up,
# stops the ones it started (processes already running are left alone).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/pid_file.sh
source "$ROOT/scripts/lib/pid_file.sh"
ETCD_PORT="${ETCD_PORT:-23790}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-23800}"
CLUSTER="${CLUSTER:-mooncake}"
read -r -a MASTER_PORTS <<<"${MASTER_PORTS:-50151 50152 50153}"
read -r -a WORKER_PORTS <<<"${WORKER_PORTS:-50161 50162 50163}"
DRAM="${DRAM:-128MiB}"
# Absolute: live_pid matches paths under it in the processes' command lines.
DATA_DIR="$(realpath -m -- "${DATA_DIR:-$ROOT/var/ha}")"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
ETCD_BIN="${ETCD_BIN:-$(command -v etcd || echo /usr/bin/etcd)}"
MASTER_BIN="$BUILD_DIR/master/mooncake-master"
WORKER_BIN="$BUILD_DIR/worker/mooncake-worker"
ETCD_URL="http://127.0.0.1:$ETCD_PORT"
LEADER_KEY="/mooncake/$CLUSTER/leader"
READY_TIMEOUT_S=30
STOP_TIMEOUT_S=10

log() { printf '==> %s\n' "$*"; }
die() { printf 'ha_cluster: %s\n' "$*" >&2; exit 1; }

# The argument only NAME's process in this DATA_DIR has: its ready file, or
# for etcd its data directory.
own_arg() {
  if [ "$1" = etcd ]; then echo "$DATA_DIR/etcd"; else echo "$DATA_DIR/$1.port"; fi
}

# pid of a recorded process if it is still alive and still ours (one of its
# arguments is own_arg NAME; PIDs are reused), else empty.
live_pid() { pid_if_ours "$DATA_DIR/$1.pid" "$(own_arg "$1")"; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The leader's RPC address as etcd holds it (empty: none).
leader() {
  curl -s -X POST "$ETCD_URL/v3/kv/range" \
    -d "{\"key\":\"$(printf '%s' "$LEADER_KEY" | base64 -w0)\"}" |
    python3 -c 'import base64,json,sys
kvs=json.load(sys.stdin).get("kvs",[])
print(base64.b64decode(kvs[0]["value"]).decode() if kvs else "")' 2>/dev/null || true
}

# start NAME READY BIN ARGS...: BIN in the background, logging to NAME.log.
start() {
  local name=$1 ready=$2 bin=$3
  shift 3
  rm -f "$ready"
  printf '=== %s: starting %s %s ===\n' "$(date -Is)" "$bin" "$*" >>"$DATA_DIR/$name.log"
  nohup "$bin" "$@" >>"$DATA_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DATA_DIR/$name.pid"
}

# wait_ready NAME CHECK: polls CHECK (a command) until it succeeds; returns 1
# (after the log tail) when NAME exits or is not ready in time.
wait_ready() {
  local name=$1 check=$2 waited=0 pid
  pid=$(cat "$DATA_DIR/$name.pid")
  until eval "$check"; do
    # kill -0, not live_pid: right after the fork the child may not have
    # exec'd its binary yet.
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$DATA_DIR/$name.log" >&2 || true
      printf 'ha_cluster: %s exited during start-up (log %s)\n' "$name" "$DATA_DIR/$name.log" >&2
      return 1
    fi
    if [ "$waited" -ge $((READY_TIMEOUT_S * 10)) ]; then
      tail -n 20 "$DATA_DIR/$name.log" >&2 || true
      printf 'ha_cluster: %s not ready after %ss (log %s)\n' "$name" "$READY_TIMEOUT_S" "$DATA_DIR/$name.log" >&2
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
}

start_master() {
  local i=$1 name="master-$1"
  start "$name" "$DATA_DIR/$name.port" "$MASTER_BIN" --host 127.0.0.1 \
    --port "${MASTER_PORTS[$((i - 1))]}" --admin-port 0 --ready-file "$DATA_DIR/$name.port" \
    --etcd "$ETCD_URL" --cluster-name "$CLUSTER"
  wait_ready "$name" "[ -s '$DATA_DIR/$name.port' ]" || return 1
  log "$name running (pid $(live_pid "$name"), rpc ${MASTER_PORTS[$((i - 1))]})"
}

start_worker() {
  local i=$1 name="worker-$1"
  start "$name" "$DATA_DIR/$name.port" "$WORKER_BIN" --node-id "$name" --host 127.0.0.1 \
    --port "${WORKER_PORTS[$((i - 1))]}" --admin-port 0 --ready-file "$DATA_DIR/$name.port" \
    --dram-capacity "$DRAM" --ssd-capacity 0 --etcd "$ETCD_URL" --cluster-name "$CLUSTER"
  wait_ready "$name" "[ -s '$DATA_DIR/$name.port' ]" || return 1
  log "$name running (pid $(live_pid "$name"), rpc ${WORKER_PORTS[$((i - 1))]})"
}

# The processes this `up` started, so that a failure stops just those.
STARTED=()
rollback() {
  trap - EXIT INT TERM
  echo "ha_cluster: up failed; stopping what it started" >&2
  local j
  for ((j = ${#STARTED[@]} - 1; j >= 0; j--)); do
    stop_one "${STARTED[$j]}" >&2 || true
  done
  exit 1
}

cmd_up() {
  [ -x "$ETCD_BIN" ] || die "etcd not found (apt-get install etcd-server, or scripts/install-deps.sh)"
  [ -x "$MASTER_BIN" ] && [ -x "$WORKER_BIN" ] || die "build the binaries first (README \"Build\")"
  command -v curl >/dev/null 2>&1 || die "curl not found (apt-get install curl, or scripts/install-deps.sh)"
  mkdir -p "$DATA_DIR"
  # Every port of a process that is not running yet, before starting any.
  local i port
  if [ -z "$(live_pid etcd)" ]; then
    for port in "$ETCD_PORT" "$ETCD_PEER_PORT"; do
      ! port_in_use "$port" || die "port $port is busy; set ETCD_PORT / ETCD_PEER_PORT"
    done
  fi
  for i in 1 2 3; do
    port=${MASTER_PORTS[$((i - 1))]:-}
    [ -n "$port" ] || die "MASTER_PORTS needs 3 ports"
    [ -n "$(live_pid "master-$i")" ] || ! port_in_use "$port" || die "port $port (master-$i) is busy; set MASTER_PORTS"
    port=${WORKER_PORTS[$((i - 1))]:-}
    [ -n "$port" ] || die "WORKER_PORTS needs 3 ports"
    [ -n "$(live_pid "worker-$i")" ] || ! port_in_use "$port" || die "port $port (worker-$i) is busy; set WORKER_PORTS"
  done
  trap rollback EXIT INT TERM
  if [ -z "$(live_pid etcd)" ]; then
    local peer="http://127.0.0.1:$ETCD_PEER_PORT"
    STARTED+=(etcd)
    start etcd "" "$ETCD_BIN" --name ha --data-dir "$DATA_DIR/etcd" \
      --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
      --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
      --initial-cluster "ha=$peer"
    wait_ready etcd "curl -sf '$ETCD_URL/health' >/dev/null" || rollback
    log "etcd running (pid $(live_pid etcd), $ETCD_URL, data $DATA_DIR/etcd)"
  fi
  for i in 1 2 3; do
    [ -n "$(live_pid "master-$i")" ] && continue
    STARTED+=("master-$i")
    start_master "$i" || rollback
  done
  for i in 1 2 3; do
    [ -n "$(live_pid "worker-$i")" ] && continue
    STARTED+=("worker-$i")
    start_worker "$i" || rollback
  done
  trap - EXIT INT TERM
  cat <<USAGE

HA cluster is up: etcd $ETCD_URL, cluster "$CLUSTER", leader $(leader).
  export MOONCAKE_ETCD=$ETCD_URL
  ${BUILD_DIR#"$ROOT"/}/cli/mooncake-cli put hello world
  ${BUILD_DIR#"$ROOT"/}/cli/mooncake-cli get hello
  $0 failover    # kill -9 the leader and watch a standby take over
USAGE
}

cmd_status() {
  local name pid
  for name in etcd master-1 master-2 master-3 worker-1 worker-2 worker-3; do
    pid=$(live_pid "$name")
    if [ -n "$pid" ]; then
      printf '%-9s running  pid %-7s %s\n' "$name" "$pid" \
        "$( [ -f "$DATA_DIR/$name.port" ] && printf 'rpc %s admin %s' \
          "$(sed -n 1p "$DATA_DIR/$name.port")" "$(sed -n 2p "$DATA_DIR/$name.port")")"
    else
      printf '%-9s stopped\n' "$name"
    fi
  done
  if [ -n "$(live_pid etcd)" ]; then
    printf 'leader    %s\n' "$(leader)"
  fi
}

# Kills the leader with SIGKILL, prints how long until another master holds
# the leader key, and restarts the killed master as a standby.
cmd_failover() {
  local old i victim="" started now
  old=$(leader)
  [ -n "$old" ] || die "no leader in etcd"
  for i in 1 2 3; do
    [ "127.0.0.1:${MASTER_PORTS[$((i - 1))]}" = "$old" ] && victim=$i
  done
  [ -n "$victim" ] || die "leader $old is not one of this script's masters"
  local old_b64 range
  old_b64=$(printf '%s' "$old" | base64 -w0)
  started=$(date +%s.%N)
  kill -KILL "$(live_pid "master-$victim")"
  log "killed master-$victim ($old) with SIGKILL"
  for _ in $(seq 1 400); do
    # Cheap check (curl only): a leader key whose value is not the old one.
    range=$(curl -s -X POST "$ETCD_URL/v3/kv/range" \
      -d "{\"key\":\"$(printf '%s' "$LEADER_KEY" | base64 -w0)\"}")
    if [[ "$range" == *'"kvs"'* && "$range" != *"\"$old_b64\""* ]]; then
      now=$(leader)
      log "new leader $now after $(python3 -c "print(round($(date +%s.%N) - $started, 2))") s"
      start_master "$victim" || die "could not restart master-$victim as a standby"
      return 0
    fi
    sleep 0.02
  done
  die "no new leader within 10 s"
}

stop_one() {
  local name=$1 pid waited=0
  pid=$(live_pid "$name")
  [ -n "$pid" ] || { rm -f "$DATA_DIR/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((STOP_TIMEOUT_S * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$DATA_DIR/$name.pid" "$DATA_DIR/$name.port"
  log "$name stopped (pid $pid)"
}

cmd_down() {
  local name
  for name in worker-1 worker-2 worker-3 master-1 master-2 master-3 etcd; do
    stop_one "$name"
  done
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  failover) cmd_failover ;;
  *) echo "usage: $0 up|status|failover|down" >&2; exit 2 ;;
esac
