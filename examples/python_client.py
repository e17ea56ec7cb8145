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

A master answers NOT_LEADER (retryable) for its rebuild window after every
start (--rebuild-ms, 2.5 s by default), and an HA standby always does. The
master calls here go through MasterLink, which handles that the way the C++
client's MasterEndpoint does: ask GetRole, follow a standby to the leader it
names, and back off and retry at the same address while the master we asked
leads (it is rebuilding) or no leader is known yet, for up to 15 s.
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


class MasterLink:
    """Master calls that wait out NOT_LEADER (rebuild window, HA failover).

    call(name, *args) runs MasterService.<name> and returns its answer. On
    NOT_LEADER (the bare code, a result's `code`, or any element of a batch)
    it asks GetRole: a standby naming another leader is followed there at
    once; a master that leads (still rebuilding; it names itself, or nothing
    with a wildcard --host) or knows no leader yet is asked again after a
    short backoff, at the same address. After `wait_s` the last answer is
    returned as it is, so the caller sees NOT_LEADER and fails.
    """

    FIRST_BACKOFF_S = 0.05
    MAX_BACKOFF_S = 0.25

    def __init__(self, thrift, host, port, wait_s=15.0):
        self.thrift = thrift
        self.not_leader = thrift[5].NOT_LEADER
        self.wait_s = wait_s
        self.host, self.port = host, port
        self.connection = Connection(thrift, thrift[3], host, port)
        self.waited = False

    def close(self):
        self.connection.close()

    def _is_not_leader(self, answer):
        if answer == self.not_leader:
            return True
        if getattr(answer, "code", None) == self.not_leader:
            return True
        if isinstance(answer, (list, tuple)):
            return any(self._is_not_leader(element) for element in answer)
        return False

    def _switch_to(self, host, port):
        self.connection.close()
        self.host, self.port = host, port
        self.connection = Connection(self.thrift, self.thrift[3], host, port)

    def call(self, name, *args):
        deadline = time.monotonic() + self.wait_s
        attempt = 0
        while True:
            answer = getattr(self.connection.client, name)(*args)
            if not self._is_not_leader(answer) or time.monotonic() >= deadline:
                return answer
            role = self.connection.client.GetRole()
            leader_host, _, leader_port = role.leader_address.rpartition(":")
            if not role.is_leader and leader_host and leader_port.isdigit() and \
                    (leader_host, int(leader_port)) != (self.host, self.port):
                print("master %s:%d is a standby; following the leader at %s" %
                      (self.host, self.port, role.leader_address))
                self._switch_to(leader_host, int(leader_port))
                continue
            if not self.waited:
                print("master %s:%d answered NOT_LEADER (%s); retrying until it serves" %
                      (self.host, self.port,
                       "rebuilding its directory" if role.is_leader else "no leader known yet"))
                self.waited = True
            delay = min(self.MAX_BACKOFF_S, self.FIRST_BACKOFF_S * (1 << min(attempt, 4)))
            time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
            attempt += 1


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
    WorkerService, ErrorCode, ReplicateConfig = thrift[4:7]
    host, _, port = args.master.rpartition(":")
    master = MasterLink(thrift, host, int(port))
    check = Checker()
    key = "python-example-%d-%d" % (os.getpid(), int(time.time() * 1e6))
    value = b"hello from python " * 100
    workers = []
    try:
        picked = master.call("PickNode", len(value), [])
        if not check.expect("PickNode", picked.code, ErrorCode.OK):
            raise RuntimeError("PickNode answered code %d, no node to put on" % picked.code)
        target = Connection(thrift, WorkerService, picked.node.host, picked.node.port)
        workers.append(target)
        check.expect("Put on %s" % picked.node.node_id,
                     target.client.Put(key, value, ReplicateConfig()), ErrorCode.OK)

        location = master.call("GetLocation", key)
        if not check.expect("GetLocation", location.code, ErrorCode.OK):
            raise RuntimeError("GetLocation answered code %d, no owner to read" % location.code)
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
