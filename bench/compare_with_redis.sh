#!/usr/bin/env bash
# Measures mooncake-bench and redis-benchmark in one sitting, on loopback, for
# the same value sizes, concurrency and batching, and prints ONE table: per
# size x concurrency x mode (single calls, or batches of N keys) and per
# operation, each system's ops/s (keys/s for batches), p50 and p99, and
# mooncake's throughput as a ratio of Redis's in this same run. Then it drives
# a fresh master alone (mooncake-bench --workload master) and prints its
# PutOwner and BatchGetLocation rates and its memory per key.
#
#   bench/compare_with_redis.sh [SIZES] [CONCURRENCY]
#   e.g. bench/compare_with_redis.sh "4KiB 1MiB" "1 16"
#   QUICK=1 bench/compare_with_redis.sh            # small subset, under a minute
#   LOCATION_CACHE=0 bench/compare_with_redis.sh   # every read asks the master
#   TLS=1 bench/compare_with_redis.sh              # mooncake with mutual TLS on
#                                                  # every hop (throwaway CA)
#
# Knobs (environment; the positional arguments win over SIZES/CONCURRENCY):
#   SIZES="4KiB 64KiB 1MiB 4MiB"  value sizes
#   CONCURRENCY="1 16 64"         client threads (mooncake) / connections (redis)
#   BATCHES="16 64"               keys per call of the batch rows ...
#   BATCH_SIZES="4KiB"            ... run for these sizes only ("" = no batch rows)
#   LOOP_SIZES="4KiB"             worker-alone rows (--workload loop: one
#                                 client thread, epoll) for these sizes, each
#                                 of them also in SIZES ("" = none)
#   ASYNC_SIZES="4KiB"            rows of Client::PutAsync and GetAsync
#                                 (mooncake-bench --async: CONCURRENCY calls
#                                 in flight from completions, no thread per
#                                 call) for these sizes, each of them also in
#                                 SIZES ("" = none)
#   DURATION_S=5                  mooncake get phase length
#   REPEAT=1                      runs of each row's pair (mooncake, then
#                                 Redis right after it). With more, a row
#                                 shows the median of each figure, its ratio
#                                 is the median of the pairs' own ratios, and
#                                 a last column gives their lowest-highest:
#                                 a pair shares a sitting, which on a small VM
#                                 moves both systems by 10-25% (3 is enough
#                                 to tell a row's side from the noise)
#   MASTER_KEYS=100000            keys of the master-only workload (0 = skip it)
#   SCALE_KEYS=1000000            keys of the many-keys get row, next to 20,000
#                                 (0 = skip it; QUICK=1 skips it by default)
#   LOCATION_CACHE=256MiB (client owner cache), TLS=0, BUILD_DIR=./build
#   PREFAULT=1                    the worker runs with --dram-prefault (its
#                                 arena resident before ready, as Redis's
#                                 memory is warm after its first pass over
#                                 the keys); 0 measures a cold arena
#   RPC_ENGINE=threads            the master's and worker's --rpc-engine
#   RPC_POLL_US=30                --rpc-poll-us of the worker and
#                                 mooncake-bench (0: every wait sleeps)
#   MASTER_RPC_POLL_US=200        the master's --rpc-poll-us (its default)
#   COMBINED_IN_FLIGHT=0          mooncake-bench --combined-calls-in-flight:
#                                 shared Put/Get calls out at once (0: one
#                                 per four CPUs, the client's default)
#
# Batch rows: mooncake --batch N (BatchPut of N keys per call in the load
# phase, BatchGet of N in the get phase) against redis-benchmark -P N
# (pipelined SET/GET, N requests per round trip). mooncake's p50/p99 there are
# per call of N keys; redis-benchmark's are per request as it reports them
# (about one pipeline round trip each). Both use five times the keys and
# requests of a single row, so that a batch row's put phase lasts about as
# long as a single row's.
#
# Both sides start each row from a known keyspace: mooncake-bench --cleanup
# removes its keys after every run, and before every redis-benchmark run the
# script empties Redis (FLUSHALL) and writes every key the row will read
# (key:000000000000 .. key:<keys-1>, each of the row's value size) outside
# the timed run. redis-benchmark -r K picks a random key per request, so its
# own SET phase leaves about e^-(requests/keys) of them unwritten (8% at the
# 1 MiB and 4 MiB rows): without this their GETs read a smaller value left
# by an earlier row, or nil, and flattered Redis by up to about 10%.
#
# Both sides connect before their clock starts: redis-benchmark opens all
# its clients first, and mooncake-bench makes one untimed call per thread
# (shaped as the load phase's, its keys removed at once) before the load
# phase, so that neither row times TCP connects or the worker's thread for
# each connection.
#
# It starts its own master + one worker (DRAM only large enough for the data,
# SSD tier as usual), its own redis-server (no persistence), and for the last
# part a second master, each on free ports under a temp dir, and stops them by
# PID at the end. Binaries come from BUILD_DIR [./build]; redis-server and
# redis-tools are installed from Debian if missing. Every wait is bounded, and
# every benchmark run is bounded by timeout(1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
if [ "${QUICK:-0}" = "1" ]; then
  SIZES="${1:-${SIZES:-4KiB 1MiB}}"
  CONCURRENCY="${2:-${CONCURRENCY:-1 16}}"
  BATCHES="${BATCHES-16}"
  DURATION_S="${DURATION_S:-1}"
  MASTER_KEYS="${MASTER_KEYS:-20000}"
  SCALE_KEYS="${SCALE_KEYS:-0}"
  SCALE=10  # keys and requests divided by this
