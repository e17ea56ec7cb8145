#!/usr/bin/env python3
"""A Mooncake tiered cache client in Python over plain Thrift.

Uses Debian's python3-thrift and the bindings CMake generates at build time
(<build>/examples/gen-py, from thrift/mooncake.thrift); nothing is generated
here. Framed transport + binary protocol, like every server in the project.

    python3 examples/python_client.py --master 127.0.0.1:50051 \
        --gen-py build/examples/gen-py

Flow: MasterService.PickNode -> WorkerService.Put on that node,
MasterService.GetLocation -> WorkerService.Exist(prefetch=True), Get, Upsert,
Get again, Remove. Then a zero-copy write, as a producer on the worker's own
machine does it: OpenForWrite, mmap the worker's DRAM arena, write in place,
Commit, GetPlacement. Exits 0 when every answer matches, 1 otherwise.
"""

import argparse
import mmap
import os
import sys
import time


def import_thrift(gen_py):
    sys.path.insert(0, gen_py)
    try:
        import thrift.transport.TSocket  # noqa: F401
    except ImportError:
        # Debian's python3-thrift lives in dist-packages, which a non-Debian
        # interpreter (pyenv, venv) does not search.
        sys.path.append("/usr/lib/python3/dist-packages")
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport
    from mooncake_rpc import MasterService, WorkerService
    from mooncake_rpc.ttypes import ErrorCode, MemoryHandleKind, ReplicateConfig
    return TBinaryProtocol, TSocket, TTransport, MasterService, WorkerService, ErrorCode, \
        ReplicateConfig, MemoryHandleKind


class Connection:
    """One framed binary Thrift connection; close() when done."""

    def __init__(self, thrift, service, host, port, timeout_ms=10000):
        TBinaryProtocol, TSocket, TTransport = thrift[0], thrift[1], thrift[2]
        socket = TSocket.TSocket(host, port)
        socket.setTimeout(timeout_ms)
        self.transport = TTransport.TFramedTransport(socket)
        self.client = service.Client(TBinaryProtocol.TBinaryProtocol(self.transport))
        self.transport.open()

    def close(self):
        self.transport.close()


class Checker:
    def __init__(self):
        self.failures = 0

    def expect(self, what, actual, expected):
        ok = actual == expected
        shown = actual if not isinstance(actual, bytes) or len(actual) < 64 else \
            "<%d bytes>" % len(actual)
        print("%-44s %s" % (what, "ok" if ok else "FAILED: got %r, expected %r" % (shown, expected)))
        if not ok:
            self.failures += 1
        return ok


def machine_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def write_in_place(memory, offset, data):
    """Writes `data` at `offset` of a worker's DRAM arena (a HOST_FILE handle).

    The checks are the ones client/shared_mapping.cc makes: a handle is a
    /proc/<pid>/fd/<n> path, meaningful only on the worker's machine and only
    while that worker lives, so map nothing but its memfd arena.
    """
    if memory.machine_id != machine_id():
        raise RuntimeError("the worker runs on another machine")
    if not os.readlink(memory.path).startswith("/memfd:mooncake-"):
        raise RuntimeError("%s is not the worker's arena" % memory.path)
    fd = os.open(memory.path, os.O_RDWR)
    try:
        if os.fstat(fd).st_size != memory.region_size:
            raise RuntimeError("%s is not the worker's arena" % memory.path)
        start = offset // mmap.PAGESIZE * mmap.PAGESIZE  # mmap wants a page-aligned offset
        view = mmap.mmap(fd, offset - start + len(data), offset=start)
        view[offset - start:] = data
        view.close()
    finally:
        os.close(fd)


