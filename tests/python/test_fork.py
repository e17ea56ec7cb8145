"""A client and fork(): the child shares the parent's connections, so a
client made before the fork refuses to work in the child (it would read
replies meant for the parent), and a new client there works."""

import os
import signal
import time

import mooncake


def run_in_child(body):
    """Forks; the child runs body() and reports what it returns (a str,
    "ok" when all is well) through a pipe, then os._exit. Returns that
    report. A child still running after a minute is killed."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # never back into pytest
        report = "child raised"
        try:
            os.close(read_end)
            report = body()
        except BaseException as e:  # noqa: B036 (reported to the parent)
            report = "child raised %s: %s" % (type(e).__name__, e)
        finally:
            os.write(write_end, report.encode()[:60000])
            os._exit(0)
    os.close(write_end)
    try:
        for _ in range(600):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "the child hung"
        with os.fdopen(read_end, "rb") as reader:
            return reader.read().decode()
    finally:
        try:
            os.close(read_end)
        except OSError:
            pass


def test_a_client_made_before_fork_raises_in_the_child(master, keys):
    key = keys()
    c = mooncake.Client(master=master)
    c.put(key, b"the parent's value")
    assert c.get(key) == b"the parent's value"
    assert c.get_async(key).result(timeout=30) == b"the parent's value"

    def child():
        problems = []
        for name, call in [("get", lambda: c.get(key)), ("get_async", lambda: c.get_async(key)),
                           ("put", lambda: c.put(key + "/child", b"x")),
                           ("get again", lambda: c.get(key))]:
            try:
                call()
                problems.append("%s did not raise" % name)
            except mooncake.Error as e:
                if e.code != mooncake.ErrorCode.INVALID_PARAMS or "fork" not in str(e):
                    problems.append("%s raised %s" % (name, e))
        if not c.closed:
            problems.append("closed is False")
        c.close()  # lets go of nothing the parent uses, and does not hang
        with mooncake.Client(master=master) as fresh:
            if fresh.get(key) != b"the parent's value":
                problems.append("a new client read the wrong value")
            fresh.put(key + "/child", b"from the child")
        return "; ".join(problems) or "ok"

    assert run_in_child(child) == "ok"
    # The parent's client and its connections are untouched.
    assert not c.closed
    assert c.get(key) == b"the parent's value"
    assert c.get_async(key).result(timeout=30) == b"the parent's value"
    assert c.get(key + "/child") == b"from the child"
    c.close()