else
  SIZES="${1:-${SIZES:-4KiB 64KiB 1MiB 4MiB}}"
  CONCURRENCY="${2:-${CONCURRENCY:-1 16 64}}"
  BATCHES="${BATCHES-16 64}"
  DURATION_S="${DURATION_S:-5}"
  MASTER_KEYS="${MASTER_KEYS:-100000}"
  SCALE_KEYS="${SCALE_KEYS:-1000000}"
  SCALE=1
fi
BATCH_SIZES="${BATCH_SIZES-4KiB}"
LOOP_SIZES="${LOOP_SIZES-4KiB}"
ASYNC_SIZES="${ASYNC_SIZES-4KiB}"
RUN_LIMIT_S=300  # the most one benchmark run may take
REPEAT="${REPEAT:-1}"
if ! [[ "$REPEAT" =~ ^[1-9][0-9]?$ ]]; then
  echo "REPEAT must be a whole number from 1 to 99, not '$REPEAT'" >&2
  exit 2
fi
# shellcheck source=bench/bench_cluster.sh
source "$ROOT/bench/bench_cluster.sh" compare

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  timeout 300 $SUDO apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
fi

# Empties Redis and writes keys key:000000000000 .. key:<KEYS-1>, each of
# BYTES bytes, as redis-benchmark -r KEYS names them, through one untimed
# `redis-cli --pipe`; warns when Redis does not then hold exactly KEYS keys.
# fill_redis KEYS BYTES
fill_redis() {
  local keys="$1" bytes="$2" held
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  python3 - "$keys" "$bytes" <<'PY' | timeout "$RUN_LIMIT_S" redis-cli -p "$REDIS_PORT" --pipe >"$WORK/redis-fill.log" 2>&1 ||
import sys
keys, size = int(sys.argv[1]), int(sys.argv[2])
value = b"x" * size
out = sys.stdout.buffer
for i in range(keys):
    key = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, size))
    out.write(value)
    out.write(b"\r\n")