def zero_copy_steps(check, worker, node_id, key, thrift):
    ErrorCode, ReplicateConfig, MemoryHandleKind = thrift[5], thrift[6], thrift[7]
    data = bytes(range(256)) * 4096  # 1 MiB
    plan = worker.client.OpenForWrite(key, len(data), ReplicateConfig(), False)
    if not check.expect("OpenForWrite on %s" % node_id, plan.code, ErrorCode.OK):
        return
    if plan.memory.kind != MemoryHandleKind.HOST_FILE or plan.memory.machine_id != machine_id():
        # VRAM plans need HIP in this process; remote workers cannot be mapped.
        print("%-44s %s" % ("zero-copy write", "skipped (not this machine's DRAM)"))
        worker.client.PutRevoke(plan.epoch)
        return
    write_in_place(plan.memory, plan.offset, data)
    check.expect("Get before Commit", worker.client.Get(key, 0, 0).code,
                 ErrorCode.REPLICA_IS_NOT_READY)
    check.expect("Commit", worker.client.Commit(key, plan.epoch), ErrorCode.OK)
    got = worker.client.Get(key, 0, 0)
    check.expect("Get of the zero-copy value", got.data, data)
    placement = worker.client.GetPlacement(key)
    check.expect("GetPlacement tier", placement.tier, plan.tier)
    check.expect("GetPlacement offset", placement.offset, plan.offset)
    check.expect("Remove (cleanup)", worker.client.Remove(key, True), ErrorCode.OK)


def run(args):
    thrift = import_thrift(args.gen_py)
    MasterService, WorkerService, ErrorCode, ReplicateConfig = thrift[3:7]
    host, _, port = args.master.rpartition(":")
    master = Connection(thrift, MasterService, host, int(port))
    check = Checker()
    key = "python-example-%d-%d" % (os.getpid(), int(time.time() * 1e6))
    value = b"hello from python " * 100
    workers = []
    try:
        picked = master.client.PickNode(len(value), [])
        check.expect("PickNode", picked.code, ErrorCode.OK)
        target = Connection(thrift, WorkerService, picked.node.host, picked.node.port)
        workers.append(target)
        check.expect("Put on %s" % picked.node.node_id,
                     target.client.Put(key, value, ReplicateConfig()), ErrorCode.OK)

        location = master.client.GetLocation(key)
        check.expect("GetLocation", location.code, ErrorCode.OK)
        check.expect("GetLocation names the put node", location.node_id, picked.node.node_id)
        owner = Connection(thrift, WorkerService, location.host, location.port)
        workers.append(owner)
        check.expect("Exist(prefetch=True)", owner.client.Exist(key, True, ""), 1)
        check.expect("Exist of a missing key", owner.client.Exist(key + "-missing", False, ""), 0)

        got = owner.client.Get(key, 0, 0)
        check.expect("Get code", got.code, ErrorCode.OK)
        check.expect("Get value", got.data, value)
        first_version = got.version

        new_value = b"upserted by python " * 100
        check.expect("Upsert", owner.client.Upsert(key, new_value, ReplicateConfig()), ErrorCode.OK)
        got = owner.client.Get(key, 0, 0)
        check.expect("Get after Upsert", got.data, new_value)
        check.expect("Upsert raised the version", got.version > first_version, True)

        check.expect("Remove (cleanup)", owner.client.Remove(key, True), ErrorCode.OK)
        check.expect("Exist after Remove", owner.client.Exist(key, False, ""), 0)

        zero_copy_steps(check, target, picked.node.node_id, key + "-zero-copy", thrift)
    finally:
        for connection in workers:
            connection.close()
        master.close()
    print("python example: %s" % ("every step ok" if check.failures == 0 else
                                  "%d step(s) FAILED" % check.failures))
    return 0 if check.failures == 0 else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default=os.environ.get("MOONCAKE_MASTER", "127.0.0.1:50051"),
                        help="master HOST:PORT")
    parser.add_argument("--gen-py", required=True,
                        help="folder of the generated bindings (<build>/examples/gen-py)")
    args = parser.parse_args()
    try:
        return run(args)
    except Exception as error:  # a script: report any failure as one line
        print("python example: error: %s: %s" % (type(error).__name__, error), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
