#!/usr/bin/env bash
# Local mode: one mooncake-master and one mooncake-worker (DRAM + SSD tiers)
# on this machine, state and logs under ./var.
#
#   ./scripts/local-cluster.sh up       # default: install deps, build, start
#   ./scripts/local-cluster.sh status   # running and answering? what does the master see
#   ./scripts/local-cluster.sh down     # stop them (by their recorded PIDs)
#   ./scripts/local-cluster.sh down NAME...  # stop only these (master, worker-1)
#   ./scripts/local-cluster.sh ready    # the ports answer /readyz 200, whoever
#                                       # runs there (this checkout or another)
#
# `up` records the settings it used in var/cluster.env; `status`, `down` and a
# later `up` use those while the recorded cluster runs, so the knobs below
# need not be repeated. `status` exits 0 only when both processes run and
# answer GET /readyz on their admin ports (and `mooncake-cli nodes` works);
# 1 when either is not running, 2 when both run but one does not answer.
# `up` returns once both answer /readyz 200 (at most 15 s: the master answers
# 503 for its 2.5 s rebuild window after each start), so `status` and the
# first mooncake-cli call right after it succeed; 2 if they did not get ready.
#
# `up` builds (into BUILD_DIR, the tree scripts/test.sh uses) everything the
# README uses except the tests: the binaries, mooncake-bench, the C++ examples
# and the Python bindings build/examples/gen-py.
#
# Environment knobs (defaults in brackets):
#   MASTER_PORT [50051]  MASTER_ADMIN_PORT [50050]  (master RPC / REST admin)
#   WORKER_PORT [50061]  WORKER_ADMIN_PORT [50060]  (worker RPC / REST admin)
#   NODE_ID [worker-1]  DRAM [256MiB]  SSD [1GiB]
#   BUILD_DIR [./build]  BUILD_TYPE [RelWithDebInfo]
#   SKIP_DEPS=1 (skip scripts/install-deps.sh)  SKIP_BUILD=1 (use existing binaries)
set -euo pipefail

# pwd -P: the --ready-file paths that identify our processes (live_pid) must
# be spelt the same whichever path (symlink or not) the script is run by.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
# shellcheck source=scripts/lib/pid_file.sh
source "$ROOT/scripts/lib/pid_file.sh"
cd "$ROOT"

# Settings `up` records (var/cluster.env) and the other commands re-use, and
# those of them this environment sets (before defaults apply).
SETTINGS=(MASTER_PORT WORKER_PORT MASTER_ADMIN_PORT WORKER_ADMIN_PORT NODE_ID DRAM SSD BUILD_DIR)
ENV_SET=()
for _k in "${SETTINGS[@]}"; do [ -z "${!_k+x}" ] || ENV_SET+=("$_k"); done

MASTER_PORT="${MASTER_PORT:-50051}"
WORKER_PORT="${WORKER_PORT:-50061}"
MASTER_ADMIN_PORT="${MASTER_ADMIN_PORT:-50050}"
WORKER_ADMIN_PORT="${WORKER_ADMIN_PORT:-50060}"
NODE_ID="${NODE_ID:-worker-1}"
DRAM="${DRAM:-256MiB}"
SSD="${SSD:-1GiB}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
# Same build type as scripts/test.sh, so the two share one build tree.
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
VAR="$ROOT/var"
ENV_FILE="$VAR/cluster.env"
READY_TIMEOUT_S=30
READYZ_TIMEOUT_S=15
STOP_TIMEOUT_S=10

log() { printf '==> %s\n' "$*"; }
die() { printf 'local-cluster: %s\n' "$*" >&2; exit 1; }

set_bins() {
  MASTER_BIN="$BUILD_DIR/master/mooncake-master"
  WORKER_BIN="$BUILD_DIR/worker/mooncake-worker"
  CLI_BIN="$BUILD_DIR/cli/mooncake-cli"
}
set_bins

# pid of a recorded process if it is still alive and still ours, else empty.
# PIDs are reused, so "ours" means: one of its arguments is the ready file
# this script gave it (var/NAME.port of this checkout), which nothing else has.
live_pid() { pid_if_ours "$VAR/$1.pid" "$VAR/$1.port"; }

# Names with a PID file under var/: workers first, master last.
recorded_names() {
  local f name
  for f in "$VAR"/*.pid; do
    [ -f "$f" ] || continue
    name=${f##*/}
    name=${name%.pid}
    [ "$name" = master ] || echo "$name"
  done
  [ ! -f "$VAR/master.pid" ] || echo master
}

