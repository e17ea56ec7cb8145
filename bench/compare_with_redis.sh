#!/usr/bin/env bash
# Measures mooncake-bench and redis-benchmark in one sitting, on loopback, for
# the same value sizes and concurrency, so the two are comparable:
#
#   bench/compare_with_redis.sh [SIZES] [CONCURRENCY]
#   e.g. bench/compare_with_redis.sh "4KiB 1MiB" 16
#   LOCATION_CACHE=0 bench/compare_with_redis.sh   # every read asks the master
#   TLS=1 bench/compare_with_redis.sh              # mooncake with mutual TLS on
#                                                  # every hop (throwaway CA)
#
# It starts its own master + one worker (DRAM only large enough for the data,
# SSD tier as usual) and its own redis-server (no persistence), each on free
# ports under a temp dir, and stops them by PID at the end. Binaries come from
# BUILD_DIR [./build]; redis-server/redis-tools are installed from Debian if
# missing. Every wait is bounded.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZES="${1:-4KiB 1MiB}"
CONCURRENCY="${2:-16}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
DURATION_S="${DURATION_S:-5}"
WORK="$(mktemp -d /tmp/mooncake-compare-XXXXXX)"
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_for_file() {
  for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2; return 1
}

# With TLS=1 every mooncake process presents a certificate of a throwaway CA.
TLS_ARGS=()
SYSTEM=mooncake
if [ "${TLS:-0}" = "1" ]; then
  ossl() { openssl "$@" >/dev/null 2>&1; }
  ossl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bench-ca \
    -keyout "$WORK/ca.key" -out "$WORK/ca.crt"
  ossl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$WORK/node.key" \
    -out "$WORK/node.csr"
  ossl x509 -req -in "$WORK/node.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" \
    -CAcreateserial -days 1 -out "$WORK/node.crt"
  SYSTEM=mooncake+tls
  TLS_ARGS=(--tls-cert "$WORK/node.crt" --tls-key "$WORK/node.key" --tls-ca "$WORK/ca.crt")
fi

"$BUILD_DIR/master/mooncake-master" --port 0 --admin-port -1 --ready-file "$WORK/master.port" \
  "${TLS_ARGS[@]}" >"$WORK/master.log" 2>&1 &
PIDS+=($!)
wait_for_file "$WORK/master.port"
MASTER_PORT="$(head -n1 "$WORK/master.port")"
"$BUILD_DIR/worker/mooncake-worker" --node-id bench-1 --port 0 --admin-port -1 \
  --master "127.0.0.1:$MASTER_PORT" --dram-capacity 2GiB --ssd-capacity 1GiB \
  --ssd-path "$WORK/ssd" --kv-lease-ttl-ms 0 --ready-file "$WORK/worker.port" \
  "${TLS_ARGS[@]}" >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
wait_for_file "$WORK/worker.port"

REDIS_PORT="$(free_port)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --protected-mode yes >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

BENCH="$BUILD_DIR/bench/mooncake-bench"
printf '%-8s %-10s %-6s %12s %10s %10s %10s\n' size system op ops/s p50_us p99_us MB/s
for size in $SIZES; do
  bytes="$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(KiB|MiB)?', '$size'); print(int(m[1])*{None:1,'KiB':1024,'MiB':1048576}[m[2]])")"
  keys=$(( bytes >= 1048576 ? 400 : 20000 ))
  # mooncake: load phase = puts; mixed phase with --get-ratio 1 = gets.
  "$BENCH" --master "127.0.0.1:$MASTER_PORT" --node bench-1 --value-size "$size" --keys "$keys" \
    --concurrency "$CONCURRENCY" --get-ratio 1 --duration-s "$DURATION_S" --cleanup --json \
    --location-cache-entries "${LOCATION_CACHE:-65536}" "${TLS_ARGS[@]}" \
    >"$WORK/mooncake-$size.json"
  python3 - "$WORK/mooncake-$size.json" "$size" "$SYSTEM" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
for phase in data["phases"]:
    name = {"load/put": "put", "mixed/get": "get"}.get(f'{phase["phase"]}/{phase["op"]}')
    if name:
        print(f'{sys.argv[2]:<8} {sys.argv[3]:<10} {name:<6} {phase["ops_per_s"]:12.0f} '
              f'{phase["p50_us"]:10.0f} {phase["p99_us"]:10.0f} {phase["mb_per_s"]:10.1f}')
PY
  requests=$(( bytes >= 1048576 ? 4000 : 200000 ))
  redis-benchmark -p "$REDIS_PORT" -c "$CONCURRENCY" -n "$requests" -d "$bytes" -r "$keys" \
    -t set,get --csv >"$WORK/redis-$size.csv"
  python3 - "$WORK/redis-$size.csv" "$size" "$bytes" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
header, body = rows[0], rows[1:]
col = {name: i for i, name in enumerate(header)}
for row in body:
    op = row[0].lower()
    rps = float(row[col["rps"]])
    p50 = float(row[col["p50_latency_ms"]]) * 1000
    p99 = float(row[col["p99_latency_ms"]]) * 1000
    mbps = rps * int(sys.argv[3]) / 1e6
    print(f'{sys.argv[2]:<8} {"redis":<10} {op:<6} {rps:12.0f} {p50:10.0f} {p99:10.0f} {mbps:10.1f}')
PY
done
