"""mooncake.store.MooncakeDistributedStore: Mooncake's class and return
conventions (integer codes, raw host pointers) over mooncake.Client."""

import ctypes

import numpy as np
import pytest

import mooncake
from conftest import pattern
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

E = mooncake.ErrorCode


def make_store(master):
    store = MooncakeDistributedStore()
    assert store.setup("localhost", "P2PHANDSHAKE", 0, 0, "tcp", "", master) == 0
    return store


def test_setup_failure_returns_a_code():
    store = MooncakeDistributedStore()
    assert store.setup("localhost", "", 0, 0, "tcp", "", "127.0.0.1:bad") == E.INVALID_PARAMS


def test_single_calls_return_codes(master, keys, nodes):
    store = make_store(master)
    key = keys()
    config = ReplicateConfig()
    config.preferred_segment = nodes[1]
    assert store.put(key, b"value", config) == 0
    assert store.client.inspect(key)["node_id"] == nodes[1]
    assert store.put(key, b"again") == E.OBJECT_ALREADY_EXISTS
    assert store.get(key) == b"value"
    assert store.get(keys()) == b""
    assert store.is_exist(key) == 1 and store.is_exist(keys()) == 0
    assert store.get_size(key) == 5
    assert store.upsert(key, b"VALUE") == 0 and store.get(key) == b"VALUE"
    assert store.remove(key, True) == 0
    assert store.remove(key) == E.OBJECT_NOT_FOUND
    assert store.close() == 0


def test_raw_pointer_calls_like_mooncake(master, keys):
    store = make_store(master)
    ks = keys(3)
    src = [np.full(1024, i + 1, dtype=np.uint8) for i in range(3)]
    ptrs = [a.ctypes.data for a in src]
    sizes = [a.nbytes for a in src]
    assert store.register_buffer(ptrs[0], sizes[0]) == 0
    assert store.batch_put_from(ks, ptrs, sizes) == [0, 0, 0]
    dst = [np.zeros(1024, dtype=np.uint8) for _ in range(3)]
    got = store.batch_get_into(ks, [a.ctypes.data for a in dst], sizes)
    assert got == [1024] * 3
    assert all(np.array_equal(a, b) for a, b in zip(src, dst))
    assert store.batch_is_exist(ks + [keys()]) == [1, 1, 1, 0]
    one = ctypes.create_string_buffer(1024)
    assert store.get_into(ks[0], ctypes.addressof(one), 1024) == 1024
    assert one.raw == src[0].tobytes()
    assert store.get_into(ks[0], ctypes.addressof(one), 10) == E.INVALID_PARAMS
    key = keys()
    assert store.put_from(key, ptrs[2], sizes[2]) == 0 and store.get(key) == src[2].tobytes()
    assert store.batch_get_into(ks, ptrs[:1], sizes) == [E.INVALID_PARAMS] * 3
    assert store.put_batch(keys(2), [b"a", b"b"]) == 0
    assert store.get_batch([ks[0], keys()]) == [src[0].tobytes(), b""]
    store.close()


