"""Fixtures of the mooncake Python package tests.

tests/python/run_pytest.sh (ctest PythonPackageTest) installs the package
into a temp venv, starts a master and workers w1 (DRAM + SSD) and w2 (DRAM)
on free ports and exports where they are:

  MOONCAKE_TEST_MASTER       HOST:PORT of the master
  MOONCAKE_TEST_NODES        w1,w2
  MOONCAKE_TEST_WORKER_PIDS  w1=PID,w2=PID
"""

import os
import uuid

import pytest

import mooncake


def pytest_configure(config):
    if not os.environ.get("MOONCAKE_TEST_MASTER"):
        raise pytest.UsageError(
            "MOONCAKE_TEST_MASTER is not set: run tests/python/run_pytest.sh "
            "(ctest -R PythonPackageTest), which starts a cluster")


@pytest.fixture(scope="session")
def master():
    return os.environ["MOONCAKE_TEST_MASTER"]


@pytest.fixture(scope="session")
def nodes():
    return os.environ.get("MOONCAKE_TEST_NODES", "w1,w2").split(",")


@pytest.fixture(scope="session")
def worker_pids():
    pairs = os.environ.get("MOONCAKE_TEST_WORKER_PIDS", "")
    return {k: int(v) for k, v in (p.split("=") for p in pairs.split(",") if p)}


@pytest.fixture(scope="session")
def client(master, nodes):
    with mooncake.Client(master=master, local_node=nodes[0]) as c:
        yield c


@pytest.fixture
def keys(request):
    """keys(n) or keys(): fresh keys no other test uses."""
    prefix = "py/%s/%s" % (request.node.name, uuid.uuid4().hex[:8])
    counter = iter(range(1 << 30))

    def make(n=None):
        if n is None:
            return "%s/%d" % (prefix, next(counter))
        return ["%s/%d" % (prefix, next(counter)) for _ in range(n)]

    return make


def pattern(size, seed=0):
    """Deterministic bytes covering every byte value, NULs included."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
