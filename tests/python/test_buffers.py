"""Zero-copy buffers: put_from reads and get_into writes any C-contiguous
buffer-protocol object in place, a 100 MiB value included."""

import mmap

import numpy as np
import pytest

import mooncake


def test_numpy_kv_block_round_trip_keeps_dtype_and_shape(client, keys):
    key = keys()
    block = np.random.default_rng(1).standard_normal((2, 8, 16, 64)).astype(np.float16)
    client.put_from(key, block)
    out = np.empty_like(block)
    assert client.get_into(key, out) == block.nbytes
    assert np.array_equal(out, block)


def test_get_into_a_larger_buffer_leaves_the_rest_untouched(client, keys):
    key = keys()
    client.put(key, b"abc")
    buf = bytearray(b"\xff" * 8)
    assert client.get_into(key, buf) == 3
    assert bytes(buf) == b"abc" + b"\xff" * 5


def test_get_into_a_too_small_buffer_raises_and_says_the_size(client, keys):
    key = keys()
    client.put(key, b"0123456789")
    with pytest.raises(mooncake.Error) as info:
        client.get_into(key, bytearray(4))
    assert info.value.name == "INVALID_PARAMS"
    assert "10 bytes" in str(info.value)


def test_get_into_errors(client, keys):
    with pytest.raises(mooncake.Error) as info:
        client.get_into(keys(), bytearray(4))
    assert info.value.name == "OBJECT_NOT_FOUND"
    key = keys()
    client.put(key, b"v")
    with pytest.raises(BufferError):
        client.get_into(key, b"read-only")
    strided = np.zeros((4, 4), dtype=np.uint8)[:, ::2]
    with pytest.raises((BufferError, ValueError)):
        client.get_into(key, strided)
    with pytest.raises(TypeError):
        client.get_into(key, 12345)


def test_get_into_memoryview_slices_and_mmap(client, keys):
    key = keys()
    client.put(key, b"payload")
    region = mmap.mmap(-1, 4096)  # anonymous, page-aligned like pinned memory
    view = memoryview(region)
    assert client.get_into(key, view[100:200]) == 7
    assert region[100:107] == b"payload"
    view.release()
    region.close()


def test_a_100_mib_value_round_trips_through_buffers(client, keys, nodes):
    key = keys()
    size = 100 << 20
    source = np.random.default_rng(100).integers(0, 256, size, dtype=np.uint8)
    client.put_from(key, source, preferred_node=nodes[0])
    assert client.inspect(key)["size"] == size
    out = np.zeros(size, dtype=np.uint8)
    assert client.get_into(key, out) == size
    assert np.array_equal(out, source)
    del out
    # And through the batch path, which completes it chunk by chunk.
    again = np.zeros(size, dtype=np.uint8)
    assert client.batch_get_into([key], [again]) == [size]
    assert np.array_equal(again, source)
    client.remove(key, force=True)


def test_numpy_buffers_that_cannot_be_used_raise_value_error_as_documented(client, keys):
    # docs/python.md: the exporter's error; numpy's is ValueError, which an
    # `except BufferError` written from the old docs missed.
    key = keys()
    client.put(key, b"0123456789")
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.get_into(key, np.zeros(40, np.uint8)[::2])
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.put(keys(), np.asfortranarray(np.ones((4, 4), np.uint8)))
    read_only = np.zeros(16, np.uint8)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        client.get_into(key, read_only)
    with pytest.raises(BufferError):
        client.get_into(key, memoryview(bytearray(40))[::2])