class Address:
    """An integer type that is not int, as numpy's integers are."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


def test_addresses_of_any_integer_type_are_addresses(master, keys):
    store = make_store(master)
    src = np.frombuffer(pattern(4096, seed=3), dtype=np.uint8).copy()
    one, two, three = keys(3)
    assert store.put_from(one, Address(src.ctypes.data), src.nbytes) == 0
    assert store.upsert_from(two, np.uint64(src.ctypes.data), src.nbytes) == 0
    assert store.get(one) == src.tobytes() and store.get(two) == src.tobytes()
    dst = np.zeros(4096, dtype=np.uint8)
    assert store.get_into(one, Address(dst.ctypes.data), dst.nbytes) == 4096
    assert dst.tobytes() == src.tobytes()
    halves = [np.zeros(2048, dtype=np.uint8) for _ in range(2)]
    assert store.batch_put_from([three], [np.uint64(src.ctypes.data)], [2048]) == [0]
    assert store.batch_get_into([three, two], [Address(h.ctypes.data) for h in halves],
                                [2048, 2048]) == [2048, E.INVALID_PARAMS]
    assert halves[0].tobytes() == src.tobytes()[:2048]
    store.close()


def test_a_size_given_with_a_buffer_object_is_honoured(master, keys):
    store = make_store(master)
    first, second = keys(2)
    buffer = bytearray(b"0123456789")
    assert store.put_from(first, buffer, 4) == 0
    assert store.get(first) == b"0123"
    assert store.batch_put_from([second], [buffer], [10]) == [0]
    assert store.get(second) == b"0123456789"
    with pytest.raises(ValueError):
        store.put_from(keys(), buffer, 11)
    with pytest.raises(ValueError):
        store.get_into(first, bytearray(3), 4)
    out = bytearray(10)
    assert store.get_into(second, out, 4) == E.INVALID_PARAMS  # 10 bytes do not fit in 4
    assert out == bytearray(10)
    store.close()


def test_a_host_address_without_a_size_is_refused(master, keys):
    store = make_store(master)
    src = ctypes.create_string_buffer(b"value", 5)
    key = keys()
    with pytest.raises(ValueError, match="size"):
        store.put_from(key, ctypes.addressof(src))
    with pytest.raises(ValueError, match="size"):
        store.upsert_from(key, ctypes.addressof(src))
    with pytest.raises(ValueError, match="size"):
        store.batch_put_from([key], [ctypes.addressof(src)])
    assert store.is_exist(key) == 0
    store.close()


def test_ctypes_pointers_and_integers_are_addresses(master, keys):
    # ctypes.c_void_p(addr) (and c_size_t, POINTER(c_char)) are buffers of
    # the 8 bytes holding the address: they were taken for the memory
    # meant, so put_from stored the pointer itself and get_into wrote into
    # it, both answering success.
    store = make_store(master)
    src = ctypes.create_string_buffer(pattern(4096, seed=5), 4096)
    one, two, three = keys(3)
    assert store.put_from(one, ctypes.c_void_p(ctypes.addressof(src)), 4096) == 0
    assert store.upsert_from(two, ctypes.cast(src, ctypes.POINTER(ctypes.c_char)), 4096) == 0
    assert store.batch_put_from([three], [ctypes.c_size_t(ctypes.addressof(src))], [4096]) == [0]
    assert store.get(one) == store.get(two) == store.get(three) == src.raw
    outs = [ctypes.create_string_buffer(4096) for _ in range(3)]
    assert store.get_into(one, ctypes.c_void_p(ctypes.addressof(outs[0])), 4096) == 4096
    assert store.batch_get_into([two, three],
                                [ctypes.c_void_p(ctypes.addressof(outs[1])),
                                 ctypes.c_uint64(ctypes.addressof(outs[2]))],
                                [4096, 4096]) == [4096, 4096]
    assert [o.raw for o in outs] == [src.raw] * 3
    with pytest.raises(ValueError, match="NULL"):
        store.put_from(keys(), ctypes.c_void_p(), 8)
    with pytest.raises(ValueError, match="size"):
        store.put_from(keys(), ctypes.c_void_p(ctypes.addressof(src)))
    store.close()


def test_mooncake_calls_answer_codes_without_a_client_or_with_mismatched_lengths(master, keys):
    store = make_store(master)
    key = keys()
    assert store.put_batch([key, keys()], [b"a"]) == E.INVALID_PARAMS
    assert store.upsert_batch([key], [b"a", b"b"]) == E.INVALID_PARAMS
    assert store.is_exist(key) == 0  # nothing of the mismatched batches was stored
    assert store.close() == 0
    # After close() (and before setup()), codes as for any other failure.
    assert store.put(key, b"v") == E.INVALID_PARAMS
    assert store.put_from(key, bytearray(b"v")) == E.INVALID_PARAMS
    assert store.upsert(key, b"v") == E.INVALID_PARAMS
    assert store.remove(key) == E.INVALID_PARAMS
    assert store.get(key) == b""
    assert store.get_into(key, bytearray(4)) == E.INVALID_PARAMS
    assert store.get_size(key) == E.INVALID_PARAMS
    assert store.is_exist(key) == E.INVALID_PARAMS
    assert store.batch_is_exist([key]) == [E.INVALID_PARAMS]
    assert store.batch_put_from([key], [bytearray(b"v")]) == [E.INVALID_PARAMS]
    assert store.batch_get_into([key], [bytearray(4)]) == [E.INVALID_PARAMS]
    assert store.put_batch([key], [b"v"]) == E.INVALID_PARAMS
    assert store.get_batch([key]) == [b""]
    assert MooncakeDistributedStore().is_exist(key) == E.INVALID_PARAMS