PY
    echo "filling redis with $keys keys of $bytes bytes failed: $(tail -n 2 "$WORK/redis-fill.log")" >&2
  held="$(redis-cli -p "$REDIS_PORT" dbsize 2>/dev/null || echo '?')"
  if [ "$held" != "$keys" ]; then
    echo "warning: redis holds $held keys, not the $keys this row reads" >&2
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Bytes of a size text: 4096, 4KiB, 1MiB.
size_bytes() {
  python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(KiB|MiB)?', '$1'); print(int(m[1])*{None:1,'KiB':1024,'MiB':1048576}[m[2]])"
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

PREFAULT_ARGS=()
[ "${PREFAULT:-1}" = "1" ] && PREFAULT_ARGS=(--dram-prefault)
RPC_POLL_US="${RPC_POLL_US:-30}"
MASTER_RPC_POLL_US="${MASTER_RPC_POLL_US:-200}"
COMBINED_IN_FLIGHT="${COMBINED_IN_FLIGHT:-0}"
ENGINE_ARGS=(--rpc-engine "${RPC_ENGINE:-threads}")
BENCH_WORKER_ARGS=("${PREFAULT_ARGS[@]}" --rpc-poll-us "$RPC_POLL_US")
BENCH_MASTER_ARGS=(--rpc-poll-us "$MASTER_RPC_POLL_US")
start_bench_cluster "$WORK" bench-1 "${ENGINE_ARGS[@]}" "${TLS_ARGS[@]}"

REDIS_PORT="$(free_port)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --protected-mode yes >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

BENCH="$BUILD_DIR/bench/mooncake-bench"
BENCH_POLL_ARGS=(--rpc-poll-us "$RPC_POLL_US" --combined-calls-in-flight "$COMBINED_IN_FLIGHT")
# Idle vCPUs that halt make every wake-up slow, for both systems alike
# (docs/operations.md, "Latency on virtual machines"): say how this ran.
HALT_POLL="$(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null || echo n/a)"
echo "$SYSTEM (worker ${PREFAULT_ARGS[*]:-without --dram-prefault}, --rpc-engine ${RPC_ENGINE:-threads}," \
  "--rpc-poll-us $RPC_POLL_US, master $MASTER_RPC_POLL_US; client --combined-calls-in-flight $COMBINED_IN_FLIGHT;" \
  "guest_halt_poll_ns $HALT_POLL)" \
  "vs redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), loopback;" \
  "batch rows: mooncake --batch N (BatchPut/BatchGet) vs redis-benchmark -P N (pipelined" \
  "SET/GET); ops/s = keys/s; mooncake latency per call, redis per request"
if [ "$REPEAT" -gt 1 ]; then
  echo "each row: median of $REPEAT pairs of runs (mooncake, then redis); ratio = median of" \
    "the pairs' ratios, lo-hi = their lowest and highest"
  printf '%-6s %4s %-8s %-4s %12s %9s %9s %12s %9s %9s %7s %11s\n' size conc mode op \
    mc_ops/s mc_p50us mc_p99us redis_ops/s r_p50us r_p99us ratio lo-hi
else
  printf '%-6s %4s %-8s %-4s %12s %9s %9s %12s %9s %9s %7s\n' size conc mode op \
    mc_ops/s mc_p50us mc_p99us redis_ops/s r_p50us r_p99us ratio
fi

# The put and get rows of one table line pair: mooncake's phases from
# mooncake-bench --json reports, Redis's from redis-benchmark --csv files,
# one pair of files per repeat (REPEAT).
# print_rows SIZE CONCURRENCY MODE MOONCAKE_JSON REDIS_CSV [MOONCAKE_JSON REDIS_CSV ...]
print_rows() {
  python3 - "$@" <<'PY'
import csv, json, statistics, sys
size, conc, mode = sys.argv[1:4]
files = sys.argv[4:]
def mooncake(path):
    out = {}
    try:
        for p in json.load(open(path))["phases"]:
            name = {"load/put": "put", "mixed/get": "get"}.get(f'{p["phase"]}/{p["op"]}')
            if name:
                out[name] = (p["ops_per_s"], p["p50_us"], p["p99_us"])
    except (OSError, ValueError, KeyError):
        pass
    return out
def redis(path):
    out = {}
    try:
        rows = list(csv.reader(open(path)))
        col = {name: i for i, name in enumerate(rows[0])}
        for row in rows[1:]:
            name = {"SET": "put", "GET": "get"}.get(row[0].upper())
            if name:
                out[name] = (float(row[col["rps"]]), float(row[col["p50_latency_ms"]]) * 1000,
                             float(row[col["p99_latency_ms"]]) * 1000)
    except (OSError, IndexError, KeyError, ValueError):
        pass
    return out
pairs = [(mooncake(files[i]), redis(files[i + 1])) for i in range(0, len(files), 2)]
def median_row(rows):
    # Each figure's own median over the runs that have one.
    rows = [r for r in rows if r]
    return tuple(statistics.median(r[k] for r in rows) for k in range(3)) if rows else None
def cells(v):
    return f"{v[0]:12.0f} {v[1]:9.0f} {v[2]:9.0f}" if v else f'{"-":>12} {"-":>9} {"-":>9}'
for op in ("put", "get"):
    m = median_row([mc.get(op) for mc, _ in pairs])
    r = median_row([rd.get(op) for _, rd in pairs])
    ratios = [mc[op][0] / rd[op][0] for mc, rd in pairs
              if mc.get(op) and rd.get(op) and rd[op][0] > 0]
    ratio = f"{statistics.median(ratios):7.2f}" if ratios else f'{"-":>7}'
    line = f"{size:<6} {conc:>4} {mode:<8} {op:<4} {cells(m)} {cells(r)} {ratio}"
    if len(pairs) > 1:
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
        line += f" {spread:>11}"
    print(line)
PY
}

# One pair of runs (mooncake, then redis) and its two table rows.
# compare SIZE BYTES CONCURRENCY BATCH(1 = single calls)
compare() {
  local size="$1" bytes="$2" conc="$3" batch="$4"
  local keys requests mc_keys tag files=() r
  if [ "$bytes" -ge 4194304 ]; then keys=400; requests=1000
  elif [ "$bytes" -ge 1048576 ]; then keys=1600; requests=4000
  elif [ "$bytes" -ge 65536 ]; then keys=4000; requests=50000
  else keys=20000; requests=200000; fi
  # mooncake's put phase is one pass over its keys. At 64 KiB, 4,000 keys
  # made it about a tenth of a second (62 puts a thread at 64 threads, the
  # last threads' tail a large part of it) against Redis's second or more of
  # SETs; 20,000 keys (1.25 GiB, within the cluster's 2 GiB of DRAM) keep it
  # near half a second. Redis's keyspace stays at `keys` (fill_redis).
  mc_keys="$keys"
  if [ "$bytes" -ge 65536 ] && [ "$bytes" -lt 1048576 ]; then mc_keys=20000; fi
  # A batch row moves keys several times faster: five times the keys keep its
  # put phase near a second, not a noisy tenth of one (up to what DRAM holds).
  if [ "$batch" -gt 1 ]; then
    keys=$(( keys * 5 )); requests=$(( requests * 5 ))
    [ "$bytes" -lt 65536 ] && mc_keys="$keys"
  fi
  keys=$(( keys / SCALE > 20 ? keys / SCALE : 20 ))
  mc_keys=$(( mc_keys / SCALE > 20 ? mc_keys / SCALE : 20 ))
  requests=$(( requests / SCALE > 100 ? requests / SCALE : 100 ))
  local pipeline=()
  [ "$batch" -gt 1 ] && pipeline=(-P "$batch")
  for r in $(seq 1 "$REPEAT"); do
    tag="$1-$3-$4-r$r"
    # mooncake: load phase = puts; mixed phase with --get-ratio 1 = gets.
    if ! timeout "$RUN_LIMIT_S" "$BENCH" "${BENCH_POLL_ARGS[@]}" --master "127.0.0.1:$MASTER_PORT" --node bench-1 \
        --value-size "$size" --keys "$mc_keys" --concurrency "$conc" --batch "$batch" --get-ratio 1 \
        --duration-s "$DURATION_S" --cleanup --json \
        --location-cache-bytes "${LOCATION_CACHE:-256MiB}" "${TLS_ARGS[@]}" \
        >"$WORK/mooncake-$tag.json" 2>"$WORK/mooncake-$tag.err"; then
      echo "mooncake-bench failed for $tag: $(tail -n 3 "$WORK/mooncake-$tag.err")" >&2
    fi
    # Every key the GETs read holds this row's value size, none an older one.
    fill_redis "$keys" "$bytes"
    if ! timeout "$RUN_LIMIT_S" redis-benchmark -p "$REDIS_PORT" -c "$conc" -n "$requests" \
        -d "$bytes" -r "$keys" -t set,get "${pipeline[@]}" --csv >"$WORK/redis-$tag.csv" \
        2>"$WORK/redis-$tag.err"; then
      echo "redis-benchmark failed for $tag" >&2
    fi
    files+=("$WORK/mooncake-$tag.json" "$WORK/redis-$tag.csv")
  done
  local mode=single
  [ "$batch" -gt 1 ] && mode="batch$batch"
  print_rows "$size" "$conc" "$mode" "${files[@]}"
}

for size in $SIZES; do
  bytes="$(size_bytes "$size")"
  for conc in $CONCURRENCY; do
    compare "$size" "$bytes" "$conc" 1
    case " $BATCH_SIZES " in
      *" $size "*) for batch in $BATCHES; do compare "$size" "$bytes" "$conc" "$batch"; done ;;
    esac
  done
