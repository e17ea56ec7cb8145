#!/usr/bin/env python3
"""Python batch calls next to `mooncake-bench --batch` in one sitting.

    .venv/bin/python python/benchmarks/compare_with_cpp.py --build-dir build

Starts its own mooncake-master and one mooncake-worker (1 GiB DRAM) on free
ports, warms its DRAM up, then for each SIZE:BATCH:KEYS case runs batch_bench.py (this
interpreter, which must have `mooncake` installed) and `mooncake-bench
--batch BATCH --concurrency 1 --get-ratio 1` (one thread, as the Python
bench) and prints keys/s side by side: puts (BatchPut / batch_put_from) and
gets (BatchGet / batch_get_into, batch_get). Stops both processes at the end.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def start(args, ready_file, log):
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("%s exited (%d)" % (args[0], proc.returncode))
        if os.path.exists(ready_file) and open(ready_file).read().strip():
            return proc, int(open(ready_file).read().split()[0])
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("%s wrote no ready file" % args[0])


def warm_up(addr):
    """Touches the worker's DRAM arena once, so neither bench pays the first
    page faults of a fresh worker (whoever ran first would)."""
    import numpy as np

    import mooncake

    block = np.ones(64 << 20, dtype=np.uint8)
    keys = ["warmup/%d" % i for i in range(14)]
    with mooncake.Client(master=addr) as client:
        for key in keys:
            client.put_from(key, block)
        client.batch_remove(keys, force=True)


def run_json(command):
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default="build")
    p.add_argument("--cases", default="4KiB:16:20000,64KiB:64:2048,1MiB:16:256",
                   help="SIZE:BATCH:KEYS,...")
    p.add_argument("--duration-s", default="4", help="mooncake-bench get phase length")
    args = p.parse_args()
    build = os.path.abspath(args.build_dir)
    tmp = tempfile.mkdtemp(prefix="mooncake-pybench-")
    procs = []
    try:
        with open(os.path.join(tmp, "cluster.log"), "w") as log:
            master, port = start([os.path.join(build, "master", "mooncake-master"), "--host",
                                  "127.0.0.1", "--port", "0", "--admin-port", "0",
                                  "--ready-file", os.path.join(tmp, "m.port"), "--log-level",
                                  "warn"], os.path.join(tmp, "m.port"), log)
            procs.append(master)
            addr = "127.0.0.1:%d" % port
            worker, _ = start([os.path.join(build, "worker", "mooncake-worker"), "--node-id",
                               "bench1", "--host", "127.0.0.1", "--port", "0", "--admin-port",
                               "0", "--master", addr, "--dram-capacity", "1GiB",
                               "--ssd-capacity", "0", "--ready-file",
                               os.path.join(tmp, "w.port"), "--log-level", "warn"],
                              os.path.join(tmp, "w.port"), log)
            procs.append(worker)
            warm_up(addr)
            print("%-6s %5s %-14s %8s %12s %7s" % ("size", "batch", "python call",
                                                   "keys/s", "C++ keys/s", "py/C++"))
            for case in args.cases.split(","):
                size, batch, keys = case.split(":")
                py = run_json([sys.executable, os.path.join(HERE, "batch_bench.py"), "--master",
                               addr, "--node", "bench1", "--value-size", size, "--keys", keys,
                               "--batch", batch, "--json"])
                cpp = run_json([os.path.join(build, "bench", "mooncake-bench"), "--master",
                                addr, "--node", "bench1", "--value-size", size, "--keys", keys,
                                "--batch", batch, "--concurrency", "1", "--get-ratio", "1",
                                "--duration-s", args.duration_s, "--cleanup", "--json"])
                phases = {(ph["phase"], ph["op"]): ph["keys_per_s"] for ph in cpp["phases"]}
                rows = {r["call"]: r["keys_per_s"] for r in py["results"]}
                for call, ref in (("batch_put_from", phases[("load", "put")]),
                                  ("batch_get_into", phases[("mixed", "get")]),
                                  ("batch_get", phases[("mixed", "get")])):
                    print("%-6s %5s %-14s %8.0f %12.0f %7.2f" % (size, batch, call, rows[call],
                                                                 ref, rows[call] / ref))
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
