"""get_async and put_async: futures a client thread completes, many calls
in flight without a Python thread each, and no hang when a client with
calls in flight is closed, collected, or still open at exit."""

import asyncio
import gc
import os
import resource
import subprocess
import sys
import textwrap

import pytest

import mooncake
from conftest import pattern


def test_many_gets_in_flight_each_get_their_own_value(client, keys):
    names = keys(200)
    values = [pattern(100 + i * 37, seed=i) for i in range(len(names))]
    for k, v in zip(names, values):
        client.put(k, v)
    futures = [client.get_async(k) for k in names]
    missing = client.get_async(keys())
    bad = client.get_async("")
    assert [f.result(timeout=30) for f in futures] == values
    with pytest.raises(mooncake.Error) as e:
        missing.result(timeout=30)
    assert e.value.code == mooncake.ErrorCode.OBJECT_NOT_FOUND
    with pytest.raises(mooncake.Error) as e:
        bad.result(timeout=30)
    assert e.value.code == mooncake.ErrorCode.INVALID_KEY


def test_puts_in_flight_answer_what_put_answers(client, keys):
    names = keys(100)
    futures = [client.put_async(k, pattern(4096, seed=i)) for i, k in enumerate(names)]
    assert [f.result(timeout=30) for f in futures] == [None] * len(names)
    assert client.get(names[7]) == pattern(4096, seed=7)
    # Never overwrites; keeps its options; takes str and buffers.
    with pytest.raises(mooncake.Error) as e:
        client.put_async(names[0], b"again").result(timeout=30)
    assert e.value.code == mooncake.ErrorCode.OBJECT_ALREADY_EXISTS
    pinned, text, view = keys(3)
    client.put_async(pinned, b"p", hard_pin=True).result(timeout=30)
    assert client.inspect(pinned)["hard_pinned"]
    client.put_async(text, "héllo").result(timeout=30)
    assert client.get(text) == "héllo".encode()
    buffer = bytearray(b"abcdef")
    future = client.put_async(view, memoryview(buffer)[1:4])
    buffer[1:4] = b"XYZ"  # the value was copied when the call was made
    future.result(timeout=30)
    assert client.get(view) == b"bcd"


def test_asyncio_awaits_the_futures(client, keys):
    names = keys(50)
    for i, k in enumerate(names):
        client.put(k, pattern(1000, seed=i))

    async def read_all():
        return await asyncio.gather(
            *(asyncio.wrap_future(client.get_async(k)) for k in names))

    assert asyncio.run(read_all()) == [pattern(1000, seed=i) for i in range(len(names))]


def test_a_call_in_flight_cannot_be_cancelled(client, keys):
    k = keys()
    client.put(k, b"v")
    future = client.get_async(k)
    assert not future.cancel()
    assert future.result(timeout=30) == b"v"


def test_closing_a_client_completes_its_calls_in_flight(master, keys):
    c = mooncake.Client(master=master)
    names = keys(300)
    futures = [c.put_async(k, pattern(2048, seed=i)) for i, k in enumerate(names)]
    futures += [c.get_async(k) for k in names]
    c.close()
    assert all(f.done() for f in futures)
    with pytest.raises(mooncake.Error):
        c.get_async(names[0])


def no_core_file():
    # A script that aborts leaves no core file behind.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_script(master, body, timeout=60):
    """Runs `body` in a fresh interpreter against the test cluster; a hang
    fails after `timeout` seconds instead of stalling the suite."""
    script = "import gc, mooncake\nc = mooncake.Client(master=%r)\n" % master
    script += textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ), preexec_fn=no_core_file)


def assert_prints_ok(master, body, timeout=60):
    """run_script, which must exit 0 having printed just "ok"."""
    done = run_script(master, body, timeout=timeout)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_client_collected_with_calls_in_flight_completes_them(master, keys):
    prefix = keys()
    assert_prints_ok(master, """
        futures = [c.put_async("%s/%%d" %% i, b"x" * 4096) for i in range(500)]
        futures += [c.get_async("%s/%%d" %% i) for i in range(500)]
        del c
        gc.collect()
        assert all(f.done() for f in futures), "a future was left pending"
        print("ok")
        """ % (prefix, prefix))


def test_an_interpreter_exiting_with_calls_in_flight_completes_them(master, keys):
    # The script ends with its calls in flight and the client open. Each
    # future writes one byte to stdout when it completes (os.write works
    # until the very end); all complete before the interpreter finalizes.
    prefix = keys()
    done = run_script(master, """
        import os
        futures = [c.put_async("%s/%%d" %% i, b"x" * 4096) for i in range(500)]
        futures += [c.get_async("%s/%%d" %% i) for i in range(500)]
        for f in futures:
            f.add_done_callback(lambda _: os.write(1, b"."))
        """ % (prefix, prefix))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "." * 1000


def test_closing_while_another_thread_is_in_a_call_does_not_hang(master, keys):
    # Thread T reads a large value in a loop while the main thread starts
    # gets and closes the client: T's call then holds the last reference to
    # the client, and destroying it must not wait, with the GIL held, for
    # the client's threads that complete the gets (they need the GIL).
    prefix = keys()
    assert_prints_ok(master, """
        import threading
        for round in range(5):
            key = "%s/%%d" %% round
            c.put(key, b"v" * (8 << 20))
            started = threading.Event()

            def loop():
                started.set()
                while True:
                    try:
                        c.get(key)
                    except mooncake.Error:
                        return

            t = threading.Thread(target=loop)
            t.start()
            started.wait()
            futures = [c.get_async(key) for _ in range(64)]
            c.close()
            t.join()
            assert all(f.done() for f in futures), "a future was left pending"
            c = mooncake.Client(master=%r)
        print("ok")
        """ % (prefix, master), timeout=30)


