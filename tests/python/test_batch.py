"""Batch calls: one entry per key in input order, partial failures as
mooncake.Error instances (ours) or integer codes (Mooncake-named calls)."""

import ctypes

import numpy as np
import pytest

import mooncake
from conftest import pattern

E = mooncake.ErrorCode


def errors(results):
    return [r.name if isinstance(r, mooncake.Error) else r for r in results]


def test_batch_put_and_get_round_trip_across_both_nodes(client, keys, nodes):
    first, second = keys(40), keys(40)
    values = {k: pattern(1000 + i * 531, seed=i) for i, k in enumerate(first + second)}
    # BatchPut sends a whole batch to one node: two batches, one per node.
    assert client.batch_put(first, [values[k] for k in first],
                            preferred_node=nodes[0]) == [None] * 40
    assert client.batch_put(second, [values[k] for k in second],
                            preferred_node=nodes[1]) == [None] * 40
    mixed = [k for pair in zip(first, second) for k in pair]
    assert client.batch_get(mixed) == [values[k] for k in mixed]
    assert {client.inspect(first[0])["node_id"], client.inspect(second[0])["node_id"]} == set(nodes)


def test_batch_put_reports_each_failure_in_place(client, keys):
    taken, fresh = keys(2)
    client.put(taken, b"old")
    results = client.batch_put([fresh, taken, "", keys()], [b"a", b"b", b"c", b""])
    assert results[0] is None
    assert errors(results[1:]) == ["OBJECT_ALREADY_EXISTS", "INVALID_KEY", "INVALID_PARAMS"]
    assert all(r.code < 0 for r in results[1:])
    assert client.get(fresh) == b"a" and client.get(taken) == b"old"


def test_batch_get_exist_and_remove_with_missing_keys(client, keys):
    present, absent = keys(2)
    client.put(present, b"here")
    assert errors(client.batch_get([present, absent, ""])) == [
        b"here", "OBJECT_NOT_FOUND", "INVALID_KEY"]
    assert errors(client.batch_exist([present, absent, ""])) == [True, False, "INVALID_KEY"]
    assert client.batch_is_exist([present, absent, ""]) == [1, 0, E.INVALID_KEY]
    assert errors(client.batch_remove([present, absent], force=True)) == [
        None, "OBJECT_NOT_FOUND"]
    assert client.batch_is_exist([present]) == [0]


def test_batch_upsert_replaces_and_creates(client, keys):
    old, new = keys(2)
    client.put(old, b"before")
    assert client.batch_upsert([old, new], [b"after!", "created"]) == [None, None]
    assert client.batch_get([old, new]) == [b"after!", b"created"]


def test_mooncake_batch_put_from_and_get_into_return_codes(client, keys):
    ks = keys(4)
    blocks = [np.full(4096, i, dtype=np.uint8) for i in range(4)]
    assert client.batch_put_from(ks, blocks) == [0, 0, 0, 0]
    assert client.batch_put_from(ks[:1], blocks[:1]) == [E.OBJECT_ALREADY_EXISTS]
    out = [np.zeros(4096, dtype=np.uint8) for _ in range(4)]
    assert client.batch_get_into(ks, out) == [4096] * 4
    for i in range(4):
        assert np.array_equal(out[i], blocks[i])
    assert client.batch_upsert_from(ks[:2], [b"x" * 10, b"y" * 10]) == [0, 0]
    small = [bytearray(16), bytearray(4)]
    assert client.batch_get_into([ks[0], ks[1]], small) == [10, E.INVALID_PARAMS]
    assert bytes(small[0][:10]) == b"x" * 10


def test_batch_get_into_partial_failures_and_large_values(client, keys):
    big, small, missing = keys(3)
    big_value = pattern(9 << 20, seed=7)  # more than two RPC chunks
    client.put(big, big_value)
    client.put(small, b"small")
    out = [np.empty(9 << 20, dtype=np.uint8), bytearray(100), bytearray(10), bytearray(1)]
    results = client.batch_get_into([big, small, missing, ""], out)
    assert results == [9 << 20, 5, E.OBJECT_NOT_FOUND, E.INVALID_KEY]
    assert out[0].tobytes() == big_value and bytes(out[1][:5]) == b"small"


def test_batch_calls_check_their_arguments(client, keys):
    with pytest.raises(mooncake.Error) as info:
        client.batch_put(keys(2), [b"only one"])
    assert info.value.name == "INVALID_PARAMS"
    with pytest.raises(mooncake.Error):
        client.batch_get_into(keys(2), [bytearray(1)])
    with pytest.raises(BufferError):
        client.batch_get_into(keys(1), [b"read-only bytes"])
    assert client.batch_get([]) == [] and client.batch_put([], []) == []


class FreshItems:
    """A sequence whose items are made on each access, so that the caller
    holds the only reference to each (as numpy's and ctypes' 2-D arrays do)."""

    def __init__(self, make, n):
        self.make, self.n = make, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.make(i)


def test_batch_calls_keep_items_made_on_access_alive(client, keys):
    # Every batch call that takes buffers reads or writes the item it was
    # given, even when the sequence makes a new object per access.
    n, size = 16, 4096
    values = [pattern(size, seed=100 + i) for i in range(n)]
    stored, upserted, from_buffers = keys(n), keys(n), keys(n)
    assert client.batch_put(stored, FreshItems(lambda i: bytearray(values[i]), n)) == [None] * n
    assert client.batch_upsert(upserted, FreshItems(lambda i: bytearray(values[i]), n)) == \
        [None] * n
    assert client.batch_put_from(from_buffers, FreshItems(lambda i: bytearray(values[i]), n)) == \
        [0] * n
    assert client.batch_upsert_from(from_buffers, FreshItems(lambda i: bytes(values[i]), n)) == \
        [0] * n
    assert client.batch_get(stored + upserted + from_buffers) == values * 3
    out = [bytearray(size) for _ in range(n)]
    assert client.batch_get_into(stored, FreshItems(lambda i: memoryview(out[i]), n)) == \
        [size] * n
    assert [bytes(b) for b in out] == values


def test_batch_calls_take_a_ctypes_array_of_arrays(client, keys):
    n, size = 4, 16
    src = (ctypes.c_char * size * n)()
    for i in range(n):
        src[i].raw = pattern(size, seed=200 + i)
    names = keys(n)
    assert client.batch_put_from(names, src) == [0] * n
    dst = (ctypes.c_char * size * n)()
    assert client.batch_get_into(names, dst) == [size] * n
    assert bytes(dst) == bytes(src)