done

# extra_rows MODE SIZES RUN: for each size in SIZES and each concurrency,
# `RUN SIZE CONCURRENCY KEYS` writes a mooncake-bench JSON report (REPEAT
# times), whose rows are printed against the single rows' Redis runs above
# (repeat r against that row's repeat r).
extra_rows() {
  local mode="$1" sizes="$2" run="$3" size bytes conc keys tag files r
  for size in $sizes; do
    bytes="$(size_bytes "$size")"
    for conc in $CONCURRENCY; do
      keys=20000; [ "$bytes" -ge 65536 ] && keys=4000
      keys=$(( keys / SCALE > 20 ? keys / SCALE : 20 ))
      files=()
      for r in $(seq 1 "$REPEAT"); do
        tag="$mode-$size-$conc-r$r"
        "$run" "$size" "$conc" "$keys" >"$WORK/$tag.json" 2>"$WORK/$tag.err" ||
          echo "mooncake-bench ($mode) failed for $tag: $(tail -n 3 "$WORK/$tag.err")" >&2
        files+=("$WORK/$tag.json" "$WORK/redis-$size-$conc-1-r$r.csv")
      done
      print_rows "$size" "$conc" "$mode" "${files[@]}"
    done
  done
}

# The worker alone, driven as redis-benchmark drives Redis: one thread keeps
# a call in flight on each connection (mooncake-bench --workload loop, no
# Client, no master lookups).
run_loop() {
  timeout "$RUN_LIMIT_S" "$BENCH" "${BENCH_POLL_ARGS[@]}" --workload loop --worker "127.0.0.1:$WORKER_PORT" \
    --value-size "$1" --concurrency "$2" --keys "$3" --duration-s "$DURATION_S" \
    --cleanup --json "${TLS_ARGS[@]}"
}
if [ -n "$LOOP_SIZES" ]; then
  echo
  echo "mode loop: the worker alone, one client thread on epoll (--workload loop), against" \
    "the single rows' redis runs above"
  extra_rows loop "$LOOP_SIZES" run_loop