# True when a process recorded under var/ still runs.
any_live() {
  local name
  for name in $(recorded_names); do
    [ -z "$(live_pid "$name")" ] || return 0
  done
  return 1
}

write_settings() {
  local k tmp="$ENV_FILE.tmp"
  {
    echo "# Written by scripts/local-cluster.sh up; read by status, down and up."
    for k in "${SETTINGS[@]}"; do printf '%s=%q\n' "$k" "${!k}"; done
  } >"$tmp"
  mv -f "$tmp" "$ENV_FILE"
}

# The recorded settings replace the environment's while the recorded cluster
# still runs (and always for status, which describes that cluster). With
# `up`, a knob the environment sets differently is named, not applied.
load_settings() {
  local mode=$1 k
  [ -f "$ENV_FILE" ] || return 0
  if [ "$mode" = up ] && ! any_live; then
    return 0
  fi
  local -A before=()
  for k in "${SETTINGS[@]}"; do before[$k]=${!k}; done
  # shellcheck disable=SC1090
  . "$ENV_FILE"
  if [ "$mode" = up ]; then
    for k in "${ENV_SET[@]}"; do
      if [ "${before[$k]}" != "${!k}" ]; then
        log "note: the running cluster was started with $k=${!k} (not ${before[$k]}); keeping it. Run down first to change it."
      fi
    done
  fi
  set_bins
}

port_in_use() {
  # Something accepts connections on 127.0.0.1:$1.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

build() {
  if [ "${SKIP_DEPS:-0}" != "1" ]; then
    "$ROOT/scripts/install-deps.sh"
  fi
  if [ "${SKIP_BUILD:-0}" = "1" ]; then
    return
  fi
  local cache="$BUILD_DIR/CMakeCache.txt"
  if [ ! -f "$cache" ]; then
    log "configuring $BUILD_DIR ($BUILD_TYPE)"
    local launcher=()
    command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${launcher[@]}"
  fi
  # Everything the README's later sections use; the test suites are left
  # to scripts/test.sh.
  local targets=(mooncake-master mooncake-worker mooncake-cli mooncake-bench
    mooncake-client-example mooncake-zero-copy-example mooncake-python-gen)
  log "building ${targets[*]}"
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${targets[@]}"
}

# start NAME BIN ARGS...: runs BIN in the background, logs to var/NAME.log,
# records var/NAME.pid and waits for var/NAME.port (the ready file).
start() {
  local name=$1 bin=$2
  shift 2
  local ready="$VAR/$name.port"
  rm -f "$ready"
  [ -x "$bin" ] || die "$bin not built (run without SKIP_BUILD=1)"
  printf '=== %s: starting %s %s ===\n' "$(date -Is)" "$bin" "$*" >>"$VAR/$name.log"
  nohup "$bin" "$@" --ready-file "$ready" >>"$VAR/$name.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$VAR/$name.pid"
  local waited=0
  while [ ! -s "$ready" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "local-cluster: $name exited during start-up; last lines of $VAR/$name.log:" >&2
      tail -n 30 "$VAR/$name.log" >&2 || true
      rm -f "$VAR/$name.pid"
      return 1
    fi
    if [ "$waited" -ge $((READY_TIMEOUT_S * 10)) ]; then
      echo "local-cluster: $name not ready after ${READY_TIMEOUT_S}s; last lines of $VAR/$name.log:" >&2
      tail -n 30 "$VAR/$name.log" >&2 || true
      stop_one "$name"
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  log "$name running (pid $pid, $(ports_of "$name"), log $VAR/$name.log)"
}

# Admin port of NAME: line 2 of its ready file, else the configured one.
admin_port_of() {
  local admin
  admin=$(sed -n 2p "$VAR/$1.port" 2>/dev/null || true)
  [[ "$admin" =~ ^[0-9]+$ ]] || admin=$2
  echo "$admin"
}

# Whether NAME answers GET /readyz with 200 within 3 s (complaint on stderr).
answers() {
  local name=$1 admin=$2 url
  [ "$admin" = -1 ] && return 0 # no admin server (-1): `mooncake-cli nodes` checks it below
  url="http://127.0.0.1:$admin/readyz"
  if ! command -v curl >/dev/null 2>&1; then
    return 0 # checked by `mooncake-cli nodes` below instead
  fi
  if curl -sf -m 3 -o /dev/null "$url"; then
    return 0
  fi
  echo "$name: not ready: GET $url did not answer 200 within 3 s" >&2
  return 1
}

# Whether GET /readyz on 127.0.0.1:ADMIN answers 200 (within 1 s); curl if
# there is one, else bash's /dev/tcp.
readyz_ok() {
  local admin=$1
  if command -v curl >/dev/null 2>&1; then
    curl -sf -m 1 -o /dev/null "http://127.0.0.1:$admin/readyz"
    return
  fi
  # shellcheck disable=SC2016 # $1 is the inner shell's
  timeout 1 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
    IFS=" " read -r _ code _ <&3 && [ "$code" = 200 ]' _ "$admin" 2>/dev/null
}

# Waits until the master and the worker answer /readyz 200, for at most
# READYZ_TIMEOUT_S: a master answers 503 ("rebuilding") for its rebuild
# window (--rebuild-ms, 2.5 s) after every start, and the worker until it
# registered. False (with the one still not ready on stderr) after that.
wait_until_ready() {
  local name admin deadline=$((SECONDS + READYZ_TIMEOUT_S))
  for name in master "$NODE_ID"; do
    if [ "$name" = master ]; then
      admin=$(admin_port_of master "$MASTER_ADMIN_PORT")
    else
      admin=$(admin_port_of "$name" "$WORKER_ADMIN_PORT")
    fi
    [ "$admin" = -1 ] && continue # no admin server to ask
    until readyz_ok "$admin"; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "local-cluster: $name does not answer GET http://127.0.0.1:$admin/readyz with 200 after ${READYZ_TIMEOUT_S}s; see var/$name.log and ./scripts/local-cluster.sh status" >&2
        return 1
      fi
      sleep 0.1
    done
  done
  log "master and $NODE_ID ready (/readyz 200)"
}

# "rpc 50051, admin 50050" from NAME's ready file (line 1: RPC port, line 2:
# admin port, -1 when disabled).
ports_of() {
  local ready="$VAR/$1.port" rpc admin
  rpc=$(sed -n 1p "$ready" 2>/dev/null || true)
  admin=$(sed -n 2p "$ready" 2>/dev/null || true)
  case "$admin" in
    -1) admin=off ;;
    "") admin='?' ;;
  esac
  printf 'rpc %s, admin %s' "${rpc:-?}" "$admin"
}

