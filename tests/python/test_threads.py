"""Threads: one Client shared by several Python threads, and the GIL
released while a call waits on the network."""

import os
import signal
import socket
import threading
import time

import pytest

import mooncake
from conftest import pattern


def test_threads_share_one_client(client, keys, nodes):
    errors = []
    per_thread = 30

    def work(t):
        try:
            mine = keys(per_thread)
            for i, k in enumerate(mine):
                value = pattern(8192 + t * 100 + i, seed=t * 1000 + i)
                client.put(k, value, preferred_node=nodes[i % 2])
                assert client.get(k) == value
            values = client.batch_get(mine)
            assert [len(v) for v in values] == [8192 + t * 100 + i for i in range(per_thread)]
            assert client.batch_remove(mine, force=True) == [None] * per_thread
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    run_threads(work, 8)
    assert errors == []


def run_threads(work, n):
    """Runs work(0) .. work(n - 1) on n threads at once; returns when all end."""
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_share_calls_with_several_out_at_once(master, keys, nodes):
    # Concurrent puts and gets share combined calls; with three allowed out
    # at once, every thread still gets its own values back.
    with mooncake.Client(master=master, local_node=nodes[0],
                         combined_calls_in_flight=3) as c:
        errors = []

        def work(t):
            try:
                mine = keys(40)
                for i, k in enumerate(mine):
                    c.put(k, pattern(1000 + t, seed=t * 1000 + i))
                for i, k in enumerate(mine):
                    assert c.get(k) == pattern(1000 + t, seed=t * 1000 + i)
                assert c.batch_remove(mine, force=True) == [None] * len(mine)
            except BaseException as e:  # noqa: BLE001  (reported below)
                errors.append(e)

        run_threads(work, 8)
        assert errors == []


def test_a_negative_combined_calls_in_flight_is_refused(master):
    with pytest.raises(mooncake.Error) as raised:
        mooncake.Client(master=master, combined_calls_in_flight=-1)
    assert raised.value.name == "INVALID_PARAMS"


def run_while_counting(call):
    """Runs call() in a thread; counts how often this thread gets to run
    meanwhile. Near zero if the call held the GIL while it waited."""
    done = threading.Event()
    outcome = []

    def target():
        try:
            outcome.append(call())
        except BaseException as e:  # noqa: BLE001
            outcome.append(e)
        finally:
            done.set()

    t = threading.Thread(target=target)
    t.start()
    spins = 0
    while not done.is_set():
        spins += 1
        done.wait(0.001)
    t.join()
    return spins, outcome[0]


def test_the_gil_is_released_while_connecting():
    # A listener that never answers: the handshake completes in the
    # backlog, the master request then waits for io_timeout_ms.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    try:
        spins, outcome = run_while_counting(lambda: mooncake.Client(
            master="127.0.0.1:%d" % port, connect_timeout_ms=500, io_timeout_ms=800))
    finally:
        silent.close()
    assert isinstance(outcome, mooncake.Error)
    assert outcome.name in ("RPC_FAIL", "RPC_TIMEOUT")
    assert spins > 20


def stop_and_wait(pid, timeout_s=5.0):
    """SIGSTOPs `pid` and returns once every one of its threads has stopped.

    kill() only queues the stop: a busy machine can let a worker thread
    answer a request after kill() returned, before it reaches the stop.
    """
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    # "tid (comm) S ...": the state follows the last ')'.
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue  # a thread that just exited
        if states and all(state in ("T", "t") for state in states):
            return
        time.sleep(0.001)
    raise AssertionError("worker %d did not stop within %.1f s" % (pid, timeout_s))


def test_the_gil_is_released_during_a_get_from_a_stalled_worker(master, keys, nodes,
                                                                 worker_pids):
    if nodes[1] not in worker_pids:
        pytest.skip("worker PIDs not exported")
    pid = worker_pids[nodes[1]]
    with mooncake.Client(master=master, io_timeout_ms=700) as c:
        key = keys()
        c.put(key, b"on w2", preferred_node=nodes[1])
        try:
            stop_and_wait(pid)
            spins, outcome = run_while_counting(lambda: c.get(key))
        finally:
            os.kill(pid, signal.SIGCONT)
        assert isinstance(outcome, mooncake.Error), outcome
        assert outcome.name in ("RPC_FAIL", "RPC_TIMEOUT")
        assert spins > 20
        assert c.get(key) == b"on w2"  # the worker is back