fi

# The client's asynchronous calls, driven the same way: CONCURRENCY calls in
# flight, each completion issuing the next (mooncake-bench --async: puts
# through PutAsync, then gets through GetAsync), through the whole Client
# (owner cache, put batches, pipelined connections).
run_async() {
  timeout "$RUN_LIMIT_S" "$BENCH" "${BENCH_POLL_ARGS[@]}" --master "127.0.0.1:$MASTER_PORT" --node bench-1 --async \
    --value-size "$1" --concurrency "$2" --keys "$3" --get-ratio 1 \
    --duration-s "$DURATION_S" --cleanup --json \
    --location-cache-bytes "${LOCATION_CACHE:-256MiB}" "${TLS_ARGS[@]}"
}
if [ -n "$ASYNC_SIZES" ]; then
  echo
  echo "mode async: Client::PutAsync and GetAsync, CONCURRENCY calls in flight" \
    "(mooncake-bench --async), against the single rows' redis runs above"
  extra_rows async "$ASYNC_SIZES" run_async
fi

# Many keys: gets over SCALE_KEYS small objects against the same at 20,000
# keys, on this cluster, so the ratio shows what the client's owner cache and
# the master cost once the key set is large (goal: >= 0.8).
if [ "$SCALE_KEYS" -gt 0 ]; then
  echo
  echo "many keys (64 B values, concurrency 16, gets for ${DURATION_S}s after loading the keys$( [ "$REPEAT" -gt 1 ] && echo "; medians of $REPEAT runs each")):"
  printf '%-9s %12s %9s %9s %12s\n' keys load_put/s get_ops/s p50us p99us
  scale_run() {
    local keys="$1" tag="$2"
    timeout "$RUN_LIMIT_S" "$BENCH" "${BENCH_POLL_ARGS[@]}" --master "127.0.0.1:$MASTER_PORT" --node bench-1 \
      --value-size 64 --keys "$keys" --concurrency 16 --batch 1 --get-ratio 1 \
      --duration-s "$DURATION_S" --cleanup --json \
      --location-cache-bytes "${LOCATION_CACHE:-256MiB}" "${TLS_ARGS[@]}" \
      >"$WORK/scale-$tag.json" 2>"$WORK/scale-$tag.err" ||
      echo "mooncake-bench failed for $keys keys: $(tail -n 3 "$WORK/scale-$tag.err")" >&2
  }
  scale_files=()
  for r in $(seq 1 "$REPEAT"); do
    scale_run 20000 "20000-r$r"
    scale_run "$SCALE_KEYS" "$SCALE_KEYS-r$r"
    scale_files+=("$WORK/scale-20000-r$r.json" "$WORK/scale-$SCALE_KEYS-r$r.json")
  done
  python3 - 20000 "$SCALE_KEYS" "${scale_files[@]}" <<'PY'