stop_one() {
  local name=$1 pid
  pid=$(live_pid "$name")
  if [ -z "$pid" ]; then
    rm -f "$VAR/$name.pid"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((STOP_TIMEOUT_S * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "local-cluster: $name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT_S}s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$VAR/$name.pid" "$VAR/$name.port"
  log "$name stopped (pid $pid)"
}

# After a failed start: forget the settings unless something still runs.
up_failed() {
  any_live || rm -f "$ENV_FILE"
  exit 1
}

cmd_up() {
  load_settings up
  local m w
  m=$(live_pid master)
  w=$(live_pid "$NODE_ID")
  if [ -n "$m" ] && [ -n "$w" ]; then
    log "already running"
    cmd_status
    return
  fi
  # Check the ports before building or starting anything.
  if [ -z "$m" ] && port_in_use "$MASTER_PORT"; then
    die "port $MASTER_PORT (master) is busy; stop what uses it or set MASTER_PORT"
  fi
  if [ -z "$m" ] && port_in_use "$MASTER_ADMIN_PORT"; then
    die "port $MASTER_ADMIN_PORT (master admin) is busy; stop what uses it or set MASTER_ADMIN_PORT"
  fi
  if [ -z "$w" ] && port_in_use "$WORKER_PORT"; then
    die "port $WORKER_PORT (worker) is busy; stop what uses it or set WORKER_PORT"
  fi
  if [ -z "$w" ] && port_in_use "$WORKER_ADMIN_PORT"; then
    die "port $WORKER_ADMIN_PORT (worker admin) is busy; stop what uses it or set WORKER_ADMIN_PORT"
  fi
  build
  mkdir -p "$VAR/$NODE_ID/ssd"
  write_settings
  if [ -z "$m" ]; then
    start master "$MASTER_BIN" --host 127.0.0.1 --port "$MASTER_PORT" \
      --admin-port "$MASTER_ADMIN_PORT" || up_failed
  fi
  if [ -z "$w" ]; then
    start "$NODE_ID" "$WORKER_BIN" --node-id "$NODE_ID" --host 127.0.0.1 \
      --port "$WORKER_PORT" --admin-port "$WORKER_ADMIN_PORT" --master "127.0.0.1:$MASTER_PORT" \
      --dram-capacity "$DRAM" --ssd-capacity "$SSD" --ssd-path "$VAR/$NODE_ID/ssd" ||
      { [ -n "$m" ] || stop_one master; up_failed; } # only a master this up started
  fi
  # The master keeps its default rebuild window (a re-run `up` may start it
  # beside a live worker whose keys it must wait for), so wait it out here:
  # "up" means the CLI's first call and `status` succeed at once. Both keep
  # running if they do not get ready; `status` (exit 2) and the logs tell why.
  wait_until_ready || exit 2
  cat <<USAGE

Local cluster is up: master 127.0.0.1:$MASTER_PORT, worker $NODE_ID 127.0.0.1:$WORKER_PORT
(DRAM $DRAM, SSD $SSD under var/$NODE_ID/ssd).
  master: $(ports_of master)
  $NODE_ID: $(ports_of "$NODE_ID")
REST admin (/health, /stats, /metrics): master http://127.0.0.1:$MASTER_ADMIN_PORT,
worker http://127.0.0.1:$WORKER_ADMIN_PORT. Try:

  export MOONCAKE_MASTER=127.0.0.1:$MASTER_PORT
  ${CLI_BIN#"$ROOT"/} put hello "world"
  ${CLI_BIN#"$ROOT"/} get hello
  ${CLI_BIN#"$ROOT"/} put weights --file /path/to/file
  ${CLI_BIN#"$ROOT"/} get weights -o /tmp/weights.copy
  ${CLI_BIN#"$ROOT"/} exist hello        # prints 1, exit 0 (0 and exit 1 if absent)
  ${CLI_BIN#"$ROOT"/} remove hello
  ${CLI_BIN#"$ROOT"/} nodes
  ${CLI_BIN#"$ROOT"/} stats --node $NODE_ID

Logs: var/master.log, var/$NODE_ID.log.  Stop with: ./scripts/local-cluster.sh down
USAGE
}

# Stops every process recorded under var/ that is still ours (workers first),
# whatever NODE_ID says now; with names, only those (.ci/run stops just the
# half of a cluster it started), and the settings stay while any runs.
cmd_down() {
  [ -d "$VAR" ] || { log "nothing to stop"; return 0; }
  local name
  if [ "$#" -gt 0 ]; then
    for name in "$@"; do
      # A name is a file name under var/ (a node id may hold a colon).
      [[ -n "$name" && "$name" != */* && "$name" != .* ]] || die "down: '$name' is not a process name"
      stop_one "$name"
    done
    any_live || rm -f "$ENV_FILE"
    return 0
  fi
  for name in $(recorded_names); do stop_one "$name"; done
  rm -f "$ENV_FILE"
}

# Exit 0 when the master's and the worker's admin ports answer GET /readyz
# with 200, whichever checkout (or person) started them: .ci/run runs beside
# a cluster it finds there instead of failing on busy ports.
cmd_ready() {
  load_settings status
  readyz_ok "$(admin_port_of master "$MASTER_ADMIN_PORT")" &&
    readyz_ok "$(admin_port_of "$NODE_ID" "$WORKER_ADMIN_PORT")"
}

cmd_status() {
  load_settings status
  local rc=0 name pid
  for name in master "$NODE_ID"; do
    pid=$(live_pid "$name")
    if [ -n "$pid" ]; then
      echo "$name: running (pid $pid, $(ports_of "$name"))"
    else
      echo "$name: not running"
      rc=1
    fi
  done
  [ "$rc" -eq 0 ] || return "$rc"
  # Running but not answering is 2, told apart from not running (1): .ci/run
  # must not take a developer's wedged cluster for none and stop it after.
  answers master "$(admin_port_of master "$MASTER_ADMIN_PORT")" || rc=2
  answers "$NODE_ID" "$(admin_port_of "$NODE_ID" "$WORKER_ADMIN_PORT")" || rc=2
  local master_rpc
  master_rpc=$(sed -n 1p "$VAR/master.port" 2>/dev/null || true)
  [[ "$master_rpc" =~ ^[0-9]+$ ]] || master_rpc=$MASTER_PORT
  if [ "$rc" -eq 0 ] && [ -x "$CLI_BIN" ]; then
    # Bounded: a wedged master would hold `nodes` for its 30 s RPC timeout.
    timeout 10 "$CLI_BIN" --master "127.0.0.1:$master_rpc" nodes || rc=2
  fi
  return "$rc"
}

case "${1:-up}" in
  up) cmd_up ;;
  down | stop) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  ready) cmd_ready ;;
  -h | --help | help) sed -n '2,/^[^#]/{/^#/p}' "$0" ;;
  *) die "unknown command '$1' (use up, down, status or ready)" ;;
esac