def test_a_done_callback_may_hold_the_last_reference_to_the_client(master, keys):
    # The callback keeps the client alive; once the future is done the
    # client's own completion thread drops the last reference. That thread
    # cannot destroy the client (it would join itself: std::terminate).
    prefix = keys()
    assert_prints_ok(master, """
        import time
        c.put("%s", b"v" * (8 << 20))
        del c
        for _ in range(10):
            c = mooncake.Client(master=%r)
            f = c.get_async("%s")
            f.add_done_callback(lambda f, c=c: None)
            del c, f
        time.sleep(1)
        gc.collect()
        print("ok")
        """ % (prefix, master, prefix), timeout=30)


def test_a_done_callback_may_close_the_client(master, keys):
    prefix = keys()
    assert_prints_ok(master, """
        import threading
        c.put("%s", b"v" * (8 << 20))
        for _ in range(10):
            closed = threading.Event()

            def close(f, c=c):
                c.close()
                closed.set()

            futures = [c.get_async("%s") for _ in range(8)]
            futures[0].add_done_callback(close)
            assert closed.wait(20), "the callback did not run"
            assert c.closed
            try:
                c.get_async("%s")
                raise AssertionError("a closed client took a call")
            except mooncake.Error:
                pass
            for f in futures:
                error = f.exception(timeout=20)
                assert error is not None or f.result() == b"v" * (8 << 20)
            c = mooncake.Client(master=%r)
        print("ok")
        """ % (prefix, prefix, prefix, master), timeout=30)


@pytest.mark.parametrize("call, size", [("c.get(key)", 8 << 20), ("c.get_async(key)", 4096),
                                        ("c.put_async(key + '/new', b'x')", 4096)])
def test_an_interpreter_exiting_while_a_daemon_thread_is_in_a_call_exits_cleanly(
        master, client, keys, call, size):
    # Python does not join daemon threads: the program ends while one is
    # inside a call. When that call returns it must not take the GIL back
    # while Python finalizes: CPython ends such a thread by force
    # (pthread_exit), and unwinding the binding's frames aborted the
    # process ("terminate called without an active exception", exit 134).
    # Every round ends with the thread looping over the call.
    key = keys()
    client.put(key, b"v" * size)
    try:
        for round in range(6):
            done = run_script(master, """
                import threading
                key = %r
                busy = threading.Event()

                def loop():
                    for n in range(1 << 62):
                        if n == 20:
                            busy.set()
                        try:
                            %s
                        except mooncake.Error:
                            return

                threading.Thread(target=loop, daemon=True).start()
                assert busy.wait(30), "the daemon thread made no calls"
                print("ok", flush=True)
                """ % (key, call), timeout=60)
            assert done.returncode == 0, (round, done.returncode, done.stderr[-2000:])
            assert done.stdout.strip() == "ok"
    finally:
        client.batch_remove([key, key + "/new"], force=True)


@pytest.mark.parametrize("mode", ["get_async", "get"])
def test_a_value_too_large_for_memory_raises_memory_error(master, keys, mode):
    # The address space is limited, a little less each round, until the
    # client still gets its copy of a 64 MiB value but the bytes object
    # handed to Python no longer fits. That must be Python's MemoryError:
    # the future's exception for get_async (a C++ exception there used to
    # escape the client's thread: std::terminate, exit 134), raised by get
    # (it used to be a RuntimeError).
    key = keys()
    done = run_script(master, """
        import resource
        size = 64 << 20
        key = %r
        c.put(key, b"v" * size)
        assert len(c.get_async(key).result(timeout=60)) == size
        assert len(c.get(key)) == size
        gc.collect()

        def address_space():
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmSize:"):
                        return int(line.split()[1]) << 10

        def read():
            if %r == "get_async":
                return c.get_async(key).exception(timeout=60)
            try:
                c.get(key)
            except BaseException as error:
                return error

        unlimited = resource.getrlimit(resource.RLIMIT_AS)
        error = None
        for room in range(4 * size, size // 4, -(size // 8)):
            resource.setrlimit(resource.RLIMIT_AS, (address_space() + room, unlimited[1]))
            try:
                error = read()
            finally:
                resource.setrlimit(resource.RLIMIT_AS, unlimited)
            if error is not None:
                break
        assert isinstance(error, MemoryError), repr(error)
        c.remove(key, force=True)
        print("ok")
        """ % (key, mode), timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "ok"


def test_an_interpreter_exiting_while_a_done_callback_is_in_a_call_exits(master, client, keys):
    # A future's done-callback runs on the client's thread that completes
    # the future, and may call the client itself. When the program ends
    # while such a nested call is out, its return must pass the exit gate
    # (its outer scope already counts as passing): parked there, it kept
    # the exit hook waiting for that outer scope for ever.
    key = keys()
    client.put(key, b"v" * (8 << 20))
    for round in range(3):
        done = run_script(master, """
            import threading
            key = %r
            busy = threading.Event()

            def again(_):
                busy.set()
                for n in range(1 << 62):
                    try:
                        c.get(key)
                    except mooncake.Error:
                        return

            c.get_async(key).add_done_callback(again)
            busy.wait()
            """ % key, timeout=60)
        assert done.returncode == 0, "round %d: %s" % (round, done.stderr)