import json, statistics, sys
small, large = sys.argv[1:3]
files = sys.argv[3:]
def phases(path):
    out = {}
    try:
        for p in json.load(open(path))["phases"]:
            out[f'{p["phase"]}/{p["op"]}'] = p
    except (OSError, ValueError, KeyError):
        pass
    return out
def figure(path, phase, key):
    p = phases(path).get(phase)
    return p[key] if p else None
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
# Runs alternate small, large: the pairs' ratios share a sitting each.
for i, keys in ((0, small), (1, large)):
    paths = files[i::2]
    cell = lambda phase, k: median(figure(p, phase, k) for p in paths)
    text = lambda v: f"{v:.0f}" if v is not None else "-"
    print(f'{keys:<9} {text(cell("load/put", "ops_per_s")):>12} '
          f'{text(cell("mixed/get", "ops_per_s")):>9} {text(cell("mixed/get", "p50_us")):>9} '
          f'{text(cell("mixed/get", "p99_us")):>12}')
ratios = []
for small_path, large_path in zip(files[0::2], files[1::2]):
    a, b = figure(small_path, "mixed/get", "ops_per_s"), figure(large_path, "mixed/get", "ops_per_s")
    if a and b:
        ratios.append(b / a)
if ratios:
    line = f"get throughput at {large} keys / at {small} keys: {statistics.median(ratios):.2f}"
    if len(files) > 2:
        line += f" (median of {len(ratios)} pairs, {min(ratios):.2f}-{max(ratios):.2f})"
    print(line)
PY
fi

# The master alone, on a fresh master so that its RSS growth is the keys'.
# --rebuild-ms 0: no worker predates it, so there is nothing to rebuild, and
# its key calls must not answer NOT_LEADER for the default 2.5 s window.
[ "$MASTER_KEYS" -gt 0 ] || exit 0
"$BUILD_DIR/master/mooncake-master" --port 0 --admin-port 0 --ready-file "$WORK/master2.port" \
  --rebuild-ms 0 --rpc-poll-us "$MASTER_RPC_POLL_US" "${TLS_ARGS[@]}" >"$WORK/master2.log" 2>&1 &
PIDS+=($!)
wait_for_file "$WORK/master2.port"
for _ in $(seq 1 50); do [ "$(wc -l <"$WORK/master2.port")" -ge 2 ] && break; sleep 0.1; done
MASTER2_PORT="$(sed -n 1p "$WORK/master2.port")"
MASTER2_ADMIN="$(sed -n 2p "$WORK/master2.port")"
ADMIN_ARGS=()
[ -n "$MASTER2_ADMIN" ] && ADMIN_ARGS=(--master-admin "127.0.0.1:$MASTER2_ADMIN")
echo
echo "master alone (fresh master, $MASTER_KEYS keys, 2 fake nodes, concurrency 16," \
  "BatchGetLocation of 256 keys per call):"
if timeout "$RUN_LIMIT_S" "$BENCH" "${BENCH_POLL_ARGS[@]}" --master "127.0.0.1:$MASTER2_PORT" --workload master \
    --keys "$MASTER_KEYS" --concurrency 16 --cleanup --json "${ADMIN_ARGS[@]}" "${TLS_ARGS[@]}" \
    >"$WORK/master.json" 2>"$WORK/master.err"; then
  python3 - "$WORK/master.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
print(f'{"op":<14} {"keys/s":>12} {"calls/s":>12} {"p50_us":>8} {"p99_us":>8} {"p999_us":>8} {"errors":>7}')
for p in data["phases"]:
    print(f'{p["op"]:<14} {p["keys_per_s"]:12.0f} {p["calls_per_s"]:12.0f} {p["p50_us"]:8} '
          f'{p["p99_us"]:8} {p["p999_us"]:8} {p["errors"]:7}')
per_key = data.get("master_bytes_per_key")
m = data["master"]
if per_key is None:
    print(f'master_bytes_per_key: skipped ({m["rss_note"]})')
else:
    print(f'master_bytes_per_key: {per_key:.1f} (rss {m["rss_before"]} -> {m["rss_after"]} bytes,'
          f' avg key {m["avg_key_bytes"]:.1f} bytes)')
PY
else
  echo "mooncake-bench --workload master failed: $(tail -n 3 "$WORK/master.err")" >&2
fi
