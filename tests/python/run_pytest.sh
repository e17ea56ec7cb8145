#!/usr/bin/env bash
# ctest PythonPackageTest: installs the `mooncake` Python package into a
# temporary venv the way a user does (`pip install ./python`, offline, with
# only Debian's packages), starts a real mooncake-master and two
# mooncake-worker processes on free ports, and runs the pytest suite in
# tests/python against them. Exit 77 (ctest: skipped) when the extension or
# a Debian package it needs is missing, saying which.
#
#   tests/python/run_pytest.sh --build-dir BUILD --python /usr/bin/python3 \
#       --master BIN --worker BIN --extension PATH [pytest args...]
#
# The install reuses BUILD (MOONCAKE_BUILD_DIR, MOONCAKE_SKIP_BUILD=1): the
# extension was built with the project, so nothing is compiled here.
# Processes get --port 0 --admin-port 0 and report their ports in ready
# files, so a cluster on the default ports may run meanwhile; they are
# stopped by PID when this script exits or is terminated (ctest's timeout
# kills the whole process tree).
# MOONCAKE_IT_KEEP=1 keeps the temp dir (logs, venv).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD_DIR="" PYTHON="/usr/bin/python3" MASTER_BIN="" WORKER_BIN="" EXTENSION=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --python) PYTHON="$2"; shift 2 ;;
    --master) MASTER_BIN="$2"; shift 2 ;;
    --worker) WORKER_BIN="$2"; shift 2 ;;
    --extension) EXTENSION="$2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

skip() { printf 'run_pytest: SKIPPED: %s\n' "$*"; exit 77; }
fail() { printf 'run_pytest: FAIL: %s\n' "$*" >&2; exit 1; }

[ -n "$EXTENSION" ] || skip "the extension was not configured (pybind11-dev or python3-dev missing for $PYTHON; see the CMake log)"
[ -f "$EXTENSION" ] || skip "the extension is not built yet: cmake --build $BUILD_DIR --target mooncake_python"
[ -x "$PYTHON" ] || skip "no interpreter $PYTHON"
for module in venv pytest numpy; do
  "$PYTHON" -c "import $module" 2>/dev/null || skip "$PYTHON lacks $module (Debian: python3-$module)"
done
[ -x "$MASTER_BIN" ] && [ -x "$WORKER_BIN" ] || fail "mooncake-master/mooncake-worker not built"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"

TMP="$(mktemp -d /tmp/mooncake-pytest.XXXXXX)"
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    for log in "$TMP"/*.log; do
      [ -f "$log" ] || continue
      printf -- '---- %s (last 30 lines) ----\n' "$log" >&2
      tail -n 30 "$log" >&2
    done
  fi
  if [ "${MOONCAKE_IT_KEEP:-0}" = 1 ]; then
    echo "run_pytest: kept $TMP"
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# ---- install, as a user would, offline --------------------------------
"$PYTHON" -m venv --system-site-packages "$TMP/venv" >"$TMP/venv.log" 2>&1 ||
  fail "python3 -m venv failed (see $TMP/venv.log)"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# The user's command, `pip install ./python`; setuptools' scratch files go
# to the temp dir rather than python/build.
if ! MOONCAKE_BUILD_DIR="$BUILD_DIR" MOONCAKE_SKIP_BUILD=1 MOONCAKE_SETUP_BUILD_BASE="$TMP/setup" \
    "$TMP/venv/bin/pip" install "$ROOT/python" >"$TMP/pip.log" 2>&1; then
  cat "$TMP/pip.log" >&2
  fail "pip install ./python failed"
fi

# ---- a cluster on free ports -----------------------------------------------
wait_ready() {  # name pid ready-file
  for _ in $(seq 200); do
    if [ -s "$3" ] && [ "$(wc -l <"$3")" -ge 1 ]; then
      head -n1 "$3"
      return 0
    fi
    kill -0 "$2" 2>/dev/null || fail "$1 exited before it was ready (log: $TMP/$1.log)"
    sleep 0.1
  done
  fail "$1 wrote no ready file within 20 s"
}

# --rebuild-ms 0: the master starts before its workers, so there is nothing
# to rebuild; without it the first key calls wait out the 2.5 s window.
"$MASTER_BIN" --host 127.0.0.1 --port 0 --admin-port 0 --rebuild-ms 0 \
  --ready-file "$TMP/master.port" --log-level warn >"$TMP/master.log" 2>&1 &
PIDS+=($!)
MASTER_PORT="$(wait_ready master "${PIDS[-1]}" "$TMP/master.port")" || exit 1

# w1: room for the 100 MiB value in DRAM, and an SSD tier; w2: DRAM only.
start_worker() {  # node-id dram ssd
  local args=(--node-id "$1" --host 127.0.0.1 --port 0 --admin-port 0
              --master "127.0.0.1:$MASTER_PORT" --dram-capacity "$2" --ssd-capacity "$3"
              --heartbeat-interval-ms 200 --ready-file "$TMP/$1.port" --log-level warn)
  [ "$3" != 0 ] && args+=(--ssd-path "$TMP/$1/ssd")
  "$WORKER_BIN" "${args[@]}" >"$TMP/$1.log" 2>&1 &
  PIDS+=($!)
  wait_ready "$1" "${PIDS[-1]}" "$TMP/$1.port" >/dev/null
}
start_worker w1 $((320 << 20)) $((256 << 20))
W1_PID="${PIDS[-1]}"
start_worker w2 $((96 << 20)) 0
W2_PID="${PIDS[-1]}"

# ---- the suite -------------------------------------------------------------
export MOONCAKE_TEST_MASTER="127.0.0.1:$MASTER_PORT"
export MOONCAKE_TEST_NODES="w1,w2"
export MOONCAKE_TEST_WORKER_PIDS="w1=$W1_PID,w2=$W2_PID"
export MOONCAKE_TEST_ROOT="$ROOT"
# Run from the temp dir so `import mooncake` is the installed package, never
# the source tree's python/mooncake.
cd "$TMP"
"$TMP/venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$ROOT/tests/python" \
  "$ROOT/tests/python" "$@"
