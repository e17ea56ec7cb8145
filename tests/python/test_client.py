"""Single-key calls of mooncake.Client against a real cluster: byte-exact
round trips, put options, errors as mooncake.Error with code and name."""

import pickle

import pytest

import mooncake
from conftest import pattern

E = mooncake.ErrorCode


def test_the_installed_package_is_used_not_the_source_tree():
    assert "site-packages" in mooncake.__file__, mooncake.__file__
    assert mooncake.__version__


@pytest.mark.parametrize("size", [1, 20, 255, 64 * 1024, 4 * 1024 * 1024 + 17])
def test_put_then_get_returns_the_exact_bytes(client, keys, size):
    key = keys()
    value = pattern(size, seed=size)
    client.put(key, value)
    assert client.get(key) == value


def test_every_byte_value_and_nul_bytes_survive(client, keys):
    key = keys()
    value = bytes(range(256)) * 4 + b"\0\0tail\0"
    client.put(key, value)
    assert client.get(key) == value


def test_put_accepts_str_bytearray_memoryview_and_numpy(client, keys):
    import numpy as np

    values = [
        ("text é", "text é".encode()),
        (bytearray(b"bytearray"), b"bytearray"),
        (memoryview(b"--memoryview--")[2:-2], b"memoryview"),
        (np.arange(10, dtype=np.int32), np.arange(10, dtype=np.int32).tobytes()),
    ]
    for given, stored in values:
        key = keys()
        client.put(key, given)
        assert client.get(key) == stored


def test_put_of_an_existing_key_raises_object_already_exists(client, keys):
    key = keys()
    client.put(key, b"first")
    with pytest.raises(mooncake.Error) as info:
        client.put(key, b"second")
    err = info.value
    assert err.code == E.OBJECT_ALREADY_EXISTS == -705
    assert err.name == "OBJECT_ALREADY_EXISTS"
    assert key in str(err) and "OBJECT_ALREADY_EXISTS (-705)" in str(err)
    assert client.get(key) == b"first"


def test_get_of_a_missing_key_raises_object_not_found(client, keys):
    with pytest.raises(mooncake.Error) as info:
        client.get(keys())
    assert info.value.code == -704 and info.value.name == "OBJECT_NOT_FOUND"


@pytest.mark.parametrize("bad", ["", "a\0b", "k" * 4097])
def test_invalid_keys_raise_invalid_key(client, bad):
    for call in (lambda: client.put(bad, b"v"), lambda: client.get(bad),
                 lambda: client.exist(bad), lambda: client.remove(bad)):
        with pytest.raises(mooncake.Error) as info:
            call()
        assert info.value.name == "INVALID_KEY" and info.value.code == -400
    assert client.is_exist(bad) == -400


def test_empty_value_is_refused(client, keys):
    with pytest.raises(mooncake.Error) as info:
        client.put(keys(), b"")
    assert info.value.name == "INVALID_PARAMS"


def test_upsert_creates_replaces_in_place_and_resizes(client, keys):
    key = keys()
    client.upsert(key, b"one")
    assert client.get(key) == b"one"
    v1 = client.inspect(key)["version"]
    client.upsert(key, b"two")  # same size: in place
    assert client.get(key) == b"two"
    assert client.inspect(key)["version"] > v1
    client.upsert_from(key, bytearray(b"a longer value"))
    assert client.get(key) == b"a longer value"


def test_exist_and_mooncake_is_exist(client, keys):
    key = keys()
    assert client.exist(key) is False
    assert client.is_exist(key) == 0
    client.put(key, b"v")
    assert client.exist(key) is True
    assert client.exist(key, prefetch=True) is True
    assert client.is_exist(key) == 1


def test_remove_deletes_and_a_second_remove_fails(client, keys):
    key = keys()
    client.put(key, b"v")
    client.remove(key)
    assert client.exist(key) is False
    with pytest.raises(mooncake.Error) as info:
        client.remove(key)
    assert info.value.name == "OBJECT_NOT_FOUND"


def test_a_read_lease_blocks_remove_unless_forced(client, keys):
    key = keys()
    client.put(key, b"v")
    client.get(key)  # grants a lease (kv_lease_ttl, 10 s by default)
    with pytest.raises(mooncake.Error) as info:
        client.remove(key)
    assert info.value.name == "OBJECT_HAS_LEASE"
    client.remove(key, force=True)
    assert not client.exist(key)


def test_put_options_reach_the_worker(client, keys, nodes):
    key = keys()
    client.put(key, b"pinned", hard_pin=True, preferred_node=nodes[1])
    info = client.inspect(key)
    assert info["node_id"] == nodes[1]
    assert info["hard_pinned"] is True and info["soft_pinned"] is False
    assert info["size"] == 6
    key2 = keys()
    client.put(key2, b"soft", soft_pin=True, soft_pin_ttl_ms=60000, preferred_node=nodes[0],
               preferred_tier="ssd")
    info2 = client.inspect(key2)
    assert info2["soft_pinned"] is True
    assert info2["node_id"] == nodes[0] and info2["tier"].startswith("ssd")
    with pytest.raises(mooncake.Error) as err:
        client.put(keys(), b"v", preferred_node="no-such-node")
    assert err.value.code < 0


def test_inspect_nodes_and_stats(client, keys, nodes):
    key = keys()
    client.put(key, b"12345", preferred_node=nodes[0])
    info = client.inspect(key)
    assert info["node_id"] == nodes[0] and info["size"] == 5 and info["state"]
    listed = {n["node_id"]: n for n in client.nodes()}
    assert set(nodes) <= set(listed)
    for n in nodes:
        assert listed[n]["alive"] is True and listed[n]["port"] > 0
        assert listed[n]["tiers"] and listed[n]["tiers"][0]["capacity"] > 0
    stats = client.stats(nodes[0])
    assert stats["node_id"] == nodes[0] and stats["puts"] >= 1
    assert any(t["kind"] == "dram" for t in stats["tiers"])
    with pytest.raises(mooncake.Error):
        client.stats("no-such-node")
    with pytest.raises(mooncake.Error) as missing:
        client.inspect(keys())
    assert missing.value.name == "OBJECT_NOT_FOUND"


def test_hot_cache_serves_repeated_reads(master, keys):
    import time

    with mooncake.Client(master=master, hot_cache_bytes=8 << 20) as c:
        key = keys()
        c.put(key, b"hot value")
        deadline = time.monotonic() + 10
        while c.hot_cache_counters()["hits"] == 0 and time.monotonic() < deadline:
            assert c.get(key) == b"hot value"  # filling is asynchronous
            time.sleep(0.05)
        assert c.hot_cache_counters()["hits"] >= 1
        buf = bytearray(9)
        assert c.get_into(key, buf) == 9 and bytes(buf) == b"hot value"
        assert c.transport_counters()["rdma_enabled"] is False


def test_client_configuration_errors(master):
    with pytest.raises(mooncake.Error) as info:
        mooncake.Client(master="127.0.0.1:notaport")
    assert info.value.name == "INVALID_PARAMS"
    with pytest.raises(mooncake.Error) as info:
        mooncake.Client(master=master, rdma="sometimes")
    assert info.value.name == "INVALID_PARAMS"
    with pytest.raises(TypeError):
        mooncake.Client(master, "positional")  # keyword-only


def test_unreachable_master_raises_rpc_fail():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(mooncake.Error) as info:
        mooncake.Client(master="127.0.0.1:%d" % port, connect_timeout_ms=300)
    assert info.value.name in ("RPC_FAIL", "RPC_TIMEOUT")


def test_master_defaults_to_the_environment(master, monkeypatch):
    monkeypatch.setenv("MOONCAKE_MASTER", master)
    with mooncake.Client() as c:
        assert c.nodes()


def test_a_closed_client_raises_and_context_manager_closes(master):
    with mooncake.Client(master=master) as c:
        assert not c.closed
    assert c.closed
    with pytest.raises(mooncake.Error):
        c.get("k")


def test_error_type_codes_and_names():
    assert issubclass(mooncake.Error, Exception)
    assert mooncake.error_name(-704) == "OBJECT_NOT_FOUND"
    assert mooncake.error_name(-12345) == "UNKNOWN_ERROR"
    codes = mooncake.error_codes()
    assert codes["OK"] == 0 and codes["OBJECT_ALREADY_EXISTS"] == -705
    assert E.OBJECT_HAS_LEASE == -706 and E(-900).name == "RPC_FAIL"
    err = mooncake.Error(-704, "get 'k'")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.code, copy.name, str(copy)) == (-704, "OBJECT_NOT_FOUND", str(err))
    assert mooncake.set_log_level("warn") is True
    assert mooncake.set_log_level("loud") is False


def test_keys_may_be_bytes_or_unicode(client, keys):
    key = keys() + "/ключ"
    client.put(key.encode(), b"v")
    assert client.get(key) == b"v"


def test_etcd_settings_reach_the_client():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(mooncake.Error) as info:
        mooncake.Client(etcd="http://127.0.0.1:%d" % port, cluster_name="pytest",
                        leader_wait_ms=300, connect_timeout_ms=300)
    assert info.value.code < 0 and "pytest" in str(info.value)
    with pytest.raises(mooncake.Error) as info:
        mooncake.Client(etcd="not a url")
    assert info.value.name == "INVALID_PARAMS"


@pytest.mark.parametrize("poll_us", [0, 1000])
def test_rpc_poll_us_off_or_at_its_longest_still_round_trips(master, nodes, keys, poll_us):
    with mooncake.Client(master=master, local_node=nodes[0], rpc_poll_us=poll_us) as c:
        key = keys()
        c.put(key, b"polled" * 100)
        assert c.get(key) == b"polled" * 100
